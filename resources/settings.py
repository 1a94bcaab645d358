"""memflow's settings: every `MEMFLOW_*` name, declared once with its default, type and meaning;
the resolved values; and the stores and models those values open.

`DECLARED` is the one table (declared in `resources/settings_table.py`, data only, re-exported
here). Three kinds of readers use it:

- **Resolution** (`pipelines.settings.resolve`, once per command): the core settings (`CORE`,
  the ones the code location reads through `EnvVar`) are validated by a pydantic-settings model
  built from the table (`settings_model`): flags > environment > `.env` > the state home's
  record (`resources.home`) > defaults. The CLI, `memflow serve`, `memflow up`, `memflow status`
  and recall receive the resulting `Settings`.
- **Short-lived clients** (hooks, the API client, the MCP server, the importers' tenant
  mapping) read their names through the typed accessors below (`client_env`, `hook_env`,
  `agent_env`), which import only the standard library: a hook must start in milliseconds, and
  pydantic's model machinery costs about a second of imports on a busy machine. They never fail
  on a bad value: it falls back to the default (a hook must not break the agent's session), and
  `memflow settings` shows what a command would read.
- **Dagster** reads the deployment names (`MEMFLOW_DAGSTER_PG_*`) from `deploy/dagster.yaml`.

`tests/unit/test_settings_declared.py` fails on any `MEMFLOW_*` name used in the six packages
that this table does not declare, and on any read of one outside this module (the `EnvVar`s of
`pipelines/resources.py` excepted). README.md#configuration is generated from the table
(`memflow settings --markdown`) and checked against it. Nothing here runs at import time.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from resources.settings_table import (  # noqa: F401  (re-exported for readers)
    AGENT,
    CLIENT,
    CORE,
    DECLARED,
    DECLARED_SETTINGS,
    DEFAULTS,
    DEPLOY,
    HOME,
    HOOK,
    PREFIX,
    Declared,
    convert,
    declared,
    names,
)
from schemas import rules

if TYPE_CHECKING:  # light at import: hooks and the client read the names and file layout
    from resources.graph.base import GraphStore
    from resources.models.base import EmbeddingProvider
    from resources.models.factory import EmbeddingConfig, ExtractionConfig, RerankConfig
    from resources.vector.base import VectorStore


HOME_SETTING = "MEMFLOW_HOME"
API_URL_SETTING = "MEMFLOW_API_URL"
TENANT_MAP_SETTING = "MEMFLOW_TENANT_MAP"
PREVIOUS_MODEL_SETTING = "MEMFLOW_PREVIOUS_EMBEDDING_MODEL"
LANDING_SETTING = "MEMFLOW_LANDING_DIR"
DATA_SETTING = "MEMFLOW_DATA_DIR"
TABLES_URI_SETTING = "MEMFLOW_TABLES_URI"
PATH_SETTINGS = (LANDING_SETTING, DATA_SETTING)

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


# ------------------------------------------------------------------- typed light accessors


def _read(env: Mapping[str, str] | None, name: str) -> Any:
    env = os.environ if env is None else env
    return declared(name).parse(env.get(name))


@dataclass(frozen=True)
class ClientEnv:
    """What the API client reads (`recall.client.ClientSettings`)."""

    api_url: str
    api_key: str | None
    connect_timeout_s: float
    timeout_s: float


def client_env(env: Mapping[str, str] | None = None) -> ClientEnv:
    return ClientEnv(
        api_url=_read(env, API_URL_SETTING) or declared(API_URL_SETTING).default,
        api_key=_read(env, "MEMFLOW_API_KEY") or None,
        connect_timeout_s=_read(env, "MEMFLOW_API_CONNECT_TIMEOUT_S"),
        timeout_s=_read(env, "MEMFLOW_API_TIMEOUT_S"),
    )


@dataclass(frozen=True)
class HookEnv:
    """What the session hooks read (`recall.hooks`)."""

    budget_s: float | None  # None: the event's own default
    max_chars: int
    max_facts: int
    query: str


def hook_env(env: Mapping[str, str] | None = None) -> HookEnv:
    return HookEnv(
        budget_s=_read(env, "MEMFLOW_HOOK_BUDGET_S"),
        max_chars=_read(env, "MEMFLOW_HOOK_MAX_CHARS"),
        max_facts=_read(env, "MEMFLOW_HOOK_MAX_FACTS"),
        query=_read(env, "MEMFLOW_HOOK_QUERY") or declared("MEMFLOW_HOOK_QUERY").default,
    )


@dataclass(frozen=True)
class AgentEnv:
    """Tenant mapping and the MCP server's identity (`memflow.importers.tenant`,
    `recall.mcp_server`, `recall.hooks`)."""

    tenant: str  # "" = map the working directory
    tenant_map: str
    default_org: str
    mcp_client: str


def agent_env(env: Mapping[str, str] | None = None) -> AgentEnv:
    return AgentEnv(
        tenant=_read(env, "MEMFLOW_TENANT"),
        tenant_map=_read(env, "MEMFLOW_TENANT_MAP"),
        default_org=_read(env, "MEMFLOW_DEFAULT_ORG") or declared("MEMFLOW_DEFAULT_ORG").default,
        mcp_client=_read(env, "MEMFLOW_MCP_CLIENT") or declared("MEMFLOW_MCP_CLIENT").default,
    )


@dataclass(frozen=True)
class LocalEnv:
    """The core settings a light process (a hook, the stdio MCP server, the API client's local
    fallback) reads from its environment as they stand: no resolution, no defaults for the
    paths ("" when unset)."""

    data_dir: str
    landing_dir: str
    graph_backend: str
    gremlin_url: str
    api_keys_file: str


def local_env(env: Mapping[str, str] | None = None) -> LocalEnv:
    return LocalEnv(
        data_dir=env_path(DATA_SETTING, env),
        landing_dir=env_path(LANDING_SETTING, env),
        graph_backend=_read(env, "MEMFLOW_GRAPH_BACKEND") or "sqlite",
        gremlin_url=_read(env, "MEMFLOW_GREMLIN_URL"),
        api_keys_file=env_path("MEMFLOW_API_KEYS_FILE", env),
    )


def env_path(name: str, env: Mapping[str, str] | None = None) -> str:
    """A path setting as the environment spells it ("" when unset or blank)."""
    if name not in (
        *PATH_SETTINGS,
        HOME_SETTING,
        TABLES_URI_SETTING,
        "MEMFLOW_API_KEYS_FILE",
        SETTINGS_FILE,
    ):
        raise KeyError(f"{name} is not a path setting")
    env = os.environ if env is None else env
    return (env.get(name) or "").strip()


# ------------------------------------------------------------------- the validated model


@functools.cache
def settings_model() -> type:
    """The pydantic-settings model of the core and home settings (`env_prefix="MEMFLOW_"`,
    `.env`): init values (flags) > environment > dotenv file > defaults, each value validated
    to its declared type. Built on first use: importing pydantic costs hooks too much."""
    from typing import Annotated

    from pydantic import BeforeValidator, Field, create_model, field_validator
    from pydantic_settings import BaseSettings, SettingsConfigDict

    fields: dict[str, Any] = {}
    for s in DECLARED_SETTINGS:
        if s.group not in (CORE, HOME):
            continue
        default = convert(s.kind, s.default) if s.default != "" else None
        if s.kind is str:
            default, kind = s.default, str
        else:  # a blank number is the default, as in the lenient readers
            kind = Annotated[s.kind | None, BeforeValidator(_blank_is(default))]
        fields[s.field] = (
            kind,
            Field(default=default, description=s.meaning, ge=s.low, le=s.high),
        )

    class _Base(BaseSettings):
        model_config = SettingsConfigDict(
            env_prefix=PREFIX,
            env_file=".env",
            env_file_encoding="utf-8",
            extra="ignore",
            validate_default=True,
        )

        @field_validator("history_start", check_fields=False)
        @classmethod
        def _history_start(cls, value: str) -> str:
            rules.TimeWindow.from_settings({rules.HISTORY_START_SETTING: value})
            return value

        @field_validator("extractor", "embedder", check_fields=False)
        @classmethod
        def _provider(cls, value: str, info: Any) -> str:
            from resources.models.factory import EMBEDDERS, EXTRACTORS

            known = EXTRACTORS if info.field_name == "extractor" else EMBEDDERS
            if (value or "none").strip().lower() not in known:
                raise ValueError(f"{value!r} is not one of {' | '.join(known)}")
            return value

        @field_validator("graph_backend", check_fields=False)
        @classmethod
        def _backend(cls, value: str) -> str:
            if value.strip().lower() not in ("sqlite", "gremlin"):
                raise ValueError(f"{value!r} is not one of sqlite | gremlin")
            return value

    return create_model("MemflowSettings", __base__=_Base, **fields)


def _blank_is(default: Any) -> Any:
    def blank(value: Any) -> Any:
        return default if isinstance(value, str) and not value.strip() else value

    return blank


def environment_string(value: Any) -> str:
    """A typed value as the environment spells it."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def configuration_table() -> str:
    """README.md#configuration's table, from the declarations."""
    lines = ["| variable | default | type | read by | meaning |", "|---|---|---|---|---|"]
    for s in DECLARED_SETTINGS:
        shown = s.shown_default or (f"`{s.default}`" if s.default != "" else "")
        readers = {
            CORE: "every command; the code location",
            HOME: "every command",
            CLIENT: "recall, hooks, MCP",
            AGENT: "hooks, MCP, importers",
            HOOK: "hooks",
            DEPLOY: "Dagster (deploy/dagster.yaml)",
        }[s.group]
        kind = s.kind.__name__ + (", secret" if s.secret else "")
        meaning = s.meaning.replace("|", "\\|")
        lines.append(f"| `{s.name}` | {shown} | {kind} | {readers} | {meaning} |")
    return "\n".join(lines)


