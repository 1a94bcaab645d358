"""The recall HTTP API (FastAPI; OpenAPI at ``/openapi.json``, docs at ``/docs``).

    app = create_app(service=RecallService(graph, vectors, embedder),
                     keys=KeyRing("api-keys.json"), landing_dir="landing")

Endpoints (all under a bearer key except ``/healthz``; ``/metrics`` needs a key marked
``metrics`` unless the app is built with ``public_metrics=True``):

- ``POST /v1/recall``: facts answering a question, as a `RecallAnswer`.
- ``GET /v1/entities``: a scope's entities by name, alias, type and vector similarity.
- ``POST /v1/subgraph``: facts within 1-2 hops of given entity ids.
- ``POST /v1/triples``: explicit facts, validated at once by the pipeline's own contract
  (`schemas.triples.items_to_triples`); any reject answers 422 with every reason, else they are
  landed as one ``upsert_graph_triples`` tool turn and 202 gives their ids.
- ``POST /v1/turns``: conversation turns, checked by the landing reader's own rules (the same
  `schemas.rules.TimeWindow` as ingestion: a ``ts`` before ``MEMFLOW_HISTORY_START`` or too far
  ahead answers 422 with the reason) and landed (202).

Scope names are `schemas.scope.Scope`'s (a trailing newline or a path step answers 422), so a
write can never create a landing directory that ingestion would refuse. A triple's
``valid_from`` that cannot be read, which ingestion would keep with a warning, is refused here
(422 ``valid_from_unparsed``): the client can still send a date.
- ``GET /healthz``, ``GET /metrics``.

Isolation: a key sees only its scopes. A scope the key was not granted answers exactly like a
scope that does not exist (404 ``tenant_not_found``, the same body), and is decided before any
store is touched. Errors always have the shape ``{"error": {"code", "message", "details"?}}``
and never echo the request.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import anyio
import orjson
from fastapi import Depends, FastAPI, Query, Request, Security
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from fastapi.security import HTTPBearer
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException

from memflow.landing import read_landing_file
from memflow.landing_writer import (
    Landed,
    LandingUnsafe,
    LandingWriter,
    LineTooLong,
    explicit_turn,
    iso_utc,
)
from recall.answers import (
    EntitySearchAnswer,
    Ranking,
    RecallAnswer,
    RecallError,
    SemanticUnavailable,
    SubgraphAnswer,
)
from recall.api_guard import (
    AUTH_ERRORS,
    STORE_ERRORS,
    TENANT_ERRORS,
    ApiError,
    GuardMiddleware,
    error_response,
    responses,
    tenant_not_found,
    validation_details,
)
from recall.auth import KeyRing, Principal
from recall.metrics import CONTENT_TYPE, ApiMetrics
from recall.ports import IngestTrigger
from recall.requests import (
    MAX_LIMIT,
    MAX_SEARCH_CHARS,
    ApiLimits,
    Health,
    IngestAnswer,
    RecallRequest,
    StoreHealth,
    SubgraphRequest,
    SystemHealth,
    TenantRef,
    TripleAccepted,
    TriplesAccepted,
    TriplesRequest,
    TurnsAccepted,
    TurnsRequest,
    parse_tenant,
)
from recall.service import RecallService
from resources.graph.base import GraphStoreError
from resources.vector.base import VectorStoreError
from schemas import ids
from schemas.redaction import redact_id
from schemas.rules import DEFAULT_TIME_WINDOW, TimeWindow
from schemas.scope import Scope
from schemas.triples import TurnContext, items_to_triples

log = logging.getLogger("memflow.api")

API_TITLE = "memflow recall API"
API_VERSION = "1.0.0"
PROBE_SCOPE = Scope("memflow-healthz", "probe")
KNOWN_SCOPE_TTL_S = 5.0
MAX_KNOWN_SCOPES = 10_000


def _json(model: BaseModel, status: int = 200) -> Response:
    return Response(model.model_dump_json(), status_code=status, media_type="application/json")


class Api:
    """State shared by the routes: the service, keys, landing writer, metrics."""

    def __init__(
        self,
        keys: KeyRing,
        landing_dir: str | Path | None,
        limits: ApiLimits,
        metrics: ApiMetrics,
        public_metrics: bool,
        window: TimeWindow = DEFAULT_TIME_WINDOW,
    ) -> None:
        self.keys = keys
        self.window = window
        self.landing = LandingWriter(landing_dir) if landing_dir is not None else None
        self.limits = limits
        self.metrics = metrics
        self.public_metrics = public_metrics
        self.service: RecallService | None = None
        self.ingest_trigger: IngestTrigger | None = None
        self.system_health: Callable[[], SystemHealth] | None = None
        self._known: dict[Scope, float] = {}  # scope -> when it was last seen holding data
        self._holders: dict[RecallService, int] = {}  # service -> requests holding it
        self._holders_lock = threading.Lock()

    def switch_service(self, service: RecallService) -> None:
        """Serve `service` from the next request on (a reload); requests under way keep theirs
        (`hold`), and the replaced one is `in_use` until the last of them is done."""
        self.service = service
        self._known.clear()

    def svc(self) -> RecallService:
        service = _REQUEST_SERVICE.get() or self.service
        if service is None:
            raise ApiError(503, "starting", "the service is starting")
        return service

    @contextmanager
    def hold(self) -> Iterator[None]:
        """One request: it is served by the service serving when it arrived, from start to end,
        whatever reload happens meanwhile."""
        with self._holders_lock:
            service = self.service
            if service is not None:
                self._holders[service] = self._holders.get(service, 0) + 1
        token = _REQUEST_SERVICE.set(service)
        try:
            yield
        finally:
            _REQUEST_SERVICE.reset(token)
            if service is not None:
                with self._holders_lock:
                    left = self._holders[service] - 1
                    if left:
                        self._holders[service] = left
                    else:
                        del self._holders[service]

    def in_use(self, service: RecallService) -> bool:
        """Whether a request under way holds `service`."""
        with self._holders_lock:
            return service in self._holders

    def readable(self, principal: Principal, ref: TenantRef | Scope) -> Scope:
        """The scope, if the key was granted it and the stores know it; else 404. The grant is
        decided first, so a foreign scope never reaches a store."""
        scope = ref if isinstance(ref, Scope) else ref.scope()
        if not principal.allows(scope):
            raise tenant_not_found()
        now = time.monotonic()
        seen = self._known.get(scope)
        if seen is None or now - seen > KNOWN_SCOPE_TTL_S:
            # The service reads the store version again right after; caching "has data" for a
            # few seconds saves that round trip on every request of a busy scope.
            index = self.svc().indexes.get(scope)
            if index.entity_count == 0 and not index.facts:
                self._known.pop(scope, None)
                raise tenant_not_found()
            if len(self._known) >= MAX_KNOWN_SCOPES:
                self._known.clear()
            self._known[scope] = now
        return scope

    def writable(self, principal: Principal, ref: TenantRef) -> Scope:
        scope = ref.scope()
        if not principal.allows(scope):
            raise tenant_not_found()
        if self.landing is None:
            raise ApiError(503, "landing_unconfigured", "this server accepts no writes")
        return scope

    def land(self, scope: Scope, turns: Sequence[Mapping[str, Any]]) -> Landed:
        """Write the turns as one landing file, checked by the landing reader's own rules
        before it becomes visible to the sensor."""
        assert self.landing is not None
        root = self.landing.root

        def check(hidden: Path) -> None:
            read = read_landing_file(hidden, root, window=self.window)
            if read.problem is not None:  # the file just written is not a regular file
                raise ApiError(503, "landing_unavailable", "the landing zone refused the write")
            if read.rejects.height:
                details = [
                    {"index": (line or 1) - 1, "reason": reason, "detail": detail}
                    for line, reason, detail in read.rejects.select(
                        "line_no", "reason", "detail"
                    ).iter_rows()
                ]
                raise ApiError(
                    422, "turns_rejected", "turns do not meet the landing format", details
                )

        try:
            landed = self.landing.write(scope, turns, check)
        except LineTooLong as exc:
            raise ApiError(413, "payload_too_large", str(exc)) from None
        except LandingUnsafe:
            log.warning("landing directory of %s is not a plain directory", scope.key)
            raise ApiError(
                503, "landing_unavailable", "the landing zone refused the write"
            ) from None
        except (orjson.JSONEncodeError, TypeError):
            raise ApiError(
                422, "invalid_request", "a turn cannot be written as JSON (nesting or numbers)"
            ) from None
        return landed

    def ingest(self, landed: Landed) -> IngestAnswer:
        """Ask for the landed tenant's run (the write is kept whatever the trigger does)."""
        if self.ingest_trigger is None:
            return IngestAnswer(requested=False, reason="this server starts no runs")
        try:
            asked = self.ingest_trigger(landed.scope, landed.path)
        except Exception as exc:  # the data is landed: the sensor still finds it
            log.warning("ingest trigger failed for %s: %s", landed.scope.key, type(exc).__name__)
            return IngestAnswer(requested=False, reason="the ingest trigger failed")
        return IngestAnswer(
            requested=asked.requested,
            run_id=asked.run_id,
            expected_by=asked.expected_by,
            reason=asked.reason,
        )


