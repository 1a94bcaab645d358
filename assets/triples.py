"""extracted_triples[tenant] (+ extraction_rejects, extraction_log): explicit triples from
tool calls plus model extraction, incremental per turn and replayed on a model change."""

import re

import polars as pl
from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetExecutionContext,
    AssetKey,
    AssetMaterialization,
    AssetOut,
    BackfillPolicy,
    Config,
    MetadataValue,
    Output,
    multi_asset,
)
from pydantic import Field, field_validator

from assets.metadata import (
    by_reason,
    preview,
    run_scopes,
    stored_table,
    tenant_metadata,
)
from assets.partitions import scope_partitions
from assets.retries import retry_transient_only
from memflow.extract import ExtractionTables, TenantExtraction, extract_tenant
from memflow.turns import drop_extracted_text
from resources.configurable import ExtractionModelResource, Storage
from schemas.scope import Scope
from schemas.tables import Asset

KNOWN_ENTITIES_IN_PROMPT = 200
_DAY = re.compile(r"^\d{4}-\d{2}-\d{2}$")


class ExtractConfig(Config):
    """Re-extract a date range of the tenant(s) in this run, even when the model is the same
    (set in the launchpad when materializing extracted_triples for a tenant)."""

    reextract_from: str = Field(default="", description="First day, YYYY-MM-DD (inclusive).")
    reextract_to: str = Field(default="", description="Last day, YYYY-MM-DD (inclusive).")

    @field_validator("reextract_from", "reextract_to")
    @classmethod
    def _iso_day(cls, value: str) -> str:
        if value and not _DAY.match(value):
            raise ValueError(f"{value!r} is not a day like 2026-11-03")
        return value

    def days(self) -> tuple[str, str] | None:
        if not self.reextract_from and not self.reextract_to:
            return None
        return (self.reextract_from or "0000-01-01", self.reextract_to or "9999-12-31")


@multi_asset(
    outs={
        Asset.EXTRACTED_TRIPLES: AssetOut(
            io_manager_key="tables",
            description="Candidate triples with provenance (session, turn, client, model). "
            "Reads the tenant's entities (known names for the prompt: a feedback edge) and "
            "its own previous output.",
        ),
        Asset.EXTRACTION_REJECTS: AssetOut(
            io_manager_key="tables",
            description="Items the agent or the model produced that could not be used, "
            "with a reason.",
        ),
        Asset.EXTRACTION_LOG: AssetOut(
            io_manager_key="tables",
            description="Which turns were extracted, by which model, with how many triples.",
        ),
        Asset.RETRACTION_REQUESTS: AssetOut(
            io_manager_key="tables",
            description="The items of retract_facts turns: which fact, triple or entity to "
            "take out of memory, when, who asked and why (applied by validated_facts).",
        ),
    },
    deps=[AssetKey(Asset.EXTRACTION_MODEL)],
    partitions_def=scope_partitions,
    backfill_policy=BackfillPolicy.single_run(),
    check_specs=[
        AssetCheckSpec(
            "nothing_awaiting_extraction",
            asset=Asset.EXTRACTED_TRIPLES,
            description="Text turns wait for extraction when no extractor is configured.",
        )
    ],
    # Calls the model server: the instance bounds how many extraction steps run at once
    # across every run (deploy/dagster.yaml, concurrency.pools).
    pool="extraction",
    group_name="ingest",
    compute_kind="model",
)
@retry_transient_only
def extracted_triples(
    context: AssetExecutionContext,
    config: ExtractConfig,
    raw_turns: dict[str, pl.DataFrame],
    storage: Storage,
    extraction: ExtractionModelResource,
):
    identity = extraction.identity()
    provider = extraction.build()
    triples_out: dict[str, pl.DataFrame] = {}
    rejects_out: dict[str, pl.DataFrame] = {}
    log_out: dict[str, pl.DataFrame] = {}
    requests_out: dict[str, pl.DataFrame] = {}
    awaiting: dict[str, int] = {}
    try:
        for scope in run_scopes(context):
            turns = raw_turns[scope.key]
            known = stored_table(storage, Asset.ENTITIES, scope)
            known_names = (
                known["name"].head(KNOWN_ENTITIES_IN_PROMPT).to_list() if known is not None else []
            )
            previous = ExtractionTables.of(
                stored_table(storage, Asset.EXTRACTED_TRIPLES, scope),
                stored_table(storage, Asset.EXTRACTION_REJECTS, scope),
                stored_table(storage, Asset.EXTRACTION_LOG, scope),
                stored_table(storage, Asset.RETRACTION_REQUESTS, scope),
            )
            done = extract_tenant(
                scope,
                turns,
                previous,
                provider,
                identity,
                known_names,
                force_days=config.days(),
                progress=context.log.debug,
            )
            tables = done.tables
            triples_out[scope.key] = tables.triples
            rejects_out[scope.key] = tables.rejects
            log_out[scope.key] = tables.log
            requests_out[scope.key] = tables.requests
            waiting = tables.log.filter(pl.col("model") == "none").height
            if waiting:
                awaiting[scope.key] = waiting
            if storage.retention_days == 0 and provider is not None:
                yield from _drop_extracted_text(storage, scope, turns, tables.log)
            _record_tenant(context, scope, turns, done, identity, waiting)
    finally:
        if provider is not None:
            provider.close()

    yield Output(triples_out, output_name=Asset.EXTRACTED_TRIPLES)
    yield Output(rejects_out, output_name=Asset.EXTRACTION_REJECTS)
    yield Output(log_out, output_name=Asset.EXTRACTION_LOG)
    yield Output(requests_out, output_name=Asset.RETRACTION_REQUESTS)
    yield AssetCheckResult(
        check_name="nothing_awaiting_extraction",
        asset_key=Asset.EXTRACTED_TRIPLES,
        passed=not awaiting,
        severity=AssetCheckSeverity.WARN,
        metadata={
            "awaiting_extraction": MetadataValue.json(awaiting),
            "hint": "configure MEMFLOW_EXTRACTOR (openai | command) and materialize again"
            if awaiting
            else "",
        },
    )


