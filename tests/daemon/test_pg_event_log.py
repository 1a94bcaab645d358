"""memflow's PostgreSQL event log (pipelines/pg_event_log.py) against a real server: the
production instance file loads it, every statement of a process reuses one connection, and
its kept partition listing equals Dagster's own after every change any process makes."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from dagster import DagsterInstance
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import text
from sqlalchemy.engine import make_url

from pipelines.pg_event_log import PostgresEventLog, listing_keys, listing_stamp
from tests.support.daemon import TEMPLATE
from tests.support.postgres import fresh_database, instance_yaml

pytestmark = pytest.mark.server


@given(st.lists(st.text(min_size=0, max_size=12)))
def test_a_listing_string_decodes_to_its_keys(keys: list[str]) -> None:
    assert listing_keys(listing_stamp(keys)) == keys


@pytest.fixture
def database(postgres_server: str) -> Iterator[str]:
    plain = postgres_server.replace("postgresql+psycopg2://", "postgresql://")
    with fresh_database(plain, "memflow_pglog") as url:
        yield url.replace("postgresql://", "postgresql+psycopg2://", 1)


def _memflow_instance(home: Path, db_url: str, env: pytest.MonkeyPatch) -> DagsterInstance:
    """The instance of deploy/dagster.yaml itself (its environment variables pointed at the
    test database)."""
    url = make_url(db_url)
    for name, value in (
        ("HOST", url.host),
        ("PORT", url.port),
        ("DB", url.database),
        ("USER", url.username),
        ("PASSWORD", url.password),
    ):
        env.setenv(f"MEMFLOW_DAGSTER_PG_{name}", str(value or ""))
    home.mkdir(parents=True, exist_ok=True)
    shutil.copy(TEMPLATE, home / "dagster.yaml")
    return DagsterInstance.from_config(str(home))


def _dagster_instance(home: Path, db_url: str) -> DagsterInstance:
    """Dagster's own PostgreSQL storage on the same database: another process's view."""
    home.mkdir(parents=True, exist_ok=True)
    (home / "dagster.yaml").write_text(instance_yaml(db_url))
    return DagsterInstance.from_config(str(home))


@pytest.fixture
def instances(tmp_path: Path, database: str, monkeypatch: pytest.MonkeyPatch):
    dagster = _dagster_instance(tmp_path / "dagster", database)
    memflow = _memflow_instance(tmp_path / "memflow", database, monkeypatch)
    try:
        yield memflow, dagster
    finally:
        memflow.dispose()
        dagster.dispose()


def test_the_production_instance_file_uses_memflows_event_log(instances) -> None:
    memflow, _ = instances
    assert type(memflow.event_log_storage) is PostgresEventLog


def _backend_pid(instance: DagsterInstance) -> int:
    with instance.event_log_storage.index_connection() as conn:
        return int(conn.execute(text("SELECT pg_backend_pid()")).scalar_one())


def test_every_statement_of_a_process_reuses_one_connection(instances) -> None:
    memflow, dagster = instances
    dagster.add_dynamic_partitions("tenants", ["a/b"])
    assert len({_backend_pid(memflow) for _ in range(5)}) == 1
    # Dagster's own opens a new one for each statement (what the held one saves).
    assert len({_backend_pid(dagster) for _ in range(5)}) == 5
    before = _backend_pid(memflow)
    for _ in range(20):
        assert memflow.has_dynamic_partition("tenants", "a/b")
        assert memflow.get_dynamic_partitions("tenants") == ["a/b"]
    assert _backend_pid(memflow) == before


def test_the_kept_listing_sees_every_change_any_process_makes(instances) -> None:
    memflow, dagster = instances
    assert memflow.get_dynamic_partitions("tenants") == []
    keys = [f"org{i // 3}/repo{i}" for i in range(12)] + ["odd:7/12:x", "ünï/cödé", "3:ab/c"]
    dagster.add_dynamic_partitions("tenants", keys)

    def same() -> list[str]:
        got = memflow.get_dynamic_partitions("tenants")
        assert got == dagster.get_dynamic_partitions("tenants")
        return got

    assert same() == keys
    assert same() == keys  # kept
    dagster.delete_dynamic_partition("tenants", "org1/repo4")
    assert "org1/repo4" not in same()
    dagster.add_dynamic_partitions("tenants", ["org1/repo4"])  # re-added: last now
    assert same()[-1] == "org1/repo4"
    # A change by the storage itself, and another definition's keys kept apart.
    memflow.add_dynamic_partitions("tenants", ["new/one"])
    memflow.add_dynamic_partitions("other", ["x/y"])
    assert same()[-1] == "new/one"
    assert memflow.get_dynamic_partitions("other") == ["x/y"]
    assert memflow.get_dynamic_partitions("none-such") == []


def test_a_wiped_storage_forgets_what_it_kept(instances) -> None:
    memflow, dagster = instances
    dagster.add_dynamic_partitions("tenants", ["a/b", "c/d"])
    assert memflow.get_dynamic_partitions("tenants") == ["a/b", "c/d"]
    memflow.event_log_storage.wipe()
    assert memflow.get_dynamic_partitions("tenants") == []
    assert memflow.event_log_storage.has_table("dynamic_partitions")
