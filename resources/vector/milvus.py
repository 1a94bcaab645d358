"""Milvus vector store: a Milvus server or cluster by URI, through pymilvus (the production
vector sink; the embedded default is `resources.vector.local`).

One collection per (model, dim); `tenant_id` is the partition key, `ns` a filtered field,
AUTOINDEX. The server prunes by partition key, so tenants never need collections, partitions or
indexes of their own: a collection is created (and its index built and loaded) once per model,
never per tenant. A server read that must see every acknowledged write asks for Strong
consistency, which waits for the server's time tick (~200 ms on 2.3.5): the sink therefore asks
for a whole block of tenants in one read (`ids_many`) rather than one read per tenant.

Safety: primary keys are hex digests of (tenant_id, ns, entity id), so ids never reach an
expression; org and repo (`tenant_id`, `ns`) are quoted by `literal` (only backslash,
quote, newline, carriage return and tab are escaped, which every Milvus parser since 2.3 reads
back exactly); and every row or hit whose org or repo differ is dropped after the query or
search too.
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

from pymilvus import DataType, MilvusClient
from pymilvus.client.types import LoadState

from resources.vector.base import (
    DEFAULT_MIN_COSINE,
    MAX_ENTITY_ID_BYTES,
    MAX_TEXT_HASH_BYTES,
    VectorStore,
    VectorStoreError,
    check_query,
    check_rows,
)
from resources.vector.base import check_scope as _check_scope
from schemas.records import VectorHit
from schemas.scope import Scope, ScopeError

T = TypeVar("T")

PREFIX = "mf_"
QUERY_LIMIT = 16384  # Milvus caps offset + limit of a single query
SCOPES_PER_QUERY = 256  # tenants named in one `ids_many` filter
WRITE_CHUNK_BYTES = 8 * 1024 * 1024
PROP_MODEL = "memflow.model"
PROP_LAYOUT = "memflow.layout"
LAYOUT = "partition_key"
STRONG, SESSION, EVENTUALLY = "Strong", "Session", "Eventually"
_ESCAPES = str.maketrans({"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"})
_SLUG = re.compile(r"[^a-z0-9]+")
_COLLECTION = re.compile(r"_d(\d+)$")


def literal(value: str) -> str:
    """A double-quoted Milvus string literal for `value` (the only way values enter a filter)."""
    return '"' + value.translate(_ESCAPES) + '"'


def scope_filter(scope: Scope) -> str:
    return f"tenant_id == {literal(scope.tenant_id)} and ns == {literal(scope.ns)}"


def scopes_filter(scopes: Iterable[Scope]) -> str:
    """Rows of any of `scopes` (and possibly of other (tenant_id, ns) pairs of those orgs and
    namespaces: the caller drops rows whose pair it did not ask for)."""
    tenants = sorted({s.tenant_id for s in scopes})
    nss = sorted({s.ns for s in scopes})
    return (
        f"tenant_id in [{', '.join(map(literal, tenants))}]"
        f" and ns in [{', '.join(map(literal, nss))}]"
    )


def _digest(*parts: str, size: int) -> str:
    return hashlib.sha256("\x1f".join(parts).encode("utf-8")).hexdigest()[:size]


def row_key(scope: Scope, entity_id: str) -> str:
    return _digest(scope.tenant_id, scope.ns, entity_id, size=32)


def model_prefix(model: str) -> str:
    """`mf_<slug>_<hash>_d`: the sanitized model name plus a hash so slugs cannot collide."""
    slug = _SLUG.sub("_", model.lower()).strip("_")[:48] or "model"
    return f"{PREFIX}{slug}_{_digest(model, size=8)}_d"


def collection_name(model: str, dim: int) -> str:
    """The collection of `model`'s `dim`-dimensional vectors (every tenant's)."""
    return model_prefix(model) + str(dim)


def _version(text: str) -> tuple[int, int]:
    """(major, minor) of a server version such as "v2.3.5" or "2.4.0"; (0, 0) if unknown."""
    m = re.match(r"v?(\d+)\.(\d+)", text.strip())
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def _pair(scope: Scope) -> tuple[str, str]:
    return scope.tenant_id, scope.ns


def _redact_uri(uri: str) -> str:
    parts = urlsplit(uri)
    if parts.scheme and parts.hostname and (parts.username or parts.password):
        netloc = parts.hostname + (f":{parts.port}" if parts.port else "")
        return urlunsplit(parts._replace(netloc=netloc))
    return uri


class MilvusVectorStore(VectorStore):
    """Entity-name and fact vectors in a Milvus server; see the module docstring."""

    backend = "milvus"

    def __init__(self, uri: str, token: str | None = None, *, timeout: float = 30.0) -> None:
        self.uri = uri
        self._where = _redact_uri(uri)
        if "://" not in uri:
            hint = (
                " (Milvus Lite files are no longer used: leave MEMFLOW_MILVUS_URI empty for the "
                "embedded store, see docs/vector-backends.md)"
                if uri.endswith(".db")
                else ""
            )
            raise VectorStoreError(f"milvus URI {uri!r} must be http(s)://host:port{hint}")
        self._token, self._timeout = token, timeout
        self._lock = threading.Lock()
        self._names: set[str] = set()
        self._loaded: set[str] = set()
        self._props: dict[str, str] = {}
        self._closed = False
        self._client = self._call("connect", self._connect)
        version = self._call("get_server_version", lambda: self._client.get_server_version())
        self.server_version = str(version)
        # Servers before 2.4 route an upsert into a partition-key collection by the wrong field
        # (milvus-io/milvus#30607): measured on 2.3.5, the rows are acknowledged and never seen
        # again. There a write is a delete by primary key, then an insert.
        self._upsert_works = _version(self.server_version) >= (2, 4)

    def _connect(self) -> MilvusClient:
        return MilvusClient(uri=self.uri, token=self._token or "", timeout=self._timeout)

    def __repr__(self) -> str:
        return f"MilvusVectorStore({self._where!r})"

    # -- plumbing ---------------------------------------------------------------------------

    def _call(self, op: str, fn: Callable[[], T]) -> T:
        """Run client calls; errors become VectorStoreError naming the URI."""
        try:
            return fn()
        except (ValueError, ScopeError, VectorStoreError):
            raise
        except Exception as err:  # pymilvus raises MilvusException, grpc errors, OSError...
            raise VectorStoreError(f"milvus at {self._where}: {op} failed: {err}") from err

    def _collections(self, refresh: bool = False) -> set[str]:
        if refresh or not self._names:
            names = self._call("list_collections", lambda: self._client.list_collections())
            with self._lock:
                self._names = {n for n in names if n.startswith(PREFIX)}
        return self._names

    def _model_collections(self, model: str, refresh: bool = True) -> dict[str, int]:
        """name -> dim of `model`'s collections."""
        pattern = re.compile(re.escape(model_prefix(model)) + r"(\d+)$")
        out: dict[str, int] = {}
        for name in self._collections(refresh):
            m = pattern.match(name)
            if m:
                out[name] = int(m.group(1))
        return out

    def _check_dim(self, model: str, dim: int, refresh: bool = True) -> None:
        for name, held in self._model_collections(model, refresh).items():
            if held != dim:
                raise ValueError(
                    f"model {model!r} holds {held}-dimensional vectors ({name}); got {dim}"
                )

    def _ensure_collection(self, model: str, dim: int, name: str) -> None:
        """Create `model`'s collection, its index and load it: once per model, not per tenant
        (pymilvus waits for the index and the load here, which is why it must not be per
        tenant)."""
        if name in self._collections() or name in self._collections(refresh=True):
            return
        client = self._client
        schema = client.create_schema(auto_id=False, enable_dynamic_field=False)
        schema.add_field("pk", DataType.VARCHAR, max_length=64, is_primary=True)
        schema.add_field("tenant_id", DataType.VARCHAR, max_length=128, is_partition_key=True)
        schema.add_field("ns", DataType.VARCHAR, max_length=128)
        schema.add_field("entity_id", DataType.VARCHAR, max_length=MAX_ENTITY_ID_BYTES)
        schema.add_field("text_hash", DataType.VARCHAR, max_length=MAX_TEXT_HASH_BYTES)
        schema.add_field("vector", DataType.FLOAT_VECTOR, dim=dim)
        index = client.prepare_index_params()
        index.add_index("vector", index_type="AUTOINDEX", metric_type="COSINE")
        try:
            self._call(
                "create_collection",
                lambda: self._client.create_collection(
                    name,
                    schema=schema,
                    index_params=index,
                    properties={PROP_MODEL: model, PROP_LAYOUT: LAYOUT},
                    # The default for readers that do not say (ours always do, see _level).
                    consistency_level=STRONG,
                ),
            )
        except VectorStoreError:
            # Another process may have created it between our look and our create.
            if name not in self._collections(refresh=True):
                raise
        with self._lock:
            self._names.add(name)
            self._loaded.add(name)
            self._props[name] = model

    def _ensure_loaded(self, name: str) -> None:
        """Raw client calls: run inside `_call`. Once per collection and store."""
        if name in self._loaded:
            return
        if self._client.get_load_state(name).get("state") != LoadState.Loaded:
            self._client.load_collection(name)
        with self._lock:
            self._loaded.add(name)

    def _read(self, op: str, name: str, fn: Callable[[], T]) -> T:
        """Run a read, loading the collection first."""

        def attempt() -> T:
            self._ensure_loaded(name)
            return fn()

        return self._call(op, attempt)

    def _query(self, name: str, flt: str, fields: list[str]) -> list[dict[str, Any]]:
        rows = self._read(
            "query",
            name,
            lambda: self._client.query(
                name, filter=flt, output_fields=fields, limit=QUERY_LIMIT, **_level(STRONG)
            ),
        )
        if len(rows) < QUERY_LIMIT:
            return list(rows)
        return self._read("query_iterator", name, lambda: self._iterate(name, flt, fields))

    def _iterate(self, name: str, flt: str, fields: list[str]) -> list[dict[str, Any]]:
        it = self._client.query_iterator(
            name, batch_size=4096, filter=flt, output_fields=fields, **_level(STRONG)
        )
        out: list[dict[str, Any]] = []
        try:
            while batch := it.next():
                out.extend(batch)
        finally:
            it.close()
        return out

    # -- writes -----------------------------------------------------------------------------

    def upsert(
        self,
        model: str,
        dim: int,
        scope: Scope,
        items: Sequence[tuple[str, str, Sequence[float]]],
    ) -> int:
        scope = _check_scope(scope)
        rows = {
            row_key(scope, entity_id): {
                "pk": row_key(scope, entity_id),
                "tenant_id": scope.tenant_id,
                "ns": scope.ns,
                "entity_id": entity_id,
                "text_hash": text_hash,
                "vector": vec,
            }
            for entity_id, (text_hash, vec) in check_rows(model, dim, items).items()
        }
        name = collection_name(model, dim)
        # The server is asked for the model's collections once, until this one exists: a sink
        # upserting thousands of tenants makes no listing call per tenant.
        known = name in self._collections()
        self._check_dim(model, dim, refresh=not known)
        if not rows:
            return 0
        if not known:
            self._ensure_collection(model, dim, name)
        values = list(rows.values())
        step = max(1, WRITE_CHUNK_BYTES // (4 * dim + 256))
        for start in range(0, len(values), step):
            chunk = values[start : start + step]
            if self._upsert_works:
                self._call("upsert", lambda c=chunk: self._client.upsert(name, c))
            else:
                pks = [row["pk"] for row in chunk]
                self._call("delete", lambda p=pks: self._client.delete(name, ids=p))
                self._call("insert", lambda c=chunk: self._client.insert(name, c))
        # No flush: acknowledged writes are in the server's log (they survive kill -9,
        # tests/faults), readers see them through the consistency level (_level), and a flush
        # costs ~4 s on Milvus 2.3.5.
        return len(values)

    def delete(self, model: str, scope: Scope, entity_ids: Sequence[str]) -> int:
        return self.delete_many(model, {_check_scope(scope): entity_ids})[scope]

    def delete_many(self, model: str, doomed: Mapping[Scope, Sequence[str]]) -> dict[Scope, int]:
        """One Strong lookup per 1,000 primary keys of the whole block (which of them the store
        holds, to count them), then deletes by primary key, which do not wait."""
        owner = {
            row_key(scope, e): _check_scope(scope) for scope, ids in doomed.items() for e in ids
        }
        out = dict.fromkeys(doomed, 0)
        if not owner:
            return out
        pks = sorted(owner)
        for name in self._model_collections(model):
            found: list[str] = []
            for start in range(0, len(pks), 1000):
                chunk = pks[start : start + 1000]
                got = self._read(
                    "get",
                    name,
                    lambda c=chunk, n=name: self._client.get(
                        n, ids=c, output_fields=["pk", "tenant_id", "ns"], **_level(STRONG)
                    ),
                )
                for row in got:
                    scope = owner.get(row["pk"])
                    if scope is not None and (row["tenant_id"], row["ns"]) == _pair(scope):
                        found.append(row["pk"])
                        out[scope] += 1
            for start in range(0, len(found), 1000):
                chunk = found[start : start + 1000]
                self._call("delete", lambda c=chunk, n=name: self._client.delete(n, ids=c))
        return out

    def delete_scope(self, scope: Scope) -> None:
        scope = _check_scope(scope)
        for name in sorted(n for n in self._collections(refresh=True) if _COLLECTION.search(n)):
            self._read(
                "delete", name, lambda n=name: self._client.delete(n, filter=scope_filter(scope))
            )

    # -- reads ------------------------------------------------------------------------------

    def nearest(
        self,
        model: str,
        scope: Scope,
        vector: Sequence[float],
        *,
        k: int = 8,
        min_cosine: float = DEFAULT_MIN_COSINE,
    ) -> list[VectorHit]:
        scope = _check_scope(scope)
        query = check_query(vector)
        if k <= 0:
            return []
        dim = int(query.size)
        name = collection_name(model, dim)
        if name not in self._collections() and name not in self._collections(refresh=True):
            self._check_dim(model, dim, refresh=False)
            return []
        result = self._read(
            "search",
            name,
            lambda: self._client.search(
                name,
                data=[query.tolist()],
                limit=k,
                filter=scope_filter(scope),
                output_fields=["entity_id", "tenant_id", "ns"],
                search_params={"metric_type": "COSINE"},
                **_level(SESSION),
            ),
        )
        hits: list[VectorHit] = []
        for hit in result[0] if result else []:
            entity = hit.get("entity", {})
            score = float(hit.get("distance", -1.0))
            if entity.get("tenant_id") != scope.tenant_id or entity.get("ns") != scope.ns:
                continue  # never trust the filter alone
            if score >= min_cosine:
                hits.append(VectorHit(entity["entity_id"], score))
        hits.sort(key=lambda h: -h.score)
        return hits[:k]

    def ids(self, model: str, scope: Scope) -> dict[str, str]:
        return self.ids_many(model, [_check_scope(scope)])[scope]

    def ids_many(self, model: str, scopes: Sequence[Scope]) -> dict[Scope, dict[str, str]]:
        """One Strong read per collection for up to `SCOPES_PER_QUERY` scopes (module doc)."""
        wanted = list(dict.fromkeys(_check_scope(s) for s in scopes))
        out: dict[Scope, dict[str, str]] = {s: {} for s in wanted}
        by_pair = {_pair(s): s for s in wanted}
        names = self._model_collections(model) if wanted else {}
        for name in names:
            for start in range(0, len(wanted), SCOPES_PER_QUERY):
                chunk = wanted[start : start + SCOPES_PER_QUERY]
                fields = ["tenant_id", "ns", "entity_id", "text_hash"]
                for row in self._query(name, scopes_filter(chunk), fields):
                    scope = by_pair.get((row.get("tenant_id"), row.get("ns")))
                    if scope is not None:  # a pair not asked for is another scope's
                        out[scope][row["entity_id"]] = row["text_hash"]
        return out

    def missing(self, model: str, scope: Scope, wanted: Mapping[str, str]) -> list[str]:
        held = self.ids(model, scope)
        return [eid for eid, text_hash in wanted.items() if held.get(eid) != text_hash]

    def _model_of(self, name: str) -> str | None:
        if name not in self._props:
            desc = self._call("describe_collection", lambda: self._client.describe_collection(name))
            props = desc.get("properties") or {}
            model = props.get(PROP_MODEL)
            if model is None:
                return None
            with self._lock:
                self._props[name] = model
        return self._props[name]

    def models(self, scope: Scope) -> dict[str, tuple[int, int]]:
        scope = _check_scope(scope)
        out: dict[str, tuple[int, int]] = {}
        for name in sorted(self._collections(refresh=True)):
            m = _COLLECTION.search(name)
            model = self._model_of(name) if m else None
            if m is None or model is None:
                continue
            rows = self._read(
                "count",
                name,
                lambda n=name: self._client.query(
                    n, filter=scope_filter(scope), output_fields=["count(*)"], **_level(STRONG)
                ),
            )
            count = int(rows[0]["count(*)"]) if rows else 0
            if count:
                dim, held = int(m.group(1)), out.get(model, (0, 0))[1]
                out[model] = (dim, held + count)
        return out

    def models_many(self, scopes: Sequence[Scope]) -> dict[Scope, dict[str, tuple[int, int]]]:
        """`models` of every scope asked, counted from the scope columns: per collection, one
        Strong read as a barrier (it returns once the server has applied every write
        acknowledged before it), then reads of `SCOPES_PER_QUERY` scopes at a time at
        Eventually consistency, which wait for no time tick. Strong reads wait ~200 ms each,
        and a query iterator's pages each wait again on a collection created Strong: 20 s of
        `memflow status` at 1,000 tenants (BENCHMARKS.md). On one server (standalone) the
        reads see everything the barrier saw. With more than one replica, or while a channel
        moves between nodes or a node recovers, a read can land where the barrier did not and
        miss the last writes: status is a report; the sink's and `--verify`'s reads stay
        Strong."""
        wanted = list(dict.fromkeys(_check_scope(s) for s in scopes))
        out: dict[Scope, dict[str, tuple[int, int]]] = {s: {} for s in wanted}
        if not wanted:
            return out
        for name in sorted(self._collections(refresh=True)):
            m = _COLLECTION.search(name)
            model = self._model_of(name) if m else None
            if m is None or model is None:
                continue
            dim = int(m.group(1))
            barrier = scopes_filter(wanted[:1])
            self._read("query", name, lambda n=name, f=barrier: self._count_rows(n, f, STRONG))
            for start in range(0, len(wanted), SCOPES_PER_QUERY):
                for scope, count in self._counts(name, wanted[start : start + SCOPES_PER_QUERY]):
                    if count:  # a scope's count(*) may be 0: it holds none of this model
                        out[scope][model] = (dim, out[scope].get(model, (0, 0))[1] + count)
        return out

    def _count_rows(self, name: str, flt: str, level: str) -> int:
        rows = self._client.query(name, filter=flt, output_fields=["count(*)"], **_level(level))
        return int(rows[0]["count(*)"])

    def _counts(self, name: str, chunk: Sequence[Scope]) -> Iterable[tuple[Scope, int]]:
        """The rows of each of `chunk`'s scopes, read after the barrier: the chunk's scope
        columns in one query, or, when they fill a query, a `count(*)` per scope. The filter
        also matches other (org, repo) pairs of the chunk's orgs and repos; only the chunk's
        own pairs are counted (a pair asked for in another chunk is counted there)."""
        local = {_pair(s): s for s in chunk}
        flt = scopes_filter(chunk)
        rows = self._read(
            "query",
            name,
            lambda: self._client.query(
                name, filter=flt, output_fields=["tenant_id", "ns"], limit=QUERY_LIMIT,
                **_level(EVENTUALLY),
            ),
        )  # fmt: skip
        if len(rows) < QUERY_LIMIT:
            pairs = (local.get((row.get("tenant_id"), row.get("ns"))) for row in rows)
            return Counter(scope for scope in pairs if scope is not None).items()
        return [
            (
                s,
                self._read(
                    "query",
                    name,
                    lambda f=scopes_filter([s]): self._count_rows(name, f, EVENTUALLY),
                ),
            )
            for s in chunk
        ]

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._client.close()


def _level(level: str) -> dict[str, str]:
    """The consistency level a read asks the server for.

    Strong (the sink's reads and the store-equals-table check: ids, missing, models, the lookups
    before a delete): the read waits until every write acknowledged before it is visible,
    ~200 ms a call on 2.3.5. Session (`nearest`, the recall path): this client's own writes
    are visible at once, ~3 ms a search; other processes' writes after the server's graceful
    time (5 s by default), as Bounded. Eventually (`models_many`, after a Strong read of the same
    collection as a barrier): no wait."""
    return {"consistency_level": level}
