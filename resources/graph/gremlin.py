"""The scale-out graph store: any Apache TinkerPop Gremlin server, through gremlinpython.

Portable bytecode only (GraphBinary): no lambdas, no scripts, no caller-chosen element ids.
Entities are `entity` vertices and facts are `fact` edges (subject -> object), both found by
business-key properties (`entity_id`, `fact_id`). Every element lookup is immediately narrowed by
`has('tenant_id', t).has('ns', n)`; values always travel as bytecode arguments.

Upserts are the TinkerPop 3.5 idiom `fold().coalesce(unfold(), addV(...))` (HugeGraph and other
3.5 servers have no `mergeV`), several per traversal. Chains are kept short: a traversal's
compile cost on the server grows faster than its length (see bench/bench_graph_sync.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime
from typing import Any, TypeVar

import aiohttp
from gremlin_python.driver.driver_remote_connection import DriverRemoteConnection
from gremlin_python.driver.protocol import GremlinServerError
from gremlin_python.driver.serializer import GraphBinarySerializersV1
from gremlin_python.process.anonymous_traversal import traversal
from gremlin_python.process.graph_traversal import GraphTraversal, GraphTraversalSource, __
from gremlin_python.process.traversal import Cardinality, Order, P
from gremlin_python.statics import long
from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential

from resources.graph.base import GraphStore, GraphStoreError
from resources.graph.common import (
    OPEN_END_MICROS,
    assemble_expansion,
    from_micros,
    to_micros,
    unique_ids,
)
from resources.records import EntityRecord, ExpandedFact, FactRecord
from resources.scope import Scope

ENTITY = "entity"
FACT = "fact"
SCOPE_MARKER = "memflow_scope"  # one vertex per scope, holding its version token

_ENTITY_KEYS = ("entity_id", "name", "aliases", "types", "row_hash")
_FACT_KEYS = (
    "fact_id",
    "subject_id",
    "subject",
    "predicate",
    "object_id",
    "object",
    "confidence",
    "valid_from",
    "valid_to",
    "supersedes",
    "superseded_by",
    "session_id",
    "turn_id",
    "client",
    "model",
    "source",
    "row_hash",
)
_ID_CHUNK = 1000  # ids per `within(...)` argument

T = TypeVar("T")
Source = GraphTraversalSource | GraphTraversal


class GremlinGraphStore(GraphStore):
    """Thread-safe; one connection pool per store. Construction fails fast if the URL is dead."""

    backend = "gremlin"

    def __init__(
        self,
        url: str,
        traversal_source: str = "g",
        *,
        entity_batch: int = 50,
        fact_batch: int = 10,
        pool_size: int = 2,
        timeout_s: float = 120.0,
        connect_attempts: int = 5,
    ) -> None:
        if entity_batch < 1 or fact_batch < 1:
            raise ValueError("batch sizes must be at least 1")
        self.url = url
        self.traversal_source = traversal_source
        self.entity_batch = entity_batch
        self.fact_batch = fact_batch
        self._pool_size = pool_size
        self._timeout_s = timeout_s
        self._attempts = max(1, connect_attempts)
        self._lock = threading.Lock()
        self._conn: DriverRemoteConnection | None = None
        self._g: GraphTraversalSource | None = None
        self._closed = False
        self._call(lambda g: g.inject(1).to_list())

    def __repr__(self) -> str:
        return f"GremlinGraphStore({self.url!r}, {self.traversal_source!r})"

    # -- connection --------------------------------------------------------------------------

    def _source(self) -> GraphTraversalSource:
        with self._lock:
            if self._closed:
                raise GraphStoreError(f"gremlin graph store {self.url} is closed")
            if self._g is None:
                self._conn = DriverRemoteConnection(
                    self.url,
                    self.traversal_source,
                    message_serializer=GraphBinarySerializersV1(),
                    pool_size=self._pool_size,
                    read_timeout=self._timeout_s,
                    write_timeout=self._timeout_s,
                    max_content_length=64 * 1024 * 1024,
                )
                self._g = traversal().with_(self._conn)
            return self._g

    def _reset(self, *_: object) -> None:
        # A connection that failed to open is never returned to gremlinpython's pool, so a
        # retry needs a fresh connection object rather than the old one.
        with self._lock:
            conn, self._conn, self._g = self._conn, None, None
        if conn is not None:
            # It is being discarded after a failure; closing it may fail the same way.
            with contextlib.suppress(Exception):
                conn.close()

    def _call(self, fn: Callable[[GraphTraversalSource], T]) -> T:
        retrying = Retrying(
            retry=retry_if_exception(_is_connection_error),
            stop=stop_after_attempt(self._attempts),
            wait=wait_exponential(multiplier=0.2, max=3.0),
            before_sleep=self._reset,
            reraise=True,
        )
        try:
            for attempt in retrying:
                with attempt:
                    return fn(self._source())
        except GraphStoreError:
            raise
        except GremlinServerError as exc:
            raise GraphStoreError(f"gremlin server {self.url} refused a traversal: {exc}") from exc
        except Exception as exc:
            if _is_connection_error(exc):
                self._reset()
                raise GraphStoreError(
                    f"cannot reach gremlin server {self.url} "
                    f"(after {self._attempts} attempts): {exc}"
                ) from exc
            raise
        raise AssertionError("unreachable")  # pragma: no cover - Retrying returns or raises

    # -- writes ------------------------------------------------------------------------------

    def upsert_entities(self, scope: Scope, entities: Sequence[EntityRecord]) -> int:
        rows = list({e.entity_id: e for e in entities}.values())
        if not rows:
            return 0
        for batch in _chunks(rows, self.entity_batch):

            def write(g: GraphTraversalSource, batch: list[EntityRecord] = batch) -> None:
                t: Source = g
                for e in batch:
                    t = _upsert_entity(t, scope, e)
                t.iterate()

            self._call(write)
        self._bump(scope)
        return len(rows)

    def upsert_facts(self, scope: Scope, facts: Sequence[FactRecord]) -> int:
        rows = list({f.fact_id: f for f in facts}.values())
        if not rows:
            return 0
        endpoints = sorted({e for f in rows for e in (f.subject_id, f.object_id)})
        found = set(self._existing_entity_ids(scope, endpoints))
        missing = [e for e in endpoints if e not in found]
        if missing:
            raise ValueError(f"facts reference entities not in scope {scope}: {missing[:5]}")
        self._drop_moved_edges(scope, rows)
        for batch in _chunks(rows, self.fact_batch):

            def write(g: GraphTraversalSource, batch: list[FactRecord] = batch) -> None:
                t: Source = g
                for f in batch:
                    t = _upsert_fact(t, scope, f)
                t.iterate()

            self._call(write)
        self._bump(scope)
        return len(rows)

    def supersede(self, scope: Scope, old_fact_id: str, new_fact_id: str, at: datetime) -> None:
        at_us = to_micros(at)
        if old_fact_id == new_fact_id:
            raise ValueError(f"fact {old_fact_id} cannot supersede itself")

        rows = self._call(
            lambda g: (
                _facts_e(g, scope)
                .has("fact_id", P.within([old_fact_id, new_fact_id]))
                .project("fact_id", "valid_from", "valid_to")
                .by("fact_id")
                .by("valid_from")
                .by("valid_to")
                .to_list()
            )
        )
        found = {r["fact_id"]: (int(r["valid_from"]), int(r["valid_to"])) for r in rows}
        if old_fact_id not in found:
            raise KeyError(f"fact {old_fact_id} is not in scope {scope}")
        if new_fact_id not in found:
            raise KeyError(f"replacement fact {new_fact_id} is not in scope {scope}")
        valid_from, valid_to = found[old_fact_id]
        if at_us < valid_from:
            raise ValueError(f"fact {old_fact_id} cannot be closed before it became valid")
        closed = min(valid_to, at_us)

        def write(g: GraphTraversalSource) -> None:
            # Cleared row hashes make the next sync rewrite both rows from the table.
            (
                _facts_e(g, scope)
                .has("fact_id", old_fact_id)
                .property("valid_to", long(closed))
                .property("superseded_by", new_fact_id)
                .property("row_hash", "")
                .iterate()
            )
            (
                _facts_e(g, scope)
                .has("fact_id", new_fact_id)
                .property("supersedes", old_fact_id)
                .property("row_hash", "")
                .iterate()
            )

        self._call(write)
        self._bump(scope)

    def delete_entities(self, scope: Scope, entity_ids: Iterable[str]) -> int:
        """Deletes the entities and, with their vertices, every fact touching them."""
        n = 0
        for chunk in _chunks(unique_ids(entity_ids), _ID_CHUNK):
            n += self._call(
                lambda g, chunk=chunk: (
                    _entities_v(g, scope)
                    .has("entity_id", P.within(chunk))
                    .side_effect(__.drop())
                    .count()
                    .next()
                )
            )
        if n:
            self._bump(scope)
        return n

    def delete_facts(self, scope: Scope, fact_ids: Iterable[str]) -> int:
        n = 0
        for chunk in _chunks(unique_ids(fact_ids), _ID_CHUNK):
            n += self._call(
                lambda g, chunk=chunk: (
                    _facts_e(g, scope)
                    .has("fact_id", P.within(chunk))
                    .side_effect(__.drop())
                    .count()
                    .next()
                )
            )
        if n:
            self._bump(scope)
        return n

    def delete_scope(self, scope: Scope) -> None:
        # Dropping the vertices drops their edges; the marker goes too, so version() is "0"
        # again, the token of an empty scope.
        self._call(lambda g: _scoped(g.V(), scope).drop().iterate())

    def _bump(self, scope: Scope) -> None:
        token = uuid.uuid4().hex
        self._call(
            lambda g: (
                _scoped(g.V(), scope)
                .has_label(SCOPE_MARKER)
                .fold()
                .coalesce(
                    __.unfold(),
                    __.add_v(SCOPE_MARKER)
                    .property("tenant_id", scope.tenant_id)
                    .property("ns", scope.ns),
                )
                .property(Cardinality.single, "version", token)
                .iterate()
            )
        )

    def _existing_entity_ids(self, scope: Scope, ids: Sequence[str]) -> list[str]:
        out: list[str] = []
        for chunk in _chunks(list(ids), _ID_CHUNK):
            out += self._call(
                lambda g, chunk=chunk: (
                    _entities_v(g, scope)
                    .has("entity_id", P.within(chunk))
                    .values("entity_id")
                    .to_list()
                )
            )
        return out

    def _drop_moved_edges(self, scope: Scope, facts: list[FactRecord]) -> None:
        """An edge cannot change its ends: drop stored facts whose subject or object changed."""
        wanted = {f.fact_id: (f.subject_id, f.object_id) for f in facts}
        moved: list[str] = []
        for chunk in _chunks(sorted(wanted), _ID_CHUNK):
            stored = self._call(
                lambda g, chunk=chunk: (
                    _facts_e(g, scope)
                    .has("fact_id", P.within(chunk))
                    .project("f", "s", "o")
                    .by("fact_id")
                    .by("subject_id")
                    .by("object_id")
                    .to_list()
                )
            )
            moved += [r["f"] for r in stored if (r["s"], r["o"]) != wanted[r["f"]]]
        for chunk in _chunks(moved, _ID_CHUNK):
            self._call(
                lambda g, chunk=chunk: (
                    _facts_e(g, scope).has("fact_id", P.within(chunk)).drop().iterate()
                )
            )

    # -- reads -------------------------------------------------------------------------------

    def entities(self, scope: Scope) -> list[EntityRecord]:
        rows = self._call(lambda g: _entities_read(g, scope).element_map(*_ENTITY_KEYS).to_list())
        return sorted((_entity(r) for r in rows), key=lambda e: e.entity_id)

    def get_entities(self, scope: Scope, entity_ids: Iterable[str]) -> list[EntityRecord]:
        rows: list[dict[Any, Any]] = []
        for chunk in _chunks(unique_ids(entity_ids), _ID_CHUNK):
            rows += self._call(
                lambda g, chunk=chunk: (
                    _entities_read(g, scope)
                    .has("entity_id", P.within(chunk))
                    .element_map(*_ENTITY_KEYS)
                    .to_list()
                )
            )
        return sorted((_entity(r) for r in rows), key=lambda e: e.entity_id)

    def facts(self, scope: Scope) -> list[FactRecord]:
        rows = self._call(lambda g: _facts_read(g, scope).element_map(*_FACT_KEYS).to_list())
        return sorted((_fact(r) for r in rows), key=lambda f: f.fact_id)

    def expand(
        self,
        scope: Scope,
        seeds: Sequence[str],
        *,
        hops: int = 1,
        limit: int = 40,
        as_of: datetime,
    ) -> list[ExpandedFact]:
        t = long(to_micros(as_of))

        def fetch(ids: Sequence[str], n: int) -> list[FactRecord]:
            rows = self._call(
                lambda g: (
                    _entities_v(g, scope)
                    .has("entity_id", P.within(list(ids)))
                    .both_e(FACT)
                    .has("tenant_id", scope.tenant_id)
                    .has("ns", scope.ns)
                    .has("valid_from", P.lte(t))
                    .has("valid_to", P.gt(t))
                    .has("row_hash")
                    .dedup()
                    .order()
                    .by("confidence", Order.desc)
                    .by("fact_id", Order.asc)
                    .limit(n)
                    .element_map(*_FACT_KEYS)
                    .to_list()
                )
            )
            return [_fact(r) for r in rows]

        return assemble_expansion(seeds, hops=hops, limit=limit, fetch=fetch)

    def row_hashes(self, scope: Scope) -> tuple[dict[str, str], dict[str, str]]:
        def read(g: GraphTraversalSource) -> tuple[dict[str, Any], dict[str, Any]]:
            ents = _entities_read(g, scope).group().by("entity_id").by("row_hash").next()
            facts = _facts_read(g, scope).group().by("fact_id").by("row_hash").next()
            return ents, facts

        ents, facts = self._call(read)
        return (
            {k: _only(v) for k, v in ents.items()},
            {k: _only(v) for k, v in facts.items()},
        )

    def counts(self, scope: Scope) -> dict[str, int]:
        def read(g: GraphTraversalSource) -> dict[str, int]:
            return {
                "entities": _entities_read(g, scope).count().next(),
                "facts": _facts_read(g, scope).count().next(),
            }

        return self._call(read)

    def version(self, scope: Scope) -> str:
        tokens = self._call(
            lambda g: _scoped(g.V(), scope).has_label(SCOPE_MARKER).values("version").to_list()
        )
        return str(tokens[0]) if tokens else "0"

    def scopes(self) -> list[Scope]:
        # The one cross-scope read (an operator listing); it returns scope names only.
        rows = self._call(
            lambda g: (
                g.V()
                .has_label(ENTITY)
                .has("row_hash")
                .project("t", "n")
                .by("tenant_id")
                .by("ns")
                .dedup()
                .to_list()
            )
        )
        return sorted({Scope(r["t"], r["n"]) for r in rows}, key=lambda s: (s.tenant_id, s.ns))

    def close(self) -> None:
        self._reset()
        with self._lock:
            self._closed = True


# -- traversal building blocks ---------------------------------------------------------------


def _scoped(t: GraphTraversal, scope: Scope) -> GraphTraversal:
    return t.has("tenant_id", scope.tenant_id).has("ns", scope.ns)


def _entities_v(g: Source, scope: Scope) -> GraphTraversal:
    return _scoped(g.V(), scope).has_label(ENTITY)


def _facts_e(g: GraphTraversalSource, scope: Scope) -> GraphTraversal:
    return _scoped(g.E(), scope).has_label(FACT)


def _entities_read(g: Source, scope: Scope) -> GraphTraversal:
    # Servers without transactions (TinkerGraph) show a new element before all its properties
    # are set. Upserts write `row_hash` last, so readers skip elements that lack it.
    return _entities_v(g, scope).has("row_hash")


def _facts_read(g: GraphTraversalSource, scope: Scope) -> GraphTraversal:
    return _facts_e(g, scope).has("row_hash")


def _upsert_entity(t: Source, scope: Scope, e: EntityRecord) -> GraphTraversal:
    return (
        _entities_v(t, scope)
        .has("entity_id", e.entity_id)
        .fold()
        .coalesce(
            __.unfold(),
            __.add_v(ENTITY)
            .property("tenant_id", scope.tenant_id)
            .property("ns", scope.ns)
            .property("entity_id", e.entity_id),
        )
        .property(Cardinality.single, "name", e.name)
        .property(Cardinality.single, "aliases", json.dumps(list(e.aliases), ensure_ascii=False))
        .property(Cardinality.single, "types", json.dumps(list(e.types), ensure_ascii=False))
        .property(Cardinality.single, "row_hash", e.row_hash)
    )


def _upsert_fact(t: Source, scope: Scope, f: FactRecord) -> GraphTraversal:
    # The subject exists (checked before), so exactly one traverser leaves each upsert and the
    # next one in the chain runs once.
    t = (
        _entities_v(t, scope)
        .has("entity_id", f.subject_id)
        .coalesce(
            __.out_e(FACT).has("fact_id", f.fact_id).limit(1),
            __.add_e(FACT)
            .to(_entities_v(__, scope).has("entity_id", f.object_id))
            .property("tenant_id", scope.tenant_id)
            .property("ns", scope.ns)
            .property("fact_id", f.fact_id),
        )
    )
    for key, value in _fact_values(f).items():
        if key != "fact_id":
            t = t.property(key, value)
    return t


def _fact_values(f: FactRecord) -> dict[str, Any]:
    return {
        "fact_id": f.fact_id,
        "subject_id": f.subject_id,
        "subject": f.subject,
        "predicate": f.predicate,
        "object_id": f.object_id,
        "object": f.object,
        "confidence": float(f.confidence),
        "valid_from": long(to_micros(f.valid_from)),
        "valid_to": long(OPEN_END_MICROS if f.valid_to is None else to_micros(f.valid_to)),
        # Not every Gremlin server stores nulls: "" stands for "none".
        "supersedes": f.supersedes or "",
        "superseded_by": f.superseded_by or "",
        "session_id": f.session_id,
        "turn_id": f.turn_id,
        "client": f.client,
        "model": f.model,
        "source": f.source,
        "row_hash": f.row_hash,
    }


def _entity(row: dict[Any, Any]) -> EntityRecord:
    return EntityRecord(
        entity_id=row["entity_id"],
        name=row["name"],
        aliases=tuple(json.loads(row["aliases"])),
        types=tuple(json.loads(row["types"])),
        row_hash=row["row_hash"],
    )


def _fact(row: dict[Any, Any]) -> FactRecord:
    values = {k: row[k] for k in _FACT_KEYS}
    valid_to = int(values["valid_to"])
    values["valid_from"] = from_micros(int(values["valid_from"]))
    values["valid_to"] = None if valid_to >= OPEN_END_MICROS else from_micros(valid_to)
    values["confidence"] = float(values["confidence"])
    values["supersedes"] = values["supersedes"] or None
    values["superseded_by"] = values["superseded_by"] or None
    return FactRecord(**values)


def _only(value: Any) -> Any:
    """group().by(key).by(key) folds each group into a list; ids are unique, take the one."""
    return value[0] if isinstance(value, list) and len(value) == 1 else value


def _chunks(items: list[T], size: int) -> Iterator[list[T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _is_connection_error(exc: BaseException) -> bool:
    if isinstance(exc, GremlinServerError):
        return False
    if isinstance(exc, OSError | aiohttp.ClientError | asyncio.TimeoutError | TimeoutError):
        return True
    # gremlinpython reports a dropped websocket as a bare RuntimeError.
    return isinstance(exc, RuntimeError) and "connection" in str(exc).lower()
