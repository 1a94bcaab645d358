"""Jobs: ingest per tenant-day, and the per-tenant facts -> embeddings -> sinks chain."""

from __future__ import annotations

from dagster import AssetSelection, define_asset_job

from assets.partitions import scope_day_partitions, scope_partitions
from schemas.tables import Asset

INGEST_ASSETS = AssetSelection.assets(
    Asset.RAW_TURNS, Asset.TURN_REJECTS, Asset.EXTRACTED_TRIPLES, Asset.EXTRACTION_REJECTS
)
TENANT_ASSETS = AssetSelection.assets(
    Asset.VALIDATED_FACTS,
    Asset.ENTITIES,
    Asset.QUARANTINE,
    Asset.ENTITY_EMBEDDINGS,
    Asset.GRAPH_SINK,
    Asset.VECTOR_SINK,
)

ingest_job = define_asset_job(
    "ingest_job",
    selection=INGEST_ASSETS,
    partitions_def=scope_day_partitions,
    description="Landing files of one tenant and day -> raw_turns -> extracted_triples.",
)
tenant_job = define_asset_job(
    "tenant_job",
    selection=TENANT_ASSETS,
    partitions_def=scope_partitions,
    description="Triples of a tenant -> validated facts, entities, quarantine -> embeddings -> "
    "graph and vector sinks. Select many tenants to backfill them in one run.",
)
