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

Answers are the API's JSON as plain dicts (`recall.models` describes them); importing this
module loads httpx and nothing of the recall service, so a hook starts fast. Redirects are not
followed (a key never travels to another origin).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import httpx

from resources.scope import Scope

URL_SETTING = "MEMFLOW_API_URL"
KEY_SETTING = "MEMFLOW_API_KEY"
CONNECT_TIMEOUT_SETTING = "MEMFLOW_API_CONNECT_TIMEOUT_S"
TIMEOUT_SETTING = "MEMFLOW_API_TIMEOUT_S"
DEFAULT_URL = "http://127.0.0.1:8080"
DEFAULT_CONNECT_TIMEOUT_S = 0.25
DEFAULT_TIMEOUT_S = 5.0
USER_AGENT = "memflow-client/1"


@dataclass(frozen=True)
class ClientSettings:
    url: str = DEFAULT_URL
    key: str | None = field(default=None, repr=False)
    connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S
    timeout_s: float = DEFAULT_TIMEOUT_S

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ClientSettings:
        env = os.environ if env is None else env
        return cls(
            url=(env.get(URL_SETTING) or "").strip() or DEFAULT_URL,
            key=(env.get(KEY_SETTING) or "").strip() or None,
            connect_timeout_s=_float(env.get(CONNECT_TIMEOUT_SETTING), DEFAULT_CONNECT_TIMEOUT_S),
            timeout_s=_float(env.get(TIMEOUT_SETTING), DEFAULT_TIMEOUT_S),
        )


def _float(value: str | None, default: float) -> float:
    try:
        parsed = float(value) if value else default
    except ValueError:
        return default
    return parsed if 0 < parsed < 3600 else default


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
    """The recall API over HTTP. Thread-safe (one httpx connection pool)."""

    def __init__(
        self,
        settings: ClientSettings | None = None,
        *,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.settings = settings or ClientSettings.from_env()
        headers = {"User-Agent": USER_AGENT}
        if self.settings.key:
            headers["Authorization"] = f"Bearer {self.settings.key}"
        self._http = httpx.Client(
            base_url=self.settings.url.rstrip("/"),
            headers=headers,
            timeout=self._timeout(None),
            follow_redirects=False,
            transport=transport,
            trust_env=False,  # proxies from the environment never see the key
        )

    def _timeout(self, total: float | None) -> httpx.Timeout:
        s = self.settings
        total = s.timeout_s if total is None else max(0.01, total)
        return httpx.Timeout(total, connect=min(s.connect_timeout_s, total))

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> MemflowClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- transport -----------------------------------------------------------------------

    def _call(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: Mapping[str, Any] | None = None,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        try:
            response = self._http.request(
                method, path, json=json, params=params, timeout=self._timeout(timeout)
            )
        except httpx.TimeoutException as exc:
            kind = "connect" if isinstance(exc, httpx.ConnectTimeout) else "timeout"
            raise ApiUnreachable(kind, f"{self.settings.url}: {type(exc).__name__}") from None
        except httpx.TransportError as exc:
            kind = "connect" if isinstance(exc, httpx.ConnectError) else "protocol"
            raise ApiUnreachable(kind, f"{self.settings.url}: {type(exc).__name__}") from None
        try:
            body = response.json()
        except ValueError:
            body = None
        if response.is_success and isinstance(body, dict):
            return body
        if response.is_success:
            raise ApiUnreachable("protocol", f"{self.settings.url}: the answer is not JSON")
        error = body.get("error") if isinstance(body, dict) else None
        if not isinstance(error, dict):
            raise ApiError(response.status_code, "http_error", response.reason_phrase)
        return _raise(response.status_code, error)

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
    ) -> dict[str, Any]:
        body = {"tenant": scope.key, "query": query, "ranking": ranking, "hops": hops}
        body["limit"] = limit
        if as_of is not None:
            body["as_of"] = _iso(as_of)
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
    gremlin_url: str = "ws://127.0.0.1:18182/gremlin"

    @classmethod
    def from_env(
        cls, env: Mapping[str, str] | None = None, *, require_absolute: bool = False
    ) -> LocalStores | None:
        """None when no data directory is usable (absent, or relative when `require_absolute`:
        a hook runs in the agent's project directory, where a relative path means nothing)."""
        env = os.environ if env is None else env
        data_dir = (env.get("MEMFLOW_DATA_DIR") or "").strip()
        if not data_dir or (require_absolute and not os.path.isabs(data_dir)):
            return None
        return cls(
            data_dir,
            (env.get("MEMFLOW_GRAPH_BACKEND") or "sqlite").strip() or "sqlite",
            (env.get("MEMFLOW_GREMLIN_URL") or "").strip() or cls.gremlin_url,
        )


def local_recall(stores: LocalStores, scope: Scope, query: str, **options: Any) -> dict[str, Any]:
    """Names-only recall read directly from the graph store (no model, no vector store): what
    answers when no server does. Loads the recall service (seconds on a cold start)."""
    from pathlib import Path

    from recall.service import RecallService
    from resources.graph.factory import open_graph_store

    if stores.graph_backend == "sqlite" and not (Path(stores.data_dir) / "graph.sqlite").is_file():
        raise FileNotFoundError("no graph store in the data directory")
    graph = open_graph_store(
        stores.graph_backend,
        sqlite_path=str(Path(stores.data_dir) / "graph.sqlite"),
        gremlin_url=stores.gremlin_url,
    )
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
    if local is not None:
        return RecallResult(local(scope, query, **options), "local", note)
    stores = stores or LocalStores.from_env()
    if stores is None:
        raise ApiUnreachable("connect", f"{note}; and no local data directory (MEMFLOW_DATA_DIR)")
    return RecallResult(local_recall(stores, scope, query, **options), "local", note)
