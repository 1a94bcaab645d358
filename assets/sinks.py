"""graph_sink and vector_sink per tenant: make each store equal its table, idempotently."""

import time

import polars as pl
from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetExecutionContext,
    AssetSpec,
    BackfillPolicy,
    MaterializeResult,
    MetadataValue,
    multi_asset,
)

from assets.automation import after_upstream
from assets.metadata import IO_RETRY, per_tenant_table, run_scopes
from assets.partitions import scope_partitions
from resources.configurable import (
    EmbeddingModelResource,
    GraphStoreResource,
    Storage,
    VectorStoreResource,
)
from schemas.tables import Asset


@multi_asset(
    specs=[
        AssetSpec(
            Asset.GRAPH_SINK,
            deps=[Asset.VALIDATED_FACTS, Asset.ENTITIES],
            description="The graph store (SQLite or a Gremlin server) holding the tenant's "
            "entities and facts, equal to the tables.",
            automation_condition=after_upstream(),
            partitions_def=scope_partitions,
            group_name="sinks",
        )
    ],
    check_specs=[AssetCheckSpec("graph_equals_table", asset=Asset.GRAPH_SINK)],
    partitions_def=scope_partitions,
    backfill_policy=BackfillPolicy.single_run(),
    retry_policy=IO_RETRY,
    compute_kind="graph",
)
def graph_sink(context: AssetExecutionContext, storage: Storage, graph: GraphStoreResource):
    from resources.graph.sync import graph_equals_table, sync_graph

    started = time.perf_counter()
    tables = storage.tables()
    summary: dict[str, dict] = {}
    mismatched: dict[str, dict] = {}
    with graph.open() as store:
        for scope in run_scopes(context):
            entities = tables.read(Asset.ENTITIES, scope)
            facts = tables.read(Asset.VALIDATED_FACTS, scope)
            entities = entities if entities is not None else pl.DataFrame()
            facts = facts if facts is not None else pl.DataFrame()
            report = sync_graph(store, scope, entities, facts)
            equal, diff = graph_equals_table(store, scope, entities, facts)
            if not equal:
                mismatched[scope.key] = diff
            summary[scope.key] = {
                "entities_written": report.entities_written,
                "facts_written": report.facts_written,
                "deleted": report.entities_deleted + report.facts_deleted,
                "unchanged": report.unchanged,
                "seconds": round(report.seconds, 3),
            }
            context.log.info(f"graph_sink {scope.key}: {summary[scope.key]}")
    written = sum(v["entities_written"] + v["facts_written"] for v in summary.values())
    yield MaterializeResult(
        asset_key=Asset.GRAPH_SINK,
        metadata={
            "backend": graph.backend,
            "rows_written": written,
            "rows_deleted": sum(v["deleted"] for v in summary.values()),
            "rows_unchanged": sum(v["unchanged"] for v in summary.values()),
            "per_tenant": per_tenant_table(summary),
            "duration_s": round(time.perf_counter() - started, 3),
        },
    )
    yield AssetCheckResult(
        check_name="graph_equals_table",
        asset_key=Asset.GRAPH_SINK,
        passed=not mismatched,
        severity=AssetCheckSeverity.ERROR,
        metadata={"mismatches": MetadataValue.json(mismatched)},
    )


@multi_asset(
    specs=[
        AssetSpec(
            Asset.VECTOR_SINK,
            deps=[Asset.ENTITY_EMBEDDINGS],
            description="The vector store (Milvus) holding the current model's entity-name "
            "vectors, equal to the embeddings table. Other models' vectors stay.",
            automation_condition=after_upstream(),
            partitions_def=scope_partitions,
            group_name="sinks",
        )
    ],
    check_specs=[AssetCheckSpec("vectors_equal_table", asset=Asset.VECTOR_SINK)],
    partitions_def=scope_partitions,
    backfill_policy=BackfillPolicy.single_run(),
    retry_policy=IO_RETRY,
    compute_kind="milvus",
)
def vector_sink(
    context: AssetExecutionContext,
    storage: Storage,
    vectors: VectorStoreResource,
    embedding: EmbeddingModelResource,
):
    # Imported per run: pymilvus is slow to import and the code location should load fast.
    from resources.vector.ledger import EmbeddingLedger, vector_table
    from resources.vector.sync import sync_vectors, vectors_equal_table

    started = time.perf_counter()
    summary: dict[str, dict] = {}
    mismatched: dict[str, dict] = {}
    model = embedding.model_name() if embedding.identity() != "none" else None
    if model is None:
        yield MaterializeResult(
            asset_key=Asset.VECTOR_SINK,
            metadata={"model": "none", "note": "no embedding model configured"},
        )
        yield AssetCheckResult(
            check_name="vectors_equal_table",
            asset_key=Asset.VECTOR_SINK,
            passed=True,
            metadata={"model": "none"},
        )
        return
    ledger = EmbeddingLedger(storage.data_dir)
    tables = storage.tables()
    with vectors.open() as store:
        for scope in run_scopes(context):
            entities = tables.read(Asset.ENTITIES, scope)
            table = vector_table(
                ledger,
                model,
                scope,
                entities
                if entities is not None
                else pl.DataFrame(schema={"entity_id": pl.String, "name": pl.String}),
            )
            report = sync_vectors(store, model, scope, table)
            equal, diff = vectors_equal_table(store, model, scope, table)
            if not equal:
                mismatched[scope.key] = diff
            summary[scope.key] = {
                "written": report.written,
                "deleted": report.deleted,
                "unchanged": report.unchanged,
                "seconds": round(report.seconds, 3),
            }
            context.log.info(f"vector_sink {scope.key}: {summary[scope.key]}")
    yield MaterializeResult(
        asset_key=Asset.VECTOR_SINK,
        metadata={
            "model": model,
            "rows_written": sum(v["written"] for v in summary.values()),
            "rows_deleted": sum(v["deleted"] for v in summary.values()),
            "rows_unchanged": sum(v["unchanged"] for v in summary.values()),
            "per_tenant": per_tenant_table(summary),
            "duration_s": round(time.perf_counter() - started, 3),
        },
    )
    yield AssetCheckResult(
        check_name="vectors_equal_table",
        asset_key=Asset.VECTOR_SINK,
        passed=not mismatched,
        severity=AssetCheckSeverity.ERROR,
        metadata={"model": model, "mismatches": MetadataValue.json(mismatched)},
    )


__all__ = ["graph_sink", "vector_sink"]
