"""extraction_model and embedding_model: the models in use, observed as source assets whose data
version is the model's identity, so a model change marks what it made stale (extracted_triples;
entity_embeddings and fact_embeddings). Two assets of one factory (`model_source`).

Each run of `run_job` observes them; under the daemon they are also observed at the top of
every hour (`OBSERVE_HOURLY`, evaluated by `pipelines.sensors.model_observations`), so a model
changed in the settings file shows as stale in the UI within the hour though nothing landed.
What follows a model change stays a choice: re-embedding or re-extracting 10,000 tenants is a
backfill a data engineer launches, not something the automation starts."""

from collections.abc import Callable
from typing import Any

from dagster import (
    AssetExecutionContext,
    AutomationCondition,
    DataVersion,
    ObserveResult,
    SourceAsset,
    observable_source_asset,
)

from assets.retries import retry_transient_only
from schemas.tables import Asset

OBSERVE_CRON = "0 * * * *"
OBSERVE_HOURLY = AutomationCondition.cron_tick_passed(OBSERVE_CRON, cron_timezone="UTC")


def model_source(
    name: str, resource_key: str, description: str, label: Callable[[Any], str]
) -> SourceAsset:
    """The observed identity of the model the resource `resource_key` configures (its settings
    re-read at each observation); `label` names the model in the metadata."""

    @observable_source_asset(
        name=name,
        group_name="models",
        description=description,
        required_resource_keys={resource_key},
        automation_condition=OBSERVE_HOURLY,
    )
    @retry_transient_only
    def observe(context: AssetExecutionContext) -> ObserveResult:
        resource = getattr(context.resources, resource_key)
        config = resource.config()
        return ObserveResult(
            data_version=DataVersion(config.identity()),
            metadata={
                "provider": config.kind,
                "model": label(config),
                "settings_from": resource.source(),
            },
        )

    return observe


extraction_model = model_source(
    Asset.EXTRACTION_MODEL,
    "extraction",
    "The extraction model in use (MEMFLOW_EXTRACTOR, MEMFLOW_EXTRACTION_MODEL; re-read from "
    "MEMFLOW_SETTINGS_FILE at each observation). A change marks extracted_triples unsynced; "
    "materializing a tenant then re-extracts its text turns with the new model.",
    lambda config: config.identity(),
)

embedding_model = model_source(
    Asset.EMBEDDING_MODEL,
    "embedding",
    "The embedding model in use (MEMFLOW_EMBEDDER, MEMFLOW_EMBEDDING_MODEL; re-read from "
    "MEMFLOW_SETTINGS_FILE at each observation). A change marks entity_embeddings and "
    "fact_embeddings unsynced; materialize them and vector_sink to re-embed. Vectors are kept "
    "per model, so recall keeps serving the previous model until the new one covers the tenant.",
    lambda config: config.model_name() or "none",
)

__all__ = ["OBSERVE_HOURLY", "embedding_model", "extraction_model", "model_source"]
