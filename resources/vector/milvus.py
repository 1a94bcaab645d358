"""Milvus vector store: Milvus Lite (a `.db` path, or Lite's gRPC server by URI) or a Milvus
server/cluster by URI, through pymilvus.

Layout is a per-backend choice (`Layout`):

- `partition_key` (a Milvus server): one collection per (model, dim); `tenant_id` is the
  partition key, `ns` a filtered field, AUTOINDEX. The server prunes by partition key, so this
  is the designed layout there.
- `scope` (Milvus Lite, the default there): one collection per (model, dim, tenant/ns), FLAT.
  Lite 3.2.2 is pure Python + numpy/FAISS: it does not prune by partition key, and a search walks
  every row of every segment in reach in Python (~1 us a row) before the vector math, so cost
  follows the rows a search can see. `bench/bench_milvus_layout.py`, Lite's gRPC server, 384
  dims, 100 tenants (one with 5,000 rows, 99 with 200), k=8, on the project's 2-core machine
  while other jobs ran (load 4-6), p50 / p95 ms for the big tenant and a small one:

      partition key + tenant filter    77 / 139      71 / 121
      a partition per scope            27 / 57        5 / 17
      a collection per scope           31 / 51        6 / 16
      collection per scope + cache    0.6 / 4.9     0.2 / 0.4

  (A quiet run with 5 tenants: a collection per scope 6.6 / 8.2 and 4.7 / 5.9; a gRPC round trip
  alone, `has_collection`, is ~1.2 ms.) A collection per scope is also the only layout where two
  tenants' sinks never write to one collection, which Lite's single-writer engine needs.

Even so, a 5,000-entity scope costs Lite tens of ms per search, far over the recall budget
(p50 5 ms for the whole recall). With a `cache_dir` (the supervised Lite server, see
`resources.vector.factory`) `nearest` and `models` answer from an in-process copy of the scope's
vectors, revalidated on every call by a generation token: every writer (any process on the host)
replaces `<cache_dir>/<collection>.gen` before and after each write, and a reader reloads when the
token it loaded under changed (a TTL bounds staleness after a writer died mid-write). A hit costs
a small file read and one single-threaded matrix-vector product (~0.3 ms for 5,000 x 384); the
first search after a write reloads the scope (~1-2 s for 5,000 vectors through Lite).

Safety: primary keys are hex digests of (tenant, ns, entity id), so ids never reach an
expression; tenant and namespace are quoted by `literal` (Lite has no filter templating and
rejects JSON's \\u escapes, so only backslash, quote, newline, carriage return and tab are
escaped); and every hit whose tenant or namespace differ is dropped after the search too.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import grpc
import numpy as np
from pymilvus import DataType, MilvusClient
from pymilvus.client.types import LoadState, Status
from pymilvus.exceptions import MilvusUnavailableException

from resources.fs import atomic_write_text, file_lock
from resources.vector.base import DEFAULT_MIN_COSINE, VectorStore, VectorStoreError
from schemas.records import VectorHit
from schemas.scope import Scope, ScopeError

T = TypeVar("T")

PREFIX = "mf_"
MAX_ENTITY_ID_BYTES = 1024
MAX_TEXT_HASH_BYTES = 128
QUERY_LIMIT = 16384  # Milvus caps offset + limit of a single query
WRITE_CHUNK_BYTES = 8 * 1024 * 1024
NOT_LOADED = 101  # Lite: "collection is in state 'released'"
PROP_MODEL = "memflow.model"
PROP_LAYOUT = "memflow.layout"
STRONG, SESSION = "Strong", "Session"
_ESCAPES = str.maketrans({"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"})
_SLUG = re.compile(r"[^a-z0-9]+")


class Layout(StrEnum):
    SCOPE = "scope"
    PARTITION_KEY = "partition_key"


def literal(value: str) -> str:
    """A double-quoted Milvus string literal for `value` (the only way values enter a filter)."""
    return '"' + value.translate(_ESCAPES) + '"'


def scope_filter(scope: Scope) -> str:
    return f"tenant_id == {literal(scope.tenant_id)} and ns == {literal(scope.ns)}"


def _digest(*parts: str, size: int) -> str:
    return hashlib.sha256("\x1f".join(parts).encode("utf-8")).hexdigest()[:size]


def row_key(scope: Scope, entity_id: str) -> str:
    return _digest(scope.tenant_id, scope.ns, entity_id, size=32)


def model_prefix(model: str) -> str:
    """`mf_<slug>_<hash>_d`: the sanitized model name plus a hash so slugs cannot collide."""
    slug = _SLUG.sub("_", model.lower()).strip("_")[:48] or "model"
    return f"{PREFIX}{slug}_{_digest(model, size=8)}_d"


def scope_suffix(scope: Scope) -> str:
    return "_s" + _digest(scope.tenant_id, scope.ns, size=16)


def collection_name(model: str, dim: int, scope: Scope | None = None) -> str:
    """The collection of `model`'s `dim`-dimensional vectors (of one scope in the scope layout)."""
    return model_prefix(model) + str(dim) + (scope_suffix(scope) if scope is not None else "")


