"""A small client for a running ``memflow serve``: the fast path of short-lived commands.

    settings = ClientSettings.from_env()          # MEMFLOW_API_URL, MEMFLOW_API_KEY
    with MemflowClient(settings) as api:
        answer = api.recall(Scope("acme", "payments"), "which database do we use?")

    result = recall(Scope("acme", "payments"), "which database?")  # server, else in-process
    result.answer, result.source                                    # dict, "server" | "local"

Settings (read by `ClientSettings.from_env` when called, never at import):

==================================  =========================================================
``MEMFLOW_API_URL``                 the API's base URL (default ``http://127.0.0.1:8080``, what
                                    ``memflow serve`` listens on)
``MEMFLOW_API_KEY``                 a bearer key from ``memflow keys add`` (none: the server
                                    is not asked and only the in-process path can answer)
``MEMFLOW_API_CONNECT_TIMEOUT_S``   how long to wait for the TCP connection (default 0.25 s:
                                    on loopback a running server accepts in microseconds)
``MEMFLOW_API_TIMEOUT_S``           the whole request (default 5 s)
==================================  =========================================================

Errors: `ApiUnreachable` when no server answered (refused, connect timeout, read timeout,
broken response); `ApiError` when the server answered with an error (its ``code``, e.g.
``tenant_not_found``, ``unauthorized``, ``triples_rejected``, and ``details``). Only
`ApiUnreachable` falls back to in-process recall: a server that says no (a foreign tenant, a bad
key) is never worked around by reading the stores directly.

Answers are the API's JSON as plain dicts (`recall.answers` describes them). The transport is the
standard library's ``http.client`` (keep-alive, one connection per thread), not httpx: measured
here, a hook process that imports httpx and builds a client spends about 90 ms importing it and
50 ms loading the CA bundle before its first byte (p50 of a whole hook 301 ms against 144 ms on
the stdlib, 2 busy cores; see ``bench/bench_hooks.py``), and short-lived commands are what this
module is for. Nothing of the recall service is imported either. Redirects are not followed
(a key never travels to another origin); proxies from the environment are not used; answers are
read up to 16 MiB.
"""

from __future__ import annotations

import http.client
import json as _json
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import urlencode, urlsplit

from resources.settings import API_URL_SETTING as URL_SETTING
from resources.settings import DEFAULTS, KEYS_FILE, client_env, declared, local_env
from schemas.scope import Scope

DEFAULT_URL = declared(URL_SETTING).default
DEFAULT_CONNECT_TIMEOUT_S = declared("MEMFLOW_API_CONNECT_TIMEOUT_S").parse(None)
DEFAULT_TIMEOUT_S = declared("MEMFLOW_API_TIMEOUT_S").parse(None)
USER_AGENT = "memflow-client/1"
MAX_RESPONSE_BYTES = 16 << 20
# Asked again once on a fresh connection when a kept-alive one turns out closed; writes never
# are (the server may have landed them before the connection broke).
_READS = frozenset({"/healthz", "/v1/recall", "/v1/entities", "/v1/subgraph", "/v1/facts"})


def _left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("no time left")
    return left


@dataclass(frozen=True)
class ClientSettings:
    url: str = DEFAULT_URL
    key: str | None = field(default=None, repr=False)
    connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S
    timeout_s: float = DEFAULT_TIMEOUT_S

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ClientSettings:
        found = client_env(env)  # resources.settings declares the names and their ranges
        return cls(
            url=found.api_url,
            key=found.api_key,
            connect_timeout_s=found.connect_timeout_s,
            timeout_s=found.timeout_s,
        )


