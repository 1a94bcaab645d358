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
    run_scopes,
    stored_table,
    tenant_metadata,
)
from assets.partitions import scope_partitions
from assets.retries import retry_transient_only
from memflow.turns import Settled, TurnsUpdate, TurnTables, ingest_turns, new_turns, settle
from resources.configurable import Storage
from schemas.contracts import TurnContract, quarantine_contract_failures
from schemas.scope import Scope
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
@retry_transient_only
def raw_turns(context: AssetExecutionContext, storage: Storage):
    window = storage.window()
    now = datetime.now(UTC)
    scopes = list(run_scopes(context))
    read: dict[str, tuple[float, TurnTables, TurnsUpdate]] = {}
    for scope in scopes:  # each lists its own directory only, not the whole landing zone
        started = time.perf_counter()
        previous = TurnTables.of(
            stored_table(storage, Asset.RAW_TURNS, scope),
            stored_table(storage, Asset.TURN_REJECTS, scope),
            stored_table(storage, Asset.LANDING_FILES, scope),
        )
        update = ingest_turns(storage.landing, scope, None, previous, now, window)
        read[scope.key] = (time.perf_counter() - started, previous, update)
    # One validation for the run's new turns (schemas.contracts.quarantine_contract_failures).
    fresh = {key: new_turns(previous, update) for key, (_, previous, update) in read.items()}
    _, quarantined = quarantine_contract_failures(fresh, TurnContract, "landing")
    settled: dict[str, Settled] = {}
    for scope in scopes:
        started = time.perf_counter()
        spent, previous, update = read[scope.key]
        done = settle(previous, update, quarantined[scope.key], storage.retention_days, now)
        settled[scope.key] = done
        _record_tenant(context, scope, update, done, spent + time.perf_counter() - started)
    turns_out = {key: done.tables.turns for key, done in settled.items()}
    yield Output(turns_out, output_name=Asset.RAW_TURNS)
    yield Output(
        {key: done.tables.rejects for key, done in settled.items()},
        output_name=Asset.TURN_REJECTS,
    )
    yield Output(
        {key: done.tables.files for key, done in settled.items()},
        output_name=Asset.LANDING_FILES,
    )
    yield contract_check("turn_contract", Asset.RAW_TURNS, TurnContract, turns_out)
    unbalanced = {key: done.unbalanced for key, done in settled.items() if done.unbalanced}
    yield AssetCheckResult(
        check_name="lines_accounted",
        asset_key=Asset.LANDING_FILES,
        passed=not unbalanced,
        severity=AssetCheckSeverity.ERROR,
        metadata={"files_off_balance": MetadataValue.json(unbalanced)},
    )


def _record_tenant(
    context: AssetExecutionContext,
    scope: Scope,
    update: TurnsUpdate,
    done: Settled,
    seconds: float,
) -> None:
    """The tenant's metadata on each of the three outputs."""
    turns, rejects, files = done.tables.turns, done.tables.rejects, done.tables.files
    tenant_metadata(
        context,
        Asset.RAW_TURNS,
        scope,
        {
            **update.metadata(),
            "contract_rejects": done.contract_rejects,
            "landing_problems": MetadataValue.json(
                [f"{p.path}: {p.reason}" for p in update.problems][:50]
            ),
            "rows_out": turns.height,
            "rejects_by_reason": by_reason(count_reasons(done.new_rejects)),
            "tool_call_turns": turns.filter(pl.col("tool_triples").is_not_null()).height,
            "duration_s": round(seconds, 3),
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
            "rows_out": rejects.height,
            "new_rejects": update.new_rejects + done.contract_rejects,
            "rejects_by_reason": by_reason(count_reasons(rejects)),
        },
    )
    tenant_metadata(
        context,
        Asset.LANDING_FILES,
        scope,
        {
            "files": files.height,
            "files_read": update.files_read,
            "records": int(files["records"].sum() or 0),
            "read": MetadataValue.json(update.read_files[:50]),
        },
    )


__all__ = ["raw_turns"]
