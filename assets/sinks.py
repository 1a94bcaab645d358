"""graph_sink and vector_sink per tenant: make each store equal its table, idempotently.

The tables they project are their inputs (loaded by the tables IO manager), so the lineage in
the UI is what they read. Their own output is the store, not a table: they return only
materialization metadata.
"""

import time

import polars as pl
from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetExecutionContext,
    BackfillPolicy,
    MaterializeResult,
    MetadataValue,
    asset,
)

from assets.metadata import IO_RETRY, run_scopes, tenant_metadata
from assets.partitions import scope_partitions
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
    retry_policy=IO_RETRY,
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
    description="The vector store (Milvus) holding the current model's entity-name vectors and "
    "fact vectors (under facts:<model>), equal to the embeddings of the tenant's current entity "
    "names and fact texts. Other models' vectors stay.",
    partitions_def=scope_partitions,
    backfill_policy=BackfillPolicy.single_run(),
    retry_policy=IO_RETRY,
    check_specs=[
        AssetCheckSpec(
            "vectors_equal_table",
            asset=Asset.VECTOR_SINK,
            description="After the sync, the vector store holds exactly the current model's "
            "vectors of the tenant's entities and of its facts.",
        )
    ],
    group_name="sinks",
    kinds={"milvus"},
)
def vector_sink(
    context: AssetExecutionContext,
    entities: dict[str, pl.DataFrame],
    entity_embeddings: dict[str, pl.DataFrame],
    validated_facts: dict[str, pl.DataFrame],
    fact_embeddings: dict[str, pl.DataFrame],
    storage: Storage,
    vectors: VectorStoreResource,
    embedding: EmbeddingModelResource,
):
    # `entity_embeddings` and `fact_embeddings` say which entities and facts hold a vector; the
    # vectors themselves are read from the embedding ledger (resources.vector.ledger), the
    # tables' large sidecar, for exactly the current names and fact texts.
    del entity_embeddings, fact_embeddings
    # Imported per run: pymilvus is slow to import and the code location should load fast.
    from memflow.fact_embedding import fact_vector_table
    from resources.vector.base import fact_vectors_key
    from resources.vector.ledger import EmbeddingLedger, vector_table
    from resources.vector.sync import sync_vectors, vectors_equal_table

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
    facts_key = fact_vectors_key(model)
    mismatched: dict[str, dict] = {}
    ledger = EmbeddingLedger(storage.data_dir)
    with vectors.open() as store:
        for scope in run_scopes(context):
            started = time.perf_counter()
            ents = entities.get(scope.key, empty(ENTITIES))
            facts = validated_facts.get(scope.key, empty(FACTS))
            # Entity names first: recall chooses its model by them, and keeps serving the
            # previous model until the new one covers the facts as well.
            tables = {
                "entities": (
                    model,
                    vector_table(ledger, model, scope, ents.select("entity_id", "name")),
                ),
                "facts": (facts_key, fact_vector_table(ledger, model, scope, facts)),
            }
            reports = {
                kind: sync_vectors(store, key, scope, table)
                for kind, (key, table) in tables.items()
            }
            diffs = {}
            for kind, (key, table) in tables.items():
                equal, diff = vectors_equal_table(store, key, scope, table)
                if not equal:
                    diffs[kind] = diff
            if diffs:
                mismatched[scope.key] = diffs
            ent, fact = reports["entities"], reports["facts"]
            tenant_metadata(
                context,
                Asset.VECTOR_SINK,
                scope,
                {
                    "model": model,
                    "rows_written": ent.written + fact.written,
                    "rows_deleted": ent.deleted + fact.deleted,
                    "rows_unchanged": ent.unchanged + fact.unchanged,
                    "entity_rows_written": ent.written,
                    "fact_rows_written": fact.written,
                    "fact_rows_deleted": fact.deleted,
                    "duration_s": round(time.perf_counter() - started, 3),
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
