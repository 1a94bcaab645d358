"""Dagster ConfigurableResources. Each wraps a plain class; nothing here is read at import.

`pipelines.definitions` feeds every field from an `EnvVar`; tests and the CLI build them with
explicit values. The recall service never imports this module.
"""

from __future__ import annotations

from pathlib import Path

from dagster import ConfigurableResource
from pydantic import Field

from resources.graph.base import GraphStore
from resources.models.base import DEFAULT_MAX_DIMENSIONS, EmbeddingProvider, ExtractionProvider
from resources.models.factory import EmbeddingConfig, ExtractionConfig
from resources.settings import DEFAULTS, open_graph, open_vectors
from resources.tables import TableStore
from resources.vector.base import VectorStore
from schemas import rules


class Storage(ConfigurableResource):
    """Where the landing zone and memflow's own data live, how long raw turn text is kept, and
    the time window a turn must lie in."""

    landing_dir: str = Field(default="landing-sample", description="The landing zone root.")
    data_dir: str = Field(default=".memflow", description="Tables, stores and caches.")
    retention_days: int = Field(
        default=-1,
        description="Raw-turn text retention: -1 keeps it, 0 drops it once extracted "
        "(ids and hashes kept), N drops text older than N days.",
    )

    history_start: str = Field(
        default=rules.DEFAULT_HISTORY_START,
        description="Turns before this date are quarantined (ts_before_history_start).",
    )
    future_tolerance_hours: str = Field(
        default=str(rules.DEFAULT_FUTURE_TOLERANCE_HOURS),
        description="Turns more than this many hours ahead of now are quarantined.",
    )

    def tables(self) -> TableStore:
        return TableStore(self.data_dir)

    def window(self) -> rules.TimeWindow:
        """The time window turns must lie in (the same rule the API applies)."""
        return rules.TimeWindow.from_settings(
            {
                rules.HISTORY_START_SETTING: self.history_start,
                rules.FUTURE_TOLERANCE_SETTING: self.future_tolerance_hours,
            }
        )

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

    def config(self) -> ExtractionConfig:
        return ExtractionConfig(
            provider=self.provider,
            base_url=self.base_url,
            model=self.model,
            api_key=self.api_key,
            command=self.command,
            allow_hosts=self.allow_hosts,
            timeout_s=self.timeout_s,
            max_retries=self.max_retries,
        )

    def identity(self) -> str:
        """What the triples record as `model`, and the data version downstream assets see."""
        return self.config().identity()

    def build(self) -> ExtractionProvider | None:
        return self.config().build()


class EmbeddingModelResource(ConfigurableResource):
    """The embedding provider: `none`, `openai`, `command` or `sentence-transformers`."""

    provider: str = Field(default="none")
    base_url: str = Field(default="")
    model: str = Field(
        default="", description="Vectors are stored under this name; empty = provider default."
    )
    api_key: str = Field(default="")
    command: str = Field(default="")
    allow_hosts: str = Field(default="")
    max_dimensions: int = Field(default=DEFAULT_MAX_DIMENSIONS)
    timeout_s: float = Field(default=60.0)

    def config(self) -> EmbeddingConfig:
        return EmbeddingConfig(
            provider=self.provider,
            base_url=self.base_url,
            model=self.model,
            api_key=self.api_key,
            command=self.command,
            allow_hosts=self.allow_hosts,
            max_dimensions=self.max_dimensions,
            timeout_s=self.timeout_s,
        )

    def identity(self) -> str:
        return self.config().identity()

    def model_name(self) -> str:
        return self.config().model_name()

    def build(self) -> EmbeddingProvider | None:
        return self.config().build()


class GraphStoreResource(ConfigurableResource):
    """`sqlite` (embedded default: `<data_dir>/graph.sqlite`) or `gremlin` (TinkerPop)."""

    backend: str = Field(default="sqlite", description="sqlite | gremlin")
    data_dir: str = Field(default=".memflow")
    gremlin_url: str = Field(default=DEFAULTS["MEMFLOW_GREMLIN_URL"])

    def open(self) -> GraphStore:
        return open_graph(self.backend, self.data_dir, self.gremlin_url)


class VectorStoreResource(ConfigurableResource):
    """Milvus: empty `uri` = Milvus Lite served by memflow on loopback for `data_dir`."""

    uri: str = Field(default="", description="Milvus server URI; empty for embedded Lite.")
    token: str = Field(default="")
    data_dir: str = Field(default=".memflow")

    def open(self) -> VectorStore:
        return open_vectors(self.uri, self.data_dir, self.token)
