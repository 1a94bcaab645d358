"""memflow's settings: the one table of names and defaults, the resolved values, and the stores
and models those values open.

Resolution (flags > environment > `.env` > defaults) happens once, in `pipelines.settings`; the
CLI, `memflow serve`, `memflow status` and the recall service all receive the same `Settings`
object, and the code location's resources read the same names through `EnvVar` when a run
starts. Nothing here runs at import time.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from schemas import rules

if TYPE_CHECKING:  # light at import: hooks and the client read the names and file layout
    from resources.graph.base import GraphStore
    from resources.models.base import EmbeddingProvider
    from resources.models.factory import EmbeddingConfig, ExtractionConfig
    from resources.vector.base import VectorStore

# Every setting memflow reads, with its default. README.md#configuration documents each one.
DEFAULTS: dict[str, str] = {
    "MEMFLOW_LANDING_DIR": "landing-sample",
    "MEMFLOW_DATA_DIR": ".memflow",
    "MEMFLOW_TABLES_URI": "",
    "MEMFLOW_RETENTION_DAYS": "-1",
    rules.HISTORY_START_SETTING: rules.DEFAULT_HISTORY_START,
    rules.FUTURE_TOLERANCE_SETTING: str(rules.DEFAULT_FUTURE_TOLERANCE_HOURS),
    "MEMFLOW_EXTRACTOR": "none",
    "MEMFLOW_EXTRACTION_URL": "",
    "MEMFLOW_EXTRACTION_MODEL": "",
    "MEMFLOW_EXTRACTION_API_KEY": "",
    "MEMFLOW_EXTRACTION_COMMAND": "",
    "MEMFLOW_EMBEDDER": "sentence-transformers",
    "MEMFLOW_EMBEDDING_URL": "",
    "MEMFLOW_EMBEDDING_MODEL": "",
    "MEMFLOW_EMBEDDING_API_KEY": "",
    "MEMFLOW_EMBEDDING_COMMAND": "",
    "MEMFLOW_PREVIOUS_EMBEDDING_MODEL": "",
    "MEMFLOW_ALLOW_MODEL_HOSTS": "",
    "MEMFLOW_GRAPH_BACKEND": "sqlite",
    "MEMFLOW_GREMLIN_URL": "ws://127.0.0.1:18182/gremlin",
    "MEMFLOW_MILVUS_URI": "",
    "MEMFLOW_MILVUS_TOKEN": "",
    "MEMFLOW_API_KEYS_FILE": "",
    "MEMFLOW_SETTINGS_FILE": ".env",
}

# The file (.env format) the code location's model resources re-read at the start of every run,
# observations included, so a model switch needs no restart or reload (`resources.configurable`).
SETTINGS_FILE = "MEMFLOW_SETTINGS_FILE"

# The model settings, by the field of `ExtractionConfig` / `EmbeddingConfig` (and of the
# Dagster resources wrapping them) each one feeds. These are the names a settings file can
# change while the code location runs.
EXTRACTION_SETTINGS: dict[str, str] = {
    "provider": "MEMFLOW_EXTRACTOR",
    "base_url": "MEMFLOW_EXTRACTION_URL",
    "model": "MEMFLOW_EXTRACTION_MODEL",
    "api_key": "MEMFLOW_EXTRACTION_API_KEY",
    "command": "MEMFLOW_EXTRACTION_COMMAND",
    "allow_hosts": "MEMFLOW_ALLOW_MODEL_HOSTS",
}
EMBEDDING_SETTINGS: dict[str, str] = {
    "provider": "MEMFLOW_EMBEDDER",
    "base_url": "MEMFLOW_EMBEDDING_URL",
    "model": "MEMFLOW_EMBEDDING_MODEL",
    "api_key": "MEMFLOW_EMBEDDING_API_KEY",
    "command": "MEMFLOW_EMBEDDING_COMMAND",
    "allow_hosts": "MEMFLOW_ALLOW_MODEL_HOSTS",
}

GRAPH_FILE = "graph.sqlite"
KEYS_FILE = "api-keys.json"


class Settings(Mapping[str, str]):
    """Resolved settings: every name of `DEFAULTS`, read-only, with typed accessors."""

    __slots__ = ("_values",)

    def __init__(self, values: Mapping[str, str | None] | None = None) -> None:
        given = values or {}
        self._values = {
            name: str(given[name]) if given.get(name) is not None else default
            for name, default in DEFAULTS.items()
        }

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """The settings as a process environment holds them (defaults filled in)."""
        env = os.environ if env is None else env
        return cls({name: env.get(name) for name in DEFAULTS})

    def with_values(self, **overrides: str | None) -> Settings:
        """A copy with some names replaced (None keeps the current value)."""
        merged = dict(self._values)
        merged.update({k: v for k, v in overrides.items() if v is not None})
        return Settings(merged)

    def __getitem__(self, name: str) -> str:
        return self._values[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:  # secrets (API keys, tokens) never reach a log
        shown = {k: ("***" if _secret(k) and v else v) for k, v in self._values.items()}
        return f"Settings({shown})"

    # ------------------------------------------------------------------------------ paths

    @property
    def data_dir(self) -> Path:
        return Path(self["MEMFLOW_DATA_DIR"])

    @property
    def landing_dir(self) -> Path:
        return Path(self["MEMFLOW_LANDING_DIR"])

    @property
    def graph_path(self) -> Path:
        return graph_path(self["MEMFLOW_DATA_DIR"])

    @property
    def keys_file(self) -> Path:
        explicit = self["MEMFLOW_API_KEYS_FILE"].strip()
        return Path(explicit) if explicit else self.data_dir / KEYS_FILE

    # ----------------------------------------------------------------------------- models

    def extraction(self) -> ExtractionConfig:
        from resources.models.factory import ExtractionConfig

        return ExtractionConfig(
            provider=self["MEMFLOW_EXTRACTOR"],
            base_url=self["MEMFLOW_EXTRACTION_URL"],
            model=self["MEMFLOW_EXTRACTION_MODEL"],
            api_key=self["MEMFLOW_EXTRACTION_API_KEY"],
            command=self["MEMFLOW_EXTRACTION_COMMAND"],
            allow_hosts=self["MEMFLOW_ALLOW_MODEL_HOSTS"],
        )

    def embedding(self, model: str | None = None) -> EmbeddingConfig:
        """The embedding configuration; `model` names another model of the same provider (the
        previous one, while a re-embed is under way)."""
        from resources.models.factory import EmbeddingConfig

        return EmbeddingConfig(
            provider=self["MEMFLOW_EMBEDDER"],
            base_url=self["MEMFLOW_EMBEDDING_URL"],
            model=model or self["MEMFLOW_EMBEDDING_MODEL"],
            api_key=self["MEMFLOW_EMBEDDING_API_KEY"],
            command=self["MEMFLOW_EMBEDDING_COMMAND"],
            allow_hosts=self["MEMFLOW_ALLOW_MODEL_HOSTS"],
        )

    @property
    def embedding_model(self) -> str | None:
        """The current embedding model's name, None when no embedder is configured."""
        return self.embedding().model_name() or None

    def embedder(self, model: str | None = None) -> EmbeddingProvider | None:
        return self.embedding(model).build()

    # ----------------------------------------------------------------------------- stores

    def open_graph(self) -> GraphStore:
        return open_graph(self["MEMFLOW_GRAPH_BACKEND"], self.data_dir, self["MEMFLOW_GREMLIN_URL"])

    def open_vectors(self) -> VectorStore:
        return open_vectors(self["MEMFLOW_MILVUS_URI"], self.data_dir, self["MEMFLOW_MILVUS_TOKEN"])