class ApiUnreachable(Exception):
    """No server answered. `kind`: connect, timeout or protocol."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class ApiError(Exception):
    """The server answered with an error body ``{"error": {"code", "message", "details"?}}``."""

    def __init__(
        self, status: int, code: str, message: str, details: list[Any] | None = None
    ) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.details = details or []


def _iso(t: datetime | str | None) -> str | None:
    return t.isoformat() if isinstance(t, datetime) else t


class MemflowClient:
    """The recall API over HTTP/1.1 keep-alive connections (one per thread): thread-safe."""

    def __init__(self, settings: ClientSettings | None = None) -> None:
        self.settings = settings or ClientSettings.from_env()
        url = urlsplit(self.settings.url)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"{URL_SETTING} must be an http(s) URL, not {self.settings.url!r}")
        self._https = url.scheme == "https"
        self._host = url.hostname
        self._port = url.port or (443 if self._https else 80)
        self._prefix = url.path.rstrip("/")
        self._headers = {"User-Agent": USER_AGENT, "Accept": "application/json"}
        if self.settings.key:
            self._headers["Authorization"] = f"Bearer {self.settings.key}"
        self._local = threading.local()
        self._open: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            for conn in self._open:
                conn.close()
            self._open.clear()
        self._local.__dict__.clear()

    def __enter__(self) -> MemflowClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- transport -----------------------------------------------------------------------

    def _connection(self) -> tuple[http.client.HTTPConnection, bool]:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            return conn, True
        if self._https:
            import ssl  # only HTTPS pays for loading the CA bundle

            conn = http.client.HTTPSConnection(
                self._host, self._port, context=ssl.create_default_context()
            )
        else:
            conn = http.client.HTTPConnection(self._host, self._port)
        self._local.conn = conn
        with self._lock:
            self._open.append(conn)
        return conn, False

    def _drop(self, conn: http.client.HTTPConnection) -> None:
        conn.close()
        self._local.__dict__.pop("conn", None)
        with self._lock:
            if conn in self._open:
                self._open.remove(conn)

    def _call(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: Mapping[str, Any] | None = None,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        s = self.settings
        deadline = time.monotonic() + (s.timeout_s if timeout is None else max(0.01, timeout))
        target = self._prefix + path + (f"?{urlencode(params)}" if params else "")
        headers = dict(self._headers)
        body = None
        if json is not None:
            body = _json.dumps(json, ensure_ascii=False).encode("utf-8")
            headers["Content-Type"] = "application/json"
        for attempt in (1, 2):
            conn, reused = self._connection()
            phase = "connect"
            try:
                if conn.sock is None:
                    conn.timeout = min(s.connect_timeout_s, _left(deadline))
                    conn.connect()
                phase = "request"
                assert conn.sock is not None
                conn.sock.settimeout(_left(deadline))
                conn.request(method, target, body=body, headers=headers)
                response = conn.getresponse()
                data = response.read(MAX_RESPONSE_BYTES + 1)
            except (OSError, http.client.HTTPException) as exc:
                self._drop(conn)
                stale = reused and phase == "request" and not isinstance(exc, TimeoutError)
                if stale and attempt == 1 and path in _READS:
                    continue  # the server closed an idle keep-alive connection: ask again
                kind = "timeout" if isinstance(exc, TimeoutError) and phase == "request" else (
                    "connect" if phase == "connect" else "protocol"
                )  # fmt: skip
                raise ApiUnreachable(kind, f"{s.url}: {type(exc).__name__}") from None
            if response.will_close:
                self._drop(conn)
            break
        if len(data) > MAX_RESPONSE_BYTES:
            self._drop(conn)
            raise ApiUnreachable("protocol", f"{s.url}: the answer is too large")
        try:
            decoded = _json.loads(data) if data else None
        except ValueError:
            decoded = None
        if 200 <= response.status < 300:
            if isinstance(decoded, dict):
                return decoded
            raise ApiUnreachable("protocol", f"{s.url}: the answer is not a JSON object")
        error = decoded.get("error") if isinstance(decoded, dict) else None
        if not isinstance(error, dict):  # e.g. a partial erase's report, answered 503
            body = [decoded] if isinstance(decoded, dict) else None
            raise ApiError(response.status, "http_error", response.reason or "error", body)
        return _raise(response.status, error)

    # -- endpoints -----------------------------------------------------------------------

    def health(self, timeout: float | None = None) -> dict[str, Any]:
        return self._call("GET", "/healthz", timeout=timeout)

    def recall(
        self,
        scope: Scope,
        query: str,
        *,
        ranking: str = "auto",
        as_of: datetime | str | None = None,
        hops: int = 2,
        limit: int = 40,
        timeout: float | None = None,
        rerank: bool = False,
    ) -> dict[str, Any]:
        """`rerank`: ask for the server's listwise rerank (MEMFLOW_RERANKER); the answer's
        `rerank` says whether it happened."""
        body = {"tenant": scope.key, "query": query, "ranking": ranking, "hops": hops}
        body["limit"] = limit
        if as_of is not None:
            body["as_of"] = _iso(as_of)
        if rerank:
            body["rerank"] = True
        return self._call("POST", "/v1/recall", json=body, timeout=timeout)

    def entities(
        self,
        scope: Scope,
        q: str,
        *,
        limit: int = 10,
        ranking: str = "auto",
        timeout: float | None = None,
    ) -> dict[str, Any]:
        params = {"tenant": scope.key, "q": q, "limit": limit, "ranking": ranking}
        return self._call("GET", "/v1/entities", params=params, timeout=timeout)

    def subgraph(
        self,
        scope: Scope,
        entity_ids: Sequence[str],
        *,
        hops: int = 1,
        as_of: datetime | str | None = None,
        limit: int = 40,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"tenant": scope.key, "entity_ids": list(entity_ids)}
        body.update(hops=hops, limit=limit)
        if as_of is not None:
            body["as_of"] = _iso(as_of)
        return self._call("POST", "/v1/subgraph", json=body, timeout=timeout)

    def triples(
        self,
        scope: Scope,
        triples: Sequence[Any],
        *,
        session_id: str | None = None,
        client: str = "api",
        timeout: float | None = None,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"tenant": scope.key, "triples": list(triples), "client": client}
        if session_id:
            body["session_id"] = session_id
        return self._call("POST", "/v1/triples", json=body, timeout=timeout)

    def turns(
        self, scope: Scope, turns: Sequence[Mapping[str, Any]], *, timeout: float | None = None
    ) -> dict[str, Any]:
        body = {"tenant": scope.key, "turns": [dict(t) for t in turns]}
        return self._call("POST", "/v1/turns", json=body, timeout=timeout)

    def facts(
        self,
        scope: Scope,
        *,
        entity: str | None = None,
        predicate: str | None = None,
        status: str = "valid",
        as_of: datetime | str | None = None,
        limit: int = 20,
        cursor: str | None = None,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        params: dict[str, Any] = {"tenant": scope.key, "status": status, "limit": limit}
        for name, value in (
            ("entity", entity),
            ("predicate", predicate),
            ("as_of", _iso(as_of)),
            ("cursor", cursor),
        ):
            if value is not None:
                params[name] = value
        return self._call("GET", "/v1/facts", params=params, timeout=timeout)

    def retract(
        self,
        scope: Scope,
        items: Sequence[Mapping[str, Any]],
        *,
        reason: str | None = None,
        session_id: str | None = None,
        client: str = "api",
        timeout: float | None = None,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"tenant": scope.key, "retract": [dict(i) for i in items]}
        body["client"] = client
        if reason:
            body["reason"] = reason
        if session_id:
            body["session_id"] = session_id
        return self._call("POST", "/v1/retractions", json=body, timeout=timeout)

    def erase(self, scope: Scope, *, timeout: float | None = None) -> dict[str, Any]:
        path = f"/v1/tenants/{scope.tenant_id}/{scope.ns}"
        return self._call("DELETE", path, timeout=timeout)


def _raise(status: int, error: Mapping[str, Any]) -> dict[str, Any]:
    details = error.get("details")
    raise ApiError(
        status,
        str(error.get("code") or "http_error")[:100],
        str(error.get("message") or "")[:500],
        details if isinstance(details, list) else None,
    )


# -- in-process fallback ------------------------------------------------------------------


@dataclass(frozen=True)
class LocalStores:
    """Where the in-process fallback reads (the settings ``memflow serve`` uses)."""

    data_dir: str
    graph_backend: str = "sqlite"
    gremlin_url: str = DEFAULTS["MEMFLOW_GREMLIN_URL"]

    @classmethod
    def from_env(
        cls, env: Mapping[str, str] | None = None, *, require_absolute: bool = False
    ) -> LocalStores | None:
        """None when no data directory is usable (absent, or relative when `require_absolute`:
        a hook runs in the agent's project directory, where a relative path means nothing)."""
        found = local_env(env)
        data_dir = found.data_dir
        if not data_dir or (require_absolute and not os.path.isabs(data_dir)):
            return None
        return cls(data_dir, found.graph_backend, found.gremlin_url or cls.gremlin_url)


def local_grant_allows(
    scope: Scope,
    settings: ClientSettings,
    stores: LocalStores | None,
    env: Mapping[str, str] | None = None,
) -> bool:
    """May the local fallback read `scope` for this key? When a key is configured and the keys
    file (``MEMFLOW_API_KEYS_FILE``, else ``<data>/api-keys.json``) can be read, the key must be
    in it and cover the scope, as at the API. Without a key, or without a readable keys file,
    the fallback reads what the user running it can read anyway (the data directory)."""
    if not settings.key:
        return True
    path = local_env(env).api_keys_file
    if not path and stores is not None:
        path = os.path.join(stores.data_dir, KEYS_FILE)
    if not path or not os.path.isfile(path):
        return True
    from recall.auth import KeyRing

    ring = KeyRing(path)
    if ring.error:
        return False
    principal = ring.authenticate(f"Bearer {settings.key}")
    return principal is not None and principal.allows(scope)


def local_recall(stores: LocalStores, scope: Scope, query: str, **options: Any) -> dict[str, Any]:
    """Names-only recall read directly from the graph store (no model, no vector store): what
    answers when no server does. Loads the recall service (seconds on a cold start)."""

    from recall.service import RecallService
    from resources.settings import graph_path, open_graph

    if stores.graph_backend == "sqlite" and not graph_path(stores.data_dir).is_file():
        raise FileNotFoundError("no graph store in the data directory")
    graph = open_graph(stores.graph_backend, stores.data_dir, stores.gremlin_url)
    try:
        with RecallService(graph) as service:
            options["ranking"] = "lexical"
            answer = service.recall(scope, query, **options)
            return answer.model_dump(mode="json")
    finally:
        graph.close()


@dataclass(frozen=True)
class RecallResult:
    answer: dict[str, Any]
    source: str  # server | local
    note: str | None = None  # why the local path answered


LocalRecall = Callable[..., dict[str, Any]]


def recall(
    scope: Scope,
    query: str,
    *,
    settings: ClientSettings | None = None,
    stores: LocalStores | None = None,
    local: LocalRecall | None = None,
    client: MemflowClient | None = None,
    **options: Any,
) -> RecallResult:
    """Recall from the running server; when none answers (or no key is configured), in-process
    from the local stores (names only). An error the server answers (e.g. ``tenant_not_found``
    for a scope the key does not cover) is raised as `ApiError`, never worked around."""
    settings = settings or ClientSettings.from_env()
    note = "no API key configured (MEMFLOW_API_KEY)"
    if settings.key:
        own = client is None
        api = client or MemflowClient(settings)
        try:
            return RecallResult(api.recall(scope, query, **options), "server")
        except ApiUnreachable as exc:
            note = f"the memflow API at {settings.url} is unreachable ({exc.kind})"
        finally:
            if own:
                api.close()
    options.pop("timeout", None)
    stores = stores or LocalStores.from_env()
    if not local_grant_allows(scope, settings, stores):
        raise ApiError(404, "tenant_not_found", "tenant not found")
    if local is not None:
        return RecallResult(local(scope, query, **options), "local", note)
    if stores is None:
        raise ApiUnreachable("connect", f"{note}; and no local data directory (MEMFLOW_DATA_DIR)")
    return RecallResult(local_recall(stores, scope, query, **options), "local", note)
