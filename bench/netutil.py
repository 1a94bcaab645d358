"""Loopback helpers for starting a local server in another process (benchmarks, tools).

Plain Python and httpx; no Dagster.
"""

from __future__ import annotations

import socket
import subprocess
import time

import httpx


class ServerExited(RuntimeError):
    """The server process ended before its URL answered."""


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on right now (another process may still take it before use)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def wait_for_http(
    url: str,
    timeout: float,
    *,
    proc: subprocess.Popen[bytes] | None = None,
    interval: float = 0.5,
) -> None:
    """Return once `GET url` answers 200.

    Raises ServerExited as soon as `proc` (the server, if given) has ended, with the tail of its
    stderr when that is a pipe, and TimeoutError after `timeout` seconds. Stopping the process
    is the caller's business.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            err = proc.stderr.read().decode(errors="replace")[-2000:] if proc.stderr else ""
            raise ServerExited(
                f"the server of {url} exited with {proc.returncode}{err and ': '}{err}"
            )
        try:
            if httpx.get(url, timeout=2.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(interval)
    raise TimeoutError(f"{url} did not answer 200 within {timeout:g} s")
