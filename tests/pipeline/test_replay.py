"""Model changes are visible to Dagster and replayable; a backfill of many tenants is one run;
the sinks make both stores equal their tables and a rerun writes nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
from dagster import AssetKey, AssetSelection, materialize

from assets.partitions import TENANTS
from pipelines.definitions import ALL_ASSETS
from resources.configurable import EmbeddingModelResource
from resources.vector.factory import open_vector_store
from schemas.scope import Scope
from tests.pipeline.conftest import INGEST, make_resources, run_assets
from tests.support.embeddings_server import EmbeddingsServer
from tests.support.leftovers import assert_no_process_left

pytestmark = pytest.mark.slow
TENANT_RANGE = {
    "dagster/asset_partition_range_start": "acme/api",
    "dagster/asset_partition_range_end": "globex/ml",
}
MODELS = AssetSelection.assets("extraction_model", "embedding_model")
PER_TENANT = [
    "validated_facts",
    "entities",
    "quarantine",
    "fact_merges",
    "retractions",
    "entity_embeddings",
    "fact_embeddings",
    "graph_sink",
    "vector_sink",
]


def embedder(server: EmbeddingsServer, model: str) -> EmbeddingModelResource:
    return EmbeddingModelResource(provider="openai", base_url=server.url, model=model)


@pytest.fixture
def stores(data_dir: Path):
    yield data_dir
    assert_no_process_left(data_dir)


def _input_version(instance, asset: str, partition: str, source: str) -> str:
    event = instance.get_latest_materialization_event(AssetKey(asset))
    records = instance.fetch_materializations(AssetKey(asset), limit=10).records
    tags = next(
        r.asset_materialization.tags
        for r in records
        if r.asset_materialization.partition == partition
    )
    assert event is not None
    return tags[f"dagster/input_data_version/{source}"]


def test_one_run_for_many_tenants_then_model_change_replays_per_model(
    instance, landing: Path, stores: Path
) -> None:
    data_dir = stores
    instance.add_dynamic_partitions(TENANTS, ["acme/api", "globex/ml"])
    with EmbeddingsServer(dim=8, model="hash-a") as server:
        res = make_resources(landing, data_dir, embedding=embedder(server, "hash-a"))
        assert materialize(ALL_ASSETS, selection=MODELS, instance=instance, resources=res).success
        assert run_assets(instance, res, INGEST, ["acme/api", "globex/ml"]).success
        result = materialize(
            ALL_ASSETS, selection=PER_TENANT, instance=instance, resources=res, tags=TENANT_RANGE
        )
        assert result.success
        runs = {
            r.run_id
            for r in instance.fetch_materializations(
                AssetKey("entity_embeddings"), limit=10
            ).records
        }
        assert len(runs) == 1  # one run materialized both tenants
        assert instance.get_materialized_partitions(AssetKey("entity_embeddings")) == {
            "acme/api",
            "globex/ml",
        }
        checks = {c.check_name: c.passed for c in result.get_asset_check_evaluations()}
        assert checks["graph_equals_table"] and checks["vectors_equal_table"]
        assert checks["embedding_coverage"]
        assert (
            _input_version(instance, "entity_embeddings", "acme/api", "embedding_model") == "hash-a"
        )

        # A rerun with nothing new writes nothing to either store.
        again = materialize(
            ALL_ASSETS,
            selection=["graph_sink", "vector_sink"],
            instance=instance,
            resources=res,
            tags=TENANT_RANGE,
        )
        meta = {
            m.asset_key.path[-1]: m.metadata
            for m in again.asset_materializations_for_node("graph_sink")
            + again.asset_materializations_for_node("vector_sink")
        }
        assert meta["graph_sink"]["rows_written"].value == 0
        assert meta["vector_sink"]["rows_written"].value == 0
        asked_a = len(server.texts)

    with EmbeddingsServer(dim=16, model="hash-b") as server:
        res = make_resources(landing, data_dir, embedding=embedder(server, "hash-b"))
        assert materialize(ALL_ASSETS, selection=MODELS, instance=instance, resources=res).success
        record = instance.fetch_observations(AssetKey("embedding_model"), limit=1).records[0]
        current = record.asset_observation.tags["dagster/data_version"]
        # the data version Dagster sees changed: entity_embeddings is now stale
        assert (
            current
            == "hash-b"
            != _input_version(instance, "entity_embeddings", "acme/api", "embedding_model")
        )
        assert materialize(
            ALL_ASSETS,
            selection=["entity_embeddings", "fact_embeddings", "vector_sink"],
            instance=instance,
            resources=res,
            tags=TENANT_RANGE,
        ).success
        # every entity name and fact text again, once, for the new model
        assert len(server.texts) == asked_a

    store = open_vector_store(None, str(data_dir))
    try:
        models = store.models(Scope("acme", "api"))
        assert models["hash-a"][0] == 8 and models["hash-b"][0] == 16
        assert models["hash-a"][1] == models["hash-b"][1] > 0  # the old model kept serving
    finally:
        store.close()
