"""Supervise the one Milvus Lite gRPC server that owns `<data_dir>/milvus`.

Milvus Lite takes an exclusive lock on its data directory, so the Dagster step processes, the
API and the CLI cannot each open it. One detached `milvus-lite server` process owns it instead,
bound to 127.0.0.1 only (it has no authentication), and everyone reaches it by URI.

`<data_dir>/milvus-server.json` records its pid and port; `<data_dir>/milvus-server.lock`
(an flock) makes concurrent callers start exactly one. A recorded server is reused while its
process lives and its port answers; otherwise a new one is started on a free port.

A recorded server is used (or stopped) only if it belongs to THIS data directory: the state
file must name this directory's resolved Milvus path and carry this directory's identity token,
and the process must be a Milvus Lite server of that path. The token lives in
`<data_dir>/milvus-identity.json` with the directory's resolved path, device and inode; a copy
(``cp -a``), a restored backup or a moved directory no longer matches them and mints its own
token, so it starts its own server and ``memflow stop`` on it never touches the original's.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil

from resources.fs import atomic_write_text, file_lock
from resources.models.guard import scrubbed_env
from resources.vector.base import VectorStoreError

HOST = "127.0.0.1"
STATE_FILE = "milvus-server.json"
IDENTITY_FILE = "milvus-identity.json"
LOCK_FILE = "milvus-server.lock"
LOG_FILE = "milvus-server.log"
DATA_SUBDIR = "milvus"
START_TIMEOUT_S = 180.0  # importing pymilvus + milvus_lite alone takes seconds on a busy box
LOCK_TIMEOUT_S = START_TIMEOUT_S + 30.0
STOP_TIMEOUT_S = 15.0

# Servers this process started, kept so they can be reaped (no zombies) when stopped here.
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


@dataclass(frozen=True, slots=True)
class LiteServer:
    pid: int
    port: int
    data_dir: str  # the resolved `<data_dir>/milvus` it serves
    token: str = ""  # the identity token of the data directory that started it

    @property
    def uri(self) -> str:
        return f"http://{HOST}:{self.port}"


@contextlib.contextmanager
def _locked(data_dir: Path, timeout_s: float = LOCK_TIMEOUT_S) -> Iterator[None]:
    try:
        with file_lock(data_dir / LOCK_FILE, timeout_s=timeout_s):
            yield
    except TimeoutError:
        raise VectorStoreError(
            f"timed out waiting for the Milvus Lite supervisor lock in {data_dir}"
        ) from None


def _alive(pid: int, milvus_dir: str | None = None) -> bool:
    """The process lives and is a Milvus Lite server (of `milvus_dir`, when given)."""
    child = _CHILDREN.get(pid)
    if child is not None and child.poll() is not None:
        return False
    try:  # a zombie still answers kill(0); a reused pid runs something else
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        cmdline = proc.cmdline()
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return False
    except psutil.AccessDenied:
        return True
    if not any("milvus_lite" in part for part in cmdline):
        return False
    return milvus_dir is None or milvus_dir in cmdline


def _dir_identity(root: Path) -> dict[str, object]:
    st = os.stat(root)
    return {"path": str(root), "dev": st.st_dev, "ino": st.st_ino}


def _read_token(root: Path) -> str | None:
    """This data directory's identity token; None when absent or written for another
    directory (this one is a copy, a restore or was moved)."""
    try:
        raw = json.loads((root / IDENTITY_FILE).read_text())
        here = _dir_identity(root)
    except (OSError, ValueError):
        return None
    if not isinstance(raw, dict) or any(raw.get(k) != v for k, v in here.items()):
        return None
    token = raw.get("token")
    return token if isinstance(token, str) and token else None


def _token(root: Path) -> str:
    """The identity token, minted when missing or not this directory's. Call under the lock."""
    token = _read_token(root)
    if token is None:
        token = os.urandom(16).hex()
        atomic_write_text(root / IDENTITY_FILE, json.dumps({**_dir_identity(root), "token": token}))
    return token


def _belongs(server: LiteServer | None, root: Path, token: str | None) -> bool:
    """The recorded server is this directory's: its path and its token. A record written
    before tokens existed (no token) is judged by its path alone; callers check that the
    process serves that path, and `ensure_lite_server` then records the token."""
    if server is None or token is None or server.data_dir != str(root / DATA_SUBDIR):
        return False
    return server.token in ("", token)


def _answers(port: int, timeout_s: float = 1.0) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def _free_port(preferred: int | None = None) -> int:
    """`preferred` if nothing listens there (clients of a restarted server then reconnect on
    their own), else any free port."""
    for port in (preferred, 0) if preferred else (0,):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((HOST, port))
            except OSError:
                continue
            return int(s.getsockname()[1])
    raise VectorStoreError("no free port on 127.0.0.1 for the Milvus Lite server")