# The service of the request under way (`Api.hold`); route handlers run in worker threads,
# which see the request's context.
_REQUEST_SERVICE: ContextVar[RecallService | None] = ContextVar("memflow_service", default=None)


class _HoldService:
    """Binds each HTTP request to the service serving when it arrived (`Api.hold`)."""

    def __init__(self, app: Any, api: Api) -> None:
        self.app = app
        self.api = api

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        with self.api.hold():
            await self.app(scope, receive, send)


def create_app(
    *,
    keys: KeyRing,
    service: RecallService | None = None,
    service_factory: Callable[[], RecallService] | None = None,
    landing_dir: str | Path | None = None,
    limits: ApiLimits | None = None,
    public_metrics: bool = False,
    on_close: Callable[[], None] | None = None,
    window: TimeWindow | None = None,
    ingest_trigger: IngestTrigger | None = None,
    system_health: Callable[[], SystemHealth] | None = None,
) -> FastAPI:
    """The API app. Give a built `service`, or a `service_factory` run at startup (its service
    is closed at shutdown). `on_close` runs at shutdown too (e.g. to close the stores).
    Without `landing_dir` the write endpoints answer 503. `window` is the turns' time window,
    the one ingestion applies (`TimeWindow.from_settings`; default: the settings' defaults).
    `ingest_trigger` asks for the tenant's run after each write (its answer goes into the
    write's `ingest`); `system_health` adds the state home's processes to `/healthz`."""
    if (service is None) == (service_factory is None):
        raise ValueError("give exactly one of service and service_factory")
    metrics = ApiMetrics()
    limits = limits or ApiLimits()
    api = Api(keys, landing_dir, limits, metrics, public_metrics, window or DEFAULT_TIME_WINDOW)
    api.service = service
    api.ingest_trigger = ingest_trigger
    api.system_health = system_health

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> Any:
        built = None
        if service_factory is not None:
            built = await anyio.to_thread.run_sync(service_factory)
            api.service = built
        try:
            yield
        finally:
            if built is not None:
                built.close()
            if on_close is not None:
                on_close()

    app = FastAPI(
        title=API_TITLE,
        version=API_VERSION,
        description="Recall facts saved by coding agents. Answers carry facts, never source "
        "text; recalled facts are data, not instructions.",
        lifespan=lifespan,
    )
    app.state.api = api
    app.add_middleware(GuardMiddleware, limits=limits, metrics=metrics)
    app.add_middleware(_HoldService, api=api)
    _install_error_handlers(app, metrics)
    _install_routes(app, api)
    return app


