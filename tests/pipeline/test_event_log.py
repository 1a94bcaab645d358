"""The local instance's event log (pipelines/event_log.py): what `memflow run` writes there is
what Dagster's own SQLite event log would hold, readable by a second instance (the UI), and
the kept engines stay bounded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from dagster import (
    AssetKey,
    AssetMaterialization,
    AssetObservation,
    DagsterEventType,
    DagsterInstance,
    DagsterRunStatus,
    RunsFilter,
)
from dagster._core.events import (
    AssetMaterializationPlannedData,
    AssetObservationData,
    DagsterEvent,
    DagsterEventBatchMetadata,
    StepMaterializationData,
)
from dagster._core.events.log import EventLogEntry
from dagster._core.storage.event_log.base import AssetRecordsFilter
from dagster._core.storage.event_log.sqlite.sqlite_event_log import SqliteEventLogStorage

from pipelines import event_log, runner
from pipelines.event_log import LocalSqliteEventLogStorage
from pipelines.runner import instance_for, run_all
from pipelines.settings import resolve
from resources.settings import DEFAULTS
from resources.tables import TableStore
from schemas.scope import Scope
from schemas.tables import TABLES
from tests.pipeline.landing_fixtures import small_landing
from tests.support.leftovers import assert_no_process_left

TENANTS = ["acme/api", "globex/ml"]


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    landing, data = small_landing(tmp_path / "landing"), tmp_path / "data"
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    for name in DEFAULTS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MEMFLOW_EMBEDDER", "none")
    resolve({"MEMFLOW_LANDING_DIR": str(landing), "MEMFLOW_DATA_DIR": str(data)}, tmp_path / "x")
    yield landing, data
    assert_no_process_left(data)


def test_memflow_runs_instance_uses_the_local_event_log_and_a_second_reader_sees_it(
    env,
) -> None:
    landing, data = env
    outcome = run_all(str(landing), str(data))
    assert not outcome.failures and outcome.runs == 1
    instance = DagsterInstance.get()
    assert type(instance.event_log_storage) is LocalSqliteEventLogStorage
    base = Path(instance.event_log_storage._base_dir)
    assert base == (data / "dagster" / "history" / "runs").resolve()

    # Another process's view (the UI): Dagster's own storage over the same files.
    reader = SqliteEventLogStorage(str(base))
    try:
        for key in ("raw_turns", "validated_facts", "graph_sink"):
            got = reader.get_latest_materialization_events([AssetKey(key)])[AssetKey(key)]
            assert got is not None, key
        runs = instance.get_runs(RunsFilter(statuses=[DagsterRunStatus.SUCCESS]))
        assert len(runs) == 1
        for run in runs:
            mine = [e.dagster_event_type for e in instance.all_logs(run.run_id)]
            theirs = [e.dagster_event_type for e in reader.get_logs_for_run(run.run_id)]
            assert mine == theirs and DagsterEventType.RUN_SUCCESS in theirs
        partitions = instance.get_materialized_partitions(AssetKey("validated_facts"))
        assert partitions == set(TENANTS)
    finally:
        reader.dispose()


def test_a_steps_materializations_are_stored_as_one_batch_and_read_back_per_tenant(
    env, monkeypatch: pytest.MonkeyPatch
) -> None:
    landing, data = env
    monkeypatch.delenv(runner.EVENT_BATCH_ENV, raising=False)
    batches: list[list[tuple[str, str | None]]] = []
    original = LocalSqliteEventLogStorage.store_event_batch

    def spy(self, events):
        batches.append(
            [
                (e.dagster_event.asset_key.to_user_string(), e.dagster_event.partition)
                for e in events
            ]
        )
        return original(self, events)

    monkeypatch.setattr(LocalSqliteEventLogStorage, "store_event_batch", spy)
    outcome = run_all(str(landing), str(data))
    assert not outcome.failures
    assert os.environ[runner.EVENT_BATCH_ENV] == runner.EVENT_BATCH_SIZE
    # one batch per asset of the ingest run, each holding every tenant
    batched = {b[0][0]: sorted(p for _, p in b) for b in batches}
    assert len(batches) == len(batched) >= 10
    assert all(parts == TENANTS for parts in batched.values()), batched

    reader = SqliteEventLogStorage(str(Path(DagsterInstance.get().event_log_storage._base_dir)))
    try:
        for asset in batched:
            key = AssetKey(asset)
            for tenant in TENANTS:
                got = reader.fetch_materializations(
                    AssetRecordsFilter(asset_key=key, asset_partitions=[tenant]), limit=5
                ).records
                assert len(got) == 1, (asset, tenant)
                assert got[0].event_log_entry.dagster_event.partition == tenant
            latest = reader.get_latest_materialization_events([key])[key]
            assert latest is not None and latest.dagster_event.partition in TENANTS
    finally:
        reader.dispose()


def _entry(run_id: str, kind: str, key: AssetKey, partition: str, ts: float) -> EventLogEntry:
    if kind == "P":
        ev = DagsterEvent(
            DagsterEventType.ASSET_MATERIALIZATION_PLANNED.value,
            "job",
            event_specific_data=AssetMaterializationPlannedData(key, partition=partition),
        )
    elif kind == "M":
        ev = DagsterEvent(
            DagsterEventType.ASSET_MATERIALIZATION.value,
            "job",
            event_specific_data=StepMaterializationData(
                AssetMaterialization(asset_key=key, partition=partition)
            ),
        )
    else:
        ev = DagsterEvent(
            DagsterEventType.ASSET_OBSERVATION.value,
            "job",
            event_specific_data=AssetObservationData(
                AssetObservation(asset_key=key, partition=partition)
            ),
        )
    return EventLogEntry(
        error_info=None,
        level="debug",
        user_message="",
        run_id=run_id,
        timestamp=ts,
        step_key="s",
        job_name="job",
        dagster_event=ev,
    )


@pytest.mark.parametrize("kinds", ["MO", "OM", "MM", "OO", "PP", "PM", "PPM"])
def test_a_batch_reads_back_as_the_same_events_stored_one_by_one(tmp_path, kinds) -> None:
    """Red team F2: a materialization then an observation of one asset in one batch must
    leave the asset's latest materialization where storing them one by one leaves it."""
    key, now = AssetKey("validated_facts"), time.time()
    seen = {}
    for mode in ("batch", "one_by_one"):
        storage = LocalSqliteEventLogStorage(str(tmp_path / mode))
        try:
            storage.store_event(_entry("run-1", "M", key, "acme/api", now - 60))
            batch = [_entry("run-2", k, key, f"t/{i}", now + i) for i, k in enumerate(kinds)]
            if mode == "batch":
                storage.store_event_batch(batch)
            else:
                for e in batch:
                    SqliteEventLogStorage.store_event(storage, e)
            latest = storage.get_latest_materialization_events([key])[key]
            logs = [(e.dagster_event_type, e.dagster_event.partition) for e in
                    storage.get_logs_for_run("run-2")]  # fmt: skip
            record = storage.get_asset_records([key])[0].asset_entry
            planned = storage.get_latest_planned_materialization_info(key)
            seen[mode] = (
                latest.run_id,
                latest.dagster_event.partition,
                logs,
                record.last_run_id,
                planned.run_id if planned else None,
            )
        finally:
            storage.dispose()
    assert seen["batch"] == seen["one_by_one"]


