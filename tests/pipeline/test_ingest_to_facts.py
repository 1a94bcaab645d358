"""Landing zone -> raw_turns -> extracted_triples -> validated facts, through Dagster: one run
per range of tenants, incremental on new or changed files, per-tenant metadata in the UI."""

from __future__ import annotations

import json
import os
from pathlib import Path

import polars as pl
from dagster import AssetKey

from resources.tables import TableStore
from schemas.scope import Scope
from schemas.tables import TABLES
from tests.pipeline.conftest import EVERYTHING, FACTS, INGEST, make_resources, run_assets
from tests.pipeline.landing_fixtures import SECRET_PASSWORD, SECRET_TOKEN, save, write_jsonl

ACME = Scope("acme", "api")
GLOBEX = Scope("globex", "ml")


def ingest_and_facts(instance, landing: Path, data_dir: Path, tenants=("acme/api",), **res):
    return run_assets(
        instance, make_resources(landing, data_dir, **res), [*INGEST, *FACTS], list(tenants)
    )


def _latest(instance, asset: str, partition: str):
    records = instance.fetch_materializations(AssetKey(asset), limit=50).records
    return next(
        r.asset_materialization for r in records if r.asset_materialization.partition == partition
    )


def test_landing_to_validated_facts(instance, landing: Path, data_dir: Path) -> None:
    result = ingest_and_facts(instance, landing, data_dir)
    assert result.success
    tables = TableStore(data_dir)

    turns = tables.read_table("raw_turns", ACME)
    assert turns.height == 3
    assert set(turns["day"]) == {"2026-11-02", "2026-11-03"}
    assert tables.days("raw_turns", ACME) == ["2026-11-02", "2026-11-03"]

    f = tables.read("validated_facts", ACME)
    assert sorted(zip(f["predicate"], f["object"], strict=True)) == [
        ("DEPENDS_ON", "postgresql"),
        ("USED_BY", "ci"),
        ("USES", "PostgreSQL"),
    ]
    assert set(f["session_id"]) == {"s1", "s2"} and set(f["model"]) == {"explicit"}
    ents = tables.read("entities", ACME)
    pay = ents.filter(pl.col("norm_key") == "paymentsapi").row(0, named=True)
    assert pay["name"] in ("payments-api", "Payments API")
    assert len(pay["aliases"]) == 1

    q = tables.read("quarantine", ACME)
    reasons = sorted(q["reason"])
    assert reasons == ["invalid_json", "predicate_not_upper_snake_case"]
    bad = q.filter(pl.col("reason") == "invalid_json").row(0, named=True)
    assert bad["source_file"] == "acme/api/session-1.jsonl" and bad["line_no"] == 3

    # every line accounted for, in the landing index
    files = tables.read("landing_files", ACME).row(0, named=True)
    assert files["records"] == files["turns"] + files["rejects"] == 4
    assert files["sha256"] and files["size"] > 0

    # no planted secret anywhere in the stored tables
    for path in (data_dir / "tables").rglob("*.parquet"):
        text = json.dumps(pl.read_parquet(path).to_dicts(), default=str)
        assert SECRET_TOKEN not in text and SECRET_PASSWORD not in text, path

    # metadata reaches the UI, on the tenant's own materialization
    mat = _latest(instance, "validated_facts", ACME.key)
    assert mat.metadata["rows_out"].value == 3
    assert "predicate_not_upper_snake_case" in mat.metadata["quarantine_by_reason"].value
    checks = {c.check_name: c.passed for c in result.get_asset_check_evaluations()}
    assert checks["turn_contract"] and checks["lines_accounted"] and checks["fact_contract"]


def test_one_run_for_two_tenants_gives_each_partition_its_own_metadata(
    instance, landing: Path, data_dir: Path
) -> None:
    result = ingest_and_facts(instance, landing, data_dir, tenants=("acme/api", "globex/ml"))
    assert result.success
    runs = {
        r.run_id for r in instance.fetch_materializations(AssetKey("raw_turns"), limit=10).records
    }
    assert len(runs) == 1
    acme = _latest(instance, "raw_turns", ACME.key).metadata
    globex = _latest(instance, "raw_turns", GLOBEX.key).metadata
    assert acme["rows_out"].value == 3 and globex["rows_out"].value == 1
    assert _latest(instance, "validated_facts", GLOBEX.key).metadata["rows_out"].value == 1


