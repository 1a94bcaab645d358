"""A production-shaped Dagster deployment in a temp directory, for the daemon tests and the
daemon benchmark: `dagster-daemon run` on the repository's code location (workspace.yaml),
with the instance of deploy/dagster.yaml on PostgreSQL (a database of its own).

    with DaemonWorld.create(tmp, postgres_server_url) as world:
        world.start_daemon()
        ... write landing files ...
        world.wait_until(lambda: world.facts("acme/api") >= 3, timeout=240)

The daemon runs in its own session (process group) so a test can kill -9 the daemon alone
(`kill_daemon()`) or the daemon with every process it started (`kill_daemon(group=True)`: its
code server and the run workers that server spawned, as when a machine dies).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl
import yaml

from tests.support.postgres import create_database, drop_database

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "deploy" / "dagster.yaml"
BIN = Path(sys.executable).parent
IN_FLIGHT = ("QUEUED", "NOT_STARTED", "STARTING", "STARTED", "CANCELING")


def in_flight(run: dict[str, Any]) -> bool:
    """Queued or running, or failed with a retry promised and not yet created."""
    if run["status"] in IN_FLIGHT:
        return True
    tags = run["tags"]
    return (
        run["status"] == "FAILURE"
        and tags.get("dagster/will_retry") == "true"
        and "dagster/auto_retry_run_id" not in tags
    )


STORAGES = ("run_storage", "event_log_storage", "schedule_storage")


def instance_config(db_url: str, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """deploy/dagster.yaml with its storages pointed at `db_url` (and `overrides` merged in,
    one level deep per top-level key)."""
    config = yaml.safe_load(TEMPLATE.read_text())
    for key in STORAGES:
        config[key] = {**config[key], "config": {"postgres_url": db_url}}
    for key, value in (overrides or {}).items():
        if isinstance(value, dict) and isinstance(config.get(key), dict):
            config[key] = {**config[key], **value}
        else:
            config[key] = value
    return config


def memflow_env(root: Path, landing: Path, data: Path, home: Path, **settings: str) -> dict:
    """Every memflow setting explicit (the repository's .env must not leak in)."""
    from resources.settings import DEFAULTS

    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMFLOW_", "DAGSTER_"))}
    env.update(DEFAULTS)
    env.update(
        {
            "DAGSTER_HOME": str(home),
            "MEMFLOW_DATA_DIR": str(data),
            "MEMFLOW_LANDING_DIR": str(landing),
            "MEMFLOW_EXTRACTOR": "none",
            "MEMFLOW_EMBEDDER": "none",
            "MEMFLOW_GRAPH_BACKEND": "sqlite",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false",
            "PYTHONPATH": str(ROOT),
        }
    )
    env.update(settings)
    return env


@dataclass
class DaemonWorld:
    root: Path
    server_url: str  # postgresql+psycopg2://user@host:port (no database)
    database: str
    settings: dict[str, str] = field(default_factory=dict)
    daemon: subprocess.Popen[bytes] | None = None
    daemon_starts: int = 0
    _instance: Any = None

    # -- set-up ------------------------------------------------------------------------

    @classmethod
    @contextlib.contextmanager
    def create(
        cls,
        root: Path,
        server_url: str,
        *,
        overrides: dict[str, Any] | None = None,
        **settings: str,
    ) -> Iterator[DaemonWorld]:
        plain = server_url.replace("postgresql+psycopg2://", "postgresql://")
        database = create_database(plain, "memflow_daemon")
        world = cls(root, server_url, database, dict(settings))
        try:
            world.landing.mkdir(parents=True, exist_ok=True)
            world.data.mkdir(parents=True, exist_ok=True)
            world.home.mkdir(parents=True, exist_ok=True)
            config = instance_config(world.db_url, overrides)
            (world.home / "dagster.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
            (world.root / "workspace.yaml").write_text(
                "load_from:\n  - python_module:\n      module_name: pipelines.definitions\n"
                f"      working_directory: {ROOT}\n"
            )
            yield world
        finally:
            world.stop_daemon()
            world.wait_workers_gone(30)
            if world._instance is not None:
                world._instance.dispose()
            with contextlib.suppress(Exception):
                drop_database(plain, database)

    @property
    def db_url(self) -> str:
        return f"{self.server_url}/{self.database}"

    @property
    def landing(self) -> Path:
        return self.root / "landing"

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def home(self) -> Path:
        return self.root / "dagster"

    def env(self) -> dict[str, str]:
        return memflow_env(self.root, self.landing, self.data, self.home, **self.settings)

    # -- the daemon ----------------------------------------------------------------------

    def start_daemon(self) -> subprocess.Popen[bytes]:
        self.daemon_starts += 1
        log = open(self.root / f"daemon-{self.daemon_starts}.log", "ab")  # noqa: SIM115
        self.daemon = subprocess.Popen(
            [str(BIN / "dagster-daemon"), "run", "-w", str(self.root / "workspace.yaml")],
            env=self.env(),
            cwd=self.root,  # no .env here: Dagster's CLI would load it over the environment
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()
        return self.daemon

    def kill_daemon(self, *, group: bool = False) -> None:
        """kill -9 the daemon (`group`: with its code server and run workers)."""
        assert self.daemon is not None
        if group:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.daemon.pid, signal.SIGKILL)
        else:
            self.daemon.send_signal(signal.SIGKILL)
        self.daemon.wait()

    def stop_daemon(self, timeout: float = 60.0) -> None:
        proc = self.daemon
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    def group_pids(self) -> list[int]:
        """Live processes of the daemon's session (the daemon, code servers, run workers)."""
        if self.daemon is None:
            return []
        out = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if stat[0] != "Z" and int(stat[3]) == self.daemon.pid:  # session id
                out.append(int(entry.name))
        return out

    def wait_workers_gone(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self.group_pids() and time.monotonic() < deadline:
            time.sleep(0.5)
        for pid in self.group_pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def log_tail(self, size: int = 4000) -> str:
        parts = []
        for path in sorted(self.root.glob("daemon-*.log")):
            parts.append(f"---- {path.name} ----\n{path.read_text(errors='replace')[-size:]}")
        return "\n".join(parts)

    # -- what the instance and the tables say --------------------------------------------

    def instance(self):
        """The instance, opened once (closed with the world)."""
        from dagster import DagsterInstance

        if self._instance is None:
            self._instance = DagsterInstance.from_config(str(self.home))
        return self._instance

    def runs(self) -> list[dict[str, Any]]:
        instance = self.instance()
        return [
            {
                "run_id": r.dagster_run.run_id,
                "job": r.dagster_run.job_name,
                "status": r.dagster_run.status.value,
                "tags": dict(r.dagster_run.tags),
                "created": r.create_timestamp.timestamp(),
                "start": r.start_time,
                "end": r.end_time,
            }
            for r in instance.get_run_records()
        ]

    def table(self, asset: str, tenant: str) -> pl.DataFrame | None:
        from resources.tables import TableStore
        from schemas.scope import Scope

        return TableStore(self.data).read_table(asset, Scope.parse(tenant))

    def facts(self, tenant: str) -> int:
        df = self.table("validated_facts", tenant)
        return 0 if df is None else df.height

    def wait_until(
        self, done: Callable[[], bool], timeout: float, *, what: str = "the work"
    ) -> float:
        """Seconds until `done()` and no run in flight; raises with the daemon's log."""
        started = time.monotonic()
        while time.monotonic() - started < timeout:
            if self.daemon is not None and self.daemon.poll() is not None:
                raise AssertionError(
                    f"the daemon exited ({self.daemon.returncode})\n{self.log_tail()}"
                )
            if done() and not any(map(in_flight, self.runs())):
                return time.monotonic() - started
            time.sleep(1.0)
        runs = [(r["job"], r["status"], r["tags"].get("memflow/block")) for r in self.runs()]
        raise AssertionError(f"{what} not done in {timeout:.0f}s; runs {runs}\n{self.log_tail()}")
