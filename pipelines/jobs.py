"""Jobs: ingest per tenant-day, and the per-tenant facts -> embeddings -> sinks chain."""

from __future__ import annotations

from dagster import AssetSelection, define_asset_job

from pipelines.partitions import tenant_day_partitions, tenant_partitions

INGEST_ASSETS = AssetSelection.assets(
    "raw_turns", "turn_rejects", "extracted_triples", "extraction_rejects"
)
TENANT_ASSETS = AssetSelection.assets(
    "validated_facts", "entities", "quarantine", "entity_embeddings", "graph_sink", "vector_sink"
)

ingest_job = define_asset_job(
    "ingest_job",
    selection=INGEST_ASSETS,
    partitions_def=tenant_day_partitions,
    description="Landing files of one tenant and day -> raw_turns -> extracted_triples.",
)
tenant_job = define_asset_job(
    "tenant_job",
    selection=TENANT_ASSETS,
    partitions_def=tenant_partitions,
    description="Triples of a tenant -> validated facts, entities, quarantine -> embeddings -> "
    "graph and vector sinks. Select many tenants to backfill them in one run.",
)
