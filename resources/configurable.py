"""Dagster ConfigurableResources. Each wraps a plain class; nothing here is read at import.

`pipelines.definitions` feeds every field from an `EnvVar`; tests and the CLI build them with
explicit values. The recall service never imports this module.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from dagster import ConfigurableResource
from pydantic import Field

from resources.graph.base import GraphStore
from resources.models.base import DEFAULT_MAX_DIMENSIONS, EmbeddingProvider, ExtractionProvider
from resources.tables import TableStore
from resources.vector.base import VectorStore


def _hosts(text: str) -> tuple[str, ...]:
    return tuple(h.strip() for h in (text or "").split(",") if h.strip())


class MemflowPaths(ConfigurableResource):
    """Where the landing zone and memflow's own data live."""

    landing_dir: str = Field(default="landing-sample", description="The landing zone root.")
    data_dir: str = Field(default=".memflow", description="Tables, stores and caches.")
    retention_days: int = Field(
        default=-1,
        description="Raw-turn text retention: -1 keeps it, 0 drops it once extracted "
        "(ids and hashes kept), N drops text older than N days.",
    )

    def tables(self) -> TableStore:
        return TableStore(self.data_dir)

    @property
    def landing(self) -> Path:
        return Path(self.landing_dir)


class ExtractionModelResource(ConfigurableResource):
    """The extraction provider: `none`, `openai` (OpenAI-compatible chat API) or `command`."""

    provider: str = Field(default="none", description="none | openai | command")
    base_url: str = Field(default="", description="e.g. http://127.0.0.1:11434 (Ollama)")
    model: str = Field(default="", description="Model name the server knows.")
    api_key: str = Field(default="", description="Optional; never logged.")
    command: str = Field(default="", description="Operator program (shell-quoted argv).")
    allow_hosts: str = Field(default="", description="Comma-separated non-local hosts allowed.")
    timeout_s: float = Field(default=60.0)
    max_retries: int = Field(default=3)

    def identity(self) -> str:
        """What the triples record as `model`, and the data version downstream assets see."""
        kind = self.provider.strip().lower() or "none"
        if kind == "none":
            return "none"
        if kind == "command":
            from resources.models.command import program_name

            return f"command:{self.model or program_name(shlex.split(self.command))}"
        return f"openai-compatible:{self.model}"

    def build(self) -> ExtractionProvider | None:
        kind = self.provider.strip().lower() or "none"
        if kind == "none":
            return None
        if kind == "openai":
            from resources.models.openai_chat import OpenAIChatExtractionProvider

            if not self.base_url or not self.model:
                raise ValueError("extraction provider 'openai' needs base_url and model")
            return OpenAIChatExtractionProvider(
                self.base_url,
                self.model,
                api_key=self.api_key or None,
                allow_hosts=_hosts(self.allow_hosts),
                timeout=self.timeout_s,
                max_retries=self.max_retries,
            )
        if kind == "command":
            from resources.models.command import CommandExtractionProvider

            if not self.command:
                raise ValueError("extraction provider 'command' needs a command")
            return CommandExtractionProvider(
                shlex.split(self.command), model_name=self.model or None
            )
        raise ValueError(f"unknown extraction provider {self.provider!r} (none | openai | command)")


class EmbeddingModelResource(ConfigurableResource):
    """The embedding provider: `none`, `openai`, `command` or `sentence-transformers`."""

    provider: str = Field(default="none")
    base_url: str = Field(default="")
    model: str = Field(default="", description="Vectors are stored under this name.")
    api_key: str = Field(default="")
    command: str = Field(default="")
    allow_hosts: str = Field(default="")
    max_dimensions: int = Field(default=DEFAULT_MAX_DIMENSIONS)
    timeout_s: float = Field(default=60.0)

    def identity(self) -> str:
        kind = self.provider.strip().lower() or "none"
        return "none" if kind == "none" else self.model_name()

    def model_name(self) -> str:
        kind = self.provider.strip().lower()
        if kind == "sentence-transformers":
            return self.model or "all-MiniLM-L6-v2"
        return self.model

    def build(self) -> EmbeddingProvider | None:
        kind = self.provider.strip().lower() or "none"
        if kind == "none":
            return None
        if kind == "openai":
            from resources.models.openai_embeddings import OpenAIEmbeddingProvider

            if not self.base_url or not self.model:
                raise ValueError("embedding provider 'openai' needs base_url and model")
            return OpenAIEmbeddingProvider(
                self.base_url,
                self.model,
                api_key=self.api_key or None,
                allow_hosts=_hosts(self.allow_hosts),
                timeout=self.timeout_s,
                max_dimensions=self.max_dimensions,
            )
        if kind == "command":
            from resources.models.command import CommandEmbeddingProvider

            if not self.command or not self.model:
                raise ValueError("embedding provider 'command' needs a command and a model name")
            return CommandEmbeddingProvider(
                shlex.split(self.command),
                self.model,
                timeout=self.timeout_s,
                max_dimensions=self.max_dimensions,
            )
        if kind == "sentence-transformers":
            from resources.models.st_embeddings import SentenceTransformerEmbeddingProvider

            return SentenceTransformerEmbeddingProvider(self.model or None)
        raise ValueError(
            f"unknown embedding provider {self.provider!r} "
            "(none | openai | command | sentence-transformers)"
        )


class GraphStoreResource(ConfigurableResource):
    """`sqlite` (embedded default: `<data_dir>/graph.sqlite`) or `gremlin` (TinkerPop)."""

    backend: str = Field(default="sqlite", description="sqlite | gremlin")
    data_dir: str = Field(default=".memflow")
    gremlin_url: str = Field(default="ws://127.0.0.1:18182/gremlin")

    def open(self) -> GraphStore:
        from resources.graph.factory import open_graph_store

        return open_graph_store(
            self.backend,
            sqlite_path=str(Path(self.data_dir) / "graph.sqlite"),
            gremlin_url=self.gremlin_url,
        )


class VectorStoreResource(ConfigurableResource):
    """Milvus: empty `uri` = Milvus Lite served by memflow on loopback for `data_dir`."""

    uri: str = Field(default="", description="Milvus server URI; empty for embedded Lite.")
    token: str = Field(default="")
    data_dir: str = Field(default=".memflow")

    def open(self) -> VectorStore:
        from resources.vector.factory import open_vector_store

        return open_vector_store(self.uri or None, self.data_dir, token=self.token or None)
