from __future__ import annotations

from pathlib import Path

import pytest
from dagster import DagsterInstance

from pipelines.io import ParquetTablesIOManager
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
        "tables": ParquetTablesIOManager(data_dir=str(data_dir)),
        "storage": Storage(landing_dir=str(landing), data_dir=str(data_dir)),
        "extraction": ExtractionModelResource(provider="none"),
        "embedding": EmbeddingModelResource(provider="none"),
        "graph": GraphStoreResource(backend="sqlite", data_dir=str(data_dir)),
        "vectors": VectorStoreResource(data_dir=str(data_dir)),
    }
    res.update(overrides)
    return res
