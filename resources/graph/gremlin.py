"""The scale-out graph store: any Apache TinkerPop Gremlin server, through gremlinpython.

Portable bytecode only (GraphBinary): no lambdas, no scripts, no caller-chosen element ids.
A fact's `sources` (the turns that stated it) is one property, a JSON string
(`resources.graph.common.encode_sources`), as in the SQLite store.
Entities are `entity` vertices and facts are `fact` edges (subject -> object), both found by
business-key properties (`entity_id`, `fact_id`). Every element lookup is immediately narrowed by
`has('tenant_id', t).has('ns', n)`; values always travel as bytecode arguments.

Upserts are the TinkerPop 3.5 idiom `fold().coalesce(unfold(), addV(...))` (HugeGraph and other
3.5 servers have no `mergeV`), several per traversal. Chains are kept short: on Gremlin Server
3.8 a chain's compile cost grew faster than its length (100 fact upserts per traversal took
about 3x longer per fact than 10). `new_rows="inject"` writes rows found absent with a few
data-driven traversals instead, still portable to 3.5; on the same server mergeV/mergeE
(3.6+) were slower than that, so they are not used. Numbers: bench/bench_graph_sync.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime
from typing import Any, Literal, TypeVar

import aiohttp
from gremlin_python.driver.driver_remote_connection import DriverRemoteConnection
from gremlin_python.driver.protocol import GremlinServerError
from gremlin_python.driver.serializer import GraphBinarySerializersV1
from gremlin_python.process.anonymous_traversal import traversal
from gremlin_python.process.graph_traversal import GraphTraversal, GraphTraversalSource, __
from gremlin_python.process.traversal import Cardinality, Order, P, T
from gremlin_python.statics import long
from gremlin_python.structure.graph import Vertex
from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential

from resources.graph.base import GraphStore, GraphStoreError
from resources.graph.common import (
    ENTITY_FIELDS,
    FACT_FIELDS,
    NO_SOURCES,
    OPEN_END_MICROS,
    assemble_expansion,
    decode_sources,
    fact_row,
    from_micros,
    to_micros,
    unique_ids,
)
from schemas.records import EntityRecord, ExpandedFact, FactRecord
from schemas.scope import Scope

ENTITY = "entity"
FACT = "fact"
SCOPE_MARKER = "memflow_scope"  # one vertex per scope, holding its version token

# row_hash last: it is the property writers set last (see _entities_read).
_ENTITY_KEYS = (*ENTITY_FIELDS, "row_hash")
_FACT_KEYS = (*FACT_FIELDS, "row_hash")
_ID_CHUNK = 1000  # ids per `within(...)` argument
_COUNT_CHUNK = 50  # scopes counted in one traversal (counts_many): ~39 KB of bytecode at most,
# under the 64 KiB request limit (maxContentLength) of stock server configurations
_WITHIN_MAX = 200  # longer id lists: read the scope's keys once instead (see _rows_by_key)

R = TypeVar("R")
Rec = TypeVar("Rec", EntityRecord, FactRecord)
Source = GraphTraversalSource | GraphTraversal
NewRows = Literal["coalesce", "inject"]


class GremlinGraphStore(GraphStore):
    """Thread-safe; one connection pool per store. Construction fails fast if the URL is dead."""

    backend = "gremlin"

    def __init__(
        self,
        url: str,
        traversal_source: str = "g",
        *,
        new_rows: NewRows = "coalesce",
        entity_batch: int = 50,
        fact_batch: int = 10,
        insert_batch: int = 1000,
        pool_size: int = 2,
        timeout_s: float = 120.0,
        connect_attempts: int = 5,
    ) -> None:
        """`new_rows="inject"` inserts rows found absent (one read per 1,000 ids) in a few
        data-driven `inject(rows).unfold().addV/addE` traversals instead of one upsert each; rows
        already present still go through the fold/coalesce upsert. Portable to TinkerPop 3.5.
        Like fold/coalesce on a server without unique indexes, it does not stop two concurrent
        writers of the same scope from both inserting a new id (a sink runs one at a time)."""
        if min(entity_batch, fact_batch, insert_batch) < 1:
            raise ValueError("batch sizes must be at least 1")
        if new_rows not in ("coalesce", "inject"):
            raise ValueError(f"new_rows must be 'coalesce' or 'inject', not {new_rows!r}")
        self.url = url
        self.traversal_source = traversal_source
        self.new_rows = new_rows
        self.entity_batch = entity_batch
        self.fact_batch = fact_batch
        self.insert_batch = insert_batch
        self._pool_size = pool_size
        self._timeout_s = timeout_s
        self._attempts = max(1, connect_attempts)
        self._lock = threading.Lock()
        self._conn: DriverRemoteConnection | None = None
        self._g: GraphTraversalSource | None = None
        self._pooled: list[Any] = []
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
                # gremlinpython drops a connection that failed to open from its pool without
                # closing its event loop and HTTP session; keep them to close on reset.
                self._pooled = list(self._conn._client._pool.queue)
                self._g = traversal().with_(self._conn)
            return self._g

    def _reset(self, *_: object) -> None:
        """Discards the connection pool; the next call opens a fresh one."""
        with self._lock:
            conn, self._conn, self._g = self._conn, None, None
            pooled, self._pooled = self._pooled, []
        # Being discarded after a failure, they may fail to close the same way.
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()
        for pooled_conn in pooled:
            transport = getattr(pooled_conn, "_transport", None)
            if transport is not None:
                with contextlib.suppress(Exception):
                    transport.close()

    def _call(self, fn: Callable[[GraphTraversalSource], R], *, idempotent: bool = True) -> R:
        """Runs `fn` on the traversal source, retrying with backoff while the server cannot be
        reached, or while it answers with a transient storage failure (a deadlock victim, a
        lock or commit conflict: `_is_transient`). After a lost connection a traversal that is
        not idempotent (a plain insert) is not retried: the server may have run it. After a
        transient failure every traversal is: the server reported it failed, so its
        transaction was rolled back."""
        attempts = self._attempts

        def retry(exc: BaseException) -> bool:
            if _is_transient(exc):
                return True
            return idempotent and _is_connection_error(exc)

        def before_sleep(state: Any) -> None:
            if state.outcome is not None and _is_connection_error(state.outcome.exception()):
                self._reset()

        retrying = Retrying(
            retry=retry_if_exception(retry),
            stop=stop_after_attempt(attempts),
            wait=wait_exponential(multiplier=0.2, max=3.0),
            before_sleep=before_sleep,
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
                tried = retrying.statistics.get("attempt_number", attempts)
                raise GraphStoreError(
                    f"cannot reach gremlin server {self.url} (after {tried} attempts): {exc}"
                ) from exc
            raise
        raise AssertionError("unreachable: Retrying returns or raises")

    # -- writes ------------------------------------------------------------------------------

    def upsert_entities(self, scope: Scope, entities: Sequence[EntityRecord]) -> int:
        rows = list({e.entity_id: e for e in entities}.values())
        if not rows:
            return 0
        existing = rows
        if self.new_rows == "inject":
            present = self._entity_vertex_ids(scope, [e.entity_id for e in rows])
            existing = [e for e in rows if e.entity_id in present]
            fresh = [e for e in rows if e.entity_id not in present]
            for batch in _chunks(fresh, self.insert_batch):
                self._call(
                    lambda g, batch=batch: _run(_insert_entities(g, scope, batch)),
                    idempotent=False,
                )
        for batch in _chunks(existing, self.entity_batch):
            self._call(lambda g, batch=batch: _run(_chain(g, batch, scope, _upsert_entity)))
        self._bump(scope)
        return len(rows)

    def upsert_facts(self, scope: Scope, facts: Sequence[FactRecord]) -> int:
        rows = list({f.fact_id: f for f in facts}.values())
        if not rows:
            return 0
        endpoints = sorted({e for f in rows for e in (f.subject_id, f.object_id)})
        vertex_ids = self._entity_vertex_ids(scope, endpoints)
        missing = [e for e in endpoints if e not in vertex_ids]
        if missing:
            raise ValueError(f"facts reference entities not in scope {scope}: {missing[:5]}")
        present = self._keep_unmoved_edges(scope, rows)
        existing = rows
        if self.new_rows == "inject":
            existing = [f for f in rows if f.fact_id in present]
            fresh = [f for f in rows if f.fact_id not in present]
            for batch in _chunks(fresh, self.insert_batch):
                self._call(
                    lambda g, batch=batch: _run(_insert_facts(g, scope, batch, vertex_ids)),
                    idempotent=False,
                )
        for batch in _chunks(existing, self.fact_batch):
            self._call(lambda g, batch=batch: _run(_chain(g, batch, scope, _upsert_fact)))
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
            _run(
                _facts_e(g, scope)
                .has("fact_id", old_fact_id)
                .property("valid_to", long(closed))
                .property("superseded_by", new_fact_id)
                .property("row_hash", "")
            )
            _run(
                _facts_e(g, scope)
                .has("fact_id", new_fact_id)
                .property("supersedes", old_fact_id)
                .property("row_hash", "")
            )

        self._call(write)
        self._bump(scope)

    def delete_entities(self, scope: Scope, entity_ids: Iterable[str]) -> int:
        """Deletes the entities and, with their vertices, every fact touching them."""
        return self._drop(scope, _entities_v, "entity_id", entity_ids)

    def delete_facts(self, scope: Scope, fact_ids: Iterable[str]) -> int:
        return self._drop(scope, _facts_e, "fact_id", fact_ids)

    def _drop(
        self,
        scope: Scope,
        elements: Callable[[GraphTraversalSource, Scope], GraphTraversal],
        key: str,
        ids: Iterable[str],
    ) -> int:
        n = 0
        for chunk in _chunks(unique_ids(ids), _ID_CHUNK):
            n += self._call(
                lambda g, chunk=chunk: (
                    elements(g, scope)
                    .has(key, P.within(chunk))
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
        self._call(lambda g: _run(_scoped(g.V(), scope).drop()))

    def _bump(self, scope: Scope) -> None:
        token = uuid.uuid4().hex
        self._call(
            lambda g: _run(
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
            )
        )

    def _entity_vertex_ids(self, scope: Scope, ids: Sequence[str]) -> dict[str, Any]:
        """entity_id -> the server's vertex id, for the ids present in the scope."""
        rows = self._rows_by_key(
            scope, ids, lambda t: t.project("e", "v").by("entity_id").by(T.id), edges=False
        )
        return {r["e"]: r["v"] for r in rows}

    def _keep_unmoved_edges(self, scope: Scope, facts: list[FactRecord]) -> set[str]:
        """Drops stored facts whose subject or object changed (an edge cannot change its ends);
        returns the ids of the facts still stored."""
        wanted = {f.fact_id: (f.subject_id, f.object_id) for f in facts}
        stored = self._rows_by_key(
            scope,
            sorted(wanted),
            lambda t: t.project("f", "s", "o").by("fact_id").by("subject_id").by("object_id"),
            edges=True,
        )
        moved = [r["f"] for r in stored if (r["s"], r["o"]) != wanted[r["f"]]]
        for chunk in _chunks(moved, _ID_CHUNK):
            self._call(
                lambda g, chunk=chunk: _run(
                    _facts_e(g, scope).has("fact_id", P.within(chunk)).drop()
                )
            )
        return {r["f"] for r in stored} - set(moved)

    def _rows_by_key(
        self,
        scope: Scope,
        ids: Sequence[str],
        project: Callable[[GraphTraversal], GraphTraversal],
        *,
        edges: bool,
    ) -> list[dict[str, Any]]:
        """`project` applied to the scope's entities (or facts) whose business key is in ids.

        `within` is a linear scan of its list on many servers, so a long id list is answered by
        reading the whole scope once and filtering here instead.
        """
        if not ids:
            return []
        key = "fact_id" if edges else "entity_id"
        base = _facts_e if edges else _entities_v
        if len(ids) > _WITHIN_MAX:
            wanted = set(ids)
            rows = self._call(lambda g: project(base(g, scope)).to_list())
            first = "f" if edges else "e"
            return [r for r in rows if r[first] in wanted]
        return self._call(lambda g: project(base(g, scope).has(key, P.within(list(ids)))).to_list())

    # -- reads -------------------------------------------------------------------------------

    def entities(self, scope: Scope) -> list[EntityRecord]:
        rows = self._call(lambda g: _fields(_entities_read(g, scope), _ENTITY_KEYS).to_list())
        return sorted((_entity(r) for r in rows), key=lambda e: e.entity_id)

    def get_entities(self, scope: Scope, entity_ids: Iterable[str]) -> list[EntityRecord]:
        rows: list[dict[Any, Any]] = []
        for chunk in _chunks(unique_ids(entity_ids), _ID_CHUNK):
            rows += self._call(
                lambda g, chunk=chunk: _fields(
                    _entities_read(g, scope).has("entity_id", P.within(chunk)), _ENTITY_KEYS
                ).to_list()
            )
        return sorted((_entity(r) for r in rows), key=lambda e: e.entity_id)

    def facts(self, scope: Scope) -> list[FactRecord]:
        rows = self._call(lambda g: _fields(_facts_read(g, scope), _FACT_KEYS).to_list())
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
                lambda g: _fields(
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
                    .limit(n),
                    _FACT_KEYS,
                ).to_list()
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

    def counts_many(self, scopes: Sequence[Scope]) -> dict[Scope, dict[str, int]]:
        """One traversal per `_COUNT_CHUNK` scopes, each scope counted through its own
        (tenant_id, ns) index read inside it. Not a grouping over `within(orgs)` and
        `within(repos)`: JanusGraph cannot answer that cross product from its composite index
        and scanned every element once per chunk (27 s at 1,000 tenants of 40 elements,
        against 1.0-1.9 s this way). Facts are counted from their subjects (`outE`), which are in
        the scope: a mid-traversal `E()` needs TinkerPop 3.7, a mid-traversal `V()` any
        server memflow supports."""
        wanted = list(dict.fromkeys(scopes))
        out: dict[Scope, dict[str, int]] = {}
        for start in range(0, len(wanted), _COUNT_CHUNK):
            chunk = wanted[start : start + _COUNT_CHUNK]
            keys = [f"s{i}" for i in range(len(chunk))]

            def read(g: GraphTraversalSource, chunk=chunk, keys=keys) -> dict[str, Any]:
                t = g.inject(0).project(*keys)
                for scope in chunk:
                    t = t.by(
                        __.project("entities", "facts")
                        .by(_entities_read(__, scope).count())
                        .by(
                            _scoped(_entities_v(__, scope).out_e(FACT), scope)
                            .has("row_hash")
                            .count()
                        )
                    )
                return t.next()

            found = self._call(read)
            for key, scope in zip(keys, chunk, strict=True):
                out[scope] = {kind: int(n) for kind, n in found[key].items()}
        return out

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


