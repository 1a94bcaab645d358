"""Real Gremlin servers for the tests, started once and shared (tests/support/services.py).

Two flavours, both run by `scripts/gremlin-server.sh`:

- `tinkergraph`: Apache TinkerPop Gremlin Server on TinkerGraph (in memory), port
  MEMFLOW_GREMLIN_PORT (default 18182).
- `janusgraph`: JanusGraph's Gremlin Server on BerkeleyDB JE, persisted under
  .janusgraph/data-<port>, port MEMFLOW_JANUSGRAPH_PORT (default 18303).

`MEMFLOW_TEST_GREMLIN_URL` / `MEMFLOW_TEST_JANUSGRAPH_URL` point the tests at a server someone
else runs; it is never started or stopped here. (Not MEMFLOW_GREMLIN_URL: pymilvus loads the
repository's `.env` into os.environ when it is imported, so the application's setting would
silently point the tests at whatever `.env` names.)
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from tests.support.services import ServiceUnavailable, SharedService

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gremlin-server.sh"
START_TIMEOUT_S = 600  # a first run also resolves the server's jars with Maven

FLAVOURS: dict[str, dict[str, str]] = {
    "tinkergraph": {
        "state": ".gremlin",
        "port_env": "MEMFLOW_GREMLIN_PORT",
        "port": "18182",
        "url_env": "MEMFLOW_TEST_GREMLIN_URL",
    },
    "janusgraph": {
        "state": ".janusgraph",
        "port_env": "MEMFLOW_JANUSGRAPH_PORT",
        "port": "18303",
        "url_env": "MEMFLOW_TEST_JANUSGRAPH_URL",
    },
}

GremlinServerUnavailable = ServiceUnavailable  # the name the fixtures used before


def port(flavour: str = "tinkergraph") -> int:
    spec = FLAVOURS[flavour]
    return int(os.environ.get(spec["port_env"], spec["port"]))


def default_url(flavour: str = "tinkergraph", at_port: int | None = None) -> str:
    return f"ws://127.0.0.1:{at_port or port(flavour)}/gremlin"


def script(
    flavour: str,
    command: str,
    timeout: float,
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Runs `scripts/gremlin-server.sh FLAVOUR COMMAND` (`env` overrides, e.g. another port)."""
    spec = FLAVOURS[flavour]
    full = {
        **os.environ,
        "MEMFLOW_PYTHON": sys.executable,
        spec["port_env"]: str(port(flavour)),
        **(env or {}),
    }
    return subprocess.run(
        ["bash", str(SCRIPT), flavour, command],
        cwd=ROOT,
        env=full,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def start_or_fail(flavour: str, env: Mapping[str, str] | None = None) -> None:
    result = script(flavour, "start", START_TIMEOUT_S, env)
    if result.returncode != 0:
        raise ServiceUnavailable(
            f"scripts/gremlin-server.sh {flavour} start failed (exit {result.returncode}):\n"
            f"{result.stdout}\n{result.stderr}"
        )


def service(flavour: str) -> SharedService:
    return SharedService(
        name=f"{flavour}-{port(flavour)}",
        state_dir=ROOT / FLAVOURS[flavour]["state"],
        start=lambda: start_or_fail(flavour),
        stop=lambda: script(flavour, "stop", 120) and None,
        answers=lambda: script(flavour, "status", 60).returncode == 0,
    )


def acquire_server(flavour: str = "tinkergraph") -> str:
    """The URL of a running server of `flavour`; starts one if none answers. Pair with
    release_server(flavour)."""
    external = os.environ.get(FLAVOURS[flavour]["url_env"])
    if external:
        return external
    service(flavour).acquire()
    return default_url(flavour)


def release_server(flavour: str = "tinkergraph") -> None:
    if os.environ.get(FLAVOURS[flavour]["url_env"]):
        return
    service(flavour).release()


class DedicatedJanusGraph:
    """A JanusGraph server one test owns (the kill -9 tests): its own port (the env's
    MEMFLOW_FAULT_JANUSGRAPH_PORT, else a free one) and its own data directory."""

    def __init__(self, data_dir: Path, at_port: int | None = None) -> None:
        from tests.support.services import free_port_block

        self.port = at_port or free_port_block(1, "MEMFLOW_FAULT_JANUSGRAPH_PORT")
        self.data_dir = data_dir
        self.url = default_url("janusgraph", self.port)
        self._env = {
            "MEMFLOW_JANUSGRAPH_PORT": str(self.port),
            "MEMFLOW_JANUSGRAPH_DATA": str(data_dir),
        }

    def start(self) -> None:
        start_or_fail("janusgraph", self._env)

    def stop(self) -> None:
        """Stops the server and removes what the script wrote for its port (config, log)."""
        script("janusgraph", "stop", 120, self._env)
        state = ROOT / FLAVOURS["janusgraph"]["state"]
        for name in (
            f"janusgraph-{self.port}.properties",
            f"janusgraph-server-{self.port}.yaml",
            f"server-{self.port}.log",
        ):
            (state / name).unlink(missing_ok=True)

    def pid(self) -> int:
        return int((ROOT / FLAVOURS["janusgraph"]["state"] / f"server-{self.port}.pid").read_text())

    def kill(self) -> None:
        """kill -9; the pid file stays behind, stale, as after a crash."""
        import signal

        pid = self.pid()
        os.kill(pid, signal.SIGKILL)
        while Path(f"/proc/{pid}").exists():
            try:
                if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0] == "Z":
                    os.waitpid(pid, os.WNOHANG)  # never our child (setsid), but be safe
                    break
            except (OSError, ChildProcessError):
                break
            time.sleep(0.05)
