from __future__ import annotations

from pathlib import Path

import pytest
from dagster import DagsterInstance

from pipelines.io import DeltaTablesIOManager
from resources.configurable import (
    EmbeddingModelResource,
    ExtractionModelResource,
    GraphStoreResource,
    Storage,
    VectorStoreResource,
)
from tests.pipeline.landing_fixtures import small_landing


@pytest.fixture
def landing(tmp_path: Path) -> Path:
    return small_landing(tmp_path / "landing")


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    d = tmp_path / "data"
    d.mkdir()
    return d


@pytest.fixture
def instance():
    with DagsterInstance.ephemeral() as inst:
        yield inst


def make_resources(landing: Path, data_dir: Path, **overrides: object) -> dict:
    res = {
        "tables": DeltaTablesIOManager(data_dir=str(data_dir)),
        "storage": Storage(landing_dir=str(landing), data_dir=str(data_dir)),
        "extraction": ExtractionModelResource(provider="none"),
        "embedding": EmbeddingModelResource(provider="none"),
        "graph": GraphStoreResource(backend="sqlite", data_dir=str(data_dir)),
        "vectors": VectorStoreResource(data_dir=str(data_dir)),
    }
    res.update(overrides)
    return res


# The assets of the stages, by name (a multi-asset runs whole).
INGEST = [
    "raw_turns",
    "turn_rejects",
    "landing_files",
    "extracted_triples",
    "extraction_rejects",
    "extraction_log",
    "retraction_requests",
]
FACTS = ["validated_facts", "entities", "quarantine", "fact_merges", "retractions"]
DOWNSTREAM = [*FACTS, "entity_embeddings", "fact_embeddings", "graph_sink", "vector_sink"]
EVERYTHING = [*INGEST, *DOWNSTREAM]


def run_assets(
    instance: DagsterInstance,
    resources: dict,
    selection: list[str],
    tenants: list[str],
    **kwargs: object,
):
    """Materialize `selection` for a contiguous range of tenants in one run (adding the tenant
    partitions first), as `memflow run` and the sensor do."""
    from dagster import materialize

    from pipelines.batches import range_tags
    from pipelines.definitions import ALL_ASSETS

    known = set(instance.get_dynamic_partitions("tenants"))
    instance.add_dynamic_partitions("tenants", [t for t in tenants if t not in known])
    tags = dict(kwargs.pop("tags", {}) or {})  # type: ignore[call-overload]
    return materialize(
        ALL_ASSETS,
        selection=selection,
        instance=instance,
        resources=resources,
        tags={**range_tags(tenants[0], tenants[-1]), **tags},
        **kwargs,  # type: ignore[arg-type]
    )
