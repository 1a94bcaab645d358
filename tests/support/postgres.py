"""PostgreSQL for the Dagster instances of the daemon tests, started once and shared.

`scripts/postgres.sh` initialises Debian's PostgreSQL into `.postgres/data-<port>` and starts it
on MEMFLOW_POSTGRES_PORT (default 18350); the first test process that needs it starts it (file
lock, tests/support/services.py) and the last one stops it. Each test gets a database of its
own (`fresh_database`), dropped afterwards, so tests and xdist workers never share Dagster
storage. A server that cannot be started raises `ServiceUnavailable`: the fixtures fail the
test, never skip it.

`MEMFLOW_TEST_POSTGRES_URL` (e.g. postgresql://user:pw@host:5432) points the tests at a server
someone else runs; it is never started or stopped here.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

from tests.support.services import ServiceUnavailable, SharedService

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "postgres.sh"
DEFAULT_PORT = 18350
START_TIMEOUT_S = 600  # a fresh machine installs the package first


def port() -> int:
    return int(os.environ.get("MEMFLOW_POSTGRES_PORT", str(DEFAULT_PORT)))


def script(command: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT), command],
        cwd=ROOT,
        env={**os.environ, "MEMFLOW_POSTGRES_PORT": str(port())},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _start() -> None:
    result = script("start", START_TIMEOUT_S)
    if result.returncode != 0:
        raise ServiceUnavailable(
            f"scripts/postgres.sh start failed (exit {result.returncode}):\n"
            f"{result.stdout}\n{result.stderr}"
        )


def service() -> SharedService:
    return SharedService(
        name=f"postgres-{port()}",
        state_dir=ROOT / ".postgres-users",
        start=_start,
        stop=lambda: script("stop", 120) and None,
        answers=lambda: script("status", 30).returncode == 0,
    )


def server_url() -> str:
    return os.environ.get("MEMFLOW_TEST_POSTGRES_URL") or f"postgresql://memflow@127.0.0.1:{port()}"


def acquire() -> str:
    """The URL of a running server (without a database); starts one if none answers."""
    if not os.environ.get("MEMFLOW_TEST_POSTGRES_URL"):
        service().acquire()
    return server_url()


def release() -> None:
    if not os.environ.get("MEMFLOW_TEST_POSTGRES_URL"):
        service().release()


def _connect(url: str, db: str = "postgres"):
    import psycopg2

    conn = psycopg2.connect(f"{url}/{db}", connect_timeout=10)
    conn.autocommit = True
    return conn


def create_database(url: str, prefix: str = "dagster") -> str:
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    with contextlib.closing(_connect(url)) as conn, conn.cursor() as cur:
        cur.execute(f'CREATE DATABASE "{name}"')
    return name


def drop_database(url: str, name: str) -> None:
    with contextlib.closing(_connect(url)) as conn, conn.cursor() as cur:
        cur.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (name,)
        )
        cur.execute(f'DROP DATABASE IF EXISTS "{name}"')


@contextlib.contextmanager
def fresh_database(url: str, prefix: str = "dagster") -> Iterator[str]:
    """A new empty database on the server at `url`; yields its full URL; dropped afterwards."""
    name = create_database(url, prefix)
    try:
        yield f"{url}/{name}"
    finally:
        drop_database(url, name)


def instance_yaml(db_url: str, *, extra: str = "") -> str:
    """A dagster.yaml with run storage, event logs and schedules on `db_url` (the production
    template is deploy/dagster.yaml; `extra` adds its run coordinator, retries, ...)."""
    return (
        f"telemetry:\n  enabled: false\nstorage:\n  postgres:\n    postgres_url: {db_url}\n" + extra
    )