def read_settings_file(path: str | os.PathLike[str]) -> dict[str, str]:
    """The settings a `.env`-format file names (empty when there is no such file); names the
    file lists without a value are left out."""
    from dotenv import dotenv_values

    if not path or not Path(path).is_file():
        return {}
    return {k: v for k, v in dotenv_values(path).items() if v is not None}


def _secret(name: str) -> bool:
    return name.endswith(("_API_KEY", "_TOKEN"))


def graph_path(data_dir: str | os.PathLike[str]) -> Path:
    """The embedded graph store's file: `<data>/graph.sqlite`."""
    return Path(data_dir) / GRAPH_FILE


def open_graph(backend: str, data_dir: str | os.PathLike[str], gremlin_url: str) -> GraphStore:
    """The graph store of a data directory: SQLite inside it, or a Gremlin server by URL."""
    from resources.graph.factory import open_graph_store

    return open_graph_store(backend, sqlite_path=graph_path(data_dir), gremlin_url=gremlin_url)


def open_vectors(uri: str, data_dir: str | os.PathLike[str], token: str = "") -> VectorStore:
    """The vector store: the embedded one in the data directory (empty URI) or a Milvus server."""
    from resources.vector.factory import open_vector_store

    return open_vector_store(uri or None, data_dir, token=token or None)
