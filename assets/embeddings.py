"""entity_embeddings[tenant] and fact_embeddings[tenant]: entity-name and fact-text vectors of
the current embedding model.

The ledger (`resources.vector.ledger`) is the cursor: each batch of 64 is persisted before the
next call, so a killed run loses at most one batch and the rerun embeds only what is missing.
Fact vectors live in the same ledger under their own key (`facts:<model>`), so a model change
re-embeds both under the new model while the previous model's vectors keep serving.
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
    ObserveResult,
    Output,
    multi_asset,
    observable_source_asset,
)

from assets.metadata import run_scopes, tenant_metadata
from assets.partitions import scope_partitions
from assets.retries import retry_transient_only
from resources.configurable import EmbeddingModelResource, Storage
from schemas.tables import EMBEDDINGS, FACT_EMBEDDINGS, Asset, conform, empty


@observable_source_asset(
    group_name="models",
    description="The embedding model in use (MEMFLOW_EMBEDDER, MEMFLOW_EMBEDDING_MODEL; "
    "re-read from MEMFLOW_SETTINGS_FILE at each observation). A change marks entity_embeddings "
    "and fact_embeddings unsynced; materialize them and vector_sink to re-embed. Vectors are "
    "kept per model, so recall keeps serving the previous model until the new one covers the "
    "tenant.",
)
@retry_transient_only
def embedding_model(embedding: EmbeddingModelResource) -> ObserveResult:
    config = embedding.config()
    return ObserveResult(
        data_version=DataVersion(config.identity()),
        metadata={
            "provider": config.kind,
            "model": config.model_name() or "none",
            "settings_from": embedding.source(),
        },
    )


@multi_asset(
    outs={
        Asset.ENTITY_EMBEDDINGS: AssetOut(
            io_manager_key="tables",
            description="Which entities hold a vector of the current model (ids, dim, hash).",
        )
    },
    deps=[AssetKey(Asset.EMBEDDING_MODEL)],
    partitions_def=scope_partitions,
    backfill_policy=BackfillPolicy.single_run(),
    check_specs=[
        AssetCheckSpec(
            "embedding_coverage",
            asset=Asset.ENTITY_EMBEDDINGS,
            description="Every entity of the tenants in the run has a vector of the current "
            "model (warns while a model change is being re-embedded, or with no embedder).",
        )
    ],
    group_name="embeddings",
    compute_kind="model",
)
@retry_transient_only
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

    provider = embedding.build()
    out: dict[str, pl.DataFrame] = {}
    uncovered: dict[str, int] = {}
    try:
        ledger = EmbeddingLedger(storage.data_dir)
        for scope in run_scopes(context):
            started = time.perf_counter()
            ents = entities.get(scope.key, pl.DataFrame())
            if provider is None:
                out[scope.key] = empty(EMBEDDINGS)
                uncovered[scope.key] = ents.height
                tenant_metadata(
                    context,
                    Asset.ENTITY_EMBEDDINGS,
                    scope,
                    {"model": "none", "entities": ents.height, "embedded": 0},
                )
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
            tenant_metadata(
                context,
                Asset.ENTITY_EMBEDDINGS,
                scope,
                {
                    "model": provider.model,
                    "dimension": report.dim,
                    "entities": ents.height,
                    "embedded": report.embedded,
                    "skipped": report.skipped,
                    "calls": report.batches,
                    "names_per_s": round(report.names_per_s, 1),
                    "duration_s": round(time.perf_counter() - started, 3),
                },
            )
    finally:
        if provider is not None:
            provider.close()
    yield Output(out, output_name=Asset.ENTITY_EMBEDDINGS)
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


@multi_asset(
    outs={
        Asset.FACT_EMBEDDINGS: AssetOut(
            io_manager_key="tables",
            description='Which facts hold a vector of their text ("subject predicate '
            'object") under the current model (ids, dim, hash); the vectors are in the '
            "embedding ledger under the fact-vector key facts:<model>.",
        )
    },
    deps=[AssetKey(Asset.EMBEDDING_MODEL)],
    partitions_def=scope_partitions,
    backfill_policy=BackfillPolicy.single_run(),
    check_specs=[
        AssetCheckSpec(
            "fact_embedding_coverage",
            asset=Asset.FACT_EMBEDDINGS,
            description="Every fact of the tenants in the run (closed ones included) has a "
            "vector of its text under the current model (warns while a model change is being "
            "re-embedded, or with no embedder).",
        )
    ],
    group_name="embeddings",
    compute_kind="model",
)
@retry_transient_only
def fact_embeddings(
    context: AssetExecutionContext,
    validated_facts: dict[str, pl.DataFrame],
    storage: Storage,
    embedding: EmbeddingModelResource,
):
    # Imported per run, like entity_embeddings' (the vector stack is slow to import).
    from memflow.fact_embedding import embed_missing_facts, fact_vector_table
    from resources.vector.ledger import EmbeddingLedger

    provider = embedding.build()
    out: dict[str, pl.DataFrame] = {}
    uncovered: dict[str, int] = {}
    try:
        ledger = EmbeddingLedger(storage.data_dir)
        for scope in run_scopes(context):
            started = time.perf_counter()
            facts = validated_facts.get(scope.key, pl.DataFrame())
            n_facts = facts["fact_id"].n_unique() if "fact_id" in facts.columns else 0
            if provider is None:
                out[scope.key] = empty(FACT_EMBEDDINGS)
                uncovered[scope.key] = n_facts
                tenant_metadata(
                    context,
                    Asset.FACT_EMBEDDINGS,
                    scope,
                    {"model": "none", "facts": n_facts, "embedded": 0},
                )
                continue
            report = embed_missing_facts(
                provider,
                ledger,
                scope,
                facts,
                progress=lambda done, total, s=scope: context.log.debug(
                    f"{s.key}: embedded {done}/{total} facts"
                ),
            )
            table = fact_vector_table(ledger, provider.model, scope, facts)
            out[scope.key] = conform(table, FACT_EMBEDDINGS)
            missing = n_facts - table.height
            if missing:
                uncovered[scope.key] = missing
            tenant_metadata(
                context,
                Asset.FACT_EMBEDDINGS,
                scope,
                {
                    "model": provider.model,
                    "key": report.model,
                    "dimension": report.dim,
                    "facts": n_facts,
                    "embedded": report.embedded,
                    "skipped": report.skipped,
                    "calls": report.batches,
                    "facts_per_s": round(report.names_per_s, 1),
                    "duration_s": round(time.perf_counter() - started, 3),
                },
            )
    finally:
        if provider is not None:
            provider.close()
    yield Output(out, output_name=Asset.FACT_EMBEDDINGS)
    yield AssetCheckResult(
        check_name="fact_embedding_coverage",
        asset_key=Asset.FACT_EMBEDDINGS,
        passed=not uncovered,
        severity=AssetCheckSeverity.WARN,
        metadata={
            "model": embedding.identity(),
            "facts_without_vector": MetadataValue.json(uncovered),
        },
    )