# ------------------------------------------------------------------- resolved settings


class Settings(Mapping[str, str]):
    """Resolved settings: every name of `DEFAULTS`, read-only, with typed accessors."""

    __slots__ = ("_home", "_values", "sources")

    def __init__(
        self,
        values: Mapping[str, str | None] | None = None,
        *,
        home: Path | None = None,
        sources: Mapping[str, str] | None = None,
    ) -> None:
        given = values or {}
        self._values = {
            name: str(given[name]) if given.get(name) is not None else default
            for name, default in DEFAULTS.items()
        }
        self._home = home
        self.sources: Mapping[str, str] = dict(sources or {})  # name -> where it came from

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """The settings as a process environment holds them (defaults filled in)."""
        env = os.environ if env is None else env
        return cls({name: env.get(name) for name in DEFAULTS})

    def with_values(self, **overrides: str | None) -> Settings:
        """A copy with some names replaced (None keeps the current value)."""
        merged = dict(self._values)
        merged.update({k: v for k, v in overrides.items() if v is not None})
        return Settings(merged, home=self._home, sources=self.sources)

    @property
    def home(self) -> Path:
        """The state home these settings were resolved with (`resources.home`)."""
        if self._home is None:
            from resources.home import state_home

            return state_home()
        return self._home

    def __getitem__(self, name: str) -> str:
        return self._values[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:  # secrets (API keys, tokens) never reach a log
        shown = {k: ("***" if _secret(k) and v else v) for k, v in self._values.items()}
        return f"Settings({shown})"

    def environ(self) -> dict[str, str]:
        """The values as a child process's environment needs them."""
        return dict(self._values)

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

    @property
    def retention_days(self) -> int:
        return int(self["MEMFLOW_RETENTION_DAYS"])

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

    def rerank(self) -> RerankConfig:
        """The optional listwise rerank's configuration (`none`: off)."""
        from resources.models.factory import RerankConfig

        return RerankConfig(
            provider=self["MEMFLOW_RERANKER"],
            base_url=self["MEMFLOW_RERANK_URL"],
            model=self["MEMFLOW_RERANK_MODEL"],
            api_key=self["MEMFLOW_RERANK_API_KEY"],
            allow_hosts=self["MEMFLOW_ALLOW_MODEL_HOSTS"],
            budget_s=declared("MEMFLOW_RERANK_BUDGET_S").parse(self["MEMFLOW_RERANK_BUDGET_S"]),
        )

    @property
    def previous_embedding_model(self) -> str:
        """The model recall keeps serving for scopes the current one does not cover yet:
        MEMFLOW_PREVIOUS_EMBEDDING_MODEL when set; else, when the `onnx` provider runs its
        default (no MEMFLOW_EMBEDDING_MODEL), the model that was its default before
        (`FORMER_DEFAULT_MODEL`), so a data directory the earlier default embedded is still
        answered with its vectors while the new default re-embeds it. "" when there is none."""
        explicit = self[PREVIOUS_MODEL_SETTING].strip()
        if explicit:
            return explicit
        config = self.embedding()
        if config.kind == "onnx" and not config.model.strip():
            from resources.models.onnx_embeddings import FORMER_DEFAULT_MODEL

            return FORMER_DEFAULT_MODEL
        return ""

    def embedder(self, model: str | None = None) -> EmbeddingProvider | None:
        return self.embedding(model).build()

    # ----------------------------------------------------------------------------- stores

    def open_graph(self) -> GraphStore:
        return open_graph(self["MEMFLOW_GRAPH_BACKEND"], self.data_dir, self["MEMFLOW_GREMLIN_URL"])

    def open_vectors(self) -> VectorStore:
        return open_vectors(
            self["MEMFLOW_MILVUS_URI"],
            self.data_dir,
            self["MEMFLOW_MILVUS_TOKEN"],
            cache_mib=int(self["MEMFLOW_VECTOR_CACHE_MIB"]),
        )


def read_settings_file(path: str | os.PathLike[str]) -> dict[str, str]:
    """The settings a `.env`-format file names (empty when there is no such file); names the
    file lists without a value are left out."""
    from dotenv import dotenv_values

    if not path or not Path(path).is_file():
        return {}
    return {k: v for k, v in dotenv_values(path).items() if v is not None}


def _secret(name: str) -> bool:
    found = DECLARED.get(name)
    return found.secret if found is not None else name.endswith(("_API_KEY", "_TOKEN"))


def graph_path(data_dir: str | os.PathLike[str]) -> Path:
    """The embedded graph store's file: `<data>/graph.sqlite`."""
    return Path(data_dir) / GRAPH_FILE


def open_graph(backend: str, data_dir: str | os.PathLike[str], gremlin_url: str) -> GraphStore:
    """The graph store of a data directory: SQLite inside it, or a Gremlin server by URL."""
    from resources.graph.factory import open_graph_store

    return open_graph_store(backend, sqlite_path=graph_path(data_dir), gremlin_url=gremlin_url)


def open_vectors(
    uri: str, data_dir: str | os.PathLike[str], token: str = "", *, cache_mib: int | None = None
) -> VectorStore:
    """The vector store: the embedded one in the data directory (empty URI) or a Milvus server."""
    from resources.vector.factory import open_vector_store

    return open_vector_store(uri or None, data_dir, token=token or None, cache_mib=cache_mib)