def test_an_index_failure_mid_batch_stores_each_event_once(tmp_path, monkeypatch) -> None:
    """Red team F3: the run's database commits before the index; when the index refuses the
    batch, Dagster stores the events again one by one, so the batch takes its rows back."""
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    monkeypatch.setenv(runner.EVENT_BATCH_ENV, runner.EVENT_BATCH_SIZE)
    instance = instance_for(str(tmp_path))
    storage = instance.event_log_storage
    assert isinstance(storage, LocalSqliteEventLogStorage)
    original = LocalSqliteEventLogStorage.index_transaction
    failures = [1]

    def flaky(self):
        if failures:
            failures.pop()
            raise RuntimeError("database is locked")
        return original(self)

    monkeypatch.setattr(LocalSqliteEventLogStorage, "index_transaction", flaky)
    key, now = AssetKey("raw_turns"), time.time()
    tenants = ["acme/api", "acme/web", "globex/ml"]
    try:
        for i, tenant in enumerate(tenants):
            instance.handle_new_event(
                _entry("run-9", "M", key, tenant, now + i),
                batch_metadata=DagsterEventBatchMetadata("b-1", i == len(tenants) - 1),
            )
        assert not failures  # the failure happened
        logged = [
            e.dagster_event.partition
            for e in storage.get_logs_for_run("run-9")
            if e.dagster_event_type == DagsterEventType.ASSET_MATERIALIZATION
        ]
        assert sorted(logged) == tenants
        assert instance.get_materialized_partitions(key) == set(tenants)
    finally:
        instance.dispose()


