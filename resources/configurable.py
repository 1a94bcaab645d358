"""Dagster ConfigurableResources. Each wraps a plain class; nothing here is read at import.

`pipelines.definitions` feeds every field from an `EnvVar`; tests and the CLI build them with
explicit values. The recall service never imports this module.
"""

from __future__ import annotations

from pathlib import Path

from dagster import ConfigurableResource, EnvVar, InitResourceContext
from pydantic import Field, PrivateAttr, field_validator

from resources.graph.base import GraphStore
from resources.home import resolved_dir
from resources.models.base import DEFAULT_MAX_DIMENSIONS, EmbeddingProvider, ExtractionProvider
from resources.models.factory import EmbeddingConfig, ExtractionConfig
from resources.settings import (
    DATA_SETTING,
    DEFAULTS,
    EMBEDDING_SETTINGS,
    EXTRACTION_SETTINGS,
    LANDING_SETTING,
    SETTINGS_FILE,
    open_graph,
    open_vectors,
    read_settings_file,
)
from resources.tables import TableStore
from resources.vector.base import VectorStore
from schemas import rules


def _absolute(setting: str):
    """A validator making a path field absolute when the resource is built with its value
    (empty: the state home's, `resources.home.resolved_dir`); an `EnvVar` is left for Dagster
    to resolve when a run starts."""

    def check(value: str) -> str:
        return value if isinstance(value, EnvVar) else resolved_dir(setting, value)

    return check


class Storage(ConfigurableResource):
    """Where the landing zone and memflow's own data live, how long raw turn text is kept, and
    the time window a turn must lie in."""

    landing_dir: str = Field(
        default="", description="The landing zone root (empty: the state home's)."
    )
    data_dir: str = Field(
        default="", description="Tables, stores and caches (empty: the state home's)."
    )
    _landing_abs = field_validator("landing_dir")(_absolute(LANDING_SETTING))
    _data_abs = field_validator("data_dir")(_absolute(DATA_SETTING))
    tables_uri: str = Field(
        default="",
        description="Where the Delta tables live (a path or an object-store URI such as "
        "s3://bucket/prefix); empty: <data_dir>/tables.",
    )
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
        return TableStore(self.data_dir, uri=self.tables_uri or None)

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


class _ModelResource(ConfigurableResource):
    """A model's settings, re-read from `settings_file` when a run starts.

    Under `dagster dev` the fields come from the process environment, which Dagster filled from
    `.env` when the code location started: without this, editing `.env` would reach the code
    location only after a restart or a "Reload". The settings file is read again each time
    Dagster sets the resource up for a run (once per run with the in-process executor; an
    observation of a model source asset is a run), and the model settings it names win over the
    fields, as Dagster's `.env` wins over the environment at start. The memflow CLI resolves its
    settings once and leaves `settings_file` empty for its own runs.
    """

    settings_file: str = Field(
        default="",
        description=f"A .env-format file ({SETTINGS_FILE}) whose model settings are re-read "
        "at the start of every run and win over the fields; empty: the fields only.",
    )
    _fresh: dict[str, str] = PrivateAttr(default_factory=dict)

    @classmethod
    def _settings(cls) -> dict[str, str]:  # field -> setting name
        raise NotImplementedError

    def setup_for_execution(self, context: InitResourceContext) -> None:
        self._fresh = self.reread()

    def reread(self) -> dict[str, str]:
        """The fields the settings file sets now ({} without a file)."""
        found = read_settings_file(self.settings_file)
        return {f: found[name] for f, name in self._settings().items() if name in found}

    def _values(self) -> dict[str, str]:
        return {f: self._fresh.get(f, getattr(self, f)) for f in self._settings()}

    def source(self) -> str:
        """Where this run's model settings came from, for the UI (never their values)."""
        if self._fresh:
            return f"{self.settings_file} (re-read when this run started)"
        return "the process environment (as resolved when the process started)"


class ExtractionModelResource(_ModelResource):
    """The extraction provider: `none`, `openai` (OpenAI-compatible chat API) or `command`."""

    provider: str = Field(default="none", description="none | openai | command")
    base_url: str = Field(default="", description="e.g. http://127.0.0.1:11434 (Ollama)")
    model: str = Field(default="", description="Model name the server knows.")
    api_key: str = Field(default="", description="Optional; never logged.")
    command: str = Field(default="", description="Operator program (shell-quoted argv).")
    allow_hosts: str = Field(default="", description="Comma-separated non-local hosts allowed.")
    timeout_s: float = Field(default=60.0)
    max_retries: int = Field(default=3)

    @classmethod
    def _settings(cls) -> dict[str, str]:
        return EXTRACTION_SETTINGS

    def config(self) -> ExtractionConfig:
        return ExtractionConfig(
            **self._values(), timeout_s=self.timeout_s, max_retries=self.max_retries
        )

    def identity(self) -> str:
        """What the triples record as `model`, and the data version downstream assets see."""
        return self.config().identity()

    def build(self) -> ExtractionProvider | None:
        return self.config().build()


class EmbeddingModelResource(_ModelResource):
    """The embedding provider: `none`, `openai`, `command`, `onnx` or `sentence-transformers`."""

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

    @classmethod
    def _settings(cls) -> dict[str, str]:
        return EMBEDDING_SETTINGS

    def config(self) -> EmbeddingConfig:
        return EmbeddingConfig(
            **self._values(), max_dimensions=self.max_dimensions, timeout_s=self.timeout_s
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
    data_dir: str = Field(default="", description="empty: the state home's")
    gremlin_url: str = Field(default=DEFAULTS["MEMFLOW_GREMLIN_URL"])
    _data_abs = field_validator("data_dir")(_absolute(DATA_SETTING))

    def open(self) -> GraphStore:
        return open_graph(self.backend, self.data_dir, self.gremlin_url)


class VectorStoreResource(ConfigurableResource):
    """Empty `uri`: the embedded store in `<data_dir>/vectors`; else a Milvus server."""

    uri: str = Field(default="", description="Milvus server URI; empty for the embedded store.")
    token: str = Field(default="")
    data_dir: str = Field(default="", description="empty: the state home's")
    cache_mib: int = Field(
        default=int(DEFAULTS["MEMFLOW_VECTOR_CACHE_MIB"]),
        description="the embedded store's per-process copy of the vectors, in MiB",
    )
    _data_abs = field_validator("data_dir")(_absolute(DATA_SETTING))

    def open(self) -> VectorStore:
        return open_vectors(self.uri, self.data_dir, self.token, cache_mib=self.cache_mib)
