"""raw_turns[tenant, day]: landing-zone turns of one tenant and day, redacted and checked."""

import time
from datetime import UTC, datetime

import polars as pl
from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetExecutionContext,
    AssetOut,
    Output,
    multi_asset,
)

from assets.metadata import by_reason, count_reasons, preview
from assets.partitions import scope_day_partitions, split_key
from memflow.turns import apply_retention, read_tenant_day
from resources.configurable import Storage
from schemas.contracts import TurnContract
from schemas.tables import Asset


@multi_asset(
    outs={
        Asset.RAW_TURNS: AssetOut(
            io_manager_key="tables",
            description="Landing-zone turns of one tenant and day, redacted; retention applied.",
        ),
        Asset.TURN_REJECTS: AssetOut(
            io_manager_key="tables",
            description="Landing lines that could not be read, with file, line and reason.",
        ),
    },
    partitions_def=scope_day_partitions,
    check_specs=[
        AssetCheckSpec(
            "turn_contract",
            asset=Asset.RAW_TURNS,
            blocking=True,
            description="Scope, roles, timestamps, unique turns, no secrets.",
        ),
    ],
    group_name="ingest",
    compute_kind="polars",
)
def raw_turns(context: AssetExecutionContext, storage: Storage):
    started = time.perf_counter()
    scope, day = split_key(context.partition_key)
    assert day is not None
    turns, rejects, stats = read_tenant_day(storage.landing, scope, day)
    turns = apply_retention(turns, storage.retention_days, datetime.now(UTC))
    try:
        TurnContract.validate(turns, lazy=True)
        check = AssetCheckResult(check_name="turn_contract", asset_key=Asset.RAW_TURNS, passed=True)
    except Exception as exc:  # pandera's SchemaErrors carries every failure
        check = AssetCheckResult(
            check_name="turn_contract",
            asset_key=Asset.RAW_TURNS,
            passed=False,
            severity=AssetCheckSeverity.ERROR,
            metadata={"errors": str(exc)[:4000]},
        )
    reasons = count_reasons(rejects)
    yield Output(
        turns,
        output_name=Asset.RAW_TURNS,
        metadata={
            "tenant": scope.key,
            "day": day,
            "files": stats["files"],
            "records_read": stats["records_read"],
            "rows_out": turns.height,
            "rejects": rejects.height,
            "rejects_by_reason": by_reason(reasons),
            "redactions": stats["redactions"],
            "tool_call_turns": turns.filter(pl.col("tool_triples").is_not_null()).height,
            "duration_s": round(time.perf_counter() - started, 3),
            "preview": preview(turns, ["session_id", "turn_id", "role", "client", "content"]),
        },
    )
    yield Output(
        rejects,
        output_name=Asset.TURN_REJECTS,
        metadata={
            "rows_out": rejects.height,
            "rejects_by_reason": by_reason(reasons),
            "preview": preview(rejects, ["source_file", "line_no", "reason", "detail"]),
        },
    )
    yield check


__all__ = ["raw_turns"]
