"""Landing zone -> raw_turns -> extracted_triples -> validated facts, through Dagster."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
from dagster import AssetKey, materialize

from assets.partitions import TENANTS, scope_day_key
from pipelines.definitions import ALL_ASSETS
from pipelines.jobs import INGEST_ASSETS
from resources.tables import TableStore
from schemas.scope import Scope
from tests.pipeline.conftest import make_resources
from tests.pipeline.landing_fixtures import SECRET_PASSWORD, SECRET_TOKEN

FACT_ASSETS = ["validated_facts", "entities", "quarantine"]


def ingest(instance, landing: Path, data_dir: Path, scope: Scope, day: str, **res):
    instance.add_dynamic_partitions(TENANTS, [scope.key])
    return materialize(
        ALL_ASSETS,
        selection=INGEST_ASSETS,
        partition_key=scope_day_key(scope, day),
        instance=instance,
        resources=make_resources(landing, data_dir, **res),
    )


def facts(instance, landing: Path, data_dir: Path, scope: Scope, **res):
    return materialize(
        ALL_ASSETS,
        selection=FACT_ASSETS,
        partition_key=scope.key,
        instance=instance,
        resources=make_resources(landing, data_dir, **res),
    )


def test_landing_to_validated_facts(instance, landing: Path, data_dir: Path) -> None:
    acme = Scope("acme", "api")
    for day in ("2026-11-02", "2026-11-03"):
        result = ingest(instance, landing, data_dir, acme, day)
        assert result.success
    result = facts(instance, landing, data_dir, acme)
    assert result.success
    tables = TableStore(data_dir)

    turns = tables.read_days("raw_turns", acme)
    assert turns.height == 3
    assert set(turns["day"]) == {"2026-11-02", "2026-11-03"}

    f = tables.read("validated_facts", acme)
    assert sorted(zip(f["predicate"], f["object"], strict=True)) == [
        ("DEPENDS_ON", "postgresql"),
        ("USED_BY", "ci"),
        ("USES", "PostgreSQL"),
    ]
    assert set(f["session_id"]) == {"s1", "s2"} and set(f["model"]) == {"explicit"}
    ents = tables.read("entities", acme)
    pay = ents.filter(pl.col("norm_key") == "paymentsapi").row(0, named=True)
    assert pay["name"] in ("payments-api", "Payments API")
    assert len(pay["aliases"]) == 1

    q = tables.read("quarantine", acme)
    reasons = sorted(q["reason"])
    assert reasons == ["invalid_json", "predicate_not_upper_snake_case"]
    bad = q.filter(pl.col("reason") == "invalid_json").row(0, named=True)
    assert bad["source_file"] == "acme/api/session-1.jsonl" and bad["line_no"] == 3

    # no planted secret anywhere in the stored tables
    for path in (data_dir / "tables").rglob("*.parquet"):
        text = json.dumps(pl.read_parquet(path).to_dicts(), default=str)
        assert SECRET_TOKEN not in text and SECRET_PASSWORD not in text, path

    # metadata reaches the UI
    mats = instance.get_latest_materialization_event(
        AssetKey("validated_facts")
    ).asset_materialization
    assert mats.metadata["rows_out"].value == 3
    assert "predicate_not_upper_snake_case" in mats.metadata["rejects_by_reason"].value


def test_rerun_is_idempotent_and_stable(instance, landing: Path, data_dir: Path) -> None:
    acme = Scope("acme", "api")
    for _ in range(2):
        for day in ("2026-11-02", "2026-11-03"):
            assert ingest(instance, landing, data_dir, acme, day).success
        assert facts(instance, landing, data_dir, acme).success
        tables = TableStore(data_dir)
        snapshot = tables.read("validated_facts", acme).sort("fact_id")
        if _ == 0:
            first = snapshot
    assert snapshot.equals(first)
