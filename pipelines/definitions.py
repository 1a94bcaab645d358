"""The code location: `dagster dev` (workspace.yaml) and the `memflow` CLI load this."""

from __future__ import annotations

from dagster import (
    AssetSelection,
    AutomationConditionSensorDefinition,
    DefaultSensorStatus,
    Definitions,
    in_process_executor,
)

from assets.embeddings import embedding_model, entity_embeddings
from assets.facts import validated_facts
from assets.sinks import graph_sink, vector_sink
from assets.triples import extracted_triples, extraction_model
from assets.turns import raw_turns
from pipelines.jobs import ingest_job, tenant_job
from pipelines.resources import env_resources
from pipelines.sensors import landing_sensor

ALL_ASSETS = [
    extraction_model,
    embedding_model,
    raw_turns,
    extracted_triples,
    validated_facts,
    entity_embeddings,
    graph_sink,
    vector_sink,
]

automation_sensor = AutomationConditionSensorDefinition(
    "tenant_automation",
    target=AssetSelection.all(),
    default_status=DefaultSensorStatus.RUNNING,
    minimum_interval_seconds=5,
    description="Runs a tenant's facts, embeddings and sinks after its turns were ingested.",
)

defs = Definitions(
    assets=ALL_ASSETS,
    jobs=[ingest_job, tenant_job],
    sensors=[landing_sensor, automation_sensor],
    resources=env_resources(),
    # One process per run: a step process per asset costs seconds of imports each, which
    # dominates the latency from a landed turn to a recallable fact.
    executor=in_process_executor,
)
