"""entity_embeddings[tenant]: entity-name vectors of the current embedding model.

The ledger (`resources.vector.ledger`) is the cursor: each batch of 64 is persisted before the
next call, so a killed run loses at most one batch and the rerun embeds only what is missing.
"""

import time

import polars as pl
from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetExecutionContext,
    AssetKey,
    AssetOut,
    BackfillPolicy,
    DataVersion,
    MetadataValue,
    Output,
    multi_asset,
    observable_source_asset,
)

from assets.automation import after_upstream
from assets.metadata import IO_RETRY, per_tenant_table, run_scopes
from assets.partitions import scope_partitions
from resources.configurable import EmbeddingModelResource, Storage
from schemas.tables import EMBEDDINGS, Asset, conform, empty


@observable_source_asset(
    group_name="models",
    description="The embedding model in use. A change marks entity_embeddings stale; "
    "backfill to re-embed. Vectors are kept per model, so recall keeps serving the previous "
    "model until the new one covers the tenant.",
)
def embedding_model(embedding: EmbeddingModelResource) -> DataVersion:
    return DataVersion(embedding.identity())


@multi_asset(
    outs={
        Asset.ENTITY_EMBEDDINGS: AssetOut(
            io_manager_key="tables",
            description="Which entities hold a vector of the current model (ids, dim, hash).",
            automation_condition=after_upstream(),
        )
    },
    deps=[AssetKey(Asset.EMBEDDING_MODEL)],
    partitions_def=scope_partitions,
    backfill_policy=BackfillPolicy.single_run(),
    retry_policy=IO_RETRY,
    check_specs=[
        AssetCheckSpec(
            "embedding_coverage",
            asset=Asset.ENTITY_EMBEDDINGS,
            description="Every entity has a vector of the current model.",
        )
    ],
    group_name="embeddings",
    compute_kind="model",
)
def entity_embeddings(
    context: AssetExecutionContext,
    entities: dict[str, pl.DataFrame],
    storage: Storage,
    embedding: EmbeddingModelResource,
):
    # Imported per run: the vector stack (pymilvus) is slow to import and the code location
    # should load fast.
    from memflow.embedding import embed_missing
    from resources.vector.ledger import EmbeddingLedger, vector_table

    started = time.perf_counter()
    provider = embedding.build()
    out: dict[str, pl.DataFrame] = {}
    summary: dict[str, dict] = {}
    uncovered: dict[str, int] = {}
    totals = {"embedded": 0, "skipped": 0, "batches": 0}
    dim = None
    try:
        ledger = EmbeddingLedger(storage.data_dir)
        for scope in run_scopes(context):
            ents = entities.get(scope.key, pl.DataFrame())
            if provider is None:
                out[scope.key] = empty(EMBEDDINGS)
                uncovered[scope.key] = ents.height
                continue
            report = embed_missing(
                provider,
                ledger,
                scope,
                ents,
                progress=lambda done, total, s=scope: context.log.debug(
                    f"{s.key}: embedded {done}/{total}"
                ),
            )
            table = vector_table(ledger, provider.model, scope, ents)
            out[scope.key] = conform(table, EMBEDDINGS)
            missing = ents.height - table.height
            if missing:
                uncovered[scope.key] = missing
            dim = report.dim or dim
            for k in totals:
                totals[k] += getattr(report, k)
            summary[scope.key] = {
                "entities": ents.height,
                "embedded": report.embedded,
                "skipped": report.skipped,
                "batches": report.batches,
                "names_per_s": round(report.names_per_s, 1),
            }
    finally:
        if provider is not None:
            provider.close()
    seconds = time.perf_counter() - started
    yield Output(
        out,
        output_name=Asset.ENTITY_EMBEDDINGS,
        metadata={
            "model": embedding.identity(),
            "dimension": dim or 0,
            **totals,
            "names_per_s": round(totals["embedded"] / seconds, 1) if seconds else 0.0,
            "per_tenant": per_tenant_table(summary),
            "duration_s": round(seconds, 3),
        },
    )
    yield AssetCheckResult(
        check_name="embedding_coverage",
        asset_key=Asset.ENTITY_EMBEDDINGS,
        passed=not uncovered,
        severity=AssetCheckSeverity.WARN,
        metadata={
            "model": embedding.identity(),
            "entities_without_vector": MetadataValue.json(uncovered),
        },
    )
