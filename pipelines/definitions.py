"""The code location: `dagster dev` (workspace.yaml) and the `memflow` CLI load this."""

from __future__ import annotations

from dagster import Definitions, in_process_executor

from assets.embeddings import entity_embeddings, fact_embeddings
from assets.facts import validated_facts
from assets.landing import landing_problems
from assets.models import embedding_model, extraction_model
from assets.sinks import graph_sink, vector_sink
from assets.triples import extracted_triples
from assets.turns import raw_turns
from pipelines.catalog import with_catalog
from pipelines.jobs import ingest_job, run_job, survey_job, tenant_job
from pipelines.maintenance import daily_table_maintenance, table_maintenance
from pipelines.resources import env_resources
from pipelines.sensors import landing_sensor, model_observations, split_failed_batches
from schemas.redaction.logs import install_log_redaction

# Every log line of the processes that load this code location (daemon, webserver, runs)
# passes the redactor, Dagster's own log manager included.
install_log_redaction()

ALL_ASSETS = [
    extraction_model,
    embedding_model,
    landing_problems,
    raw_turns,
    extracted_triples,
    validated_facts,
    entity_embeddings,
    fact_embeddings,
    graph_sink,
    vector_sink,
]

defs = Definitions(
    assets=with_catalog(ALL_ASSETS),
    jobs=[ingest_job, tenant_job, survey_job, run_job, table_maintenance],
    schedules=[daily_table_maintenance],
    sensors=[landing_sensor, split_failed_batches, model_observations],
    resources=env_resources(),
    # One process per run: a step process per asset costs seconds of imports each, which
    # dominates the latency from a landed turn to a recallable fact.
    executor=in_process_executor,
)