def _run(t: GraphTraversal) -> int:
    """Runs a write traversal for its side effects; returns how many traversers it ended with.

    Not `iterate()`: gremlinpython 3.8 ends that with `discard()`, a step TinkerPop 3.7 servers
    (JanusGraph 1.x) do not know, and 3.5-3.7 drivers end it with `none()`, which 3.8 servers
    read as a list filter. A closing `count()` means the same on every server 3.5 and up."""
    return int(t.count().next())


# Properties added after the first layout, with the value an element written before has:
# an edge without `sources` reads as no sources (and its row hash, which did not cover them,
# makes the next sync rewrite it).
_ADDED_PROPERTIES = {"sources": NO_SOURCES}


def _fields(t: GraphTraversal, keys: Sequence[str]) -> GraphTraversal:
    """Each element as {key: value} for `keys` (every one present: readers filter on row_hash,
    written last; a property added later reads as its default where an older writer left it
    out). Not `elementMap()`, which adds the element's id: JanusGraph's edge ids are a
    server-specific type (RelationIdentifier) that gremlinpython cannot read."""
    t = t.project(*keys)
    for key in keys:
        if key in _ADDED_PROPERTIES:
            t = t.by(__.coalesce(__.values(key), __.constant(_ADDED_PROPERTIES[key])))
        else:
            t = t.by(key)
    return t


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


