"""The declarations of every `MEMFLOW_*` setting: its environment name, default (as the
environment spells it), type, meaning and who reads it. Data only: nothing here reads the
environment; `resources.settings` resolves and reads the values, and re-exports these names."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from schemas import rules

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
            return convert(self.kind, text)
        if self.kind is str:
            return self.default
        return convert(self.kind, self.default) if self.default != "" else None

    def valid(self, raw: str | None) -> bool:
        """Whether a lenient reader takes `raw` as given (blank: no, the default applies)."""
        text = (raw or "").strip()
        if not text:
            return False
        try:
            value = convert(self.kind, text)
        except ValueError:
            return False
        if self.low is not None and value < self.low:
            return False
        return self.high is None or value <= self.high


def convert(kind: type, text: str) -> Any:
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
