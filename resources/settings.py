"""memflow's settings: every `MEMFLOW_*` name, declared once with its default, type and meaning;
the resolved values; and the stores and models those values open.

`DECLARED` is the one table. Three kinds of readers use it:

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

from schemas import rules

if TYPE_CHECKING:  # light at import: hooks and the client read the names and file layout
    from resources.graph.base import GraphStore
    from resources.models.base import EmbeddingProvider
    from resources.models.factory import EmbeddingConfig, ExtractionConfig, RerankConfig
    from resources.vector.base import VectorStore

PREFIX = "MEMFLOW_"

# Groups: who reads a setting.
CORE = "core"  # resolved by every command and exported for the code location's EnvVars
HOME = "home"  # where the state home is (resolved first; not an EnvVar of the code location)
CLIENT = "client"  # the API client: `memflow recall`, hooks, the stdio MCP server
AGENT = "agent"  # tenant mapping and the MCP server's identity
HOOK = "hook"  # the session hooks
DEPLOY = "deploy"  # read by Dagster itself from deploy/dagster.yaml


@dataclass(frozen=True)
class Declared:
    """One setting: its environment name, default (as the environment spells it), type,
    meaning, who reads it, and for numbers the range a lenient reader accepts."""

    name: str
    default: str
    kind: type
    meaning: str
    group: str
    secret: bool = False
    low: float | None = None
    high: float | None = None
    shown_default: str | None = None  # what the README shows when the default is computed

    @property
    def field(self) -> str:
        """The pydantic-settings field name (the name without the prefix, lower case)."""
        return self.name.removeprefix(PREFIX).lower()

    def parse(self, raw: str | None) -> Any:
        """The typed value of `raw` for a lenient reader: the default when `raw` is unset,
        blank, not of the type or outside [low, high]."""
        text = (raw or "").strip()
        if text and self.valid(text):
            return _convert(self.kind, text)
        if self.kind is str:
            return self.default
        return _convert(self.kind, self.default) if self.default != "" else None

    def valid(self, raw: str | None) -> bool:
        """Whether a lenient reader takes `raw` as given (blank: no, the default applies)."""
        text = (raw or "").strip()
        if not text:
            return False
        try:
            value = _convert(self.kind, text)
        except ValueError:
            return False
        if self.low is not None and value < self.low:
            return False
        return self.high is None or value <= self.high


def _convert(kind: type, text: str) -> Any:
    if kind is bool:
        lowered = text.strip().lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"not a boolean: {text!r}")
    if kind is float:
        value = float(text)
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError(f"not a finite number: {text!r}")
        return value
    return kind(text)


def _d(name: str, default: str, kind: type, meaning: str, group: str, **extra: Any) -> Declared:
    return Declared(PREFIX + name, default, kind, meaning, group, **extra)


_MODEL_SETTINGS_NOTE = "re-read from MEMFLOW_SETTINGS_FILE at the start of every run"

DECLARED_SETTINGS: tuple[Declared, ...] = (
    # ---------------------------------------------------------------------------- home
    _d(
        "HOME",
        "",
        str,
        "the state home: where the data directory and the landing zone are recorded (and by "
        "default live), and where running memflow processes register; empty = "
        "`$XDG_STATE_HOME/memflow`, else `~/.local/state/memflow`",
        HOME,
        shown_default="`~/.local/state/memflow`",
    ),
    # ---------------------------------------------------------------------------- core
    _d(
        "LANDING_DIR",
        "",
        str,
        "landing zone root; empty = the one the state home records, else `<home>/landing`. "
        "Resolved once to an absolute path",
        CORE,
        shown_default="`<home>/landing`",
    ),
    _d(
        "DATA_DIR",
        "",
        str,
        "tables, SQLite graph, vector data, embedding ledger, Dagster instance "
        "(`<data>/dagster`); empty = the one the state home records, else `<home>/data`. "
        "Resolved once to an absolute path",
        CORE,
        shown_default="`<home>/data`",
    ),
    _d(
        "TABLES_URI",
        "",
        str,
        "where the Delta tables live: a path or an object-store URI such as "
        "`s3://bucket/prefix` (credentials from the usual `AWS_*` variables); empty = "
        "`<data>/tables`",
        CORE,
        shown_default="`<data>/tables`",
    ),
    _d(
        "RETENTION_DAYS",
        "-1",
        int,
        "raw-turn text: `-1` keep; `0` drop once extracted (ids and hashes kept); `N` drop "
        "text older than N days",
        CORE,
        low=-1,
    ),
    _d(
        rules.HISTORY_START_SETTING.removeprefix(PREFIX),
        rules.DEFAULT_HISTORY_START,
        str,
        "turns dated before this are quarantined (`ts_before_history_start`); a date "
        "(YYYY-MM-DD, YYYY-MM, YYYY) or an ISO-8601 date-time, no zone = UTC",
        CORE,
    ),
    _d(
        rules.FUTURE_TOLERANCE_SETTING.removeprefix(PREFIX),
        str(rules.DEFAULT_FUTURE_TOLERANCE_HOURS),
        float,
        "turns dated more than this many hours after they are read (by a run or by "
        "`POST /v1/turns`) are quarantined (`ts_in_future`)",
        CORE,
        low=0,
    ),
    _d(
        "EXTRACTOR",
        "none",
        str,
        "`none` (text turns wait, counted by `memflow status` and `memflow up`), `openai` "
        "(an OpenAI-compatible chat API: Ollama, vLLM, llama.cpp), `command`; "
        + _MODEL_SETTINGS_NOTE,
        CORE,
    ),
    _d(
        "EXTRACTION_URL",
        "",
        str,
        "the chat endpoint's base URL (e.g. `http://127.0.0.1:11434/v1` for Ollama)",
        CORE,
    ),
    _d("EXTRACTION_MODEL", "", str, "the chat model's name as the server knows it", CORE),
    _d(
        "EXTRACTION_API_KEY",
        "",
        str,
        "an optional key for the chat endpoint (never logged)",
        CORE,
        secret=True,
    ),
    _d(
        "EXTRACTION_COMMAND",
        "",
        str,
        'an operator program: JSON `{"turns", "known_entities"}` on stdin, `{"triples": '
        "[...]}` on stdout; memflow's own `MEMFLOW_*` variables are removed from its "
        "environment",
        CORE,
    ),
    _d(
        "EMBEDDER",
        "onnx",
        str,
        "`none`, `openai` (`/v1/embeddings`), `command`, `onnx` (in-process, ONNX Runtime: "
        "the bundled all-MiniLM-L6-v2 exported at install time into "
        "`$XDG_CACHE_HOME/memflow/onnx`, or on first use, and its 8-bit variant, the default; "
        "the fastest query path), `sentence-transformers` (in-process, torch; the float "
        "model only, with the same name and vectors as `onnx` on `all-MiniLM-L6-v2`, so the "
        "two can be swapped on that model without re-embedding); " + _MODEL_SETTINGS_NOTE,
        CORE,
    ),
    _d("EMBEDDING_URL", "", str, "the embeddings endpoint's base URL", CORE),
    _d(
        "EMBEDDING_MODEL",
        "",
        str,
        "vectors are stored under this name; empty = the provider's default: "
        "`all-MiniLM-L6-v2-int8` for `onnx` (all-MiniLM-L6-v2 with 8-bit weights: about half "
        "the query time, recall measured beside the float model's in BENCHMARKS.md), "
        "`all-MiniLM-L6-v2` (the float model) for "
        "`sentence-transformers`; `onnx` runs the float model too. Each model's vectors are "
        "its own: a switch re-embeds, and recall serves the previous model meanwhile (with "
        "`onnx` on its default the float model is the previous one unless "
        "MEMFLOW_PREVIOUS_EMBEDDING_MODEL names another)",
        CORE,
    ),
    _d(
        "EMBEDDING_API_KEY",
        "",
        str,
        "an optional key for the embeddings endpoint (never logged)",
        CORE,
        secret=True,
    ),
    _d(
        "EMBEDDING_COMMAND",
        "",
        str,
        "an operator program that embeds (JSON on stdin and stdout)",
        CORE,
    ),
    _d(
        "PREVIOUS_EMBEDDING_MODEL",
        "",
        str,
        "during a re-embed, the model recall keeps using for scopes the new model does not "
        "cover yet (same provider kind and endpoint); empty with `onnx` on its default model: "
        "`all-MiniLM-L6-v2`, the default before",
        CORE,
    ),
    _d(
        "ALLOW_MODEL_HOSTS",
        "",
        str,
        "comma-separated non-local model hosts the operator allows",
        CORE,
    ),
    _d(
        "RERANKER",
        "none",
        str,
        "the optional listwise rerank of a recall's first 20 facts, asked for per request "
        '(`"rerank": true`): `none` (off) or `openai`, one call to a local chat model speaking '
        "the OpenAI API, behind the same local-only guard as extraction; its quality is "
        "unmeasured here (no real chat model in the project)",
        CORE,
    ),
    _d("RERANK_URL", "", str, "the rerank chat endpoint's base URL", CORE),
    _d("RERANK_MODEL", "", str, "the rerank chat model's name as the server knows it", CORE),
    _d(
        "RERANK_API_KEY",
        "",
        str,
        "an optional key for the rerank endpoint (never logged)",
        CORE,
        secret=True,
    ),
    _d(
        "RERANK_BUDGET_S",
        "2",
        float,
        "the rerank's whole time; past it the answer keeps its own order and says so "
        "(`rerank.reason` `budget_exceeded`)",
        CORE,
        low=0.05,
        high=60,
    ),
    _d(
        "GRAPH_BACKEND",
        "sqlite",
        str,
        "`sqlite` (embedded, `<data>/graph.sqlite`, WAL) or `gremlin`",
        CORE,
    ),
    _d("GREMLIN_URL", "ws://127.0.0.1:18182/gremlin", str, "any TinkerPop server", CORE),
    _d(
        "MILVUS_URI",
        "",
        str,
        "empty = the embedded vector store in the data directory; else a Milvus server or cluster",
        CORE,
    ),
    _d("MILVUS_TOKEN", "", str, "the Milvus server's token", CORE, secret=True),
    _d(
        "VECTOR_CACHE_MIB",
        "512",
        int,
        "the embedded vector store's copy of the vectors in each process (an LRU by bytes): "
        "what bounds the recall API's memory however many tenants are asked for",
        CORE,
        low=1,
    ),
    _d(
        "API_KEYS_FILE",
        "",
        str,
        "the API's bearer keys (SHA-256 only); empty = `<data>/api-keys.json`",
        CORE,
        shown_default="`<data>/api-keys.json`",
    ),
    _d(
        "SETTINGS_FILE",
        ".env",
        str,
        "a `.env`-format file the code location re-reads at the start of every run (an "
        "observation is a run) for the model settings (`MEMFLOW_EXTRACTOR`, "
        "`MEMFLOW_EXTRACTION_*`, `MEMFLOW_EMBEDDER`, `MEMFLOW_EMBEDDING_*`, "
        "`MEMFLOW_ALLOW_MODEL_HOSTS`); they win over the process environment, as Dagster's "
        "`.env` does at start. Relative to the working directory; empty or missing = the "
        "environment only. A `memflow` command resolves its settings once and exports it empty "
        "for its own runs (`memflow up` keeps one you set explicitly)",
        CORE,
    ),
    # ---------------------------------------------------------------------------- client
    _d(
        "API_URL",
        "http://127.0.0.1:8080",
        str,
        "where `memflow recall`, the hooks and the MCP server find the running API (the one "
        "`memflow up` records wins over this default); `memflow up` and `memflow serve` listen "
        "on its host and port unless given `--host`/`--port`",
        CLIENT,
    ),
    _d(
        "API_KEY",
        "",
        str,
        "a bearer key from `memflow keys add` for those clients (none: the server is not asked "
        "and only the local path answers)",
        CLIENT,
        secret=True,
    ),
    _d(
        "API_CONNECT_TIMEOUT_S",
        "0.25",
        float,
        "how long a client waits for the TCP connection (on loopback a running server accepts "
        "in microseconds)",
        CLIENT,
        low=0.001,
        high=3600,
    ),
    _d(
        "API_TIMEOUT_S",
        "5",
        float,
        "a client's whole request",
        CLIENT,
        low=0.001,
        high=3600,
    ),
    # ---------------------------------------------------------------------------- agent
    _d(
        "TENANT",
        "",
        str,
        "the `ORG/REPO` a hook or the stdio MCP server works for (empty: mapped from the "
        "working directory)",
        AGENT,
    ),
    _d(
        "TENANT_MAP",
        "",
        str,
        "explicit `DIR=ORG/REPO` rules (`;` or newlines) mapping working directories to "
        "tenants; see docs/agents.md",
        AGENT,
    ),
    _d(
        "DEFAULT_ORG",
        "local",
        str,
        "the org of a directory no rule or git remote maps",
        AGENT,
    ),
    _d(
        "MCP_CLIENT",
        "mcp",
        str,
        "the agent's name the MCP server records on the turns it lands",
        AGENT,
    ),
    # ---------------------------------------------------------------------------- hook
    _d(
        "HOOK_BUDGET_S",
        "",
        float,
        "a hook's whole time budget; empty = 2 s for session-start, 30 s for the imports",
        HOOK,
        low=0.05,
        high=600,
        shown_default="2 / 30",
    ),
    _d(
        "HOOK_MAX_CHARS",
        "4000",
        int,
        "the most characters session-start prints",
        HOOK,
        low=200,
        high=100_000,
    ),
    _d(
        "HOOK_MAX_FACTS",
        "15",
        int,
        "the most facts session-start prints",
        HOOK,
        low=1,
        high=40,
    ),
    _d(
        "HOOK_QUERY",
        "{repo} decisions conventions preferences dependencies",
        str,
        "the question session-start asks (`{repo}`: the repository's name)",
        HOOK,
    ),
    # ---------------------------------------------------------------------------- deploy
    _d("DAGSTER_PG_HOST", "", str, "PostgreSQL host of the production instance", DEPLOY),
    _d("DAGSTER_PG_PORT", "5432", int, "its port", DEPLOY),
    _d("DAGSTER_PG_DB", "", str, "its database", DEPLOY),
    _d("DAGSTER_PG_USER", "", str, "its user", DEPLOY),
    _d("DAGSTER_PG_PASSWORD", "", str, "its password", DEPLOY, secret=True),
)

DECLARED: dict[str, Declared] = {s.name: s for s in DECLARED_SETTINGS}


def declared(name: str) -> Declared:
    """The declaration of `name`; KeyError names what is declared nearby."""
    try:
        return DECLARED[name]
    except KeyError:
        raise KeyError(f"{name} is not a declared memflow setting") from None


def names(group: str) -> tuple[str, ...]:
    return tuple(s.name for s in DECLARED_SETTINGS if s.group == group)


# Every setting a command resolves and exports for the code location, with its default.
DEFAULTS: dict[str, str] = {s.name: s.default for s in DECLARED_SETTINGS if s.group == CORE}
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
        default = _convert(s.kind, s.default) if s.default != "" else None
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
