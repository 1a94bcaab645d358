"""The run summary reads each table once for every tenant (pipelines.status.tenant_summaries):
it must say, for each tenant, what reading that tenant's tables one by one says, also when
day files written by different versions disagree on columns or types."""

from __future__ import annotations

from collections import Counter
from typing import Any

import polars as pl
import pytest

from pipelines.runner import run_all
from pipelines.settings import resolve
from pipelines.status import tenant_summaries, tenant_summary
from resources.settings import DEFAULTS
from resources.tables import TableStore
from schemas.rules import SEVERITY_WARNING
from schemas.scope import Scope
from schemas.tables import TABLES, Asset, conform, empty
from tests.e2e.test_troubled_landing import build
from tests.support.leftovers import assert_no_process_left


def read(tables: TableStore, asset: str, scope: Scope) -> pl.DataFrame:
    df = tables.read_table(asset, scope)
    return conform(df, TABLES[asset]) if df is not None else empty(TABLES[asset])


def one_by_one(tables: TableStore, scope: Scope) -> dict[str, Any]:
    """The summary as the CLI computed it before, a table read at a time."""
    n = {a: read(tables, a, scope).height for a in TABLES}
    quarantine = read(tables, Asset.QUARANTINE, scope)
    warning = pl.col("severity") == SEVERITY_WARNING
    reasons = Counter(quarantine.filter(~warning)["reason"].to_list())
    warnings = Counter(quarantine.filter(warning)["reason"].to_list())
    log = read(tables, Asset.EXTRACTION_LOG, scope)
    lines_in = int(read(tables, Asset.LANDING_FILES, scope)["records"].sum() or 0)
    last = tables.summaries(Asset.VALIDATED_FACTS).get(scope.key, {})
    triples = {k: last.get(k, 0) for k in ("triples_in", "facts_stored", "facts_new", "merged")}
    triples["rejects"] = last.get("rejects", 0)
    return {
        "tenant": scope.key,
        "lines_in": lines_in,
        "turns": n[Asset.RAW_TURNS],
        "landing_rejects": n[Asset.TURN_REJECTS],
        "lines_accounted": lines_in == n[Asset.RAW_TURNS] + n[Asset.TURN_REJECTS],
        "triples": n[Asset.EXTRACTED_TRIPLES],
        "triples_balance": triples,
        "triples_accounted": triples["triples_in"]
        == triples["facts_stored"] + triples["facts_new"] + triples["merged"] + triples["rejects"],
        "facts": n[Asset.VALIDATED_FACTS],
        "entities": n[Asset.ENTITIES],
        "rejects": quarantine.height - sum(warnings.values()),
        "warnings": sum(warnings.values()),
        "rejects_by_reason": dict(sorted(reasons.items())),
        "warnings_by_reason": dict(sorted(warnings.items())),
        "text_turns_awaiting_extraction": log.filter(pl.col("model") == "none").height,
    }


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("summaries")
    landing, data = tmp / "landing", tmp / "data"
    build(landing, tmp / "outside.jsonl")
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("DAGSTER_HOME", raising=False)
        for name in DEFAULTS:
            mp.delenv(name, raising=False)
        mp.setenv("MEMFLOW_EMBEDDER", "none")
        resolve({"MEMFLOW_LANDING_DIR": str(landing), "MEMFLOW_DATA_DIR": str(data)}, tmp / "x")
        outcome = run_all(str(landing), str(data))
        assert_no_process_left(data)
    assert not outcome.failures
    return data, outcome.tenants


def test_every_tenants_summary_is_what_its_own_tables_say(stored) -> None:
    data, scopes = stored
    tables = TableStore(data)
    never = Scope("nobody", "here")  # a tenant with no table at all
    got = tenant_summaries(tables, [*scopes, never])
    assert got == [one_by_one(tables, s) for s in [*scopes, never]]
    assert any(r["rejects"] for r in got) and any(r["warnings"] for r in got)
    assert tenant_summary(tables, scopes[0]) == got[0]


def test_status_reads_tenants_in_chunks_and_says_what_one_by_one_says(stored, monkeypatch) -> None:
    """`memflow status` reads each table once for every tenant, and `--verify` compares the
    stores a chunk of tenants at a time (issue 19: tenant by tenant it grew with the square of
    the tenants, 53 s at 1,000); the report must not depend on the chunk: one tenant a chunk
    is the per-tenant read. Every store is equal to its tables, verified."""
    import json

    from pipelines import status as status_mod
    from resources.settings import Settings

    data, scopes = stored
    assert len(scopes) >= 3
    cfg = Settings.from_env({"MEMFLOW_DATA_DIR": str(data), "MEMFLOW_EMBEDDER": "none"})
    reports = []
    for chunk in (1, 2, status_mod.STATUS_CHUNK):
        monkeypatch.setattr(status_mod, "STATUS_CHUNK", chunk)
        report = status_mod.status(cfg, verify=True)
        report.pop("system", None)
        reports.append(json.dumps(report, sort_keys=True, default=str))
    assert reports[0] == reports[1] == reports[2]
    got = json.loads(reports[0])["tenants"]
    assert [t["tenant"] for t in got] == sorted(s.key for s in scopes)
    tables = TableStore(data)
    for entry, scope in zip(got, sorted(scopes, key=lambda s: s.key), strict=True):
        assert entry["accounting"] == json.loads(json.dumps(one_by_one(tables, scope)))
        assert entry["tables"] == {a: read(tables, a, scope).height for a in TABLES}
        assert entry["verified"] and entry["graph"]["equals_table"] is True
    fast = status_mod.status(cfg)
    assert [t["accounting"] for t in fast["tenants"]] == [t["accounting"] for t in got]
    assert all(t["graph"]["equals_table"] is None for t in fast["tenants"])
