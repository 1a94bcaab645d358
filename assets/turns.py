"""raw_turns[tenant] (+ turn_rejects, landing_files): a tenant's landing-zone turns, redacted,
deduplicated and checked; read incrementally (only new or changed files)."""

import time
from datetime import UTC, datetime

import polars as pl
from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetExecutionContext,
    AssetOut,
    BackfillPolicy,
    MetadataValue,
    Output,
    multi_asset,
)

from assets.metadata import (
    by_reason,
    contract_check,
    count_reasons,
    preview,
    quarantine_contract_failures,
    run_scopes,
    stored_table,
    tenant_metadata,
)
from assets.partitions import scope_partitions
from memflow import landing
from memflow.turns import TurnsUpdate, TurnTables, apply_retention, ingest_turns
from resources.configurable import Storage
from schemas.contracts import TurnContract
from schemas.tables import Asset


@multi_asset(
    outs={
        Asset.RAW_TURNS: AssetOut(
            io_manager_key="tables",
            description="A tenant's landing-zone turns, redacted and deduplicated; retention "
            "applied. Incremental: reads only landing files that are new or changed since "
            "landing_files recorded them (its own previous output is the state it updates).",
        ),
        Asset.TURN_REJECTS: AssetOut(
            io_manager_key="tables",
            description="Landing lines that could not be used, with file, line and reason.",
        ),
        Asset.LANDING_FILES: AssetOut(
            io_manager_key="tables",
            description="The landing index: each file's version (size, mtime, sha256) and how "
            "its lines were accounted for (records = turns + rejects).",
        ),
    },
    partitions_def=scope_partitions,
    backfill_policy=BackfillPolicy.single_run(),
    check_specs=[
        AssetCheckSpec(
            "turn_contract",
            asset=Asset.RAW_TURNS,
            blocking=True,
            description="Stored turns meet TurnContract (scope, roles, timestamps, unique "
            "turns, no secrets). Rows that break it are quarantined first, so this is the "
            "last guard.",
        ),
        AssetCheckSpec(
            "lines_accounted",
            asset=Asset.LANDING_FILES,
            description="Every landing line read is a turn or a reject: records = turns + "
            "rejects for every file of every tenant in the run.",
        ),
    ],
    group_name="ingest",
    compute_kind="polars",
)
def raw_turns(context: AssetExecutionContext, storage: Storage):
    found = landing.discover(storage.landing)
    window = storage.window()
    now = datetime.now(UTC)
    turns_out: dict[str, pl.DataFrame] = {}
    rejects_out: dict[str, pl.DataFrame] = {}
    files_out: dict[str, pl.DataFrame] = {}
    unbalanced: dict[str, list[str]] = {}
    scopes = list(run_scopes(context))
    read: dict[str, tuple[float, TurnTables, TurnsUpdate]] = {}
    fresh: dict[str, pl.DataFrame] = {}
    for scope in scopes:
        started = time.perf_counter()
        previous = TurnTables.of(
            stored_table(storage, Asset.RAW_TURNS, scope),
            stored_table(storage, Asset.TURN_REJECTS, scope),
            stored_table(storage, Asset.LANDING_FILES, scope),
        )
        update = ingest_turns(storage.landing, scope, found.get(scope, []), previous, now, window)
        fresh[scope.key] = update.tables.turns.join(
            previous.turns.select("turn_key"), on="turn_key", how="anti"
        )
        read[scope.key] = (time.perf_counter() - started, previous, update)
    # One validation for the run's new turns (assets.metadata.quarantine_contract_failures).
    _, quarantined = quarantine_contract_failures(fresh, TurnContract, "landing")
    for scope in scopes:
        started = time.perf_counter()
        spent, previous, update = read[scope.key]
        tables = update.tables
        contract_rejects = quarantined[scope.key]
        if contract_rejects.height:
            failed = contract_rejects.select("session_id", "turn_id", "source_file", "line_no")
            tables.turns = tables.turns.join(
                failed, on=["session_id", "turn_id", "source_file", "line_no"], how="anti"
            )
            tables.rejects = pl.concat([tables.rejects, contract_rejects])
        tables.files = _recount(tables)
        turns = apply_retention(tables.turns, storage.retention_days, now)
        turns_out[scope.key] = turns
        rejects_out[scope.key] = tables.rejects
        files_out[scope.key] = tables.files
        off = tables.files.filter(pl.col("records") != pl.col("turns") + pl.col("rejects"))
        if off.height:
            unbalanced[scope.key] = off["source_file"].to_list()
        new_reasons = count_reasons(
            tables.rejects.join(previous.rejects.select("reject_id"), on="reject_id", how="anti")
        )
        tenant_metadata(
            context,
            Asset.RAW_TURNS,
            scope,
            {
                **update.metadata(),
                "contract_rejects": contract_rejects.height,
                "landing_problems": MetadataValue.json(
                    [f"{p.path}: {p.reason}" for p in update.problems][:50]
                ),
                "rows_out": turns.height,
                "rejects_by_reason": by_reason(new_reasons),
                "tool_call_turns": turns.filter(pl.col("tool_triples").is_not_null()).height,
                "duration_s": round(spent + time.perf_counter() - started, 3),
                "preview": preview(
                    turns.filter(pl.col("source_file").is_in(update.read_files)),
                    ["session_id", "turn_id", "role", "client", "content"],
                ),
            },
        )
        tenant_metadata(
            context,
            Asset.TURN_REJECTS,
            scope,
            {
                "rows_out": tables.rejects.height,
                "new_rejects": update.new_rejects + contract_rejects.height,
                "rejects_by_reason": by_reason(count_reasons(tables.rejects)),
            },
        )
        tenant_metadata(
            context,
            Asset.LANDING_FILES,
            scope,
            {
                "files": tables.files.height,
                "files_read": update.files_read,
                "records": int(tables.files["records"].sum() or 0),
                "read": MetadataValue.json(update.read_files[:50]),
            },
        )
    yield Output(turns_out, output_name=Asset.RAW_TURNS)
    yield Output(rejects_out, output_name=Asset.TURN_REJECTS)
    yield Output(files_out, output_name=Asset.LANDING_FILES)
    yield contract_check("turn_contract", Asset.RAW_TURNS, TurnContract, turns_out)
    yield AssetCheckResult(
        check_name="lines_accounted",
        asset_key=Asset.LANDING_FILES,
        passed=not unbalanced,
        severity=AssetCheckSeverity.ERROR,
        metadata={"files_off_balance": MetadataValue.json(unbalanced)},
    )


def _recount(tables: TurnTables) -> pl.DataFrame:
    """The index's per-file turn and reject counts, from the tables as stored."""
    turns = tables.turns.group_by("source_file").agg(pl.len().alias("t"))
    rejects = tables.rejects.group_by("source_file").agg(pl.len().alias("r"))
    return (
        tables.files.join(turns, on="source_file", how="left")
        .join(rejects, on="source_file", how="left")
        .with_columns(
            pl.col("t").fill_null(0).cast(pl.Int64).alias("turns"),
            pl.col("r").fill_null(0).cast(pl.Int64).alias("rejects"),
        )
        .drop("t", "r")
    )


__all__ = ["raw_turns"]
