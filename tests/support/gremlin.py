"""A real Apache TinkerPop Gremlin Server for the tests, started once and shared.

`MEMFLOW_GREMLIN_URL` points the tests at a server someone else runs; it is never started or
stopped here. Otherwise the first test process to need one runs `scripts/gremlin-server.sh start`
under a file lock, so parallel xdist workers start it once. Each process records its pid as a
user; the last user out stops the server, and only if the tests started it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from filelock import FileLock

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gremlin-server.sh"
STATE_DIR = ROOT / ".gremlin"
START_TIMEOUT_S = 600  # a first run also resolves the server's jars with Maven


class GremlinServerUnavailable(RuntimeError):
    """The Gremlin Server could not be started; the message carries the script's output."""


def port() -> int:
    return int(os.environ.get("MEMFLOW_GREMLIN_PORT", "18182"))


def default_url() -> str:
    return f"ws://127.0.0.1:{port()}/gremlin"


def _script(command: str, timeout: float) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MEMFLOW_PYTHON": sys.executable, "MEMFLOW_GREMLIN_PORT": str(port())}
    return subprocess.run(
        ["bash", str(SCRIPT), command],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _answers() -> bool:
    return _script("status", 60).returncode == 0


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class _Users:
    """Who uses the test server (live pids) and whether the tests started it, in a JSON file."""

    def __init__(self) -> None:
        STATE_DIR.mkdir(exist_ok=True)
        self.path = STATE_DIR / f"test-users-{port()}.json"
        self.lock = FileLock(str(STATE_DIR / f"test-users-{port()}.lock"))

    def read(self) -> tuple[bool, list[int]]:
        try:
            state = json.loads(self.path.read_text())
        except (FileNotFoundError, ValueError):
            state = {}
        pids = [p for p in state.get("pids", []) if isinstance(p, int) and _pid_alive(p)]
        return bool(state.get("owned", False)), pids

    def write(self, owned: bool, pids: list[int]) -> None:
        self.path.write_text(json.dumps({"owned": owned, "pids": pids}))


def acquire_server() -> str:
    """The URL of a running Gremlin Server; starts one if none answers. Pair with release."""
    if os.environ.get("MEMFLOW_GREMLIN_URL"):
        return os.environ["MEMFLOW_GREMLIN_URL"]
    users = _Users()
    with users.lock:
        owned, pids = users.read()
        # With no live user left, an old "owned" belongs to a run that died: not ours to stop.
        owned = owned and bool(pids)
        if not _answers():
            result = _script("start", START_TIMEOUT_S)
            if result.returncode != 0:
                raise GremlinServerUnavailable(
                    f"scripts/gremlin-server.sh start failed (exit {result.returncode}):\n"
                    f"{result.stdout}\n{result.stderr}"
                )
            owned, pids = True, []
        users.write(owned, [*pids, os.getpid()])
    return default_url()


def release_server() -> None:
    if os.environ.get("MEMFLOW_GREMLIN_URL"):
        return
    users = _Users()
    with users.lock:
        owned, pids = users.read()
        others = [p for p in pids if p != os.getpid()]
        if others:
            users.write(owned, others)
            return
        if owned:
            _script("stop", 120)
        users.path.unlink(missing_ok=True)
