"""The table store's contract (`resources.tables.TableStore`), on every backend it runs on:
local disk and an S3-compatible server (tests/support/s3_server.py).

- replacing a range of tenants is idempotent and leaves every other tenant as it was;
- two spawned writers on disjoint tenants of one table both commit (Delta's conflict
  checker resolves their concurrent commits), and writers racing on one tenant leave one
  whole write, never a mix;
- schema evolution: a column added to the layout reads back null for old rows;
- the version changes only when a write commits; any earlier version reads back (time
  travel, by version and by time);
- the tables read with no memflow code: polars `scan_delta` and DuckDB's `delta_scan`.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import site
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pytest
from deltalake import DeltaTable
from deltalake.fs import DeltaStorageHandler
from pyarrow.fs import FileSelector, PyFileSystem

from resources.table_log import (
    CHECKPOINT_INTERVAL,
    TABLE_CONFIGURATION,
    TENANT_STATS_CONFIGURATION,
)
from resources.tables import SUMMARIES_DIR, TableStore
from schemas.scope import Scope
from schemas.tables import ENTITIES, LANDING_PROBLEMS, TABLES, Asset, conform
from tests.support import s3_server
from tests.support.services import ServiceUnavailable

BACKENDS = ("local", "s3")
A, B, C = Scope("acme", "api"), Scope("globex", "ml"), Scope("initech", "mono")


@pytest.fixture(scope="module")
def s3_bucket() -> Iterator[str]:
    try:
        s3_server.acquire()
    except ServiceUnavailable as exc:
        pytest.fail(f"no S3-compatible server for the object-storage backend: {exc}")
    bucket = f"memflow-{uuid.uuid4().hex[:12]}"
    s3_server.create_bucket(bucket)
    try:
        yield bucket
    finally:
        s3_server.release()


@pytest.fixture(
    params=[pytest.param(b, marks=[pytest.mark.s3] if b == "s3" else []) for b in BACKENDS]
)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, object]:
    """How to open this backend's store: a fresh root per test."""
    if request.param == "local":
        return {"data_dir": str(tmp_path / "data"), "uri": None, "storage_options": None}
    bucket = request.getfixturevalue("s3_bucket")
    return {
        "data_dir": str(tmp_path / "data"),
        "uri": f"s3://{bucket}/{uuid.uuid4().hex}/tables",
        "storage_options": s3_server.storage_options(),
    }


def open_store(backend: dict[str, object]) -> TableStore:
    return TableStore(
        backend["data_dir"],  # type: ignore[arg-type]
        uri=backend["uri"],  # type: ignore[arg-type]
        storage_options=backend["storage_options"],  # type: ignore[arg-type]
    )


@pytest.fixture
def store(backend: dict[str, object]) -> TableStore:
    return open_store(backend)


def entities(scope: Scope, n: int, tag: str = "v1") -> pl.DataFrame:
    return conform(
        pl.DataFrame(
            {
                "entity_id": [f"{scope.ns}-e{i}" for i in range(n)],
                "tenant_id": [scope.tenant_id] * n,
                "ns": [scope.ns] * n,
                "name": [f"{tag} name {i}" for i in range(n)],
                "aliases": [[f"alias {i}"] for i in range(n)],
                "types": [["Service"] for _ in range(n)],
                "first_seen": [datetime(2026, 11, 1, 9, i % 60, tzinfo=UTC) for i in range(n)],
            }
        ),
        ENTITIES,
    )


def same(a: pl.DataFrame | None, b: pl.DataFrame) -> bool:
    return a is not None and a.sort("entity_id").equals(b.sort("entity_id"))


# ----------------------------------------------------------------------- range overwrite


def test_a_range_overwrite_is_idempotent_and_leaves_other_tenants_intact(
    store: TableStore,
) -> None:
    store.write_tenants(Asset.ENTITIES, {A: entities(A, 3), B: entities(B, 2), C: entities(C, 4)})
    c_files = store.files_by_scope(Asset.ENTITIES, [C])
    new = {A: entities(A, 5, "v2"), B: entities(B, 1, "v2")}

    first = store.write_tenants(Asset.ENTITIES, new, run_id="run-2")

    assert first.committed and first.rows == {"acme/api": 5, "globex/ml": 1}
    assert same(store.read(Asset.ENTITIES, A), new[A])
    assert same(store.read(Asset.ENTITIES, B), new[B])
    assert same(store.read(Asset.ENTITIES, C), entities(C, 4))
    assert store.files_by_scope(Asset.ENTITIES, [C]) == c_files  # not rewritten
    again = store.write_tenants(Asset.ENTITIES, {A: entities(A, 5, "v2"), B: new[B]})
    assert not again.committed and again.version == first.version  # nothing changed
    assert same(store.read(Asset.ENTITIES, A), new[A])
    assert store.history(Asset.ENTITIES)[0].run_id == "run-2"
    assert store.history(Asset.ENTITIES)[0].tenants == ["acme/api", "globex/ml"]


