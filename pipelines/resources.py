"""Resources of the code location, every field fed by an `EnvVar` (resolved at run time).

The names and defaults are `resources.settings.DEFAULTS`. Local values live in the repository's
`.env`, which `dagster dev` loads and the `memflow` CLI reads too; the CLI's flags override them.
"""

from __future__ import annotations

from typing import Any

from dagster import EnvVar

from pipelines.io import ParquetTablesIOManager
from resources.configurable import (
    EmbeddingModelResource,
    ExtractionModelResource,
    GraphStoreResource,
    Storage,
    VectorStoreResource,
)


def env_resources() -> dict[str, Any]:
    data_dir = EnvVar("MEMFLOW_DATA_DIR")
    return {
        "tables": ParquetTablesIOManager(data_dir=data_dir),
        "storage": Storage(
            landing_dir=EnvVar("MEMFLOW_LANDING_DIR"),
            data_dir=data_dir,
            retention_days=EnvVar.int("MEMFLOW_RETENTION_DAYS"),
            history_start=EnvVar("MEMFLOW_HISTORY_START"),
            future_tolerance_hours=EnvVar("MEMFLOW_FUTURE_TOLERANCE_HOURS"),
        ),
        "extraction": ExtractionModelResource(
            provider=EnvVar("MEMFLOW_EXTRACTOR"),
            base_url=EnvVar("MEMFLOW_EXTRACTION_URL"),
            model=EnvVar("MEMFLOW_EXTRACTION_MODEL"),
            api_key=EnvVar("MEMFLOW_EXTRACTION_API_KEY"),
            command=EnvVar("MEMFLOW_EXTRACTION_COMMAND"),
            allow_hosts=EnvVar("MEMFLOW_ALLOW_MODEL_HOSTS"),
        ),
        "embedding": EmbeddingModelResource(
            provider=EnvVar("MEMFLOW_EMBEDDER"),
            base_url=EnvVar("MEMFLOW_EMBEDDING_URL"),
            model=EnvVar("MEMFLOW_EMBEDDING_MODEL"),
            api_key=EnvVar("MEMFLOW_EMBEDDING_API_KEY"),
            command=EnvVar("MEMFLOW_EMBEDDING_COMMAND"),
            allow_hosts=EnvVar("MEMFLOW_ALLOW_MODEL_HOSTS"),
        ),
        "graph": GraphStoreResource(
            backend=EnvVar("MEMFLOW_GRAPH_BACKEND"),
            data_dir=data_dir,
            gremlin_url=EnvVar("MEMFLOW_GREMLIN_URL"),
        ),
        "vectors": VectorStoreResource(
            uri=EnvVar("MEMFLOW_MILVUS_URI"),
            token=EnvVar("MEMFLOW_MILVUS_TOKEN"),
            data_dir=data_dir,
        ),
    }
