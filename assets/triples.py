"""extracted_triples[tenant, day]: explicit triples from tool calls plus model extraction."""

import polars as pl
from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetExecutionContext,
    AssetKey,
    AssetOut,
    DataVersion,
    Output,
    multi_asset,
    observable_source_asset,
)

from assets.metadata import IO_RETRY, by_reason, preview
from assets.partitions import scope_day_partitions, split_key
from memflow.extract import extract_day
from resources.configurable import ExtractionModelResource, Storage
from schemas.tables import Asset

KNOWN_ENTITIES_IN_PROMPT = 200


@observable_source_asset(
    group_name="models",
    description="The extraction model in use. A change marks extracted_triples stale; "
    "backfill to re-extract.",
)
def extraction_model(extraction: ExtractionModelResource) -> DataVersion:
    return DataVersion(extraction.identity())


@multi_asset(
    outs={
        Asset.EXTRACTED_TRIPLES: AssetOut(
            io_manager_key="tables",
            description="Candidate triples with provenance (session, turn, client, model).",
        ),
        Asset.EXTRACTION_REJECTS: AssetOut(
            io_manager_key="tables",
            description="Items the agent or the model produced that could not be used, "
            "with a reason.",
        ),
    },
    deps=[AssetKey(Asset.EXTRACTION_MODEL)],
    partitions_def=scope_day_partitions,
    check_specs=[
        AssetCheckSpec(
            "nothing_awaiting_extraction",
            asset=Asset.EXTRACTED_TRIPLES,
            description="Text turns wait for extraction when no extractor is configured.",
        )
    ],
    retry_policy=IO_RETRY,
    group_name="ingest",
    compute_kind="model",
)
def extracted_triples(
    context: AssetExecutionContext,
    raw_turns: pl.DataFrame,
    storage: Storage,
    extraction: ExtractionModelResource,
):
    scope, day = split_key(context.partition_key)
    tables = storage.tables()
    known = tables.read(Asset.ENTITIES, scope)
    known_names = (
        known["name"].head(KNOWN_ENTITIES_IN_PROMPT).to_list() if known is not None else []
    )
    provider = extraction.build()
    try:
        report = extract_day(scope, raw_turns, provider, known_names, progress=context.log.debug)
    finally:
        if provider is not None:
            provider.close()

    text_dropped = 0
    if storage.retention_days == 0 and provider is not None and raw_turns.height:
        # Retention 0: text goes once extracted; ids and hashes stay in raw_turns.
        text_dropped = raw_turns.filter(pl.col("content").is_not_null()).height
        tables.write(
            raw_turns.with_columns(pl.lit(None, dtype=pl.String).alias("content")),
            Asset.RAW_TURNS,
            scope,
            day,
        )

    yield Output(
        report.triples,
        output_name=Asset.EXTRACTED_TRIPLES,
        metadata={
            "tenant": scope.key,
            "day": day,
            "rows_in": report.turns,
            "rows_out": report.triples.height,
            "explicit_turns": report.explicit_turns,
            "text_turns": report.text_turns,
            "awaiting_extraction": report.awaiting_extraction,
            "model": report.model or extraction.identity(),
            "model_calls": report.model_calls,
            "prompt_tokens": report.prompt_tokens,
            "completion_tokens": report.completion_tokens,
            "low_confidence_dropped": report.low_confidence_dropped,
            "rejects_by_reason": by_reason(report.rejects_by_reason),
            "turn_text_dropped_by_retention": text_dropped,
            "duration_s": round(report.seconds, 3),
            "preview": preview(
                report.triples,
                ["subject", "predicate", "object", "confidence", "source", "turn_id"],
            ),
        },
    )
    yield Output(
        report.rejects,
        output_name=Asset.EXTRACTION_REJECTS,
        metadata={
            "rows_out": report.rejects.height,
            "rejects_by_reason": by_reason(report.rejects_by_reason),
        },
    )
    yield AssetCheckResult(
        check_name="nothing_awaiting_extraction",
        asset_key=Asset.EXTRACTED_TRIPLES,
        passed=report.awaiting_extraction == 0,
        severity=AssetCheckSeverity.WARN,
        metadata={
            "awaiting_extraction": report.awaiting_extraction,
            "hint": "configure MEMFLOW_EXTRACTOR (openai | command) and backfill"
            if report.awaiting_extraction
            else "",
        },
    )