def test_an_empty_frame_removes_only_that_tenant(store: TableStore) -> None:
    store.write_tenants(Asset.ENTITIES, {A: entities(A, 3), B: entities(B, 2)})
    store.write_table(pl.DataFrame(schema=ENTITIES), Asset.ENTITIES, A)
    assert store.read(Asset.ENTITIES, A) is None
    assert same(store.read(Asset.ENTITIES, B), entities(B, 2))
    assert store.scopes(Asset.ENTITIES) == [B]
    assert store.count_rows(Asset.ENTITIES, A) == 0 and store.count_rows(Asset.ENTITIES, B) == 2


def test_rows_of_another_scope_are_refused_and_nothing_is_written(store: TableStore) -> None:
    store.write_table(entities(A, 2), Asset.ENTITIES, A)
    version = store.version(Asset.ENTITIES)
    with pytest.raises(ValueError, match="another scope"):
        store.write_tenants(Asset.ENTITIES, {A: entities(A, 1), B: entities(A, 1)})
    assert store.version(Asset.ENTITIES) == version
    assert same(store.read(Asset.ENTITIES, A), entities(A, 2))


# ------------------------------------------------------------------ concurrent writers


def _writer(backend: dict[str, object], scope_key: str, rounds: int, ready: object) -> None:
    """A spawned process replacing one tenant's table `rounds` times."""
    store = open_store(backend)
    scope = Scope.parse(scope_key)
    ready.wait(60)  # type: ignore[attr-defined]
    for r in range(rounds):
        store.write_table(entities(scope, 3 + r, f"round {r}"), Asset.ENTITIES, scope)


def _spawned(backend: dict[str, object], keys: list[str], rounds: int) -> None:
    ctx = multiprocessing.get_context("spawn")  # delta-rs does not survive fork
    ready = ctx.Event()
    procs = [ctx.Process(target=_writer, args=(backend, k, rounds, ready)) for k in keys]
    for p in procs:
        p.start()
    time.sleep(0.5)
    ready.set()
    for p in procs:
        p.join(300)
    assert [p.exitcode for p in procs] == [0] * len(procs)


def test_two_spawned_writers_on_disjoint_tenants_both_commit(
    store: TableStore, backend: dict[str, object]
) -> None:
    store.write_tenants(Asset.ENTITIES, {A: entities(A, 1), B: entities(B, 1)})
    before = store.version(Asset.ENTITIES)
    rounds = 6

    _spawned(backend, [A.key, B.key], rounds)

    fresh = open_store(backend)
    assert fresh.version(Asset.ENTITIES) == before + 2 * rounds  # every commit landed
    last = rounds - 1
    assert same(fresh.read(Asset.ENTITIES, A), entities(A, 3 + last, f"round {last}"))
    assert same(fresh.read(Asset.ENTITIES, B), entities(B, 3 + last, f"round {last}"))


def test_writers_racing_on_one_tenant_leave_one_whole_write(
    store: TableStore, backend: dict[str, object]
) -> None:
    """Two writers replacing the same tenant conflict; the loser retries, and the table holds
    exactly one writer's rows, never both or a mix."""
    store.write_table(entities(A, 1), Asset.ENTITIES, A)

    _spawned(backend, [A.key, A.key], 4)

    got = open_store(backend).read(Asset.ENTITIES, A)
    assert same(got, entities(A, 6, "round 3"))


# ---------------------------------------------------------------------- schema evolution


