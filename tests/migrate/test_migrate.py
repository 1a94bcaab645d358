"""`memflow migrate` on a data directory the OLD code wrote (commit 6ba3651, tenant x day
partitions), then the new code's `memflow run`: the same facts, nothing extracted again,
nothing doubled.

The old data directory is made at test time: `git archive 6ba3651` into a temp folder and its
own `memflow run` (this venv, PYTHONPATH on the old tree) on its bundled sample landing zone,
with the test's command extractor logging every call.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest

from resources.graph.sqlite import SqliteGraphStore
from resources.tables import TableStore
from resources.vector.lite_server import stop_lite_server
from schemas.scope import Scope
from tests.support.old_code import CLI, run_ok, unpack

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
OLD_COMMIT = "6ba3651"
BIN = Path(sys.executable).parent
KEYS = {
    "validated_facts": "fact_id",
    "entities": "entity_id",
    "extracted_triples": "triple_id",
    "raw_turns": "turn_key",
    "quarantine": "reject_id",
    "turn_rejects": "reject_id",
    "extraction_rejects": "reject_id",
}


def _env(extract_log: Path, **extra: str) -> dict[str, str]:
    from resources.settings import DEFAULTS

    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMFLOW_", "DAGSTER_"))}
    env.update(DEFAULTS)
    command = f"{sys.executable} {ROOT}/tests/support/extractor_cmd.py --log {extract_log}"
    env.update(
        {
            "MEMFLOW_EXTRACTOR": "command",
            "MEMFLOW_EXTRACTION_COMMAND": command,
            "MEMFLOW_EMBEDDER": "none",
            "MEMFLOW_GRAPH_BACKEND": "sqlite",
        }
    )
    env.update(extra)
    return env


_run = run_ok


def _rekeyed(df: pl.DataFrame, asset: str, key: str, scope: Scope) -> list[str]:
    """`df[key]` as the current entity-key rule gives it (facts and entities), else as is."""
    from schemas import ids

    if asset == "entities":
        return [ids.entity_id(scope.tenant_id, scope.ns, ids.norm_key(n)) for n in df["name"]]
    if asset == "validated_facts":
        return [
            ids.fact_id(
                scope.tenant_id,
                scope.ns,
                ids.entity_id(scope.tenant_id, scope.ns, ids.norm_key(s)),
                p,
                ids.entity_id(scope.tenant_id, scope.ns, ids.norm_key(o)),
            )
            for s, p, o in df.select("subject", "predicate", "object").rows()
        ]
    return df[key].to_list()


def _calls(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


@pytest.fixture(scope="module")
def old_world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """A data directory and instance written by the old code, and its landing zone."""
    base = tmp_path_factory.mktemp("old-design")
    tree = unpack(OLD_COMMIT, base / "tree")
    data, log = base / "data", base / "old-extractor.log"
    env = _env(log, PYTHONPATH=str(tree))
    out = _run(
        [sys.executable, "-c", CLI, "run", "--landing", str(tree / "landing-sample"),
         "--data", str(data)],
        env,
        tree,
    )  # fmt: skip
    assert "ingest run(s)" in out  # the old design's summary line
    assert _calls(log) > 0  # the old runs extracted text turns
    old_days = TableStore(data).root / "turn_rejects" / "acme" / "payments-api"
    assert list(old_days.glob("*.parquet")), "the old design stores rejects per day"
    yield {"tree": tree, "data": data, "landing": tree / "landing-sample"}
    stop_lite_server(data)  # the old run's supervised Milvus Lite server


def _table(data: Path, asset: str, tenant: str) -> pl.DataFrame:
    """A tenant's table in either layout (the old one kept rejects per day)."""
    store, scope = TableStore(data), Scope.parse(tenant)
    df = store.read_table(asset, scope)
    if df is None:
        df = store.read_days(asset, scope)
    assert df is not None, (asset, tenant)
    return df


def test_migrate_then_run_keeps_the_facts_and_extracts_nothing_again(
    old_world: dict[str, Path], tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    data = tmp_path / "data"
    request.addfinalizer(lambda: stop_lite_server(data))
    shutil.copytree(old_world["data"], data)
    log = tmp_path / "new-extractor.log"
    env = _env(log)
    memflow = str(BIN / "memflow")

    out = _run([memflow, "migrate", "--data", str(data)], env, tmp_path)
    assert "command:python extractor_cmd.py" in out  # the identity the old instance observed
    store = TableStore(data)
    tenants = [s.key for s in store.scopes("validated_facts")]
    assert len(tenants) == 4
    for tenant in tenants:
        scope = Scope.parse(tenant)
        for asset in ("turn_rejects", "extraction_rejects"):
            assert store.path(asset, scope).exists()  # one table per tenant now
            assert not (store.root / asset / scope.tenant_id / scope.ns).exists()
        log_table = _table(data, "extraction_log", tenant)
        assert log_table["turn_key"].is_unique().all()
        assert log_table.height == _table(data, "raw_turns", tenant).height

    again = _run([memflow, "migrate", "--data", str(data)], env, tmp_path)
    assert "nothing changed" in again  # idempotent

    _run(
        [memflow, "run", "--landing", str(old_world["landing"]), "--data", str(data)],
        env,
        tmp_path,
    )
    assert _calls(log) == 0, "the new code extracted turns the old one had extracted"

    old = old_world["data"]
    for tenant in tenants:
        for asset, key in KEYS.items():
            before, after = _table(old, asset, tenant), _table(data, asset, tenant)
            assert after[key].is_unique().all(), (tenant, asset)  # nothing doubled
            expected = _rekeyed(before, asset, key, Scope.parse(tenant))
            assert sorted(after[key].to_list()) == sorted(expected), (tenant, asset)
        # The same facts, content and all: ids follow the entity-key rule of issue 16, which
        # the new code applies to what the old one stored (memflow.rekey).
        facts_before = _table(old, "validated_facts", tenant).sort("triple_id")
        facts_after = _table(data, "validated_facts", tenant).sort("triple_id")
        ids_ = {"fact_id", "subject_id", "object_id", "supersedes", "superseded_by"}
        columns = [c for c in facts_before.columns if c in facts_after.columns and c not in ids_]
        assert facts_after.select(columns).equals(facts_before.select(columns)), tenant
        graph_before = SqliteGraphStore(old / "graph.sqlite")
        graph_after = SqliteGraphStore(data / "graph.sqlite")
        try:
            assert graph_after.counts(Scope.parse(tenant)) == graph_before.counts(
                Scope.parse(tenant)
            )
        finally:
            graph_before.close()
            graph_after.close()
        # The first run rebuilt the landing index by reading every file once.
        files = _table(data, "landing_files", tenant)
        assert files.height > 0
        assert (files["records"] == files["turns"] + files["rejects"]).all()
