"""Where the MCP tools get their answers: a typed `Memory` protocol and its two backends.

- `ApiMemory`: the running recall API over HTTP (`recall.client`), with the server's key (stdio)
  or the caller's own bearer key (HTTP: the API applies its key rules to the caller). Answers in
  every mode the API has (hybrid with a model up).
- `LocalMemory`: this process: a `recall.service.RecallService` (given, e.g. the one
  ``memflow serve`` built, or opened from the local stores for names-only recall) and the write
  path `recall.writes.Writes` into a landing zone.

Both answer the API's JSON as dicts; both raise `MemoryToolError` for a call they cannot answer.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from recall.client import ApiError, ApiUnreachable, LocalStores, MemflowClient
from recall.ports import IngestTrigger, TenantEraser
from schemas.scope import Scope


class MemoryToolError(Exception):
    """A tool call the memory cannot answer; `code` is stable (the API's error codes)."""

    def __init__(self, code: str, message: str, details: list[Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = details or []


def not_found() -> MemoryToolError:
    return MemoryToolError("tenant_not_found", "tenant not found")


class Memory(Protocol):
    """What a backend answers. Items handed to the writes are already checked by the tools."""

    def recall(
        self, scope: Scope, question: str, *, as_of: datetime | None, limit: int, ranking: str
    ) -> dict[str, Any]: ...

    def search(self, scope: Scope, query: str, *, limit: int) -> dict[str, Any]: ...

    def subgraph(
        self, scope: Scope, ids: Sequence[str], *, hops: int, as_of: datetime | None, limit: int
    ) -> dict[str, Any]: ...

    def facts(
        self,
        scope: Scope,
        *,
        entity: str | None,
        predicate: str | None,
        status: str,
        as_of: datetime | None,
        limit: int,
        cursor: str | None,
    ) -> dict[str, Any]: ...

    def save_triples(
        self, scope: Scope, items: list[dict[str, Any]], *, session_id: str, client: str
    ) -> dict[str, Any]: ...

    def save_turns(self, scope: Scope, turns: list[dict[str, Any]]) -> dict[str, Any]: ...

    def retract(
        self,
        scope: Scope,
        items: list[dict[str, Any]],
        *,
        reason: str | None,
        session_id: str,
        client: str,
        by: str,
    ) -> dict[str, Any]: ...

    def erase(self, scope: Scope) -> dict[str, Any]: ...

    def close(self) -> None: ...


def _jsonable(turn: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v.isoformat() if isinstance(v, datetime) else v for k, v in turn.items()}


class ApiMemory:
    """The running API. `key`, when given, replaces the settings' key for every call (the HTTP
    server forwards each caller's own key)."""

    def __init__(self, client: MemflowClient) -> None:
        self.client = client

    @classmethod
    def with_key(cls, client: MemflowClient, key: str) -> ApiMemory:
        return cls(MemflowClient(replace(client.settings, key=key)))

    def recall(
        self, scope: Scope, question: str, *, as_of: datetime | None, limit: int, ranking: str
    ) -> dict[str, Any]:
        return self.client.recall(scope, question, as_of=as_of, limit=limit, ranking=ranking)

    def search(self, scope: Scope, query: str, *, limit: int) -> dict[str, Any]:
        return self.client.entities(scope, query, limit=limit)

    def subgraph(
        self, scope: Scope, ids: Sequence[str], *, hops: int, as_of: datetime | None, limit: int
    ) -> dict[str, Any]:
        return self.client.subgraph(scope, ids, hops=hops, as_of=as_of, limit=limit)

    def facts(self, scope: Scope, **options: Any) -> dict[str, Any]:
        return self.client.facts(scope, **options)

    def save_triples(
        self, scope: Scope, items: list[dict[str, Any]], *, session_id: str, client: str
    ) -> dict[str, Any]:
        return self.client.triples(scope, items, session_id=session_id, client=client)

    def save_turns(self, scope: Scope, turns: list[dict[str, Any]]) -> dict[str, Any]:
        return self.client.turns(scope, [_jsonable(t) for t in turns])

    def retract(
        self,
        scope: Scope,
        items: list[dict[str, Any]],
        *,
        reason: str | None,
        session_id: str,
        client: str,
        by: str,
    ) -> dict[str, Any]:
        # The API records its caller (the key) as `by`; `by` is for the local path only.
        return self.client.retract(
            scope, items, reason=reason, session_id=session_id, client=client
        )

    def erase(self, scope: Scope) -> dict[str, Any]:
        try:
            return self.client.erase(scope)
        except ApiError as exc:
            if exc.status == 503 and exc.details:  # a partial erase: its report
                return dict(exc.details[0])
            raise

    def close(self) -> None:
        self.client.close()


class LocalMemory:
    """Recall and writes in this process. `service`: a recall service to answer with (its
    modes); else one is opened from `stores` on first use (names only, no model). Writes land
    in `landing_dir`; `trigger` is asked for the tenant's run after each; `eraser` erases."""

    def __init__(
        self,
        service: Any | None = None,
        *,
        stores: LocalStores | None = None,
        landing_dir: Path | None = None,
        trigger: IngestTrigger | None = None,
        eraser: TenantEraser | None = None,
    ) -> None:
        self._service = service
        self._stores = stores
        self._own: list[Callable[[], None]] = []
        self._lock = threading.Lock()
        self.landing_dir = landing_dir
        self.trigger = trigger
        self.eraser = eraser
        self._writes: Any | None = None

    def service(self) -> Any:
        with self._lock:
            if self._service is None:
                if self._stores is None:
                    raise MemoryToolError("unavailable", "no local stores are configured")
                from recall.service import RecallService
                from resources.settings import graph_path, open_graph

                data = self._stores.data_dir
                if self._stores.graph_backend == "sqlite" and not graph_path(data).is_file():
                    raise MemoryToolError("unavailable", "the local data directory holds no graph")
                graph = open_graph(self._stores.graph_backend, data, self._stores.gremlin_url)
                self._service = RecallService(graph)
                self._own = [self._service.close, graph.close]
            return self._service

    def writes(self) -> Any:
        from recall.writes import Writes

        if self.landing_dir is None:
            raise MemoryToolError(
                "landing_unconfigured", "no landing zone is configured for writes"
            )
        with self._lock:
            if self._writes is None:
                self._writes = Writes(self.landing_dir, trigger=self.trigger)
            return self._writes

    @property
    def can_write(self) -> bool:
        return self.landing_dir is not None

    def close(self) -> None:
        for close in self._own:
            close()

    def _known(self, scope: Scope) -> Any:
        service = self.service()
        index = service.indexes.get(scope)
        if index.entity_count == 0 and not index.facts:
            raise not_found()
        return service

    def recall(
        self, scope: Scope, question: str, *, as_of: datetime | None, limit: int, ranking: str
    ) -> dict[str, Any]:
        answer = self._known(scope).recall(
            scope, question, as_of=as_of, limit=limit, ranking=ranking
        )
        return answer.model_dump(mode="json")

    def search(self, scope: Scope, query: str, *, limit: int) -> dict[str, Any]:
        return self._known(scope).search_entities(scope, query, limit).model_dump(mode="json")

    def subgraph(
        self, scope: Scope, ids: Sequence[str], *, hops: int, as_of: datetime | None, limit: int
    ) -> dict[str, Any]:
        answer = self._known(scope).subgraph(scope, ids, hops=hops, as_of=as_of, limit=limit)
        return answer.model_dump(mode="json")

    def facts(self, scope: Scope, **options: Any) -> dict[str, Any]:
        from recall.listing import list_facts

        return list_facts(self._known(scope), scope, **options).model_dump(mode="json")

    def save_triples(
        self, scope: Scope, items: list[dict[str, Any]], *, session_id: str, client: str
    ) -> dict[str, Any]:
        saved = self.writes().save_triples(
            scope, items, session_id=session_id, client=client, strict=True, prefix="mcp"
        )
        return saved.model_dump(mode="json")

    def save_turns(self, scope: Scope, turns: list[dict[str, Any]]) -> dict[str, Any]:
        return self.writes().save_turns(scope, turns).model_dump(mode="json")

    def retract(
        self,
        scope: Scope,
        items: list[dict[str, Any]],
        *,
        reason: str | None,
        session_id: str,
        client: str,
        by: str,
    ) -> dict[str, Any]:
        saved = self.writes().retract(
            scope, items, reason=reason, by=by, client=client, session_id=session_id, prefix="mcp"
        )
        return saved.model_dump(mode="json")

    def erase(self, scope: Scope) -> dict[str, Any]:
        if self.eraser is None:
            raise MemoryToolError(
                "erase_unavailable",
                "this server cannot erase tenants: run `memflow erase --tenant ORG/REPO --yes`",
            )
        report = self.eraser(scope)
        return {
            "tenant": scope.key,
            "erased": not report.problems,
            "removed": dict(report.removed),
            "problems": list(report.problems),
            "notes": list(report.notes),
        }


__all__ = [
    "ApiError",
    "ApiMemory",
    "ApiUnreachable",
    "LocalMemory",
    "Memory",
    "MemoryToolError",
    "not_found",
]