def test_an_existing_instance_file_is_left_as_it_is(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    home = tmp_path / "data" / "dagster"
    home.mkdir(parents=True)
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    instance = instance_for(str(tmp_path / "data"))
    try:
        assert type(instance.event_log_storage) is SqliteEventLogStorage
    finally:
        instance.dispose()


def test_kept_engines_are_bounded_and_wipe_releases_them(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(event_log, "RUN_SHARDS_KEPT", 3)
    storage = LocalSqliteEventLogStorage(str(tmp_path / "runs"))
    try:
        for i in range(10):
            with storage.run_connection(f"run-{i}"):
                pass
        with storage.index_connection():
            pass
        kept = list(storage._engines)
        assert kept[-1] == "index" and len(kept) == 4
        assert [k for k in kept if k != "index"] == ["run-7", "run-8", "run-9"]
        storage.wipe()
        assert list(storage._engines) in ([], ["index"])
        assert not list((tmp_path / "runs").glob("run-*.db"))
    finally:
        storage.dispose()


def _schema(db: Path) -> tuple[list[tuple[str, str]], str | None, str]:
    """A SQLite file's tables and indexes (their SQL), its alembic revision, its journal mode."""
    import sqlite3

    with sqlite3.connect(db) as conn:
        sql = sorted(conn.execute("SELECT name, sql FROM sqlite_master WHERE sql IS NOT NULL"))
        revision = conn.execute("SELECT version_num FROM alembic_version").fetchone()
        mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
    return sql, revision[0] if revision else None, mode


def test_new_shards_and_index_are_created_as_dagster_creates_them(tmp_path: Path) -> None:
    """The index and a run's shard, created with the migrations loaded once, are the files
    Dagster's own `_initdb` creates: same tables, indexes, revision, WAL."""
    ours = LocalSqliteEventLogStorage(str(tmp_path / "ours"))
    theirs = SqliteEventLogStorage(str(tmp_path / "theirs"))
    try:
        for storage in (ours, theirs):
            with storage.run_connection("run-1"):
                pass
        for name in ("index.db", "run-1.db"):
            mine, dagsters = _schema(tmp_path / "ours" / name), _schema(tmp_path / "theirs" / name)
            assert mine == dagsters
            assert mine[1] is not None and mine[2] == "wal"
    finally:
        ours.dispose()
        theirs.dispose()


def test_a_shard_that_is_not_new_goes_through_dagsters_initdb(tmp_path: Path, monkeypatch) -> None:
    """A shard with a revision is left alone; one with tables and no revision (an old SQLAlchemy
    wrote it) is Dagster's to stamp; the shortcut never re-creates what is there."""
    import sqlite3

    storage = LocalSqliteEventLogStorage(str(tmp_path / "runs"))
    try:
        with storage.run_connection("run-1"):
            pass
        db = tmp_path / "runs" / "run-1.db"
        with sqlite3.connect(db) as conn:
            conn.execute("UPDATE alembic_version SET version_num = 'older'")
        calls: list[bool] = []
        original = SqliteEventLogStorage._initdb

        def dagsters(self, engine, for_index_shard=False):
            calls.append(for_index_shard)
            return original(self, engine, for_index_shard)

        monkeypatch.setattr(SqliteEventLogStorage, "_initdb", dagsters)
        storage._initialized_dbs.clear()
        with storage.run_connection("run-1"):
            pass
        assert calls == [] and _schema(db)[1] == "older"  # a revision: left as it is

        with sqlite3.connect(db) as conn:
            conn.execute("DROP TABLE alembic_version")
        storage._initialized_dbs.clear()
        with storage.run_connection("run-1"):
            pass
        assert calls == [False]
        assert _schema(db)[1] is not None
    finally:
        storage.dispose()


def test_count_rows_equals_the_height_of_every_table(env) -> None:
    landing, data = env
    assert not run_all(str(landing), str(data)).failures
    tables = TableStore(data)
    checked = 0
    for tenant in TENANTS:
        scope = Scope.parse(tenant)
        for asset in TABLES:
            df = tables.read_table(asset, scope)
            assert tables.count_rows(asset, scope) == (0 if df is None else df.height), asset
            checked += df is not None and df.height > 0
    assert checked >= 10


_SLOW_JOB = """
import sys, time
import dagster as dg

@dg.op
def first():
    time.sleep(1)
    return 1

@dg.op
def second(x):
    time.sleep(1)
    return x

@dg.job
def slow():
    second(first())

with dg.DagsterInstance.get() as instance:
    slow.execute_in_process(instance=instance)
"""


def test_a_watcher_in_another_process_sees_a_running_runs_events_live(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the UI's live run view does: subscribe to a run another process is executing. With
    kept connections the events sit in the run's -wal file, which the watcher must follow."""
    home = tmp_path / "home"
    home.mkdir()
    base = (home / "history" / "runs").resolve()
    (home / "dagster.yaml").write_text(
        event_log.INSTANCE_YAML.format(base_dir=json.dumps(str(base)))
    )
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    instance = DagsterInstance.get()
    try:
        assert type(instance.event_log_storage) is LocalSqliteEventLogStorage
        child = subprocess.Popen(
            [sys.executable, "-c", _SLOW_JOB],
            env={**os.environ, "DAGSTER_HOME": str(home)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 120
        while not instance.get_runs() and time.monotonic() < deadline:
            time.sleep(0.05)
        run_id = instance.get_runs()[0].run_id
        past = instance.get_records_for_run(run_id)
        live: list[float] = []
        instance.watch_event_logs(run_id, past.cursor, lambda _e, _c: live.append(time.monotonic()))
        assert child.wait(timeout=120) == 0
        ended = time.monotonic()
        total = len(instance.get_records_for_run(run_id, limit=10_000).records)
        while len(past.records) + len(live) < total and time.monotonic() < ended + 10:
            time.sleep(0.05)
        assert len(past.records) + len(live) == total
        assert any(t < ended for t in live)  # while the run was still going, not only at its end
    finally:
        instance.dispose()


def test_the_kept_partition_listing_follows_every_change_by_any_process(tmp_path: Path) -> None:
    """Issue 19: the listing of a dynamic partitions definition is kept while the stored keys
    are the same; a key added, erased, or replaced by another writer (a second storage on the
    same directory: another process) is seen at the next call, including SQLite reusing the
    id of an erased last key for a new one."""
    ours = LocalSqliteEventLogStorage(str(tmp_path / "runs"))
    other = LocalSqliteEventLogStorage(str(tmp_path / "runs"))
    plain = SqliteEventLogStorage(str(tmp_path / "runs"))
    name = "tenants"
    try:
        assert ours.get_dynamic_partitions(name) == []
        other.add_dynamic_partitions(name, ["a/x", "b/y", "c/z"])
        assert ours.get_dynamic_partitions(name) == ["a/x", "b/y", "c/z"]
        assert ours.get_dynamic_partitions(name) == ["a/x", "b/y", "c/z"]  # kept
        other.delete_dynamic_partition(name, "c/z")
        other.add_dynamic_partitions(name, ["d/w"])  # the erased last key's id, reused
        assert ours.get_dynamic_partitions(name) == plain.get_dynamic_partitions(name)
        assert ours.get_dynamic_partitions(name) == ["a/x", "b/y", "d/w"]
        other.delete_dynamic_partition(name, "b/y")
        other.delete_dynamic_partition(name, "d/w")
        other.add_dynamic_partitions(name, ["e/v", "d/w"])  # same count, same last key
        assert ours.get_dynamic_partitions(name) == ["a/x", "e/v", "d/w"]
        listed = ours.get_dynamic_partitions(name)
        listed.append("not/stored")  # the caller's copy, not the kept listing
        assert ours.get_dynamic_partitions(name) == ["a/x", "e/v", "d/w"]
        assert ours.get_dynamic_partitions("other") == []
        ours.add_dynamic_partitions(name, ["f/u"])  # its own engine's commit
        assert ours.get_dynamic_partitions(name) == ["a/x", "e/v", "d/w", "f/u"]
        plain.delete_dynamic_partition(name, "a/x")  # Dagster's own storage
        plain.add_dynamic_partitions(name, ["a/x"])
        assert ours.get_dynamic_partitions(name) == plain.get_dynamic_partitions(name)
        assert ours.get_dynamic_partitions(name) == ["e/v", "d/w", "f/u", "a/x"]
    finally:
        for storage in (ours, other, plain):
            storage.dispose()


def test_a_listing_with_no_commit_since_reads_no_keys(tmp_path: Path, monkeypatch) -> None:
    """Calls with no commit to the index in between (a step's per-tenant metadata calls) cost
    one `PRAGMA data_version` each, not a read of every key; the first call after any commit
    reads the keys again."""
    ours = LocalSqliteEventLogStorage(str(tmp_path / "runs"))
    other = LocalSqliteEventLogStorage(str(tmp_path / "runs"))
    name = "tenants"
    statements: list[str] = []
    read_index = LocalSqliteEventLogStorage._read_index

    def counted(self, sql, params):
        statements.append(sql)
        return read_index(self, sql, params)

    monkeypatch.setattr(LocalSqliteEventLogStorage, "_read_index", counted)
    try:
        other.add_dynamic_partitions(name, [f"org/r{i}" for i in range(50)])
        assert len(ours.get_dynamic_partitions(name)) == 50
        statements.clear()
        for _ in range(20):
            assert len(ours.get_dynamic_partitions(name)) == 50
        assert statements and all(s.startswith("PRAGMA data_version") for s in statements)
        other.add_dynamic_partitions(name, ["org/new"])
        assert ours.get_dynamic_partitions(name)[-1] == "org/new"
    finally:
        for storage in (ours, other):
            storage.dispose()


def test_partition_membership_on_the_kept_reader_follows_every_writer(tmp_path: Path) -> None:
    """`has_dynamic_partition` answers through the kept sqlite3 reader: a key added or erased
    by another storage on the same directory (another process) is seen at the next call, and
    the answers are the ones Dagster's own storage gives."""
    ours = LocalSqliteEventLogStorage(str(tmp_path / "runs"))
    other = LocalSqliteEventLogStorage(str(tmp_path / "runs"))
    plain = SqliteEventLogStorage(str(tmp_path / "runs"))
    name = "tenants"
    try:
        assert not ours.has_dynamic_partition(name, "a/x")
        other.add_dynamic_partitions(name, ["a/x", "b/y"])
        assert ours.has_dynamic_partition(name, "a/x") and ours.has_dynamic_partition(name, "b/y")
        assert not ours.has_dynamic_partition("other", "a/x")
        other.delete_dynamic_partition(name, "a/x")
        for key in ("a/x", "b/y", "c/z"):
            assert ours.has_dynamic_partition(name, key) == plain.has_dynamic_partition(name, key)
        assert not ours.has_dynamic_partition(name, "a/x")
        ours.add_dynamic_partitions(name, ["c/z"])  # its own write, through its engine
        assert ours.has_dynamic_partition(name, "c/z") and other.has_dynamic_partition(name, "c/z")
        ours.wipe()  # the reader goes with the engines; a later call opens a new one
        assert not ours.has_dynamic_partition(name, "b/y")
    finally:
        for storage in (ours, other, plain):
            storage.dispose()