def _disconnected(err: BaseException) -> bool:
    if isinstance(err, MilvusUnavailableException):
        return True
    if getattr(err, "code", None) == Status.CONNECT_FAILED:
        return True
    cause = err.__cause__ or err.__context__
    code = getattr(cause, "code", None)
    return callable(code) and code() == grpc.StatusCode.UNAVAILABLE


def _version(text: str) -> tuple[int, int]:
    """(major, minor) of a server version such as "v2.3.5-lite" or "2.4.0"; (0, 0) if unknown."""
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


@dataclass(slots=True)
class _Entry:
    token: str
    loaded_at: float
    ids: list[str]
    matrix: np.ndarray  # (n, dim), rows normalised
    nbytes: int


class _ScopeCache:
    """Per-process copies of scopes' vectors, revalidated by generation files (module doc)."""

    def __init__(self, directory: Path, ttl_s: float, max_bytes: int) -> None:
        self.directory = directory
        self.ttl_s = ttl_s
        self.max_bytes = max_bytes
        self._entries: OrderedDict[tuple[str, Scope], _Entry] = OrderedDict()
        self._models: dict[Scope, tuple[tuple[str, ...], float, dict[str, tuple[int, int]]]] = {}
        self._bytes = 0
        self._lock = threading.Lock()
        directory.mkdir(parents=True, exist_ok=True)

    def token(self, name: str) -> str:
        try:
            return (self.directory / f"{name}.gen").read_text("ascii")
        except FileNotFoundError:
            return ""

    def bump(self, name: str) -> None:
        atomic_write_text(self.directory / f"{name}.gen", os.urandom(16).hex())

    @contextlib.contextmanager
    def locked(self, name: str) -> Iterator[None]:
        """An exclusive lock per collection, shared by every process using this directory."""
        with file_lock(self.directory / f"{name}.lock", timeout_s=-1):
            yield

    def get(
        self, key: tuple[str, Scope], load: Callable[[], tuple[list[str], np.ndarray]]
    ) -> _Entry:
        token = self.token(key[0])  # read before loading: a write during the load shows next time
        now = time.monotonic()
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and entry.token == token and now - entry.loaded_at < self.ttl_s:
                self._entries.move_to_end(key)
                return entry
        ids, matrix = load()
        entry = _Entry(token, now, ids, matrix, matrix.nbytes + 64 * len(ids))
        with self._lock:
            old = self._entries.pop(key, None)
            self._bytes -= old.nbytes if old else 0
            self._entries[key] = entry
            self._bytes += entry.nbytes
            while self._bytes > self.max_bytes and len(self._entries) > 1:
                _, evicted = self._entries.popitem(last=False)
                self._bytes -= evicted.nbytes
        return entry

    def models(
        self, scope: Scope, names: Iterable[str], load: Callable[[], dict[str, tuple[int, int]]]
    ) -> dict[str, tuple[int, int]]:
        tokens = tuple(self.token(n) for n in ["catalog", *sorted(names)])
        now = time.monotonic()
        with self._lock:
            cached = self._models.get(scope)
        if cached and cached[0] == tokens and now - cached[1] < self.ttl_s:
            return dict(cached[2])
        held = load()
        with self._lock:
            self._models[scope] = (tokens, now, held)
        return dict(held)


