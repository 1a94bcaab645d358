"""Request and response models of the recall API, and its request bounds.

Answers of the recall service are `recall.answers`; these are what the HTTP layer adds: tenant
references, request bodies with their limits (published in the OpenAPI schema), acceptance
answers of the write endpoints, the error body and the health answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from recall.answers import Ranking
from schemas.rules import Role
from schemas.scope import Scope, ScopeError

# Field bounds, published in the OpenAPI schema.
MAX_QUERY_CHARS = 4096
MAX_SEARCH_CHARS = 1024
MAX_LIMIT = 40
MAX_HOPS = 2
MAX_ENTITY_IDS = 50
MAX_TRIPLES = 500
MAX_TURNS = 500
MAX_ID_CHARS = 200
MAX_CONTENT_CHARS = 500_000


@dataclass(frozen=True, slots=True)
class ApiLimits:
    """Byte bounds enforced before a request is parsed (not part of the schema)."""

    max_body_bytes: int = 1 << 20
    max_query_string_bytes: int = 16_384
    health_timeout_s: float = 5.0


class ErrorInfo(BaseModel):
    code: str = Field(description="stable, machine-readable")
    message: str
    details: list[dict[str, Any]] | None = None


class ErrorBody(BaseModel):
    error: ErrorInfo


# -- requests ----------------------------------------------------------------------------

TENANT_DOC = "ORG/REPO; or give `org` and `repo`"


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TenantRef(_Request):
    tenant: str | None = Field(
        None, max_length=201, description=TENANT_DOC, examples=["acme/payments"]
    )
    org: str | None = Field(None, max_length=100, examples=["acme"])
    repo: str | None = Field(None, max_length=100, examples=["payments"])

    @model_validator(mode="after")
    def _one_tenant(self) -> TenantRef:
        if self.tenant is None and (self.org is None or self.repo is None):
            raise ValueError("give `tenant` (ORG/REPO) or both `org` and `repo`")
        named = self.org is not None or self.repo is not None
        if self.tenant is not None and named:
            org, _, repo = self.tenant.partition("/")
            if (self.org, self.repo) != (org, repo):
                raise ValueError("`tenant` and `org`/`repo` disagree")
        self.scope()
        return self

    def scope(self) -> Scope:
        return parse_tenant(self.tenant) if self.tenant is not None else _scope(self.org, self.repo)


def _scope(org: str | None, repo: str | None) -> Scope:
    try:
        return Scope(org or "", repo or "")
    except ScopeError:
        raise ValueError(
            "tenant names are letters, digits, '.', '_' and '-' (at most 100 characters each)"
        ) from None


def parse_tenant(text: str) -> Scope:
    org, sep, repo = text.partition("/")
    if not sep:
        raise ValueError("tenant must be spelled ORG/REPO")
    return _scope(org, repo)


def _utc(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    try:
        t = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    except (OverflowError, ValueError):
        raise ValueError("time is out of range") from None
    if not 1 < t.year < 9999:
        raise ValueError("time is out of range (years 2-9998)")
    return t


AsOf = Field(
    None,
    description="answer as of this instant (ISO-8601; default now; no zone means UTC)",
    examples=["2026-01-15T12:00:00Z"],
)


class RecallRequest(TenantRef):
    query: str = Field(max_length=MAX_QUERY_CHARS, examples=["which database does payments use?"])
    ranking: Ranking = "auto"
    as_of: datetime | None = AsOf
    hops: int = Field(2, ge=1, le=MAX_HOPS)
    limit: int = Field(MAX_LIMIT, ge=1, le=MAX_LIMIT, description="facts at most")
    rerank: bool = Field(
        False,
        description="reorder the first facts through the server's listwise rerank "
        "(MEMFLOW_RERANKER, a local chat model; off by default): the answer's `rerank` says "
        "whether it happened and, if not, why",
    )

    @field_validator("as_of")
    @classmethod
    def _as_of_utc(cls, value: datetime | None) -> datetime | None:
        return _utc(value)


class SubgraphRequest(TenantRef):
    entity_ids: list[Annotated[str, Field(max_length=MAX_ID_CHARS)]] = Field(
        min_length=1, max_length=MAX_ENTITY_IDS, examples=[["e_0123456789abcdef"]]
    )
    hops: int = Field(1, ge=1, le=MAX_HOPS)
    as_of: datetime | None = AsOf
    limit: int = Field(MAX_LIMIT, ge=1, le=MAX_LIMIT)

    @field_validator("as_of")
    @classmethod
    def _as_of_utc(cls, value: datetime | None) -> datetime | None:
        return _utc(value)


TRIPLE_ITEM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "checked by the pipeline's contract (schemas.triples), not by this schema: "
    "names are redacted and at most 120 characters, predicates UPPER_SNAKE_CASE (trivially "
    "fixable spellings are fixed), confidence in [0.6, 1] (default 1)",
    "properties": {
        "subject": {"type": "string"},
        "predicate": {"type": "string"},
        "object": {"type": "string"},
        "confidence": {"type": "number"},
        "valid_from": {"type": "string", "format": "date-time"},
        "supersedes": {
            "description": "fact id (f_...) or the replaced triple",
            "anyOf": [
                {"type": "string"},
                {
                    "type": "object",
                    "properties": {
                        "subject": {"type": "string"},
                        "predicate": {"type": "string"},
                        "object": {"type": "string"},
                    },
                },
            ],
        },
        "subject_type": {"type": "string"},
        "object_type": {"type": "string"},
    },
    "required": ["subject", "predicate", "object"],
}
TripleItem = Annotated[Any, WithJsonSchema(TRIPLE_ITEM_SCHEMA)]


class TriplesRequest(TenantRef):
    triples: list[TripleItem] = Field(min_length=1, max_length=MAX_TRIPLES)
    session_id: str | None = Field(
        None, min_length=1, max_length=MAX_ID_CHARS, description="default: a new api-... id"
    )
    client: str = Field(
        "api", min_length=1, max_length=100, description="the agent, e.g. claude-code"
    )


class TurnIn(_Request):
    session_id: str = Field(min_length=1, max_length=MAX_ID_CHARS)
    turn_id: str = Field(min_length=1, max_length=MAX_ID_CHARS)
    ts: AwareDatetime = Field(
        description="with a zone; between MEMFLOW_HISTORY_START and a day from now (the time "
        "window ingestion applies)",
        examples=["2026-01-15T09:15:02Z"],
    )
    role: Role
    content: str | None = Field(None, max_length=MAX_CONTENT_CHARS)
    client: str = Field(min_length=1, max_length=100, examples=["claude-code"])
    tool_name: str | None = Field(None, max_length=100)
    tool_input: Any = None

    @field_validator("ts")
    @classmethod
    def _ts_utc(cls, value: datetime) -> datetime:
        # Only made UTC here: its range is the landing reader's time window, checked when the
        # turns are landed, so the API refuses exactly what ingestion would.
        try:
            return value.astimezone(UTC)
        except (OverflowError, ValueError):
            raise ValueError("ts is out of range") from None


class TurnsRequest(TenantRef):
    turns: list[TurnIn] = Field(min_length=1, max_length=MAX_TURNS)


# -- answers -----------------------------------------------------------------------------


class IngestInfo(BaseModel):
    """When what was written is expected to be recallable (`recall.ports.IngestRequest`)."""

    requested: bool = Field(description="a run of the tenant was asked for now")
    run_id: str | None = None
    expected_by: datetime | None = Field(
        None, description="when the data should be recallable (an estimate), if known"
    )
    reason: str | None = Field(None, description="why no run was asked for, or how it went")


class TripleAccepted(BaseModel):
    index: int = Field(description="the item's place in the request's `triples`")
    status: Literal["saved", "saved_with_warning"] = "saved"
    warning: str | None = Field(None, description="what was changed, e.g. valid_from_unparsed")
    warning_detail: str | None = None
    triple_id: str
    fact_id: str
    subject_id: str
    object_id: str
    subject: str
    predicate: str
    object: str


class TripleRejected(BaseModel):
    index: int
    reason: str
    detail: str | None = None


WRITE_NOTICE = "landed for the pipeline; recallable once the tenant's run has ingested it (ingest)"


class TriplesAccepted(BaseModel):
    tenant: str
    accepted: int
    session_id: str
    turn_id: str
    landing_file: str | None = None
    triples: list[TripleAccepted] = Field(default_factory=list)
    rejected: list[TripleRejected] = Field(
        default_factory=list, description="items not saved (never for the API: it refuses them)"
    )
    ingest: IngestInfo | None = None
    notice: str = WRITE_NOTICE


class TurnsAccepted(BaseModel):
    tenant: str
    accepted: int
    landing_file: str
    tool_inputs_left_out: int = Field(
        0, description="inputs of tools other than the memory tools: never written"
    )
    ingest: IngestInfo | None = None
    notice: str = WRITE_NOTICE


# -- list, retract, erase --------------------------------------------------------------------

FactStatus = Literal["valid", "closed", "all"]


_OTHERS = {
    "fact_id": ("subject", "predicate", "object", "entity"),
    "triple": ("fact_id", "entity"),
    "entity": ("fact_id", "subject", "predicate", "object"),
}


class RetractItemIn(_Request):
    """One of: `fact_id`; `subject` + `predicate` + `object`; `entity` (forget an entity: every
    open fact it is subject or object of, and its name)."""

    # The one-of rule in the OpenAPI schema too, so a client (or a schema-driven generator)
    # reads what the validator below enforces: exactly one form, its fields given as strings.
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "oneOf": [
                {
                    "required": ["fact_id"],
                    "properties": {"fact_id": {"type": "string"}},
                    "not": {"anyOf": [{"required": [k]} for k in _OTHERS["fact_id"]]},
                },
                {
                    "required": ["subject", "predicate", "object"],
                    "properties": {
                        k: {"type": "string"} for k in ("subject", "predicate", "object")
                    },
                    "not": {"anyOf": [{"required": [k]} for k in _OTHERS["triple"]]},
                },
                {
                    "required": ["entity"],
                    "properties": {"entity": {"type": "string"}},
                    "not": {"anyOf": [{"required": [k]} for k in _OTHERS["entity"]]},
                },
            ]
        },
    )

    fact_id: str | None = Field(None, min_length=1, max_length=MAX_ID_CHARS)
    subject: str | None = Field(None, max_length=1000)
    predicate: str | None = Field(None, max_length=1000)
    object: str | None = Field(None, max_length=1000)
    entity: str | None = Field(None, max_length=1000, description="an entity's name or id")

    @model_validator(mode="after")
    def _one_form(self) -> RetractItemIn:
        triple = (self.subject, self.predicate, self.object)
        forms = [
            self.fact_id is not None,
            self.entity is not None,
            any(v is not None for v in triple),
        ]
        if sum(forms) != 1:
            raise ValueError("give one of: fact_id; subject, predicate and object; entity")
        if forms[2] and any(v is None for v in triple):
            raise ValueError("a triple needs subject, predicate and object")
        return self


class RetractionsRequest(TenantRef):
    retract: list[RetractItemIn] = Field(min_length=1, max_length=MAX_TRIPLES)
    reason: str | None = Field(None, max_length=1000, description="why (kept with the record)")
    client: str = Field("api", min_length=1, max_length=100)
    session_id: str | None = Field(None, min_length=1, max_length=MAX_ID_CHARS)


class RetractItemOut(BaseModel):
    fact_id: str | None = Field(None, description="given, or the fact the triple names")
    subject: str | None = None
    predicate: str | None = None
    object: str | None = None
    entity: str | None = None


class RetractionAccepted(BaseModel):
    tenant: str
    accepted: int
    items: list[RetractItemOut]
    by: str = Field(description="who asked: the key's id, as the retraction record keeps it")
    at: datetime = Field(description="the retraction's time: facts leave recall from then on")
    session_id: str
    turn_id: str
    landing_file: str
    ingest: IngestInfo | None = None
    notice: str = (
        "landed for the pipeline: once the tenant's run has applied it (ingest), the facts are "
        "closed at `at`, leave recall, and stay visible to an as_of before `at`"
    )


class EraseAnswer(BaseModel):
    tenant: str
    erased: bool
    removed: dict[str, int] = Field(description="what went, place by place")
    problems: list[str] = Field(default_factory=list)
    notes: list[str] = Field(
        default_factory=list, description="what stays until it expires, nothing to act on"
    )


class StoreHealth(BaseModel):
    ok: bool
    backend: str | None = None


class SystemHealth(BaseModel):
    """The running memflow processes of the server's state home, and every one that works on
    another data directory or landing zone than this server (paths left out: no key is
    needed here)."""

    processes: int
    conflicts: list[str]


class Health(BaseModel):
    status: Literal["ok", "unavailable"]
    graph: StoreHealth
    vectors: StoreHealth | None
    embedding_model: str | None
    system: SystemHealth | None = None
