"""The recall HTTP API (FastAPI; OpenAPI at ``/openapi.json``, docs at ``/docs``).

    app = create_app(service=RecallService(graph, vectors, embedder),
                     keys=KeyRing("api-keys.json"), landing_dir="landing")

Endpoints (all under a bearer key except ``/healthz``; ``/metrics`` needs a key marked
``metrics`` unless the app is built with ``public_metrics=True``):

- ``POST /v1/recall``: facts answering a question, as a `RecallAnswer`.
- ``GET /v1/entities``: a scope's entities by name, alias, type and vector similarity.
- ``POST /v1/subgraph``: facts within 1-2 hops of given entity ids.
- ``GET /v1/facts``: a tenant's stored facts, filtered (entity, predicate, valid/closed/all at
  ``as_of``) and paged (``total``, ``more``, ``next_cursor``), newest first (`recall.listing`).
- ``POST /v1/triples``: explicit facts, validated at once by the pipeline's own contract
  (`schemas.triples.items_to_triples`); any reject answers 422 with every reason, else they are
  landed as one ``upsert_graph_triples`` tool turn and 202 gives their ids.
- ``POST /v1/turns``: conversation turns, redacted, checked by the landing reader's own rules
  (the same `schemas.rules.TimeWindow` as ingestion: a ``ts`` before ``MEMFLOW_HISTORY_START`` or
  too far ahead answers 422 with the reason) and landed (202); the input of tools other than the
  memory tools is not written (the pipeline never stores it).
- ``POST /v1/retractions``: retract facts (by id or triple) or forget entities: one
  ``retract_facts`` turn with the key's id as ``by``; the facts stage closes them at its time.
- ``DELETE /v1/tenants/{org}/{repo}``: erase everything of a tenant (an ``admin`` key that
  covers it; the server's `recall.ports.TenantEraser`), answering its report; 501 without one.

Writes go through `recall.writes` (the MCP server's path too) and answer ``ingest``: the
`recall.ports.IngestTrigger`'s answer (a run asked for now, when the data is expected to be
recallable), or why nothing ingests it on its own.

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
from collections.abc import Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import anyio
from fastapi import Depends, FastAPI, Query, Request, Security
from fastapi import Path as PathParam
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from fastapi.security import HTTPBearer
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException

from recall.answers import (
    EntitySearchAnswer,
    FactPage,
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
from recall.listing import MAX_PAGE, list_facts
from recall.metrics import CONTENT_TYPE, ApiMetrics
from recall.ports import IngestTrigger, TenantEraser
from recall.requests import (
    MAX_ID_CHARS,
    MAX_LIMIT,
    MAX_SEARCH_CHARS,
    ApiLimits,
    EraseAnswer,
    FactStatus,
    Health,
    RecallRequest,
    RetractionAccepted,
    RetractionsRequest,
    StoreHealth,
    SubgraphRequest,
    SystemHealth,
    TenantRef,
    TriplesAccepted,
    TriplesRequest,
    TurnsAccepted,
    TurnsRequest,
    parse_tenant,
)
from recall.service import RecallService
from recall.writes import Writes
from resources.graph.base import GraphStoreError
from resources.vector.base import VectorStoreError
from schemas.rules import DEFAULT_TIME_WINDOW, TimeWindow
from schemas.scope import Scope, ScopeError

log = logging.getLogger("memflow.api")

API_TITLE = "memflow recall API"
API_VERSION = "1.0.0"
PROBE_SCOPE = Scope("memflow-healthz", "probe")
KNOWN_SCOPE_TTL_S = 5.0
MAX_KNOWN_SCOPES = 10_000


def _json(model: BaseModel, status: int = 200) -> Response:
    return Response(model.model_dump_json(), status_code=status, media_type="application/json")


class Api:
    """State shared by the routes: the service, keys, writes, eraser, metrics."""

    def __init__(
        self,
        keys: KeyRing,
        landing_dir: str | Path | None,
        limits: ApiLimits,
        metrics: ApiMetrics,
        public_metrics: bool,
        window: TimeWindow = DEFAULT_TIME_WINDOW,
        ingest_trigger: IngestTrigger | None = None,
        eraser: TenantEraser | None = None,
    ) -> None:
        self.keys = keys
        self.window = window
        self.writes = (
            Writes(landing_dir, window=window, trigger=ingest_trigger)
            if landing_dir is not None
            else None
        )
        self.eraser = eraser
        self.limits = limits
        self.metrics = metrics
        self.public_metrics = public_metrics
        self.service: RecallService | None = None
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

    def writable(self, principal: Principal, ref: TenantRef) -> Writes:
        """The write path, if the key was granted the scope (else 404) and the server has a
        landing zone (else 503)."""
        if not principal.allows(ref.scope()):
            raise tenant_not_found()
        if self.writes is None:
            raise ApiError(503, "landing_unconfigured", "this server accepts no writes")
        return self.writes

    def forget_known(self, scope: Scope) -> None:
        self._known.pop(scope, None)


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
    eraser: TenantEraser | None = None,
    system_health: Callable[[], SystemHealth] | None = None,
) -> FastAPI:
    """The API app. Give a built `service`, or a `service_factory` run at startup (its service
    is closed at shutdown). `on_close` runs at shutdown too (e.g. to close the stores).
    Without `landing_dir` the write endpoints answer 503. `window` is the turns' time window,
    the one ingestion applies (`TimeWindow.from_settings`; default: the settings' defaults).
    `ingest_trigger` is asked for the tenant's run after each write; `eraser` erases a tenant
    (without one, ``DELETE /v1/tenants/...`` answers 501); `system_health` adds the state
    home's processes to `/healthz`."""
    if (service is None) == (service_factory is None):
        raise ValueError("give exactly one of service and service_factory")
    metrics = ApiMetrics()
    limits = limits or ApiLimits()
    api = Api(
        keys,
        landing_dir,
        limits,
        metrics,
        public_metrics,
        window or DEFAULT_TIME_WINDOW,
        ingest_trigger,
        eraser,
    )
    api.service = service
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
    _read_routes(app, api)
    _write_routes(app, api)
    _memory_routes(app, api)
    _retraction_routes(app, api)
    _erase_routes(app, api)
    _ops_routes(app, api)
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


def _authenticate(api: Api, request: Request) -> Principal:
    # The raw header, not HTTPBearer's parse: that one also takes "Bearer  key" (two spaces)
    # and "Bearer key extra"; `recall.auth.parse_bearer` takes exactly one token68. HTTPBearer
    # stays declared so the OpenAPI schema publishes the scheme.
    found = api.keys.authenticate(request.headers.get("authorization"))
    if found is None:
        raise ApiError(401, "unauthorized", "a valid bearer key is required")
    return found


def _caller(request: Request, _: Any = Security(_bearer)) -> Principal:
    return _authenticate(request.app.state.api, request)


Caller = Annotated[Principal, Depends(_caller)]


def _read_routes(app: FastAPI, api: Api) -> None:
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
            rerank=body.rerank,
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
        scope = api.readable(caller, _query_tenant(tenant))
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


def _query_tenant(tenant: str) -> Scope:
    try:
        return parse_tenant(tenant)
    except ValueError as exc:
        raise ApiError(422, "invalid_request", str(exc)) from None


WRITE_ERRORS = {**AUTH_ERRORS, **TENANT_ERRORS, **responses((503, "this server accepts no writes"))}


def _write_routes(app: FastAPI, api: Api) -> None:
    @app.post(
        "/v1/triples",
        status_code=202,
        response_model=TriplesAccepted,
        responses=WRITE_ERRORS,
        summary="Save explicit facts: validated at once, landed for the pipeline",
        tags=["write"],
    )
    def triples(body: TriplesRequest, caller: Caller) -> Response:
        writes = api.writable(caller, body)
        scope = body.scope()
        saved = writes.save_triples(
            scope, body.triples, session_id=body.session_id, client=body.client, strict=True
        )
        api.metrics.landed(scope, "triples", saved.accepted)
        return _json(saved, 202)

    @app.post(
        "/v1/turns",
        status_code=202,
        response_model=TurnsAccepted,
        responses=WRITE_ERRORS,
        summary="Offload conversation turns to the landing zone",
        tags=["write"],
    )
    def turns(body: TurnsRequest, caller: Caller) -> Response:
        writes = api.writable(caller, body)
        scope = body.scope()
        saved = writes.save_turns(scope, [t.model_dump(exclude_none=True) for t in body.turns])
        api.metrics.landed(scope, "turns", saved.accepted)
        return _json(saved, 202)


def _memory_routes(app: FastAPI, api: Api) -> None:
    @app.get(
        "/v1/facts",
        response_model=FactPage,
        responses={**AUTH_ERRORS, **TENANT_ERRORS, **STORE_ERRORS},
        summary="A tenant's stored facts, filtered and paged (newest first)",
        tags=["memory"],
    )
    def facts(
        caller: Caller,
        tenant: Annotated[str, Query(max_length=201, description="ORG/REPO")],
        entity: Annotated[
            str | None, Query(max_length=1000, description="an entity's id or name")
        ] = None,
        predicate: Annotated[str | None, Query(max_length=200)] = None,
        status: FactStatus = "valid",
        as_of: Annotated[datetime | None, Query(description="default: now")] = None,
        limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 20,
        cursor: Annotated[str | None, Query(max_length=MAX_ID_CHARS)] = None,
    ) -> Response:
        scope = api.readable(caller, _query_tenant(tenant))
        when = _aware(as_of)
        page = list_facts(
            api.svc(),
            scope,
            entity=entity,
            predicate=predicate,
            status=status,
            as_of=when,
            limit=limit,
            cursor=cursor,
        )
        return _json(page)


def _retraction_routes(app: FastAPI, api: Api) -> None:
    @app.post(
        "/v1/retractions",
        status_code=202,
        response_model=RetractionAccepted,
        responses=WRITE_ERRORS,
        summary="Retract facts or forget entities (applied by the pipeline at this time)",
        tags=["memory"],
    )
    def retractions(body: RetractionsRequest, caller: Caller) -> Response:
        writes = api.writable(caller, body)
        scope = body.scope()
        items = [i.model_dump(exclude_none=True) for i in body.retract]
        saved = writes.retract(
            scope,
            items,
            reason=body.reason,
            by=caller.by,
            client=body.client,
            session_id=body.session_id,
        )
        api.metrics.landed(scope, "retractions", saved.accepted)
        return _json(saved, 202)


def _erase_routes(app: FastAPI, api: Api) -> None:
    @app.delete(
        "/v1/tenants/{org}/{repo}",
        response_model=EraseAnswer,
        responses={
            **AUTH_ERRORS,
            **TENANT_ERRORS,
            **responses(
                (403, "the key is not an admin key"),
                (501, "this server cannot erase tenants"),
                (503, "erasing failed part way; the report says what is left"),
            ),
        },
        summary="Erase everything memflow holds for a tenant (admin keys only)",
        tags=["memory"],
    )
    def erase(
        caller: Caller,
        org: Annotated[str, PathParam(max_length=100)],
        repo: Annotated[str, PathParam(max_length=100)],
    ) -> Response:
        try:
            scope = Scope(org, repo)
        except ScopeError:
            raise tenant_not_found() from None
        if not caller.allows(scope):
            raise tenant_not_found()
        if not caller.admin:
            raise ApiError(403, "forbidden", "erasing a tenant needs an admin key")
        if api.eraser is None:
            raise ApiError(
                501,
                "erase_unavailable",
                "this server was started without a tenant eraser (memflow serve / memflow up "
                "provide one; `memflow erase --tenant ORG/REPO --yes` works without a server)",
            )
        report = api.eraser(scope)
        api.forget_known(scope)
        log.warning("tenant %s erased by %s", scope.key, caller.key_id)
        answer = EraseAnswer(
            tenant=scope.key,
            erased=not report.problems,
            removed=dict(report.removed),
            problems=list(report.problems),
            notes=list(report.notes),
        )
        return _json(answer, 200 if answer.erased else 503)


def _aware(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


def _ops_routes(app: FastAPI, api: Api) -> None:
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
            found = _authenticate(api, request)
            if not found.metrics:
                raise ApiError(403, "forbidden", "this key may not read metrics")
        return Response(api.metrics.render(), media_type=CONTENT_TYPE)


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
