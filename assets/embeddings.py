"""entity_embeddings[tenant] and fact_embeddings[tenant]: entity-name and fact-text vectors of
the current embedding model, two assets of one factory (`_embeddings_asset`).

The ledger (`resources.vector.ledger`) is the cursor: each batch of 64 is persisted before the
next call, so a killed run loses at most one batch and the rerun embeds only what is missing.
Fact vectors live in the same ledger under their own key (`facts:<model>`), so a model change
re-embeds both under the new model while the previous model's vectors keep serving.
"""

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import polars as pl
from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetExecutionContext,
    AssetIn,
    AssetKey,
    AssetOut,
    AssetsDefinition,
    BackfillPolicy,
    MetadataValue,
    Output,
    multi_asset,
)

from assets.metadata import run_scopes, tenant_metadata
from assets.partitions import scope_partitions
from assets.retries import retry_transient_only
from resources.configurable import EmbeddingModelResource, Storage
from schemas.tables import EMBEDDINGS, FACT_EMBEDDINGS, Asset, conform, empty


@dataclass(frozen=True)
class _Sweep:
    """What tells the two embedding assets apart: the table they embed, how its rows are
    counted and swept, and their names in the catalog."""

    asset: str
    source: str
    description: str
    check: str
    check_description: str
    layout: dict[str, pl.DataType]
    noun: str  # what the rows are, in the metadata ("entities", "facts")
    rate: str  # the metadata's name for the sweep's speed
    count: Callable[[pl.DataFrame], int]
    # (provider, ledger, scope, rows, progress) -> (the sweep's report, the vector table);
    # the vector stack is imported here, per run: it is slow to import and the code location
    # should load fast
    sweep: Callable[..., tuple[Any, pl.DataFrame]]
    keyed: bool = False  # the vectors' ledger key differs from the model's name: say it


def _sweep_entities(provider, ledger, scope, rows, progress):
    from memflow.embedding import embed_missing
    from resources.vector.ledger import vector_table

    report = embed_missing(provider, ledger, scope, rows, progress=progress)
    return report, vector_table(ledger, provider.model, scope, rows)


def _sweep_facts(provider, ledger, scope, rows, progress):
    from memflow.fact_embedding import embed_missing_facts, fact_vector_table

    report = embed_missing_facts(provider, ledger, scope, rows, progress=progress)
    return report, fact_vector_table(ledger, provider.model, scope, rows)


def _embeddings_asset(sweep: _Sweep) -> AssetsDefinition:
    """The asset that embeds `sweep.source`'s rows a tenant at a time, through the ledger."""

    @multi_asset(
        name=sweep.asset,
        outs={sweep.asset: AssetOut(io_manager_key="tables", description=sweep.description)},
        ins={"rows": AssetIn(key=sweep.source)},
        deps=[AssetKey(Asset.EMBEDDING_MODEL)],
        partitions_def=scope_partitions,
        backfill_policy=BackfillPolicy.single_run(),
        check_specs=[
            AssetCheckSpec(sweep.check, asset=sweep.asset, description=sweep.check_description)
        ],
        group_name="embeddings",
        compute_kind="model",
    )
    @retry_transient_only
    def embeddings(
        context: AssetExecutionContext,
        rows: dict[str, pl.DataFrame],
        storage: Storage,
        embedding: EmbeddingModelResource,
    ):
        from resources.vector.ledger import EmbeddingLedger

        provider = embedding.build()
        out: dict[str, pl.DataFrame] = {}
        uncovered: dict[str, int] = {}
        try:
            ledger = EmbeddingLedger(storage.data_dir)
            for scope in run_scopes(context):
                started = time.perf_counter()
                held = rows.get(scope.key, pl.DataFrame())
                n = sweep.count(held)
                if provider is None:
                    out[scope.key] = empty(sweep.layout)
                    uncovered[scope.key] = n
                    metadata = {"model": "none", sweep.noun: n, "embedded": 0}
                    tenant_metadata(context, sweep.asset, scope, metadata)
                    continue
                report, table = sweep.sweep(
                    provider,
                    ledger,
                    scope,
                    held,
                    lambda done, total, s=scope: context.log.debug(
                        f"{s.key}: embedded {done}/{total} {sweep.noun}"
                    ),
                )
                out[scope.key] = conform(table, sweep.layout)
                if n - table.height:
                    uncovered[scope.key] = n - table.height
                metadata = {
                    "model": provider.model,
                    **({"key": report.model} if sweep.keyed else {}),
                    "dimension": report.dim,
                    sweep.noun: n,
                    "embedded": report.embedded,
                    "skipped": report.skipped,
                    "calls": report.batches,
                    sweep.rate: round(report.names_per_s, 1),
                    "duration_s": round(time.perf_counter() - started, 3),
                }
                tenant_metadata(context, sweep.asset, scope, metadata)
        finally:
            if provider is not None:
                provider.close()
        yield Output(out, output_name=sweep.asset)
        yield AssetCheckResult(
            check_name=sweep.check,
            asset_key=sweep.asset,
            passed=not uncovered,
            severity=AssetCheckSeverity.WARN,
            metadata={
                "model": embedding.identity(),
                f"{sweep.noun}_without_vector": MetadataValue.json(uncovered),
            },
        )

    return embeddings


entity_embeddings = _embeddings_asset(
    _Sweep(
        asset=Asset.ENTITY_EMBEDDINGS,
        source=Asset.ENTITIES,
        description="Which entities hold a vector of the current model (ids, dim, hash).",
        check="embedding_coverage",
        check_description="Every entity of the tenants in the run has a vector of the current "
        "model (warns while a model change is being re-embedded, or with no embedder).",
        layout=EMBEDDINGS,
        noun="entities",
        rate="names_per_s",
        count=lambda df: df.height,
        sweep=_sweep_entities,
    )
)

fact_embeddings = _embeddings_asset(
    _Sweep(
        asset=Asset.FACT_EMBEDDINGS,
        source=Asset.VALIDATED_FACTS,
        description='Which facts hold a vector of their text ("subject predicate object") '
        "under the current model (ids, dim, hash); the vectors are in the embedding ledger "
        "under the fact-vector key facts:<model>.",
        check="fact_embedding_coverage",
        check_description="Every fact of the tenants in the run (closed ones included) has a "
        "vector of its text under the current model (warns while a model change is being "
        "re-embedded, or with no embedder).",
        layout=FACT_EMBEDDINGS,
        noun="facts",
        rate="facts_per_s",
        count=lambda df: df["fact_id"].n_unique() if "fact_id" in df.columns else 0,
        sweep=_sweep_facts,
        keyed=True,
    )
)