def test_rerun_is_idempotent_and_reads_nothing_unchanged(
    instance, landing: Path, data_dir: Path
) -> None:
    assert ingest_and_facts(instance, landing, data_dir).success
    tables = TableStore(data_dir)
    first = tables.read("validated_facts", ACME).sort("fact_id")
    versions = {asset: tables.version(asset) for asset in TABLES}
    assert ingest_and_facts(instance, landing, data_dir).success
    assert tables.read("validated_facts", ACME).sort("fact_id").equals(first)
    meta = _latest(instance, "raw_turns", ACME.key).metadata
    assert meta["files_read"].value == 0 and meta["new_turns"].value == 0
    # nothing changed, so no table got a commit: every Delta version is as it was
    assert {asset: tables.version(asset) for asset in TABLES} == versions


def test_a_new_file_is_read_alone_and_earlier_days_are_not_rewritten(
    instance, landing: Path, data_dir: Path
) -> None:
    assert ingest_and_facts(instance, landing, data_dir).success
    tables = TableStore(data_dir)
    globex_files = tables.files_by_scope("raw_turns", [GLOBEX])
    write_jsonl(
        landing,
        "acme",
        "api",
        "session-7.jsonl",
        [
            save(
                "acme",
                "api",
                "s7",
                "1",
                "2026-11-09T10:00:00Z",
                [{"subject": "payments-api", "predicate": "USES", "object": "Kafka"}],
            )
        ],
    )
    assert ingest_and_facts(instance, landing, data_dir).success
    meta = _latest(instance, "raw_turns", ACME.key).metadata
    assert meta["files_read"].value == 1 and meta["new_turns"].value == 1
    # acme's table was replaced in one commit; globex's data files were not touched
    assert tables.files_by_scope("raw_turns", [GLOBEX]) == globex_files
    assert "Kafka" in tables.read("validated_facts", ACME)["object"].to_list()
    log = tables.read_table("extraction_log", ACME)
    assert log.height == 4 and log["turn_key"].n_unique() == 4  # each turn extracted once


def test_a_replaced_file_replaces_its_turns(instance, landing: Path, data_dir: Path) -> None:
    assert ingest_and_facts(instance, landing, data_dir, tenants=("globex/ml",)).success
    tables = TableStore(data_dir)
    assert tables.read_table("raw_turns", GLOBEX)["turn_id"].to_list() == ["1"]
    path = landing / "globex" / "ml" / "session-9.jsonl"
    write_jsonl(
        landing,
        "globex",
        "ml",
        "session-9.jsonl",
        [
            save(
                "globex",
                "ml",
                "s9",
                "2",
                "2026-11-04T08:00:00Z",
                [{"subject": "trainer", "predicate": "USES", "object": "jax"}],
            )
        ],
    )
    os.utime(path, ns=(2, 2))
    assert ingest_and_facts(instance, landing, data_dir, tenants=("globex/ml",)).success
    turns = tables.read_table("raw_turns", GLOBEX)
    assert turns["turn_id"].to_list() == ["2"]
    assert tables.days("raw_turns", GLOBEX) == ["2026-11-04"]
    facts = tables.read("validated_facts", GLOBEX)
    # the earlier fact stays stored (nothing stored is lost); the new one joins it
    assert {"jax"} <= set(facts["object"].to_list()) and facts.height == 2


def test_the_same_turn_in_another_file_on_another_day_is_a_duplicate(
    instance, landing: Path, data_dir: Path
) -> None:
    triple = [{"subject": "a", "predicate": "USES", "object": "b"}]
    write_jsonl(
        landing,
        "acme",
        "api",
        "x1.jsonl",
        [save("acme", "api", "sx", "d3", "2026-11-20T01:00:00Z", triple)],
    )
    write_jsonl(
        landing,
        "acme",
        "api",
        "x2.jsonl",
        [save("acme", "api", "sx", "d3", "2026-11-21T01:00:00Z", [{**triple[0], "object": "c"}])],
    )
    assert ingest_and_facts(instance, landing, data_dir).success
    tables = TableStore(data_dir)
    q = tables.read("quarantine", ACME)
    dup = q.filter(pl.col("reason") == "duplicate_turn")
    assert dup.height == 1 and dup["source_file"].to_list() == ["acme/api/x2.jsonl"]
    objects = tables.read("validated_facts", ACME)["object"].to_list()
    assert "b" in objects and "c" not in objects


def test_everything_in_one_run_lands_in_both_stores(
    instance, landing: Path, data_dir: Path
) -> None:
    from tests.support.leftovers import assert_no_process_left

    try:
        result = run_assets(
            instance, make_resources(landing, data_dir), EVERYTHING, ["acme/api", "globex/ml"]
        )
        assert result.success
        checks = {c.check_name: c.passed for c in result.get_asset_check_evaluations()}
        assert checks["graph_equals_table"] and checks["vectors_equal_table"]
        assert _latest(instance, "graph_sink", ACME.key).metadata["facts_written"].value == 3
    finally:
        assert_no_process_left(data_dir)