def _record_tenant(
    context: AssetExecutionContext,
    scope: Scope,
    turns: pl.DataFrame,
    done: TenantExtraction,
    identity: str,
    waiting: int,
) -> None:
    """The tenant's metadata on the stage's four tables."""
    tables, report = done.tables, done.report
    tenant_metadata(
        context,
        Asset.EXTRACTED_TRIPLES,
        scope,
        {
            "turns": turns.height,
            "turns_extracted": done.todo_turns,
            "why": MetadataValue.json(done.reasons),
            "turns_dropped": done.dropped_turns,
            "rows_out": tables.triples.height,
            "new_triples": report.triples.height,
            "explicit_turns": report.explicit_turns,
            "retract_turns": report.retract_turns,
            "text_turns": report.text_turns,
            "awaiting_extraction": waiting,
            "model": identity,
            "model_calls": report.model_calls,
            "prompt_tokens": report.prompt_tokens,
            "completion_tokens": report.completion_tokens,
            "low_confidence_dropped": report.low_confidence_dropped,
            "rejects_by_reason": by_reason(report.rejects_by_reason),
            "duration_s": round(report.seconds, 3),
            "preview": preview(
                report.triples,
                ["subject", "predicate", "object", "confidence", "source", "turn_id"],
            ),
        },
    )
    tenant_metadata(
        context,
        Asset.EXTRACTION_REJECTS,
        scope,
        {"rows_out": tables.rejects.height, "new_rejects": report.rejects.height},
    )
    tenant_metadata(
        context, Asset.EXTRACTION_LOG, scope, {"rows_out": tables.log.height, "model": identity}
    )
    tenant_metadata(
        context,
        Asset.RETRACTION_REQUESTS,
        scope,
        {
            "rows_out": tables.requests.height,
            "new_requests": report.requests.height,
            "preview": preview(
                report.requests, ["kind", "fact_id", "subject", "entity", "ts", "by"]
            ),
        },
    )


def _drop_extracted_text(storage: Storage, scope, turns: pl.DataFrame, log: pl.DataFrame):
    """Retention 0: a turn's text goes once its extraction is done (ids and hashes stay). This
    rewrites raw_turns, which another asset owns, so it is reported as a materialization of
    raw_turns with what changed."""
    stripped, dropped = drop_extracted_text(turns, log)
    if not dropped:
        return
    written = storage.tables().write_table(stripped, Asset.RAW_TURNS, scope)
    yield AssetMaterialization(
        asset_key=Asset.RAW_TURNS,
        partition=scope.key,
        description="retention 0: turn text dropped after extraction (ids and hashes kept)",
        metadata={"turn_text_dropped": dropped, "delta_version": written.version},
    )


__all__ = ["ExtractConfig", "extracted_triples"]