def _chain(
    g: GraphTraversalSource,
    rows: list[Rec],
    scope: Scope,
    upsert: Callable[[Source, Scope, Rec], GraphTraversal],
) -> GraphTraversal:
    """Several upserts in one traversal: each leaves exactly one traverser for the next."""
    t: Source = g
    for row in rows:
        t = upsert(t, scope, row)
    return t  # type: ignore[return-value]


def _insert_entities(
    g: GraphTraversalSource, scope: Scope, rows: list[EntityRecord]
) -> GraphTraversal:
    data = [
        {
            "entity_id": e.entity_id,
            "name": e.name,
            "aliases": json.dumps(list(e.aliases), ensure_ascii=False),
            "types": json.dumps(list(e.types), ensure_ascii=False),
            "row_hash": e.row_hash,
        }
        for e in rows
    ]
    t = (
        g.inject(data)
        .unfold()
        .as_("r")
        .add_v(ENTITY)
        .property("tenant_id", scope.tenant_id)
        .property("ns", scope.ns)
    )
    for key in _ENTITY_KEYS:  # row_hash last: readers wait for it
        t = t.property(Cardinality.single, key, __.select("r").select(key))
    return t


def _insert_facts(
    g: GraphTraversalSource, scope: Scope, rows: list[FactRecord], vertex_ids: dict[str, Any]
) -> GraphTraversal:
    data = [
        {
            **_fact_values(f),
            # References to vertices the server named (read back just before), not ids we chose.
            "_s": Vertex(_id_arg(vertex_ids[f.subject_id])),
            "_o": Vertex(_id_arg(vertex_ids[f.object_id])),
        }
        for f in rows
    ]
    t = (
        g.inject(data)
        .unfold()
        .as_("r")
        .add_e(FACT)
        .from_(__.select("r").select("_s"))
        .to(__.select("r").select("_o"))
        .property("tenant_id", scope.tenant_id)
        .property("ns", scope.ns)
    )
    for key in _FACT_KEYS:  # row_hash last: readers wait for it
        t = t.property(key, __.select("r").select(key))
    return t