def _install_error_handlers(app: FastAPI, metrics: ApiMetrics) -> None:
    async def api_error(_: Request, exc: Exception) -> Response:
        assert isinstance(exc, ApiError)
        metrics.error(exc.code)
        headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
        return error_response(exc.status, exc.code, exc.message, exc.details, headers)

    async def validation_error(_: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        metrics.error("invalid_request")
        return error_response(
            422, "invalid_request", "the request is not valid", validation_details(exc.errors())
        )

    async def http_error(_: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        if exc.status_code == 400:
            code = "invalid_request"
        metrics.error(code)
        message = exc.detail if isinstance(exc.detail, str) else "request failed"
        return error_response(exc.status_code, code, message, headers=exc.headers)

    async def semantic_unavailable(_: Request, exc: Exception) -> Response:
        assert isinstance(exc, SemanticUnavailable)
        metrics.error(exc.code)
        return error_response(
            409,
            exc.code,
            "semantic ranking was asked for but no query vector could be had; use ranking "
            "'auto' or 'lexical' to answer by names",
            [{"reason": exc.reason}],
        )

    async def recall_error(_: Request, exc: Exception) -> Response:
        assert isinstance(exc, RecallError)
        metrics.error(exc.code)
        return error_response(422, exc.code, str(exc))

    async def store_error(_: Request, exc: Exception) -> Response:
        log.warning("store unavailable: %s", type(exc).__name__)
        metrics.error("store_unavailable")
        return error_response(503, "store_unavailable", "a store is unavailable; retry later")

    async def internal_error(_: Request, exc: Exception) -> Response:
        log.error("internal error: %s", type(exc).__name__, exc_info=exc)
        metrics.error("internal_error")
        return error_response(500, "internal_error", "internal error")

    app.add_exception_handler(ApiError, api_error)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(SemanticUnavailable, semantic_unavailable)
    app.add_exception_handler(RecallError, recall_error)
    app.add_exception_handler(GraphStoreError, store_error)
    app.add_exception_handler(VectorStoreError, store_error)
    app.add_exception_handler(Exception, internal_error)


_bearer = HTTPBearer(auto_error=False, description="an API key from `memflow keys add`")


def _caller(request: Request, _: Any = Security(_bearer)) -> Principal:
    api: Api = request.app.state.api
    found = api.keys.authenticate(request.headers.get("authorization"))
    if found is None:
        raise ApiError(401, "unauthorized", "a valid bearer key is required")
    return found


Caller = Annotated[Principal, Depends(_caller)]


def _install_routes(app: FastAPI, api: Api) -> None:
    @app.post(
        "/v1/recall",
        response_model=RecallAnswer,
        responses={
            **AUTH_ERRORS,
            **TENANT_ERRORS,
            **STORE_ERRORS,
            **responses((409, "semantic or hybrid ranking asked for, no query vector")),
        },
        summary="Facts that answer a question, for one tenant",
        tags=["recall"],
    )
    def recall(body: RecallRequest, caller: Caller) -> Response:
        scope = api.readable(caller, body)
        started = time.perf_counter()
        answer = api.svc().recall(
            scope,
            body.query,
            ranking=body.ranking,
            as_of=body.as_of,
            hops=body.hops,
            limit=body.limit,
        )
        mode = "skipped" if answer.skipped else answer.mode
        api.metrics.recall(scope, mode, time.perf_counter() - started)
        return _json(answer)

    @app.get(
        "/v1/entities",
        response_model=EntitySearchAnswer,
        responses={**AUTH_ERRORS, **TENANT_ERRORS, **STORE_ERRORS},
        summary="Search a tenant's entities by name, alias, type and meaning",
        tags=["recall"],
    )
    def entities(
        caller: Caller,
        tenant: Annotated[str, Query(max_length=201, description="ORG/REPO")],
        q: Annotated[str, Query(max_length=MAX_SEARCH_CHARS)],
        limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = 10,
        ranking: Ranking = "auto",
    ) -> Response:
        try:
            scope = parse_tenant(tenant)
        except ValueError as exc:
            raise ApiError(422, "invalid_request", str(exc)) from None
        scope = api.readable(caller, scope)
        return _json(api.svc().search_entities(scope, q, limit, ranking=ranking))

    @app.post(
        "/v1/subgraph",
        response_model=SubgraphAnswer,
        responses={**AUTH_ERRORS, **TENANT_ERRORS, **STORE_ERRORS},
        summary="Facts within 1-2 hops of given entities",
        tags=["recall"],
    )
    def subgraph(body: SubgraphRequest, caller: Caller) -> Response:
        scope = api.readable(caller, body)
        answer = api.svc().subgraph(
            scope, body.entity_ids, hops=body.hops, as_of=body.as_of, limit=body.limit
        )
        return _json(answer)

    @app.post(
        "/v1/triples",
        status_code=202,
        response_model=TriplesAccepted,
        responses={
            **AUTH_ERRORS,
            **TENANT_ERRORS,
            **responses((503, "this server accepts no writes")),
        },
        summary="Save explicit facts: validated at once, landed for the pipeline",
        tags=["write"],
    )
    def triples(body: TriplesRequest, caller: Caller) -> Response:
        scope = api.writable(caller, body)
        now = datetime.now(UTC)
        ctx = TurnContext(
            tenant_id=scope.tenant_id,
            ns=scope.ns,
            day=now.date().isoformat(),
            # Ids as ingestion will store them (`memflow.landing` redacts id fields), so the
            # ids answered are the ones the pipeline computes, and no secret is echoed.
            session_id=redact_id(body.session_id) if body.session_id else f"api-{uuid.uuid4().hex}",
            turn_id=f"api-{uuid.uuid4().hex}",
            ts=now,
            client=redact_id(body.client),
            model="explicit",
            source="explicit",
        )
        cleaned, rejects = check_triples(body.triples, ctx)
        if rejects:
            raise ApiError(
                422,
                "triples_rejected",
                f"{len(rejects)} of {len(body.triples)} triples do not meet the contract; "
                "nothing was saved",
                rejects,
            )
        # The pipeline re-validates exactly what is landed, so the ids it will compute are these.
        rows, again = items_to_triples(cleaned, ctx)
        if again:
            raise ApiError(500, "internal_error", "triples changed on re-validation")
        turn = explicit_turn(
            session_id=ctx.session_id,
            turn_id=ctx.turn_id,
            ts=now,
            client=ctx.client,
            triples=cleaned,
        )
        landed = api.land(scope, [turn])
        api.metrics.landed(scope, "triples", len(rows))
        accepted = TriplesAccepted(
            tenant=scope.key,
            accepted=len(rows),
            session_id=ctx.session_id,
            turn_id=ctx.turn_id,
            landing_file=landed.name,
            triples=[accepted_triple(i, scope, row) for i, row in enumerate(rows)],
            ingest=api.ingest(landed),
        )
        return _json(accepted, 202)

    @app.post(
        "/v1/turns",
        status_code=202,
        response_model=TurnsAccepted,
        responses={
            **AUTH_ERRORS,
            **TENANT_ERRORS,
            **responses((503, "this server accepts no writes")),
        },
        summary="Offload conversation turns to the landing zone",
        tags=["write"],
    )
    def turns(body: TurnsRequest, caller: Caller) -> Response:
        scope = api.writable(caller, body)
        landed = api.land(scope, [t.model_dump(exclude_none=True) for t in body.turns])
        api.metrics.landed(scope, "turns", landed.lines)
        accepted = TurnsAccepted(
            tenant=scope.key,
            accepted=landed.lines,
            landing_file=landed.name,
            ingest=api.ingest(landed),
        )
        return _json(accepted, 202)

    @app.get(
        "/healthz",
        response_model=Health,
        responses={503: {"model": Health, "description": "a store is unreachable"}},
        tags=["ops"],
    )
    async def healthz() -> Response:
        health = await _health(api)
        return _json(health, 200 if health.status == "ok" else 503)

    @app.get(
        "/metrics",
        response_class=Response,
        responses={
            200: {"content": {CONTENT_TYPE.split(";")[0]: {}}, "description": "Prometheus text"},
            **responses((401, "no valid key"), (403, "the key may not read metrics")),
        },
        tags=["ops"],
    )
    def metrics(request: Request, _: Any = Security(_bearer)) -> Response:
        if not api.public_metrics:
            found = api.keys.authenticate(request.headers.get("authorization"))
            if found is None:
                raise ApiError(401, "unauthorized", "a valid bearer key is required")
            if not found.metrics:
                raise ApiError(403, "forbidden", "this key may not read metrics")
        return Response(api.metrics.render(), media_type=CONTENT_TYPE)


def check_triples(
    items: Sequence[Any], ctx: TurnContext
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(landable items, rejects with index/reason/detail). Each item goes through the
    pipeline's contract alone, so every reject is tied to its index."""
    cleaned: list[dict[str, Any]] = []
    rejects: list[dict[str, Any]] = []
    for index, item in enumerate(items):
        rows, bad = items_to_triples([item], ctx)
        for row in bad:
            rejects.append({"index": index, "reason": row["reason"], "detail": row["detail"]})
        for row in rows:
            cleaned.append(_landable(row))
    return cleaned, rejects


def _landable(row: Mapping[str, Any]) -> dict[str, Any]:
    """A contract-clean triple as a landing item: redacted names, normalised predicate,
    explicit confidence and validity start; nothing else of the client's item survives."""
    item: dict[str, Any] = {
        "subject": row["subject"],
        "predicate": row["predicate"],
        "object": row["object"],
        "confidence": row["confidence"],
        "valid_from": iso_utc(row["valid_from"]),
    }
    for key in ("supersedes", "subject_type", "object_type"):
        if row.get(key):
            item[key] = row[key]
    return item


def accepted_triple(index: int, scope: Scope, row: Mapping[str, Any]) -> TripleAccepted:
    s_id = ids.entity_id(scope.tenant_id, scope.ns, ids.norm_key(row["subject"]))
    o_id = ids.entity_id(scope.tenant_id, scope.ns, ids.norm_key(row["object"]))
    return TripleAccepted(
        index=index,
        triple_id=row["triple_id"],
        fact_id=ids.fact_id(scope.tenant_id, scope.ns, s_id, row["predicate"], o_id),
        subject_id=s_id,
        object_id=o_id,
        subject=row["subject"],
        predicate=row["predicate"],
        object=row["object"],
    )


async def _health(api: Api) -> Health:
    service = _REQUEST_SERVICE.get() or api.service
    if service is None:
        return Health(
            status="unavailable", graph=StoreHealth(ok=False), vectors=None, embedding_model=None
        )
    graph = service.graph
    vectors = service.vector_leg.vectors

    async def probe(check: Callable[[], Any]) -> bool:
        try:
            with anyio.fail_after(api.limits.health_timeout_s):
                await anyio.to_thread.run_sync(check, abandon_on_cancel=True)
        except Exception:
            return False
        return True

    graph_ok = await probe(lambda: graph.version(PROBE_SCOPE))
    vec_health = None
    if vectors is not None:
        vec_ok = await probe(lambda: vectors.models(PROBE_SCOPE))
        vec_health = StoreHealth(ok=vec_ok, backend=vectors.backend)
    ok = graph_ok and (vec_health is None or vec_health.ok)
    system = None
    if api.system_health is not None:
        try:
            system = await anyio.to_thread.run_sync(api.system_health)
        except Exception:  # the stores' health is what this answers first
            system = None
    return Health(
        status="ok" if ok else "unavailable",
        graph=StoreHealth(ok=graph_ok, backend=graph.backend),
        vectors=vec_health,
        embedding_model=service.current_model,
        system=system,
    )
