"""Servers the test processes share: started once, stopped by the last user.

The first test process (an xdist worker, or a second pytest run in the same worktree) that needs
a server takes a file lock, starts the server if nothing answers, and records its pid in a JSON
file beside the lock; every later user only adds its pid. `release` removes the pid; the last
live user stops the server, and only if the tests started it (one that already answered, e.g.
started by `make test` or by hand, is left alone). Pids of processes that died (kill -9, a crashed
run) are dropped when the file is read, so a stale file never keeps a server alive forever nor
makes anyone stop a server it did not start.

A service that cannot be started raises `ServiceUnavailable` with the starter's output: the
fixtures turn that into a failed test, never a skip.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock


class ServiceUnavailable(RuntimeError):
    """A shared test server could not be started; the message says why."""


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie still answers kill(0)
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


@dataclass(frozen=True)
class SharedService:
    """`start()` raises ServiceUnavailable or returns once the server answers; `stop()` stops
    the server `start` started; `answers()` is a real request (not just an open port)."""

    name: str
    state_dir: Path
    start: Callable[[], None]
    stop: Callable[[], None]
    answers: Callable[[], bool]

    @property
    def _users_path(self) -> Path:
        return self.state_dir / f"test-users-{self.name}.json"

    def _lock(self) -> FileLock:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        return FileLock(str(self.state_dir / f"test-users-{self.name}.lock"))

    def _read(self) -> tuple[bool, list[int]]:
        try:
            state = json.loads(self._users_path.read_text())
        except (FileNotFoundError, ValueError):
            state = {}
        pids = [p for p in state.get("pids", []) if isinstance(p, int) and pid_alive(p)]
        return bool(state.get("owned", False)), pids

    def _write(self, owned: bool, pids: list[int]) -> None:
        tmp = self._users_path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"owned": owned, "pids": pids}))
        os.replace(tmp, self._users_path)

    def acquire(self) -> None:
        with self._lock():
            owned, pids = self._read()
            # With no live user left, an old "owned" belongs to a run that died: its server is
            # still ours to stop only if we end up starting (or re-using) it ourselves below.
            owned = owned and bool(pids)
            if not self.answers():
                self.start()
                owned, pids = True, [p for p in pids if p != os.getpid()]
            self._write(owned, [*(p for p in pids if p != os.getpid()), os.getpid()])

    def release(self) -> None:
        with self._lock():
            owned, pids = self._read()
            others = [p for p in pids if p != os.getpid()]
            if others:
                self._write(owned, others)
                return
            if owned:
                self.stop()
            self._users_path.unlink(missing_ok=True)


def free_ports(n: int) -> list[int]:
    """`n` distinct free ports from the kernel, bound together while chosen (two calls of a
    bind-and-close probe can get the same port back)."""
    import socket

    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def free_port_block(size: int = 1, env: str | None = None, start: int = 20000) -> int:
    """The first port of `size` consecutive free ports on 127.0.0.1 (the port in `env` if that
    is set), for a server one test owns alone. Probed upwards from a random point at or above
    `start`, below the kernel's ephemeral range, so it does not race with clients' ports."""
    import random
    import socket

    if env and os.environ.get(env):
        return int(os.environ[env])
    first = random.randrange(start, 32000 - size)
    for base in range(first, 32000 - size):
        socks: list[socket.socket] = []
        try:
            for p in range(base, base + size):
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                socks.append(s)
                s.bind(("127.0.0.1", p))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise ServiceUnavailable(f"no {size} consecutive free ports on 127.0.0.1")
