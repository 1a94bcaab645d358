"""Resources of the code location, every field fed by an `EnvVar` (resolved at run time).

Defaults for local use live in the repository's `.env`, which `dagster dev` loads and the
`memflow` CLI reads too; the CLI's flags override them.
"""

from __future__ import annotations

from typing import Any

from dagster import EnvVar

from pipelines.io import ParquetTablesIOManager
from resources.configurable import (
    EmbeddingModelResource,
    ExtractionModelResource,
    GraphStoreResource,
    MemflowPaths,
    VectorStoreResource,
)

# Every setting memflow reads, with its default. The CLI and `.env` use the same table.
SETTINGS: dict[str, str] = {
    "MEMFLOW_LANDING_DIR": "landing-sample",
    "MEMFLOW_DATA_DIR": ".memflow",
    "MEMFLOW_RETENTION_DAYS": "-1",
    "MEMFLOW_EXTRACTOR": "none",
    "MEMFLOW_EXTRACTION_URL": "",
    "MEMFLOW_EXTRACTION_MODEL": "",
    "MEMFLOW_EXTRACTION_API_KEY": "",
    "MEMFLOW_EXTRACTION_COMMAND": "",
    "MEMFLOW_EMBEDDER": "sentence-transformers",
    "MEMFLOW_EMBEDDING_URL": "",
    "MEMFLOW_EMBEDDING_MODEL": "all-MiniLM-L6-v2",
    "MEMFLOW_EMBEDDING_API_KEY": "",
    "MEMFLOW_EMBEDDING_COMMAND": "",
    "MEMFLOW_PREVIOUS_EMBEDDING_MODEL": "",
    "MEMFLOW_ALLOW_MODEL_HOSTS": "",
    "MEMFLOW_GRAPH_BACKEND": "sqlite",
    "MEMFLOW_GREMLIN_URL": "ws://127.0.0.1:18182/gremlin",
    "MEMFLOW_MILVUS_URI": "",
    "MEMFLOW_MILVUS_TOKEN": "",
    "MEMFLOW_API_KEYS_FILE": "",
}


def env_resources() -> dict[str, Any]:
    data_dir = EnvVar("MEMFLOW_DATA_DIR")
    return {
        "tables": ParquetTablesIOManager(data_dir=data_dir),
        "paths": MemflowPaths(
            landing_dir=EnvVar("MEMFLOW_LANDING_DIR"),
            data_dir=data_dir,
            retention_days=EnvVar.int("MEMFLOW_RETENTION_DAYS"),
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