_LITE_WRITES = threading.RLock()
_LITE_FILES: dict[str, int] = {}
_LITE_FILES_LOCK = threading.Lock()


class MilvusVectorStore(VectorStore):
    """Entity-name vectors in Milvus; see the module docstring for layout and caching."""

    backend = "milvus"

    def __init__(
        self,
        uri: str,
        token: str | None = None,
        *,
        layout: Layout | str = "auto",
        cache_dir: str | os.PathLike[str] | None = None,
        timeout: float = 30.0,
        cache_ttl_s: float = 300.0,
        cache_max_bytes: int = 512 * 1024 * 1024,
        reconnect: Callable[[], str] | None = None,
    ) -> None:
        """`reconnect`, when given, is called after a lost connection for the URI to reconnect
        to (the supervised Lite server passes `ensure_lite_server`, which restarts it)."""
        self.uri = uri
        self._where = _redact_uri(uri)
        self._lite_file = uri.endswith(".db") and "://" not in uri
        if self._lite_file:
            Path(uri).parent.mkdir(parents=True, exist_ok=True)
            self._lite_path = os.path.abspath(uri)
        elif "://" not in uri:
            raise VectorStoreError(
                f"milvus URI {uri!r} must be http(s)://host:port or a Milvus Lite path ending .db"
            )
        self._token, self._timeout, self._reconnect = token, timeout, reconnect
        self._lock = threading.Lock()
        # Set before the first call: a failed connect goes through _reopen, which uses them.
        self._names: set[str] = set()
        self._loaded: set[str] = set()
        self._props: dict[str, str] = {}
        self._closed = False
        self._client = self._call("connect", self._first_client)
        if self._lite_file:
            with _LITE_FILES_LOCK:
                _LITE_FILES[self._lite_path] = _LITE_FILES.get(self._lite_path, 0) + 1
        version = self._call("get_server_version", lambda: self._client.get_server_version())
        self.server_version = str(version)
        self.is_lite = self._lite_file or self.server_version.startswith("milvus_lite")
        self.backend = "milvus-lite" if self.is_lite else "milvus"
        # Servers before 2.4 route an upsert into a partition-key collection by the wrong field
        # (milvus-io/milvus#30607): measured on 2.3.5, the rows are acknowledged and never seen
        # again. There a write is a delete by primary key, then an insert.
        self._upsert_works = self.is_lite or _version(self.server_version) >= (2, 4)
        if layout == "auto":
            layout = Layout.SCOPE if self.is_lite else Layout.PARTITION_KEY
        self.layout = Layout(layout)
        self._cache = (
            _ScopeCache(Path(cache_dir), cache_ttl_s, cache_max_bytes) if cache_dir else None
        )

    def _first_client(self) -> MilvusClient:
        # After a failed first connect, _reopen has made the client; keep that one.
        client = getattr(self, "_client", None)
        return client if client is not None else self._connect()

    def _connect(self) -> MilvusClient:
        return MilvusClient(uri=self.uri, token=self._token or "", timeout=self._timeout)

    def _reopen(self) -> None:
        assert self._reconnect is not None
        uri = self._reconnect()
        with self._lock:
            # No client yet when the first connect is what failed.
            old: MilvusClient | None = getattr(self, "_client", None)
            self.uri, self._where = uri, _redact_uri(uri)
            self._client = self._connect()
            self._loaded.clear()
        if old is not None:
            with contextlib.suppress(Exception):
                old.close()

    def __repr__(self) -> str:
        return f"MilvusVectorStore({self._where!r}, layout={self.layout.value!r})"

    # -- plumbing ---------------------------------------------------------------------------

    def _call(self, op: str, fn: Callable[[], T]) -> T:
        """Run client calls; errors become VectorStoreError naming the URI. After a lost
        connection the call is retried once on a new one when the store can reconnect."""
        try:
            return fn()
        except (ValueError, ScopeError, VectorStoreError):
            raise
        except Exception as err:  # pymilvus raises MilvusException, grpc errors, OSError...
            if self._reconnect is None or not _disconnected(err):
                raise VectorStoreError(f"milvus at {self._where}: {op} failed: {err}") from err
        try:
            self._reopen()
            return fn()
        except (ValueError, ScopeError, VectorStoreError):
            raise
        except Exception as err:
            raise VectorStoreError(f"milvus at {self._where}: {op} failed: {err}") from err

    def _collections(self, refresh: bool = False) -> set[str]:
        if refresh or not self._names:
            names = self._call("list_collections", lambda: self._client.list_collections())
            with self._lock:
                self._names = {n for n in names if n.startswith(PREFIX)}
        return self._names

    def _model_collections(self, model: str, refresh: bool = True) -> dict[str, int]:
        """name -> dim of `model`'s collections in this store's layout (any scope)."""
        prefix = model_prefix(model)
        pattern = re.compile(re.escape(prefix) + r"(\d+)(_s[0-9a-f]{16})?$")
        out: dict[str, int] = {}
        for name in self._collections(refresh):
            m = pattern.match(name)
            if m and (m.group(2) is not None) == (self.layout is Layout.SCOPE):
                out[name] = int(m.group(1))
        return out

    def _target(self, model: str, dim: int, scope: Scope) -> str:
        return collection_name(model, dim, scope if self.layout is Layout.SCOPE else None)

    def _scoped(self, model: str, scope: Scope) -> list[str]:
        """The collections that may hold `scope`'s vectors of `model`."""
        names = self._model_collections(model)
        if self.layout is Layout.SCOPE:
            return [n for n in names if n.endswith(scope_suffix(scope))]
        return list(names)

    def _check_dim(self, model: str, dim: int, refresh: bool = True) -> None:
        for name, held in self._model_collections(model, refresh).items():
            if held != dim:
                raise ValueError(
                    f"model {model!r} holds {held}-dimensional vectors ({name}); got {dim}"
                )

    def _bump(self, name: str) -> None:
        if self._cache is not None:
            self._cache.bump(name)

    @contextlib.contextmanager
    def _writing(self, name: str) -> Iterator[None]:
        """One write to a collection: announced to cached readers before and after, and in Lite
        serialised (its engine is single-writer per collection while its gRPC server runs
        requests on a thread pool) within this process and, through the cache dir, the host."""
        local = _LITE_WRITES if self.is_lite else contextlib.nullcontext()
        shared = self._cache.locked(name) if self._cache else contextlib.nullcontext()
        with local, shared:
            self._bump(name)
            try:
                yield
            finally:
                self._bump(name)

    def _ensure_collection(self, model: str, dim: int, name: str) -> None:
        if name in self._collections() or name in self._collections(refresh=True):
            return
        lite = self.is_lite
        client = self._client
        schema = client.create_schema(auto_id=False, enable_dynamic_field=False)
        schema.add_field("pk", DataType.VARCHAR, max_length=64, is_primary=True)
        schema.add_field(
            "tenant_id",
            DataType.VARCHAR,
            max_length=128,
            is_partition_key=self.layout is Layout.PARTITION_KEY,
        )
        schema.add_field("ns", DataType.VARCHAR, max_length=128)
        schema.add_field("entity_id", DataType.VARCHAR, max_length=MAX_ENTITY_ID_BYTES)
        schema.add_field("text_hash", DataType.VARCHAR, max_length=MAX_TEXT_HASH_BYTES)
        schema.add_field("vector", DataType.FLOAT_VECTOR, dim=dim)
        index = client.prepare_index_params()
        index.add_index("vector", index_type="FLAT" if lite else "AUTOINDEX", metric_type="COSINE")
        # A server's default for readers that do not say (ours always do, see _level).
        level = {} if lite else {"consistency_level": STRONG}
        try:
            self._call(
                "create_collection",
                lambda: self._client.create_collection(
                    name,
                    schema=schema,
                    index_params=index,
                    properties={PROP_MODEL: model, PROP_LAYOUT: self.layout.value},
                    **level,
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
        self._bump("catalog")

    def _ensure_loaded(self, name: str) -> None:
        """Raw client calls: run inside `_call`. Lite starts with every collection released."""
        if name in self._loaded:
            return
        if self._client.get_load_state(name).get("state") != LoadState.Loaded:
            self._client.load_collection(name)
        with self._lock:
            self._loaded.add(name)

    def _read(self, op: str, name: str, fn: Callable[[], T]) -> T:
        """Run a read, loading the collection first (and again if the server restarted)."""

        def attempt() -> T:
            self._ensure_loaded(name)
            try:
                return fn()
            except Exception as err:
                if getattr(err, "code", None) != NOT_LOADED:
                    raise
            with self._lock:
                self._loaded.discard(name)
            self._ensure_loaded(name)
            return fn()

        return self._call(op, attempt)

    def _query(self, name: str, flt: str, fields: list[str]) -> list[dict[str, Any]]:
        rows = self._read(
            "query",
            name,
            lambda: self._client.query(
                name, filter=flt, output_fields=fields, limit=QUERY_LIMIT, **self._level(STRONG)
            ),
        )
        if len(rows) < QUERY_LIMIT:
            return list(rows)
        return self._read("query_iterator", name, lambda: self._iterate(name, flt, fields))

    def _iterate(self, name: str, flt: str, fields: list[str]) -> list[dict[str, Any]]:
        it = self._client.query_iterator(
            name, batch_size=4096, filter=flt, output_fields=fields, **self._level(STRONG)
        )
        out: list[dict[str, Any]] = []
        try:
            while batch := it.next():
                out.extend(batch)
        finally:
            it.close()
        return out

    def _scope_rows(self, name: str, scope: Scope, fields: list[str]) -> list[dict[str, Any]]:
        rows = self._query(name, scope_filter(scope), ["tenant_id", "ns", *fields])
        return [r for r in rows if (r.get("tenant_id"), r.get("ns")) == _pair(scope)]

    @staticmethod
    def _check_scope(scope: object) -> Scope:
        if not isinstance(scope, Scope):
            raise ScopeError("a vector store call needs a tenant scope (Scope(tenant_id, ns))")
        return scope

    # -- writes -----------------------------------------------------------------------------

    def upsert(
        self,
        model: str,
        dim: int,
        scope: Scope,
        items: Sequence[tuple[str, str, Sequence[float]]],
    ) -> int:
        scope = self._check_scope(scope)
        if not model:
            raise ValueError("model is required")
        if not isinstance(dim, int) or dim <= 0:
            raise ValueError(f"dim must be a positive integer, got {dim!r}")
        rows: dict[str, dict[str, Any]] = {}
        for entity_id, text_hash, vector in items:
            if not entity_id or len(entity_id.encode("utf-8")) > MAX_ENTITY_ID_BYTES:
                raise ValueError(f"entity id must be 1..{MAX_ENTITY_ID_BYTES} bytes")
            if len(text_hash.encode("utf-8")) > MAX_TEXT_HASH_BYTES:
                raise ValueError(f"text hash of {entity_id!r} is too long")
            vec = np.asarray(vector, dtype=np.float32)
            if vec.shape != (dim,):
                raise ValueError(
                    f"vector of {entity_id!r} has {vec.size} dimensions, expected {dim}"
                )
            rows[row_key(scope, entity_id)] = {
                "pk": row_key(scope, entity_id),
                "tenant_id": scope.tenant_id,
                "ns": scope.ns,
                "entity_id": entity_id,
                "text_hash": text_hash,
                "vector": vec,
            }
        self._check_dim(model, dim)
        if not rows:
            return 0
        name = self._target(model, dim, scope)
        self._ensure_collection(model, dim, name)
        values = list(rows.values())
        step = max(1, WRITE_CHUNK_BYTES // (4 * dim + 256))
        with self._writing(name):
            for start in range(0, len(values), step):
                chunk = values[start : start + step]
                if self._upsert_works:
                    self._call("upsert", lambda c=chunk: self._client.upsert(name, c))
                else:
                    pks = [row["pk"] for row in chunk]
                    self._call("delete", lambda p=pks: self._client.delete(name, ids=p))
                    self._call("insert", lambda c=chunk: self._client.insert(name, c))
            self._flush(name)
        return len(values)

    def _flush(self, name: str) -> None:
        """Lite: unflushed rows search ~100x slower. A server: no flush. Its acknowledged writes
        are already in its log (they survive kill -9, tests/faults), readers see them through
        the consistency level (_level), and a flush costs ~4 s on Milvus 2.3.5."""
        if self.is_lite:
            self._call("flush", lambda: self._client.flush(name))

    def _level(self, level: str) -> dict[str, str]:
        """The consistency level a read asks a server for (Lite has one process, no levels).

        Strong (the sink's reads and the store-equals-table check: ids, missing, models, the
        lookups before a delete): the read waits until every write acknowledged before it is
        visible, ~200 ms a call on 2.3.5. Session (`nearest`, the recall path): this client's
        own writes are visible at once, ~3 ms a search; other processes' writes after the
        server's graceful time (5 s by default), as Bounded."""
        return {} if self.is_lite else {"consistency_level": level}

    def delete(self, model: str, scope: Scope, entity_ids: Sequence[str]) -> int:
        scope = self._check_scope(scope)
        pks = sorted({row_key(scope, e) for e in entity_ids})
        if not pks:
            return 0
        return sum(self._delete_in(name, scope, pks) for name in self._scoped(model, scope))

    def _delete_in(self, name: str, scope: Scope, pks: list[str]) -> int:
        found: list[str] = []
        for start in range(0, len(pks), 1000):
            chunk = pks[start : start + 1000]
            got = self._read(
                "get",
                name,
                lambda c=chunk: self._client.get(
                    name, ids=c, output_fields=["pk", "tenant_id", "ns"], **self._level(STRONG)
                ),
            )
            found.extend(r["pk"] for r in got if (r["tenant_id"], r["ns"]) == _pair(scope))
        if not found:
            return 0
        with self._writing(name):
            for start in range(0, len(found), 1000):
                chunk = found[start : start + 1000]
                self._call("delete", lambda c=chunk: self._client.delete(name, ids=c))
            self._flush(name)
        return len(found)

    def delete_scope(self, scope: Scope) -> None:
        scope = self._check_scope(scope)
        names = self._collections(refresh=True)
        if self.layout is Layout.SCOPE:
            for name in sorted(n for n in names if n.endswith(scope_suffix(scope))):
                with self._writing(name):
                    self._call("drop_collection", lambda n=name: self._client.drop_collection(n))
                with self._lock:
                    self._names.discard(name)
                    self._loaded.discard(name)
            self._bump("catalog")
            return
        pattern = re.compile(r"^" + re.escape(PREFIX) + r".*_d\d+$")
        for name in sorted(n for n in names if pattern.match(n)):
            with self._writing(name):
                self._read(
                    "delete",
                    name,
                    lambda n=name: self._client.delete(n, filter=scope_filter(scope)),
                )
                self._flush(name)

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
        scope = self._check_scope(scope)
        query = np.asarray(vector, dtype=np.float32)
        if query.ndim != 1 or query.size == 0:
            raise ValueError("the query vector must be a non-empty list of numbers")
        if k <= 0:
            return []
        dim = int(query.size)
        name = self._target(model, dim, scope)
        if self._cache is not None:
            return self._nearest_cached(model, name, scope, query, k, min_cosine)
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
                **self._level(SESSION),
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

    def _nearest_cached(
        self, model: str, name: str, scope: Scope, query: np.ndarray, k: int, floor: float
    ) -> list[VectorHit]:
        assert self._cache is not None
        entry = self._cache.get((name, scope), lambda: self._load_scope(name, scope))
        if not entry.ids:
            self._check_dim(model, int(query.size), refresh=False)
            return []
        norm = float(np.linalg.norm(query))
        if norm == 0.0:
            return []
        # einsum, not `@`: a BLAS gemv fans out to every core and, on a busy host, waits
        # milliseconds for its threads; one core does 5,000 x 384 in ~0.5 ms.
        scores = np.einsum("ij,j->i", entry.matrix, query / norm, optimize=False)
        top = min(k, scores.size)
        best = np.argpartition(-scores, top - 1)[:top]
        best = best[np.argsort(-scores[best], kind="stable")]
        return [VectorHit(entry.ids[i], float(scores[i])) for i in best if scores[i] >= floor]

    def _load_scope(self, name: str, scope: Scope) -> tuple[list[str], np.ndarray]:
        if name not in self._collections(refresh=True):
            return [], np.zeros((0, 0), dtype=np.float32)
        rows = self._scope_rows(name, scope, ["entity_id", "vector"])
        if not rows:
            return [], np.zeros((0, 0), dtype=np.float32)
        matrix = np.asarray([r["vector"] for r in rows], dtype=np.float32)
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        matrix /= np.where(norms == 0.0, 1.0, norms)
        return [r["entity_id"] for r in rows], matrix

    def ids(self, model: str, scope: Scope) -> dict[str, str]:
        scope = self._check_scope(scope)
        out: dict[str, str] = {}
        for name in self._scoped(model, scope):
            for row in self._scope_rows(name, scope, ["entity_id", "text_hash"]):
                out[row["entity_id"]] = row["text_hash"]
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
        scope = self._check_scope(scope)
        if self._cache is None:
            return self._count_models(scope, self._collections(refresh=True))
        suffix = scope_suffix(scope) if self.layout is Layout.SCOPE else ""
        names = [n for n in self._collections() if not suffix or n.endswith(suffix)]
        return self._cache.models(
            scope, names, lambda: self._count_models(scope, self._collections(refresh=True))
        )

    def _count_models(self, scope: Scope, names: Iterable[str]) -> dict[str, tuple[int, int]]:
        pattern = re.compile(r"_d(\d+)(_s[0-9a-f]{16})?$")
        out: dict[str, tuple[int, int]] = {}
        for name in sorted(names):
            m = pattern.search(name)
            if m is None:
                continue
            if self.layout is Layout.SCOPE and m.group(2) != scope_suffix(scope):
                continue
            if self.layout is Layout.PARTITION_KEY and m.group(2) is not None:
                continue
            model = self._model_of(name)
            if model is None:
                continue
            # A scope-layout collection holds only its scope's rows (its name and every primary
            # key derive from the scope), and Lite counts with a filter by materialising every
            # row (~50x slower), so only the shared partition-key collections are filtered.
            flt = "" if self.layout is Layout.SCOPE else scope_filter(scope)
            rows = self._read(
                "count",
                name,
                lambda n=name, f=flt: self._client.query(
                    n, filter=f, output_fields=["count(*)"], **self._level(STRONG)
                ),
            )
            count = int(rows[0]["count(*)"]) if rows else 0
            if count:
                dim, held = int(m.group(1)), out.get(model, (0, 0))[1]
                out[model] = (dim, held + count)
        return out

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._client.close()
        finally:
            if self._lite_file:
                self._release_lite_file()

    def _release_lite_file(self) -> None:
        # pymilvus starts an in-process Lite server per .db path and never stops it; stop it
        # with the last store on that path so tests and tools can reopen the path later.
        with _LITE_FILES_LOCK:
            left = _LITE_FILES.get(self._lite_path, 1) - 1
            if left > 0:
                _LITE_FILES[self._lite_path] = left
                return
            _LITE_FILES.pop(self._lite_path, None)
        from milvus_lite.server_manager import server_manager_instance

        server_manager_instance.release_server(self._lite_path)