def _id_arg(vertex_id: Any) -> Any:
    # gremlinpython sends a small Python int as a 32-bit Int; a Long-keyed graph would not
    # find the vertex by it.
    return long(vertex_id) if isinstance(vertex_id, int) else vertex_id


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
    values = dict(zip(FACT_FIELDS, fact_row(f), strict=True))
    values.update(
        valid_from=long(values["valid_from"]),
        valid_to=long(OPEN_END_MICROS if f.valid_to is None else values["valid_to"]),
        # Not every Gremlin server stores nulls: "" stands for "none".
        supersedes=f.supersedes or "",
        superseded_by=f.superseded_by or "",
        row_hash=f.row_hash,
    )
    return values


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
    values["sources"] = decode_sources(values["sources"])
    return FactRecord(**values)


def _only(value: Any) -> Any:
    """group().by(key).by(key) folds each group into a list; ids are unique, take the one."""
    return value[0] if isinstance(value, list) and len(value) == 1 else value


def _chunks(items: list[R], size: int) -> Iterator[list[R]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


# Server answers that mean "try again": the traversal's transaction was rolled back. JanusGraph
# (BerkeleyDB JE deadlock victims, lock timeouts, failed commits), Neptune and others
# (ConcurrentModificationException).
_TRANSIENT = (
    "DeadlockException",
    "LockConflictException",
    "TemporaryBackendException",
    "TemporaryLockingException",
    "PermanentLockingException",
    "ConcurrentModificationException",
    "Could not commit transaction due to exception during persistence",
    "Could not call index",
    "Could not execute operation due to backend exception",
)


def _is_transient(exc: BaseException) -> bool:
    if not isinstance(exc, GremlinServerError):
        return False
    # The message, and the exception names and stack trace the server attaches.
    text = f"{exc} {getattr(exc, 'status_attributes', None) or ''}"
    return any(t in text for t in _TRANSIENT)


def _is_connection_error(exc: BaseException) -> bool:
    if isinstance(exc, GremlinServerError):
        return False
    if isinstance(exc, OSError | aiohttp.ClientError | asyncio.TimeoutError | TimeoutError):
        return True
    # gremlinpython reports a dropped websocket as a bare RuntimeError.
    return isinstance(exc, RuntimeError) and "connection" in str(exc).lower()
