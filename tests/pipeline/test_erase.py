"""`memflow erase`: after it, nothing of the tenant is anywhere (the data directory and the
landing zone walked file by file, every table, the graph and vector stores, the embedding
ledger, the Dagster instance's partitions, runs and materializations), and the other tenants
are exactly as they were. A dry run changes nothing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pipelines.erase import erase_tenant, format_report
from pipelines.runner import instance_for, run_all
from pipelines.settings import resolve
from resources.settings import DEFAULTS
from resources.tables import TableStore
from schemas.scope import Scope
from schemas.tables import TABLES
from tests.pipeline.landing_fixtures import save, small_landing, write_jsonl
from tests.support.embeddings_server import EmbeddingsServer

pytestmark = pytest.mark.slow
GONE, KEPT = Scope("acme", "api"), Scope("globex", "ml")
MARKER = "zebra-ledger-9f3a"  # a name only the erased tenant ever held


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    for name in DEFAULTS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    landing, data = small_landing(tmp_path / "landing"), tmp_path / "data"
    write_jsonl(landing, "acme", "api", "marker.jsonl", [
        save("acme", "api", "s3", "1", "2026-11-04T10:00:00Z",
             [{"subject": "payments-api", "predicate": "USES", "object": MARKER}]),
    ])  # fmt: skip
    with EmbeddingsServer(dim=16) as server:
        monkeypatch.setenv("MEMFLOW_EMBEDDER", "openai")
        monkeypatch.setenv("MEMFLOW_EMBEDDING_URL", server.url)
        monkeypatch.setenv("MEMFLOW_EMBEDDING_MODEL", "hash-16")
        cfg = resolve(
            {"MEMFLOW_LANDING_DIR": str(landing), "MEMFLOW_DATA_DIR": str(data)},
            tmp_path / "none",
        )
        outcome = run_all(str(landing), str(data))  # both tenants in one run (shared)
        assert not outcome.failures
        again = run_all(str(landing), str(data), tenants=[GONE.key])  # one of its own
        assert not again.failures
        yield cfg
    os.environ.pop("DAGSTER_HOME", None)


def snapshot(cfg, scope: Scope) -> dict:
    """Everything a tenant has, as far as a test can read it."""
    tables = TableStore(cfg.data_dir)
    rows = {}
    for asset in TABLES:
        df = tables.read_table(asset, scope)
        rows[asset] = None if df is None else df.sort(df.columns).to_dicts()
    graph, vectors = cfg.open_graph(), cfg.open_vectors()
    try:
        stores = {
            "graph": graph.counts(scope),
            "entities": sorted(e.name for e in graph.entities(scope)),
            "vectors": vectors.models(scope),
        }
    finally:
        graph.close()
        vectors.close()
    landing = sorted(p.name for p in (cfg.landing_dir / scope.tenant_id / scope.ns).glob("*"))
    return {"rows": rows, "stores": stores, "landing": landing}


def instance_view(cfg, key: str) -> dict:
    from dagster import AssetKey, AssetRecordsFilter

    from assets.partitions import TENANTS

    instance = instance_for(str(cfg.data_dir))
    try:
        named = [
            r.run_id
            for r in instance.get_runs()
            if key in r.tags.values() or key in str(r.tags.get("dagster/partition", ""))
        ]
        materialized = 0
        for asset in TABLES:
            records = instance.fetch_materializations(
                AssetRecordsFilter(asset_key=AssetKey(asset), asset_partitions=[key]), limit=1000
            )
            materialized += len(records.records)
        return {
            "partition": key in instance.get_dynamic_partitions(TENANTS),
            "runs naming it": named,
            "materializations": materialized,
        }
    finally:
        instance.dispose()


def files_of(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file()]


def test_a_dry_run_reports_and_changes_nothing(world) -> None:
    before = snapshot(world, GONE), instance_view(world, GONE.key)
    report = erase_tenant(world, GONE, apply=False, shared_runs=True)
    assert report.removed["landing files"] == 2
    assert report.removed["graph facts"] >= 2 and report.removed["vectors"] > 0
    assert report.removed["dagster runs"] >= 2 and report.removed["dagster partition"] == 1
    assert "would erase" in format_report(report, applied=False)
    assert (snapshot(world, GONE), instance_view(world, GONE.key)) == before


def test_after_erase_nothing_of_the_tenant_is_anywhere(world) -> None:
    kept_before = snapshot(world, KEPT)
    assert instance_view(world, GONE.key)["materializations"] > 0
    report = erase_tenant(world, GONE, apply=True, shared_runs=True)
    assert not report.problems
    assert report.removed["graph facts"] >= 2 and report.removed["landing files"] == 2

    after = snapshot(world, GONE)
    assert all(v is None for v in after["rows"].values())
    assert after["stores"] == {"graph": {"entities": 0, "facts": 0}, "entities": [], "vectors": {}}
    assert after["landing"] == [] and not (world.landing_dir / "acme").exists()
    view = instance_view(world, GONE.key)
    assert view == {"partition": False, "runs naming it": [], "materializations": 0}
    # no file or folder of the data directory or landing zone is the tenant's
    for root in (world.data_dir, world.landing_dir):
        for path in root.rglob("*"):
            parts = path.relative_to(root).parts
            assert not any(parts[i : i + 2] == ("acme", "api") for i in range(len(parts))), path
    # and no table file holds its rows (tables of every tenant read back whole), nor their
    # Delta logs: no entry copies a value of a column (statistics are not recorded)
    for path in files_of(world.data_dir / "tables"):
        assert MARKER.encode() not in path.read_bytes(), path

    assert snapshot(world, KEPT) == kept_before
    assert instance_view(world, KEPT.key)["partition"]


def test_the_instances_latest_materialization_forgets_the_tenant_at_the_next_run(world) -> None:
    """Dagster caches each asset's latest materialization; deleting the runs that made it
    leaves the cache (no public API clears one partition's), and the next run of any tenant
    replaces it. The erase report says so."""
    from dagster import AssetKey

    report = erase_tenant(world, GONE, apply=True, shared_runs=True)
    assert "latest materialization" in format_report(report, applied=True)
    # --all: the kept tenant is up to date, a plain run would run no tenant
    outcome = run_all(str(world.landing_dir), str(world.data_dir), all_tenants=True)
    assert not outcome.failures and [s.key for s in outcome.tenants] == [KEPT.key]
    instance = instance_for(str(world.data_dir))
    try:
        for asset in TABLES:
            event = instance.get_latest_materialization_event(AssetKey(asset))
            if event is not None and event.dagster_event is not None:
                assert event.dagster_event.partition != GONE.key, asset
    finally:
        instance.dispose()


def test_shared_runs_are_kept_unless_asked_and_the_report_says_so(world) -> None:
    report = erase_tenant(world, GONE, apply=True, shared_runs=False)
    assert len(report.problems) == 1 and "among other tenants" in report.problems[0]
    view = instance_view(world, GONE.key)
    assert not view["partition"] and view["runs naming it"]  # the shared run, kept
    assert "NOT ERASED" in format_report(report, applied=True)
    # erasing again finishes the job and finds nothing else
    again = erase_tenant(world, GONE, apply=True, shared_runs=True)
    assert not again.problems and set(again.removed) <= {"dagster runs"}


def test_the_report_names_delta_logs_that_keep_statistics_of_the_tenant(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A table an earlier memflow created records each file's first and last value of every
    column in its log: the erase removes the tenant's files and says the entries stay."""
    from deltalake import DeltaTable

    from tests.contract.test_table_store import entities

    for name in DEFAULTS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    landing, data = tmp_path / "landing", tmp_path / "data"
    landing.mkdir()
    cfg = resolve({"MEMFLOW_LANDING_DIR": str(landing), "MEMFLOW_DATA_DIR": str(data)}, tmp_path)
    store = TableStore(data)
    uri = store.uri("entities")
    Path(uri).mkdir(parents=True)
    schema = entities(GONE, 1).to_arrow().schema
    DeltaTable.create(uri, schema=schema, partition_by=["tenant_id", "ns"])
    store.write_tenants("entities", {GONE: entities(GONE, 2), KEPT: entities(KEPT, 1)})

    report = erase_tenant(cfg, GONE, apply=True)
    os.environ.pop("DAGSTER_HOME", None)

    assert report.removed["table entities"] == 2
    assert TableStore(data).read("entities", GONE) is None
    # not a failure (nothing to act on: the entries expire), said as what stays
    assert not report.problems and len(report.notes) == 1, report
    assert "Delta logs of entities still hold" in report.notes[0]
    shown_report = format_report(report, applied=True)
    assert "STAYS UNTIL IT EXPIRES: tables: the Delta logs of entities" in shown_report
    assert report.as_json()["notes"] == list(report.notes)
    kept = erase_tenant(cfg, KEPT, apply=False)  # a dry run says it too
    os.environ.pop("DAGSTER_HOME", None)
    assert any("Delta logs of entities" in n for n in kept.notes) and not kept.problems
