"""Jobs: the whole per-tenant chain, the part from facts on (for rebuilds), the survey, and
what `memflow run` launches first (the survey and the chain in one run)."""

from __future__ import annotations

from dagster import AssetSelection, define_asset_job

from assets.partitions import scope_partitions
from assets.retries import STEP_RETRY
from schemas.tables import Asset

ALL_TENANT_ASSETS = AssetSelection.assets(
    Asset.RAW_TURNS,
    Asset.TURN_REJECTS,
    Asset.LANDING_FILES,
    Asset.EXTRACTED_TRIPLES,
    Asset.EXTRACTION_REJECTS,
    Asset.EXTRACTION_LOG,
    Asset.RETRACTION_REQUESTS,
    Asset.VALIDATED_FACTS,
    Asset.ENTITIES,
    Asset.QUARANTINE,
    Asset.FACT_MERGES,
    Asset.RETRACTIONS,
    Asset.ENTITY_EMBEDDINGS,
    Asset.FACT_EMBEDDINGS,
    Asset.GRAPH_SINK,
    Asset.VECTOR_SINK,
)
TENANT_ASSETS = AssetSelection.assets(
    Asset.VALIDATED_FACTS,
    Asset.ENTITIES,
    Asset.QUARANTINE,
    Asset.FACT_MERGES,
    Asset.RETRACTIONS,
    Asset.ENTITY_EMBEDDINGS,
    Asset.FACT_EMBEDDINGS,
    Asset.GRAPH_SINK,
    Asset.VECTOR_SINK,
)

# Every job carries the step retry policy; which failures it retries: assets/retries.py.
ingest_job = define_asset_job(
    "ingest_job",
    selection=ALL_TENANT_ASSETS,
    partitions_def=scope_partitions,
    description="A range of tenants through every asset: new or changed landing files -> "
    "turns -> triples -> facts -> embeddings -> graph and vector stores. The landing sensor "
    "and `memflow run` launch it; one run covers many tenants.",
    op_retry_policy=STEP_RETRY,
)
tenant_job = define_asset_job(
    "tenant_job",
    selection=TENANT_ASSETS,
    partitions_def=scope_partitions,
    description="Triples of a tenant -> validated facts, entities, quarantine -> embeddings -> "
    "graph and vector sinks. Select many tenants to rebuild them in one run.",
    op_retry_policy=STEP_RETRY,
)
SURVEY = (Asset.EXTRACTION_MODEL, Asset.EMBEDDING_MODEL, Asset.LANDING_PROBLEMS)
SURVEY_ASSETS = AssetSelection.assets(*SURVEY)
survey_job = define_asset_job(
    "survey_job",
    selection=SURVEY_ASSETS,
    description="Observe the configured extraction and embedding models (a changed identity "
    "marks extracted_triples, or entity_embeddings and fact_embeddings, stale) and list what "
    "the landing zone holds that no tenant reads. `memflow run` starts with it; the landing "
    "sensor requests it when the landing zone's problems change.",
    op_retry_policy=STEP_RETRY,
)
run_job = define_asset_job(
    "run_job",
    selection=SURVEY_ASSETS | ALL_TENANT_ASSETS,
    partitions_def=scope_partitions,
    description="survey_job and ingest_job in one run: observe the models, list the landing "
    "zone's problems, then a range of tenants through every asset. `memflow run` launches it "
    "for its first range of tenants (one run fewer to create, execute and record) and "
    "ingest_job for any other.",
    op_retry_policy=STEP_RETRY,
)