def _read_state(data_dir: Path) -> LiteServer | None:
    try:
        raw = json.loads((data_dir / STATE_FILE).read_text())
        return LiteServer(
            int(raw["pid"]), int(raw["port"]), str(raw["data_dir"]), str(raw.get("token") or "")
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def _write_state(data_dir: Path, server: LiteServer) -> None:
    atomic_write_text(data_dir / STATE_FILE, json.dumps(asdict(server)))


def _log_tail(data_dir: Path, size: int = 2000) -> str:
    try:
        return (data_dir / LOG_FILE).read_text(errors="replace")[-size:]
    except OSError:
        return ""


def running_lite_server(data_dir: str | os.PathLike[str]) -> LiteServer | None:
    """The live server of `data_dir` (recorded there, and belonging to it), or None."""
    root = Path(data_dir).resolve()
    server = _read_state(root)
    if (
        server is not None
        and _belongs(server, root, _read_token(root))
        and _alive(server.pid, server.data_dir)
        and _answers(server.port)
    ):
        return server
    return None


def _server_command(milvus_dir: Path, port: int) -> list[str]:
    return [
        *(sys.executable, "-m", "milvus_lite", "server", "--data-dir", str(milvus_dir)),
        *("--host", HOST, "--port", str(port), "--max-workers", "8"),
    ]


def _start(data_dir: Path, timeout_s: float, port_hint: int | None, token: str) -> LiteServer:
    milvus_dir = data_dir / DATA_SUBDIR
    milvus_dir.mkdir(parents=True, exist_ok=True)
    port = _free_port(port_hint)
    cmd = _server_command(milvus_dir, port)
    with open(data_dir / LOG_FILE, "ab") as log:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=scrubbed_env(),
            start_new_session=True,  # outlives the step process that started it
        )
    _CHILDREN[proc.pid] = proc
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            _CHILDREN.pop(proc.pid, None)
            raise VectorStoreError(
                f"Milvus Lite server for {milvus_dir} exited with {proc.returncode}: "
                f"{_log_tail(data_dir)}"
            )
        if _answers(port, 0.5):
            return LiteServer(proc.pid, port, str(milvus_dir), token)
        time.sleep(0.1)
    _terminate(proc.pid)
    raise VectorStoreError(
        f"Milvus Lite server for {milvus_dir} did not answer within {timeout_s:.0f} s: "
        f"{_log_tail(data_dir)}"
    )


def lite_store_exists(data_dir: str | os.PathLike[str]) -> bool:
    """Whether a Lite server ever stored anything for `data_dir` (its `milvus` folder exists):
    when not, there is nothing to count and no server needs starting to say so."""
    return (Path(data_dir).resolve() / DATA_SUBDIR).is_dir()


def ensure_lite_server(
    data_dir: str | os.PathLike[str], *, timeout_s: float = START_TIMEOUT_S
) -> str:
    """The URI of the Lite server owning `<data_dir>/milvus`, started if none is running."""
    root = Path(data_dir).resolve()
    server = running_lite_server(root)
    if server is not None:
        return server.uri
    with _locked(root):
        token = _token(root)
        server = running_lite_server(root)  # another process may have started it meanwhile
        if server is not None and not server.token:
            server = LiteServer(server.pid, server.port, server.data_dir, token)
            _write_state(root, server)  # adopt a server recorded before tokens existed
        if server is None:
            stale = _read_state(root)
            ours = _belongs(stale, root, token)
            if stale is not None and ours and _alive(stale.pid, stale.data_dir):
                _terminate(stale.pid)  # alive but not answering: it holds the data lock
            # A server recorded by another directory (this one is a copy) is left alone.
            server = _start(root, timeout_s, stale.port if stale and ours else None, token)
            _write_state(root, server)
    return server.uri


def _terminate(pid: int, timeout_s: float = STOP_TIMEOUT_S) -> None:
    # SIGINT lets `milvus-lite server` stop gRPC and close the database cleanly.
    for sig in (signal.SIGINT, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            child = _CHILDREN.get(pid)
            if child is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    child.wait(timeout=0.1)
            else:
                time.sleep(0.1)
            if not _alive(pid):
                _CHILDREN.pop(pid, None)
                return


def stop_lite_server(data_dir: str | os.PathLike[str]) -> bool:
    """Stop the server of `data_dir`; True if one was running. A server the state file records
    for another directory (this one is a copy of it) is never stopped; its record is dropped."""
    root = Path(data_dir).resolve()
    if not (root / STATE_FILE).exists():
        return False
    with _locked(root):
        server = _read_state(root)
        was_running = (
            server is not None
            and _belongs(server, root, _token(root))
            and _alive(server.pid, server.data_dir)
        )
        if server is not None and was_running:
            _terminate(server.pid)
        with contextlib.suppress(FileNotFoundError):
            (root / STATE_FILE).unlink()
    return was_running