def test_a_column_added_to_the_layout_reads_back_null_for_old_rows(
    store: TableStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    old_layout = {k: v for k, v in ENTITIES.items() if k != "types"}
    monkeypatch.setitem(TABLES, Asset.ENTITIES, old_layout)
    store.write_table(entities(A, 2).drop("types"), Asset.ENTITIES, A)  # an older version
    monkeypatch.setitem(TABLES, Asset.ENTITIES, ENTITIES)

    store.write_table(entities(B, 2), Asset.ENTITIES, B)

    old = store.read(Asset.ENTITIES, A)
    assert old is not None and old.columns == list(ENTITIES)
    assert old["types"].null_count() == 2
    assert same(store.read(Asset.ENTITIES, B), entities(B, 2))
    # polars reads the evolved table whole, old rows with nulls
    assert (
        pl.scan_delta(store.uri(Asset.ENTITIES), storage_options=store.storage_options or None)
        .collect()
        .height
        == 4
    )


def test_read_columns_reads_what_read_many_reads_in_one_scan(
    store: TableStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`memflow status` reads a few columns of every tenant at once: the same rows and values
    as reading tenant by tenant, a file written before a column existed reading null."""
    monkeypatch.setitem(TABLES, Asset.ENTITIES, {k: v for k, v in ENTITIES.items() if k != "types"})
    store.write_table(entities(A, 2).drop("types"), Asset.ENTITIES, A)  # an older version
    monkeypatch.setitem(TABLES, Asset.ENTITIES, ENTITIES)
    store.write_tenants(Asset.ENTITIES, {B: entities(B, 3), C: entities(C, 1)})
    nobody = Scope("nobody", "here")

    got = store.read_columns(Asset.ENTITIES, [A, B, nobody], ["name", "types"])

    assert got.columns == ["tenant_id", "ns", "name", "types"]
    one_by_one = pl.concat(
        [df.select(got.columns) for df in store.read_many(Asset.ENTITIES, [A, B]).values()]
    )
    assert got.sort("ns", "name").equals(one_by_one.sort("ns", "name"))
    assert got.height == 5 and got.filter(pl.col("ns") == A.ns)["types"].null_count() == 2
    assert C.tenant_id not in got["tenant_id"].to_list()  # a tenant not asked for
    never = store.read_columns(Asset.QUARANTINE, [A], ["reason"])  # a table never written
    assert never.is_empty() and never.columns == ["tenant_id", "ns", "reason"]
    assert store.read_columns(Asset.ENTITIES, [], ["name"]).is_empty()


def quarantined(scope: Scope, reasons: list[tuple[str, str | None]]) -> pl.DataFrame:
    return conform(
        pl.DataFrame(
            {
                "reject_id": [f"{scope.ns}-r{i}" for i in range(len(reasons))],
                "tenant_id": [scope.tenant_id] * len(reasons),
                "ns": [scope.ns] * len(reasons),
                "reason": [r for r, _ in reasons],
                "severity": [s for _, s in reasons],
            }
        ),
        TABLES[Asset.QUARANTINE],
    )


def test_figures_are_recorded_with_each_write_and_trusted_only_for_its_files(
    store: TableStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A report over every tenant reads the figures each write recorded beside the table, not
    every tenant's files; figures that do not name a tenant's current files (a write that died
    between its two commits, a compaction) are made from the files, and maintenance records
    them anew. A null severity reads as the column's default (an error), as a read fills it."""
    import resources.table_figures as figures_mod

    store.write_tenants(
        Asset.QUARANTINE,
        {
            A: quarantined(A, [("bad_json", "error"), ("bad_json", None), ("late", "warning")]),
            B: quarantined(B, [("late", "warning")]),
        },
    )
    expected = {
        A: {"rows": 3, "warnings": 1, "reject:bad_json": 2, "warning:late": 1},
        B: {"rows": 1, "warnings": 1, "warning:late": 1},
        C: {"rows": 0, "warnings": 0},  # never written
    }
    real_read = figures_mod.read_columns

    def no_scan(*args: object, **kw: object) -> pl.DataFrame:
        raise AssertionError("a tenant's files were read")

    monkeypatch.setattr(figures_mod, "read_columns", no_scan)
    assert store.figures(Asset.QUARANTINE, [A, B, C]) == expected

    # figures naming files that are no longer A's: made from A's files (and only A's)
    stale = {**expected[A], "rows": 99, figures_mod.FILES_KEY: 1}
    store.record_summaries(Asset.QUARANTINE, {A: stale})
    read: list[list[Scope]] = []

    def counted(store_: TableStore, asset: str, scopes: list[Scope], columns: list[str]):
        read.append(list(scopes))
        return real_read(store_, asset, scopes, columns)

    monkeypatch.setattr(figures_mod, "read_columns", counted)
    assert store.figures(Asset.QUARANTINE, [A, B, C]) == expected and read == [[A]]
    assert figures_mod.refresh_figures(store, Asset.QUARANTINE) == 1
    read.clear()
    assert store.figures(Asset.QUARANTINE, [A, B]) == {A: expected[A], B: expected[B]}
    assert read == []

    # a write that leaves A as it was records A's missing figures (an earlier directory's
    # next run), committing nothing to the table itself
    store.record_summaries(Asset.QUARANTINE, {A: stale})
    version = store.version(Asset.QUARANTINE)
    store.write_table(store.read(Asset.QUARANTINE, A), Asset.QUARANTINE, A)
    assert store.version(Asset.QUARANTINE) == version
    read.clear()
    assert store.figures(Asset.QUARANTINE, [A]) == {A: expected[A]} and read == []

    # a table written before figures were recorded: maintenance records them
    store.record_summaries(Asset.QUARANTINE, {A: stale, B: stale})
    monkeypatch.setattr(figures_mod, "REFRESH_CHUNK", 1)  # a commit each
    before = store.version(f"{SUMMARIES_DIR}/{Asset.QUARANTINE}")
    store.maintain(retention_hours=0, tables=[Asset.QUARANTINE])
    assert store.version(f"{SUMMARIES_DIR}/{Asset.QUARANTINE}") == before + 2
    read.clear()
    assert store.figures(Asset.QUARANTINE, [A, B, C]) == expected and read == []
    # the write that removes a tenant's rows leaves it with the figures of no rows
    store.write_table(quarantined(B, []), Asset.QUARANTINE, B)
    assert store.figures(Asset.QUARANTINE, [B]) == {B: expected[C]} and read == []


# --------------------------------------------------------------------- versions, history


def test_the_version_changes_only_on_write_and_every_version_reads_back(
    store: TableStore,
) -> None:
    assert store.version(Asset.ENTITIES) is None
    first = store.write_tenants(Asset.ENTITIES, {A: entities(A, 2), B: entities(B, 2)})
    v1 = first.version
    assert v1 is not None and store.version(Asset.ENTITIES) == v1
    store.read(Asset.ENTITIES, A)
    store.scopes(Asset.ENTITIES)
    store.count_rows(Asset.ENTITIES, B)
    assert store.version(Asset.ENTITIES) == v1  # reads never change it
    time.sleep(0.05)
    between = datetime.now(UTC)
    time.sleep(0.05)
    second = store.write_table(entities(A, 4, "v2"), Asset.ENTITIES, A)
    assert second.version == v1 + 1 and store.version(Asset.ENTITIES) == v1 + 1

    assert same(store.read(Asset.ENTITIES, A, version=v1), entities(A, 2))
    assert same(store.read(Asset.ENTITIES, A, as_of=between), entities(A, 2))
    assert same(store.read(Asset.ENTITIES, A), entities(A, 4, "v2"))
    assert [h.version for h in store.history(Asset.ENTITIES)][:2] == [v1 + 1, v1]
    with pytest.raises(LookupError):
        store.read(Asset.ENTITIES, A, version=v1 + 10)


def test_the_zone_table_commits_only_when_its_rows_change(store: TableStore) -> None:
    """The landing zone's problems table is written by every run: the same rows (empty
    included) make no version, so a re-run with nothing new commits nothing."""
    empty = pl.DataFrame(schema=LANDING_PROBLEMS)
    v = store.write_zone(empty, Asset.LANDING_PROBLEMS).version
    again = store.write_zone(empty, Asset.LANDING_PROBLEMS)
    assert not again.committed and again.version == v == store.version(Asset.LANDING_PROBLEMS)
    rows = conform(pl.DataFrame({"path": ["bad name/x.jsonl"], "reason": ["invalid_scope"]}),
                   LANDING_PROBLEMS)  # fmt: skip
    changed = store.write_zone(rows, Asset.LANDING_PROBLEMS)
    assert changed.committed and changed.version == v + 1  # type: ignore[operator]
    assert not store.write_zone(rows, Asset.LANDING_PROBLEMS).committed
    stored = store.read_zone(Asset.LANDING_PROBLEMS)
    assert stored is not None and stored.equals(rows)
    assert store.write_zone(empty, Asset.LANDING_PROBLEMS).version == v + 2  # type: ignore[operator]
    stored = store.read_zone(Asset.LANDING_PROBLEMS)
    assert stored is not None and stored.is_empty()


def test_summaries_commit_only_the_tenants_whose_summary_changed(store: TableStore) -> None:
    table = f"_summaries/{Asset.VALIDATED_FACTS}"
    store.record_summaries(Asset.VALIDATED_FACTS, {A: {"facts": 2}, B: {"facts": 3}})
    v = store.version(table)
    store.record_summaries(Asset.VALIDATED_FACTS, {A.key: {"facts": 2}, B: {"facts": 3}})
    assert store.version(table) == v  # the same summaries: no commit
    store.record_summaries(Asset.VALIDATED_FACTS, {A: {"facts": 2}, B: {"facts": 4}})
    assert store.version(table) == v + 1  # type: ignore[operator]
    assert store.history(table)[0].tenants == [B.key]
    assert store.summaries(Asset.VALIDATED_FACTS) == {
        A.key: {"facts": 2},
        B.key: {"facts": 4},
    }
    # only the tenants asked for (a write of a few tenants decodes no other's)
    assert store.summaries(Asset.VALIDATED_FACTS, [B, C]) == {B.key: {"facts": 4}}
    assert store.summaries(Asset.VALIDATED_FACTS, []) == {}


def test_summaries_are_read_once_per_version_and_never_stale(tmp_path: Path, monkeypatch) -> None:
    writer, reader = TableStore(tmp_path / "data"), TableStore(tmp_path / "data")
    writer.record_summaries(Asset.VALIDATED_FACTS, {A: {"facts": 1}, B: {"facts": 2}})
    assert reader.summaries(Asset.VALIDATED_FACTS) == {A.key: {"facts": 1}, B.key: {"facts": 2}}
    reads: list[str] = []
    real = pl.read_parquet
    monkeypatch.setattr(pl, "read_parquet", lambda p, **kw: reads.append(p) or real(p, **kw))
    assert reader.summaries(Asset.VALIDATED_FACTS, [B]) == {B.key: {"facts": 2}}
    assert reads == []  # the same files: not read again
    writer.record_summaries(Asset.VALIDATED_FACTS, {B: {"facts": 5}})
    assert reader.summaries(Asset.VALIDATED_FACTS) == {A.key: {"facts": 1}, B.key: {"facts": 5}}
    assert reads  # a new version: read anew


def _last_checkpoint(uri: str) -> int | None:
    marker = Path(uri, "_delta_log", "_last_checkpoint")
    return json.loads(marker.read_text())["version"] if marker.exists() else None


def test_the_log_is_checkpointed_every_ten_commits_new_table_or_old(tmp_path: Path) -> None:
    """A process opening a table replays the commits after its last checkpoint: at most
    `CHECKPOINT_INTERVAL` of them, for the tables memflow creates (the property) and for a
    table created before memflow set it (checkpoints written by the store, no commit added)."""
    store = TableStore(tmp_path / "data")
    old_uri = store.uri("old_entities")
    Path(old_uri).mkdir(parents=True)
    DeltaTable.create(  # as memflow created its tables before the interval was set
        old_uri, schema=entities(A, 1).to_arrow().schema, partition_by=["tenant_id", "ns"]
    )
    for n in range(1, 2 * CHECKPOINT_INTERVAL + 3):
        store.write_tenants(Asset.ENTITIES, {A: entities(A, n), B: entities(B, 1)})
        store.write_tenants("old_entities", {A: entities(A, n)})
    new = DeltaTable(store.uri(Asset.ENTITIES))
    assert new.metadata().configuration == TABLE_CONFIGURATION
    assert TABLE_CONFIGURATION["delta.checkpointInterval"] == str(CHECKPOINT_INTERVAL)
    old = DeltaTable(old_uri)
    assert "delta.checkpointInterval" not in old.metadata().configuration
    assert old.version() == 2 * CHECKPOINT_INTERVAL + 2  # one commit per write, no other
    for table, uri in ((new, store.uri(Asset.ENTITIES)), (old, old_uri)):
        last = _last_checkpoint(uri)
        assert last is not None and 0 <= table.version() - last < CHECKPOINT_INTERVAL
    fresh = TableStore(tmp_path / "data")  # reads through the checkpoints
    assert same(fresh.read(Asset.ENTITIES, A), entities(A, 2 * CHECKPOINT_INTERVAL + 2))
    assert same(fresh.read(Asset.ENTITIES, B), entities(B, 1))
    expected = entities(A, 2 * CHECKPOINT_INTERVAL + 2)
    stored = fresh.read("old_entities", A)
    assert stored is not None and same(stored.select(expected.columns), expected)
    store.record_summaries(Asset.VALIDATED_FACTS, {A: {"facts": 1}})
    summaries = DeltaTable(store.summary_uri(Asset.VALIDATED_FACTS)).metadata().configuration
    assert summaries == TENANT_STATS_CONFIGURATION


def _logged_adds(store: TableStore, uri: str) -> list[dict]:
    """Every add action of the table's JSON commits, read with no memflow code."""
    fs = PyFileSystem(DeltaStorageHandler(uri, store.storage_options or None))
    adds = []
    for info in fs.get_file_info(FileSelector("_delta_log")):
        if info.path.endswith(".json"):
            with fs.open_input_stream(info.path) as stream:
                for line in stream.read().decode().splitlines():
                    action = json.loads(line)
                    if "add" in action:
                        adds.append(action["add"])
    return adds


def _min_values(add: dict) -> dict:
    return json.loads(add["stats"]).get("minValues") or {}


def test_the_log_counts_rows_without_column_statistics_and_older_tables_get_the_setting(
    backend: dict[str, object],
) -> None:
    """The log records each file's row count, and no column values (memflow picks files by
    partition; the values would stay in the log after an erase). A table created before
    keeps its statistics until maintenance sets the property; the erase report names it."""
    from resources.table_upkeep import logged_statistics

    store = open_store(backend)
    store.write_tenants(Asset.ENTITIES, {A: entities(A, 3), B: entities(B, 2)})
    adds = _logged_adds(store, store.uri(Asset.ENTITIES))
    assert len(adds) == 2 and not any(_min_values(a) for a in adds)
    assert sorted(json.loads(a["stats"])["numRecords"] for a in adds) == [2, 3]
    assert store.rows_per_tenant(Asset.ENTITIES, [A, B, C]) == {A: 3, B: 2, C: 0}
    assert logged_statistics(store, A) == ([], [])
    # the summaries (no partitions, tenants replaced by predicate) keep the tenant columns'
    store.record_summaries(Asset.VALIDATED_FACTS, {A: {"facts": 1}, B: {"facts": 2}})
    summary_adds = _logged_adds(store, store.summary_uri(Asset.VALIDATED_FACTS))
    assert summary_adds and all(set(_min_values(a)) == {"tenant_id", "ns"} for a in summary_adds)

    older = open_store(  # a second root, whose entities table memflow created before
        {
            **backend,
            "data_dir": f"{backend['data_dir']}-older",
            "uri": f"{backend['uri']}-older" if backend["uri"] else None,
        }
    )
    uri, options = older.uri(Asset.ENTITIES), older.storage_options or None
    if older.local:
        Path(uri).mkdir(parents=True)
    schema = entities(A, 1).to_arrow().schema
    DeltaTable.create(uri, schema=schema, partition_by=["tenant_id", "ns"], storage_options=options)
    older.write_tenants(Asset.ENTITIES, {A: entities(A, 2)})
    assert all(_min_values(a) for a in _logged_adds(older, uri))
    assert logged_statistics(older, A) == ([Asset.ENTITIES], [])
    assert logged_statistics(older, B) == ([], [])

    done = {m.table: m for m in older.maintain(retention_hours=0)}
    assert done[Asset.ENTITIES].properties_set == tuple(sorted(TABLE_CONFIGURATION))
    assert DeltaTable(uri, storage_options=options).metadata().configuration == (
        TABLE_CONFIGURATION
    )
    assert {m.table: m for m in older.maintain()}[Asset.ENTITIES].properties_set == ()
    older.write_tenants(Asset.ENTITIES, {A: entities(A, 4), B: entities(B, 1)})
    live = DeltaTable(uri, storage_options=options).get_add_actions(flatten=True)
    paths = set(live.column("path").to_pylist())
    written = [a for a in _logged_adds(older, uri) if a["path"] in paths]
    assert len(written) == 2 and not any(_min_values(a) for a in written)
    assert same(older.read(Asset.ENTITIES, A), entities(A, 4))
    older.delete_tenant(A)  # the files go; the older entries describing them stay
    assert older.read(Asset.ENTITIES, A) is None
    assert logged_statistics(older, A) == ([Asset.ENTITIES], [])
    if older.local:  # the same root named by a file:// URL
        by_url = TableStore(f"{backend['data_dir']}-url", uri=f"file://{older.root}")
        assert logged_statistics(by_url, A) == ([Asset.ENTITIES], [])
    # a property changed later (someone asks for statistics again): read from the log as is
    store_uri = store.uri(Asset.ENTITIES)
    table = DeltaTable(store_uri, storage_options=store.storage_options or None)
    table.alter.set_table_properties({"delta.dataSkippingNumIndexedCols": "32"})
    store.write_tenants(Asset.ENTITIES, {A: entities(A, 5)})
    assert logged_statistics(store, A) == ([Asset.ENTITIES], [])
    assert logged_statistics(store, B) == ([], [])
    # once the entries expire (a retention of nothing here, a month by default) they are gone
    DeltaTable(uri, storage_options=options).alter.set_table_properties(
        {"delta.logRetentionDuration": "interval 0 seconds"}
    )
    older.write_tenants(Asset.ENTITIES, {B: entities(B, 2)})  # B's files carried none
    older.maintain(retention_hours=0)
    assert logged_statistics(older, A) == ([], [])


def test_statistics_in_a_commit_older_than_the_oldest_checkpoint_are_found(
    tmp_path: Path,
) -> None:
    """A file written with statistics and replaced before the table's oldest checkpoint is
    in no checkpoint: only its commit, still kept, holds its values."""
    from resources.table_upkeep import logged_statistics

    store = TableStore(tmp_path / "data")
    uri = store.uri(Asset.ENTITIES)
    Path(uri).mkdir(parents=True)
    schema = entities(A, 1).to_arrow().schema
    DeltaTable.create(uri, schema=schema, partition_by=["tenant_id", "ns"])  # as before
    store.write_tenants(Asset.ENTITIES, {A: entities(A, 2)})
    DeltaTable(uri).alter.set_table_properties({"delta.dataSkippingNumIndexedCols": "0"})
    store.write_tenants(Asset.ENTITIES, {A: entities(A, 3)})  # replaces the file, no values
    DeltaTable(uri).create_checkpoint()
    checkpoint = DeltaTable(uri).get_add_actions(flatten=True)
    assert "min.name" not in checkpoint.column_names  # the checkpoint holds no values
    assert logged_statistics(store, A) == ([Asset.ENTITIES], [])


def test_a_set_statistics_choice_is_kept_by_maintenance(tmp_path: Path) -> None:
    """A table whose statistics someone chose keeps that choice: columns by count on a
    table without partitions (adding tenant columns would override it), columns by name on
    one with partitions."""
    from resources.table_upkeep import missing_properties

    unpartitioned = str(tmp_path / "summaries")
    schema = entities(A, 1).to_arrow().schema
    Path(unpartitioned).mkdir()
    DeltaTable.create(
        unpartitioned, schema=schema, configuration={"delta.dataSkippingNumIndexedCols": "32"}
    )
    assert missing_properties(DeltaTable(unpartitioned)) == {"delta.checkpointInterval": "10"}
    partitioned = str(tmp_path / "entities")
    Path(partitioned).mkdir()
    DeltaTable.create(
        partitioned, schema=schema, partition_by=["tenant_id", "ns"],
        configuration={"delta.dataSkippingStatsColumns": "name"},
    )  # fmt: skip
    assert missing_properties(DeltaTable(partitioned)) == {"delta.checkpointInterval": "10"}
    fresh = str(tmp_path / "older")
    Path(fresh).mkdir()
    DeltaTable.create(fresh, schema=schema)  # as a summary table was created before
    assert missing_properties(DeltaTable(fresh)) == TENANT_STATS_CONFIGURATION


def test_a_file_url_root_is_the_local_path_and_an_erase_purges_it(tmp_path: Path) -> None:
    """`file://` names the same local tables: an erase's purge removes the tenant's folders
    there too (it walks local paths)."""
    root = tmp_path / "data" / "tables"
    store = TableStore(tmp_path / "other", uri=f"file://{root}")
    assert store.root == str(root) and store.local
    for n in (1, 2):
        store.write_tenants(Asset.ENTITIES, {A: entities(A, n), B: entities(B, 1)})
    folder = root / "entities" / f"tenant_id={A.tenant_id}" / f"ns={A.ns}"
    assert len(list(folder.glob("*.parquet"))) == 2
    store.delete_tenant(A)
    assert not folder.exists()
    assert same(TableStore(tmp_path / "data").read(Asset.ENTITIES, B), entities(B, 1))
    with pytest.raises(ValueError, match="another host"):
        TableStore(tmp_path, uri="file://elsewhere/tables")


# -------------------------------------------------------------- erase and maintenance


def test_deleting_a_tenant_removes_its_rows_history_and_summaries_only(
    store: TableStore,
) -> None:
    store.write_tenants(Asset.ENTITIES, {A: entities(A, 2), B: entities(B, 3)})
    store.write_table(entities(A, 1, "v2"), Asset.ENTITIES, A)
    store.record_summaries(Asset.VALIDATED_FACTS, {A: {"facts": 2}, B: {"facts": 3}})
    old = store.version(Asset.ENTITIES)

    removed = store.delete_tenant(A)

    assert removed == {"entities": 1, "_summaries/validated_facts": 1}
    assert store.read(Asset.ENTITIES, A) is None
    assert same(store.read(Asset.ENTITIES, B), entities(B, 3))
    assert store.summaries(Asset.VALIDATED_FACTS) == {"globex/ml": {"facts": 3}}
    with pytest.raises(LookupError):  # its history went too: nothing of it can be read back
        store.read(Asset.ENTITIES, A, version=old)


def test_a_table_of_another_module_is_stored_and_erased_like_the_assets(
    store: TableStore,
) -> None:
    """Any table name works (the embedding ledger may live here); its columns are its own."""
    rows = {
        s: pl.DataFrame({"tenant_id": [s.tenant_id], "ns": [s.ns], "vector": [[0.1, 0.2]]})
        for s in (A, B)
    }
    store.write_tenants("embedding_ledger", rows)
    got = store.read("embedding_ledger", A)
    assert got is not None and got["vector"].to_list() == [[0.1, 0.2]]
    removed = store.delete_tenant(A, tables=["embedding_ledger"])
    assert removed["embedding_ledger"] == 1
    assert store.read("embedding_ledger", A) is None
    assert store.read("embedding_ledger", B) is not None


def test_maintenance_compacts_and_vacuums_and_keeps_every_tenant(store: TableStore) -> None:
    for r in range(3):  # three commits: three files for B, the old ones unreferenced
        store.write_tenants(Asset.ENTITIES, {A: entities(A, 2), B: entities(B, 2 + r)})
    before = store.version(Asset.ENTITIES)

    done = {m.table: m for m in store.maintain(retention_hours=0)}

    assert done["entities"].files_vacuumed >= 2
    assert same(store.read(Asset.ENTITIES, A), entities(A, 2))
    assert same(store.read(Asset.ENTITIES, B), entities(B, 4))
    with pytest.raises(LookupError):  # vacuumed: older versions are gone
        store.read(Asset.ENTITIES, B, version=before - 1)


def test_maintenance_removes_a_killed_writes_files_once_past_the_retention(
    tmp_path: Path,
) -> None:
    """A write killed before its commit leaves a file no version names (the kill test's
    case, staged here): kept while younger than the retention (a running write's file looks
    the same), vacuumed once older."""
    store = TableStore(tmp_path / "data")
    for r in range(2):
        store.write_tenants(Asset.ENTITIES, {A: entities(A, 2 + r)})
    folder = Path(store.uri(Asset.ENTITIES)) / f"tenant_id={A.tenant_id}" / f"ns={A.ns}"
    orphan = folder / f"part-00000-{uuid.uuid4()}-c000.snappy.parquet"
    orphan.write_bytes(next(folder.glob("*.parquet")).read_bytes())

    store.maintain(retention_hours=24)
    assert orphan.exists()
    aged = time.time() - 25 * 3600
    os.utime(orphan, (aged, aged))
    done = {m.table: m for m in store.maintain(retention_hours=24)}

    assert not orphan.exists() and done["entities"].files_vacuumed >= 1
    assert same(store.read(Asset.ENTITIES, A), entities(A, 3))


# ------------------------------------------------------------------ readers without memflow


def test_polars_reads_the_tables_with_no_memflow_code(store: TableStore) -> None:
    store.write_tenants(Asset.ENTITIES, {A: entities(A, 3), B: entities(B, 2)})
    options = store.storage_options or None
    got = (
        pl.scan_delta(store.uri(Asset.ENTITIES), storage_options=options)
        .filter((pl.col("tenant_id") == "acme") & (pl.col("ns") == "api"))
        .collect()
    )
    assert same(conform(got, ENTITIES), entities(A, 3))
    old = pl.read_delta(store.uri(Asset.ENTITIES), version=0, storage_options=options)
    assert old.is_empty()  # version 0: the table created empty


def _duckdb_extensions() -> Path:
    """Where the duckdb-ext-* wheels put DuckDB's signed extensions (delta, httpfs): DuckDB
    cannot download them here, so they come from the package registry."""
    for base in site.getsitepackages():
        folder = Path(base, "duckdb_ext", "extensions")
        if list(folder.glob("*/*/delta.duckdb_extension")):
            return folder
    pytest.fail("DuckDB's delta extension (the duckdb-ext-delta wheel) is not installed")


def test_duckdb_reads_the_tables_with_its_delta_extension(store: TableStore) -> None:
    import duckdb

    store.write_tenants(Asset.ENTITIES, {A: entities(A, 3), B: entities(B, 2)})
    con = duckdb.connect(config={"extension_directory": str(_duckdb_extensions())})
    con.execute("LOAD delta")  # signed by DuckDB: loaded with signature checks on
    if not store.local:
        opts = s3_server.storage_options()
        con.execute("LOAD httpfs")
        con.execute(
            "CREATE SECRET s3test (TYPE s3, KEY_ID $key, SECRET $secret, REGION $region, "
            "ENDPOINT $endpoint, URL_STYLE 'path', USE_SSL false)",
            {
                "key": opts["aws_access_key_id"],
                "secret": opts["aws_secret_access_key"],
                "region": opts["aws_region"],
                "endpoint": opts["aws_endpoint_url"].split("://", 1)[1],
            },
        )
    rows = con.execute(
        "SELECT tenant_id, ns, count(*) FROM delta_scan(?) GROUP BY ALL ORDER BY ALL",
        [store.uri(Asset.ENTITIES)],
    ).fetchall()
    assert rows == [("acme", "api", 3), ("globex", "ml", 2)]


# ---------------------------------------------------------------------------- fork guard


def _forked_child_write(root: str, out: object) -> None:
    try:
        TableStore(root).write_table(entities(B, 1), Asset.ENTITIES, B)
        out.put("wrote")  # type: ignore[attr-defined]
    except RuntimeError as exc:
        out.put(str(exc))  # type: ignore[attr-defined]


def test_a_forked_child_gets_a_clear_error_instead_of_a_panic(tmp_path: Path) -> None:
    store = TableStore(tmp_path)
    store.write_table(entities(A, 1), Asset.ENTITIES, A)  # delta-rs used in this process
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    child = ctx.Process(target=_forked_child_write, args=(str(tmp_path), out))
    child.start()
    child.join(60)
    hung = child.is_alive()
    if hung:  # a hung child would hold the test session at exit
        child.kill()
        child.join(10)
    assert not hung, "the forked child hung instead of refusing"
    assert "start it with the 'spawn' method" in out.get(timeout=5)
    assert store.read(Asset.ENTITIES, B) is None
