"""graph_sink and vector_sink per tenant: make each store equal its table, idempotently.

The tables they project are their inputs (loaded by the tables IO manager), so the lineage in
the UI is what they read; the vector sink reads the vectors from the embedding ledger and
depends on the embeddings assets (`deps`) without loading their tables. Their own output is the
store, not a table: they return only materialization metadata.
"""

import polars as pl
from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetExecutionContext,
    AssetKey,
    BackfillPolicy,
    MaterializeResult,
    MetadataValue,
    asset,
)

from assets.metadata import run_scopes, tenant_metadata
from assets.partitions import scope_partitions
from assets.retries import retry_transient_only
from resources.configurable import (
    EmbeddingModelResource,
    GraphStoreResource,
    Storage,
    VectorStoreResource,
)
from schemas.tables import ENTITIES, FACTS, Asset, empty


@asset(
    name=Asset.GRAPH_SINK,
    description="The graph store (SQLite or a Gremlin server) holding the tenant's entities "
    "and facts, equal to the tables.",
    partitions_def=scope_partitions,
    backfill_policy=BackfillPolicy.single_run(),
    check_specs=[
        AssetCheckSpec(
            "graph_equals_table",
            asset=Asset.GRAPH_SINK,
            description="After the sync, the graph store holds exactly the tenant's entities "
            "and facts tables (ids and content).",
        )
    ],
    group_name="sinks",
    kinds={"graph"},
)
@retry_transient_only
def graph_sink(
    context: AssetExecutionContext,
    entities: dict[str, pl.DataFrame],
    validated_facts: dict[str, pl.DataFrame],
    graph: GraphStoreResource,
):
    from resources.graph.sync import sync_and_check

    mismatched: dict[str, dict] = {}
    with graph.open() as store:
        for scope in run_scopes(context):
            ents = entities.get(scope.key, empty(ENTITIES))
            facts = validated_facts.get(scope.key, empty(FACTS))
            report, equal, diff = sync_and_check(store, scope, ents, facts)
            if not equal:
                mismatched[scope.key] = diff
            tenant_metadata(
                context,
                Asset.GRAPH_SINK,
                scope,
                {
                    "backend": graph.backend,
                    "rows_written": report.entities_written + report.facts_written,
                    "entities_written": report.entities_written,
                    "facts_written": report.facts_written,
                    "rows_deleted": report.entities_deleted + report.facts_deleted,
                    "rows_unchanged": report.unchanged,
                    "duration_s": round(report.seconds, 3),
                },
            )
    yield MaterializeResult()
    yield AssetCheckResult(
        check_name="graph_equals_table",
        asset_key=Asset.GRAPH_SINK,
        passed=not mismatched,
        severity=AssetCheckSeverity.ERROR,
        metadata={"mismatches": MetadataValue.json(mismatched)},
    )


@asset(
    name=Asset.VECTOR_SINK,
    description="The vector store (embedded in the data directory, or a Milvus server) holding "
    "the current model's entity-name vectors and fact vectors (under facts:<model>), equal to "
    "the embeddings of the tenant's current entity names and fact texts. Other models' vectors "
    "stay.",
    partitions_def=scope_partitions,
    backfill_policy=BackfillPolicy.single_run(),
    # The embeddings assets say which names and facts hold a vector; the vectors themselves
    # are read from the embedding ledger (their large sidecar), so the sink depends on them
    # without loading their tables.
    deps=[AssetKey(Asset.ENTITY_EMBEDDINGS), AssetKey(Asset.FACT_EMBEDDINGS)],
    check_specs=[
        AssetCheckSpec(
            "vectors_equal_table",
            asset=Asset.VECTOR_SINK,
            description="After the sync, read back from the store: it holds exactly the "
            "current model's vectors of the tenant's entities and of its facts.",
        )
    ],
    group_name="sinks",
    kinds={"numpy", "milvus"},
)
@retry_transient_only
def vector_sink(
    context: AssetExecutionContext,
    entities: dict[str, pl.DataFrame],
    validated_facts: dict[str, pl.DataFrame],
    storage: Storage,
    vectors: VectorStoreResource,
    embedding: EmbeddingModelResource,
):
    # Imported per run: the vector stack is slow to import and the code location should load fast.
    from memflow.vector_sync import sync_tenants
    from resources.vector.ledger import EmbeddingLedger

    model = embedding.model_name() if embedding.identity() != "none" else None
    if model is None:
        for scope in run_scopes(context):
            tenant_metadata(
                context, Asset.VECTOR_SINK, scope, {"model": "none", "note": "no embedder"}
            )
        yield MaterializeResult()
        yield AssetCheckResult(
            check_name="vectors_equal_table",
            asset_key=Asset.VECTOR_SINK,
            passed=True,
            metadata={"model": "none"},
        )
        return

    def tenants():
        # Each tenant's tables are let go once its wanted rows are known.
        for scope in run_scopes(context):
            ents = entities.pop(scope.key, None)
            facts = validated_facts.pop(scope.key, None)
            yield (
                scope,
                ents if ents is not None else empty(ENTITIES),
                facts if facts is not None else empty(FACTS),
            )

    mismatched: dict[str, dict] = {}
    ledger = EmbeddingLedger(storage.data_dir)
    with vectors.open() as store:
        for done in sync_tenants(store, ledger, model, tenants()):
            if not done.equal:
                mismatched[done.scope.key] = done.mismatches
            ent, fact = done.reports["entities"], done.reports["facts"]
            tenant_metadata(
                context,
                Asset.VECTOR_SINK,
                done.scope,
                {
                    "model": model,
                    "backend": store.backend,
                    "rows_written": ent.written + fact.written,
                    "rows_deleted": ent.deleted + fact.deleted,
                    "rows_unchanged": ent.unchanged + fact.unchanged,
                    "entity_rows_written": ent.written,
                    "fact_rows_written": fact.written,
                    "fact_rows_deleted": fact.deleted,
                    "duration_s": round(done.seconds, 3),
                },
            )
    yield MaterializeResult()
    yield AssetCheckResult(
        check_name="vectors_equal_table",
        asset_key=Asset.VECTOR_SINK,
        passed=not mismatched,
        severity=AssetCheckSeverity.ERROR,
        metadata={"model": model, "mismatches": MetadataValue.json(mismatched)},
    )


__all__ = ["graph_sink", "vector_sink"]
