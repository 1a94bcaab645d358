"""Resources of the code location, every field fed by an `EnvVar` (resolved at run time).

The names and defaults are `resources.settings.DEFAULTS`. Local values live in the repository's
`.env`, which `dagster dev` loads when it starts and the `memflow` CLI reads too; the CLI's flags
override them. The model settings are also re-read from `MEMFLOW_SETTINGS_FILE` (`.env`) at the
start of every run, so switching a model needs no restart or reload.
"""

from __future__ import annotations

from typing import Any

from dagster import EnvVar

from pipelines.block_lock import BlockLockedStorage
from pipelines.io import DeltaTablesIOManager
from resources.configurable import (
    EmbeddingModelResource,
    ExtractionModelResource,
    GraphStoreResource,
    VectorStoreResource,
)
from resources.settings import EMBEDDING_SETTINGS, EXTRACTION_SETTINGS, SETTINGS_FILE


def env_resources() -> dict[str, Any]:
    data_dir = EnvVar("MEMFLOW_DATA_DIR")
    tables_uri = EnvVar("MEMFLOW_TABLES_URI")
    return {
        "tables": DeltaTablesIOManager(data_dir=data_dir, tables_uri=tables_uri),
        # Storage that holds the run's tenant-block locks (one run per block, however started).
        "storage": BlockLockedStorage(
            landing_dir=EnvVar("MEMFLOW_LANDING_DIR"),
            data_dir=data_dir,
            tables_uri=tables_uri,
            retention_days=EnvVar.int("MEMFLOW_RETENTION_DAYS"),
            history_start=EnvVar("MEMFLOW_HISTORY_START"),
            future_tolerance_hours=EnvVar("MEMFLOW_FUTURE_TOLERANCE_HOURS"),
        ),
        # Model settings: the environment at start, then `MEMFLOW_SETTINGS_FILE` re-read at
        # every run, so a model switch in `.env` needs no restart (resources.configurable).
        "extraction": ExtractionModelResource(
            **{f: EnvVar(name) for f, name in EXTRACTION_SETTINGS.items()},
            settings_file=EnvVar(SETTINGS_FILE),
        ),
        "embedding": EmbeddingModelResource(
            **{f: EnvVar(name) for f, name in EMBEDDING_SETTINGS.items()},
            settings_file=EnvVar(SETTINGS_FILE),
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
            cache_mib=EnvVar.int("MEMFLOW_VECTOR_CACHE_MIB"),
        ),
    }
