"""The embedded vector store: numpy over Arrow files in the data directory; no server.

Layout (one directory per model key, one file per scope)::

    <root>/<model-slug>-<hash>/model.json                 {"model": "...", "dim": 384}
    <root>/<model-slug>-<hash>/<org>/<repo>.<digest>.arrow
    <root>/<model-slug>-<hash>/<org>/<repo>.<digest>.rows  its row count and stat (a count)
    <root>/.locks/<hash>.lock                             a scope file's write lock

A scope's file is an uncompressed Arrow IPC file (Feather v2: pyarrow, polars and pandas read it
with no memflow code) with the columns tenant_id, ns, entity_id, text_hash and vector
(fixed_size_list<float32>[dim], stored unit-length, so a search is one matrix-vector product).
`<digest>` is a hash of the exact (tenant_id, ns): two scopes never share a file, even where the
file system folds case.

Writes replace the file whole: under an exclusive lock of the scope's file
(`resources.fs.file_lock`, shared by every process on the host), read it, merge, write a
temporary file, fsync, rename. A reader never sees half a write, and a writer killed mid-write
leaves the previous file intact plus a temporary file that the next writer of that scope
removes (it holds the lock, so any temporary file it finds is an orphan). Erasing a scope
removes its files, a killed writer's temporary files and its tenant's folder once empty; the
locks are named by a hash, so nothing left names the tenant.

Searches read the file whole into memory and keep it in a per-process LRU bounded by bytes,
revalidated by one `stat` per call (a replaced file has another inode, size or mtime): several
processes (the Dagster steps, the API's workers, the CLI) share the files, and a write of any of
them is seen at the next call. (Read, not memory-mapped: a file truncated in place by another
program would kill a process mapping it.) A query costs a stat and one single-threaded
matrix-vector product (`bench/bench_vector_store.py`).

Counting every tenant's vectors (`models_many`, what `memflow status` asks) reads the `.rows`
file each write leaves beside its Arrow file: the rows it wrote and the stat of the file it
made. Where that stat is the Arrow file's still, the count is exact without opening the Arrow
file (~20 us against ~100 us a file); anywhere else (no `.rows` file, another stat: a file
copied in, a write killed between the two) the Arrow file is counted.

Isolation: the path is derived from the scope, every row carries tenant_id and ns, and rows of
another scope in a file are dropped when it is loaded, so no search can answer them.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from resources.fs import file_lock
from resources.vector.base import (
    DEFAULT_MIN_COSINE,
    VectorStore,
    VectorStoreError,
    check_query,
    check_rows,
)
from resources.vector.base import check_scope as _check_scope
from resources.vector.declaration import (
    check_declared,
    declare,
    declared_models,
    model_dir_name,
    read_declaration,
)
from schemas.records import VectorHit
from schemas.scope import Scope

SUFFIX = ".arrow"
ROWS_SUFFIX = ".rows"
DEFAULT_CACHE_BYTES = 512 * 1024 * 1024
LOCK_TIMEOUT_S = 120.0
LOCKS = ".locks"


def _scope_digest(scope: Scope) -> str:
    return hashlib.sha256(f"{scope.tenant_id}\x1f{scope.ns}".encode()).hexdigest()[:12]


def _schema(dim: int) -> pa.Schema:
    return pa.schema(
        [
            ("tenant_id", pa.large_string()),
            ("ns", pa.large_string()),
            ("entity_id", pa.large_string()),
            ("text_hash", pa.large_string()),
            ("vector", pa.list_(pa.float32(), dim)),
        ]
    )


@dataclass(frozen=True, slots=True)
class _Scoped:
    """One scope's rows of one model key, as loaded from its file."""

    stamp: tuple[int, int, int, int]  # st_dev, st_ino, st_size, st_mtime_ns of the file
    ids: pa.Array
    hashes: pa.Array
    matrix: np.ndarray  # (n, dim) float32, unit rows, read-only
    nbytes: int

    @property
    def rows(self) -> int:
        return len(self.ids)


def _strings(values: Sequence[str]) -> pa.Array:
    """A string array built from its buffers: `pa.array` imports pandas (seconds) to inspect
    its argument, and neither the API nor the hooks need pandas otherwise."""
    encoded = [v.encode("utf-8") for v in values]
    offsets = np.zeros(len(encoded) + 1, np.int64)
    np.cumsum([len(b) for b in encoded], out=offsets[1:])
    buffers = [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded))]
    return pa.Array.from_buffers(pa.large_string(), len(encoded), buffers)


def _floats(matrix: np.ndarray) -> pa.Array:
    """(n, dim) float32 rows as a fixed_size_list<float32>[dim] array (one copy at most)."""
    flat = np.ascontiguousarray(matrix, dtype=np.float32).reshape(-1)
    values = pa.Array.from_buffers(pa.float32(), flat.size, [None, pa.py_buffer(flat)])
    return pa.FixedSizeListArray.from_arrays(values, matrix.shape[1])


def _matrix(vectors: pa.FixedSizeListArray, dim: int) -> np.ndarray:
    """The (n, dim) float32 view of a vector column (zero-copy; `to_numpy` imports pandas)."""
    values = vectors.flatten()
    buffer = values.buffers()[1]
    flat = np.frombuffer(buffer, np.float32, count=len(values), offset=values.offset * 4)
    return flat.reshape(-1, dim)


_NO_STRINGS = _strings([])
_EMPTY = _Scoped((0, 0, 0, 0), _NO_STRINGS, _NO_STRINGS, np.zeros((0, 0), np.float32), 0)


def _only(column: pa.ChunkedArray, value: str) -> bool:
    return column.unique().to_pylist() in ([value], [])


def _bits(flags: list[bool]) -> pa.Buffer:
    return pa.py_buffer(np.packbits(np.asarray(flags, dtype=bool), bitorder="little").tobytes())


def _stamp(st: os.stat_result) -> tuple[int, int, int, int]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _read(path: Path, scope: Scope, dim: int) -> _Scoped:
    """The scope's rows of the file at `path`, read whole into memory (rows of another scope
    are dropped); the stamp is the opened file's, so a file replaced meanwhile is reloaded
    later. Not memory-mapped: a file truncated in place by another program (a `cp` over it)
    would kill a process that maps it (SIGBUS), while a copy in memory stays valid. A file
    that is not this store's schema with the model's declared `dim` (another model's file
    copied over, a column of doubles, a null) fails naming the file."""
    try:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            data = f.read()
    except FileNotFoundError:
        return _EMPTY
    try:
        if not data:
            raise pa.ArrowInvalid("the file is empty")
        with pa.ipc.open_file(pa.BufferReader(pa.py_buffer(data))) as reader:
            table = reader.read_all()
        if not table.schema.equals(_schema(dim)):
            expected = ", ".join(f"{f.name}: {f.type}" for f in _schema(dim))
            raise pa.ArrowInvalid(f"its columns are not {expected}")
        vectors = table["vector"]
        if any(c.null_count for c in table.columns) or any(
            chunk.flatten().null_count for chunk in vectors.chunks
        ):
            raise pa.ArrowInvalid("it holds nulls")
        only_mine = _only(table["tenant_id"], scope.tenant_id) and _only(table["ns"], scope.ns)
    except (pa.ArrowInvalid, pa.ArrowTypeError, KeyError, AttributeError) as err:
        raise VectorStoreError(
            f"vector file {path} cannot be read ({err}); remove it and run "
            "`memflow vectors rebuild` to write it again from the embedding ledger"
        ) from err
    if table.num_rows and not only_mine:
        # A file holds its own scope's rows only; one that does not answers those rows alone.
        tenants, nss = table["tenant_id"].to_pylist(), table["ns"].to_pylist()
        mine = [(t, n) == (scope.tenant_id, scope.ns) for t, n in zip(tenants, nss, strict=True)]
        table = table.filter(pa.Array.from_buffers(pa.bool_(), len(mine), [None, _bits(mine)]))
    if not table.num_rows:
        return _Scoped(_stamp(st), _NO_STRINGS, _NO_STRINGS, np.zeros((0, dim), np.float32), 0)
    table = table.combine_chunks()
    matrix = _matrix(table["vector"].chunk(0), dim)
    ids, hashes = table["entity_id"].chunk(0), table["text_hash"].chunk(0)
    return _Scoped(_stamp(st), ids, hashes, matrix, st.st_size)


def _count(path: Path, scope: Scope, dim: int) -> int:
    """What `_read(path, scope, dim).rows` says, reading the file's footer and its tenant_id
    and ns columns only (not the vectors: a count of every tenant's files stays cheap). Those
    two columns are checked as `_read` checks them; the others are not read (a search, or
    `ids`, reads and checks them)."""
    try:
        source = pa.OSFile(str(path))
    except FileNotFoundError:
        return 0
    try:
        with source:
            reader = pa.ipc.open_file(source, options=pa.ipc.IpcReadOptions(included_fields=[0, 1]))
            scope_columns = pa.schema(list(_schema(dim))[:2])
            if not reader.schema.equals(scope_columns):
                expected = ", ".join(f"{f.name}: {f.type}" for f in scope_columns)
                raise pa.ArrowInvalid(f"its columns are not {expected}")
            table = reader.read_all()
    except (pa.ArrowInvalid, pa.ArrowTypeError, KeyError, AttributeError) as err:
        raise VectorStoreError(
            f"vector file {path} cannot be read ({err}); remove it and run "
            "`memflow vectors rebuild` to write it again from the embedding ledger"
        ) from err
    if _only(table["tenant_id"], scope.tenant_id) and _only(table["ns"], scope.ns):
        return table.num_rows
    tenants, nss = table["tenant_id"].to_pylist(), table["ns"].to_pylist()
    return sum((t, n) == (scope.tenant_id, scope.ns) for t, n in zip(tenants, nss, strict=True))


def _recorded_rows(stem: str) -> int | None:
    """The rows its writer recorded beside the file `<stem>.arrow`, where the file is still the
    one it wrote (same stat); None otherwise (no file: 0). Plain `os` calls: it runs for every
    file of every tenant (`models_many`)."""
    try:
        st = os.stat(stem + SUFFIX)
    except FileNotFoundError:
        return 0
    try:
        fd = os.open(stem + ROWS_SUFFIX, os.O_RDONLY)
    except OSError:
        return None
    try:
        rows, *stamp = (int(x) for x in os.read(fd, 256).split())
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)
    return rows if tuple(stamp) == _stamp(st) else None


def _held_rows(stem: str, scope: Scope, dim: int) -> int:
    """The scope's rows in the file `<stem>.arrow`: as recorded, else counted (`_count`)."""
    rows = _recorded_rows(stem)
    return _count(Path(stem + SUFFIX), scope, dim) if rows is None else rows


def _remove(path: Path) -> None:
    """Remove a scope's file (its writer's lock held) and its tenant's folder once empty."""
    path.unlink(missing_ok=True)
    path.with_suffix(ROWS_SUFFIX).unlink(missing_ok=True)
    with contextlib.suppress(OSError):  # another scope of the tenant still has a file
        path.parent.rmdir()


class _Cache:
    """Per-process LRU of loaded scope files, bounded by their bytes, revalidated by stat."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self._entries: OrderedDict[Path, _Scoped] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, path: Path, scope: Scope, dim: int, *, keep: bool = True) -> _Scoped:
        """The file's rows, from the cache while the file is unchanged; read (and, with `keep`,
        kept) otherwise."""
        try:
            stamp = _stamp(os.stat(path))
        except FileNotFoundError:
            self.drop(path)
            return _EMPTY
        with self._lock:
            entry = self._entries.get(path)
            if entry is not None and entry.stamp == stamp:
                self._entries.move_to_end(path)
                return entry
        entry = _read(path, scope, dim)
        if not keep:
            return entry
        with self._lock:
            old = self._entries.pop(path, None)
            self.bytes -= old.nbytes if old is not None else 0
            if entry.rows and entry.nbytes <= self.max_bytes:
                self._entries[path] = entry
                self.bytes += entry.nbytes
            while self.bytes > self.max_bytes and self._entries:
                _, evicted = self._entries.popitem(last=False)
                self.bytes -= evicted.nbytes
        return entry

    def drop(self, path: Path) -> None:
        with self._lock:
            old = self._entries.pop(path, None)
            self.bytes -= old.nbytes if old is not None else 0

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self.bytes = 0

    def __len__(self) -> int:
        return len(self._entries)


class LocalVectorStore(VectorStore):
    """Vectors in Arrow files under `root` (module docstring); safe across processes."""

    backend = "embedded"

    def __init__(
        self, root: str | os.PathLike[str], *, cache_max_bytes: int = DEFAULT_CACHE_BYTES
    ) -> None:
        self.root = Path(root)
        self.cache = _Cache(cache_max_bytes)
        self._dims: dict[str, int] = {}  # model -> declared dim (a declaration never changes)

    def __repr__(self) -> str:
        return f"LocalVectorStore({str(self.root)!r})"

    # -- paths and declarations -------------------------------------------------------------

    def _model_dir(self, model: str) -> Path:
        if not model:
            raise ValueError("model is required")
        return self.root / model_dir_name(model)

    def path(self, model: str, scope: Scope) -> Path:
        """The file holding `scope`'s vectors of `model` (it may not exist)."""
        scope = _check_scope(scope)
        name = f"{scope.ns}.{_scope_digest(scope)}{SUFFIX}"
        return self._model_dir(model) / scope.tenant_id / name

    def _declared(self, model: str) -> int | None:
        """The dimension `model`'s vectors have here; None before its first write."""
        if model not in self._dims:
            try:
                dim = read_declaration(self._model_dir(model), model)
            except ValueError as err:
                raise VectorStoreError(str(err)) from err
            if dim is None:
                return None
            self._dims[model] = dim
        return self._dims[model]

    def _declare(self, model: str, dim: int) -> None:
        """Record `model`'s dimension once; a ValueError when it holds another dimension."""
        held = self._declared(model)
        if held is None:
            try:
                held = declare(self._model_dir(model), model, dim)
            except OSError as err:
                raise VectorStoreError(f"cannot write {self._model_dir(model)}: {err}") from err
            self._dims[model] = held
        check_declared(model, held, dim)

    def _model_names(self) -> dict[str, tuple[str, int]]:
        """model-dir name -> (model, dim) of every model declared here."""
        return declared_models(self.root)

    # -- writes -----------------------------------------------------------------------------

    def _lock_path(self, path: Path) -> Path:
        """The write lock of the file at `path`: in `<root>/.locks`, named by a hash, so that
        erasing a tenant leaves no file or folder that names it (lock files stay: removing a
        lock file another process waits on would let two writers in)."""
        digest = hashlib.sha256(str(path.relative_to(self.root)).encode()).hexdigest()[:32]
        return self.root / LOCKS / f"{digest}.lock"

    @contextlib.contextmanager
    def _writing(self, path: Path) -> Iterator[None]:
        lock_path = self._lock_path(path)
        try:
            with file_lock(lock_path, timeout_s=LOCK_TIMEOUT_S):
                # Only a lock holder makes a temporary file: any found now is an orphan.
                for orphan in path.parent.glob(f".{path.name}.*.tmp"):
                    orphan.unlink(missing_ok=True)
                yield
        except TimeoutError as err:
            raise VectorStoreError(f"timed out waiting for the write lock of {path}") from err
        except OSError as err:
            raise VectorStoreError(f"cannot write {path}: {err}") from err
        finally:
            self.cache.drop(path)

    def _rewrite(
        self,
        model: str,
        dim: int,
        scope: Scope,
        upserts: Mapping[str, tuple[str, np.ndarray]],
        deletes: set[str],
    ) -> int:
        """Apply upserts and deletes to the scope's file in one replacement; returns how many
        held rows were deleted."""
        path = self.path(model, scope)
        with self._writing(path):
            held = _read(path, scope, dim)
            old_ids = held.ids.to_pylist()
            gone = set(upserts) | deletes
            keep = [i for i, e in enumerate(old_ids) if e not in gone]
            deleted = sum(1 for e in old_ids if e in deletes and e not in upserts)
            if not upserts and deleted == 0:
                return 0
            ids = [old_ids[i] for i in keep] + list(upserts)
            if not ids:
                _remove(path)
                return deleted
            old_hashes = held.hashes.to_pylist()
            hashes = [old_hashes[i] for i in keep] + [h for h, _ in upserts.values()]
            parts = [held.matrix[keep]] if keep else []
            if upserts:
                parts.append(np.stack([v for _, v in upserts.values()]))
            matrix = np.ascontiguousarray(np.concatenate(parts), dtype=np.float32)
            self._write_file(path, scope, dim, ids, hashes, matrix)
        return deleted

    def _write_file(
        self,
        path: Path,
        scope: Scope,
        dim: int,
        ids: list[str],
        hashes: list[str],
        matrix: np.ndarray,
    ) -> None:
        n = len(ids)
        table = pa.Table.from_arrays(
            [
                _strings([scope.tenant_id] * n),
                _strings([scope.ns] * n),
                _strings(ids),
                _strings(hashes),
                _floats(matrix),
            ],
            schema=_schema(dim),
        )
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            try:
                sink = pa.OSFile(str(tmp), "wb")
            except FileNotFoundError:  # another scope's erase removed the emptied folder
                path.parent.mkdir(parents=True, exist_ok=True)
                sink = pa.OSFile(str(tmp), "wb")
            with sink, pa.ipc.new_file(sink, table.schema) as w:
                w.write_table(table)
            fd = os.open(tmp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            # The data is fsynced before the rename, the directory is not: after a power loss
            # the rename may be lost and the previous file stays, which the next sink's diff
            # (ids read from the file) finds and writes again.
            os.replace(tmp, path)
            # what it wrote, for a count that opens no Arrow file (`_held_rows`)
            stamp = " ".join(str(x) for x in _stamp(os.stat(path)))
            path.with_suffix(ROWS_SUFFIX).write_text(f"{n} {stamp}\n")
        except OSError as err:
            tmp.unlink(missing_ok=True)
            raise VectorStoreError(f"cannot write {path}: {err}") from err

    def upsert(
        self,
        model: str,
        dim: int,
        scope: Scope,
        items: Sequence[tuple[str, str, Sequence[float]]],
    ) -> int:
        scope = _check_scope(scope)
        rows = {}
        for entity_id, (text_hash, vec) in check_rows(model, dim, items).items():
            norm = float(np.linalg.norm(vec))
            rows[entity_id] = (text_hash, vec / norm if norm else vec)
        check_declared(model, self._declared(model), dim)
        if rows:
            self._declare(model, dim)
            self._rewrite(model, dim, scope, rows, set())
        return len(rows)

    def delete(self, model: str, scope: Scope, entity_ids: Sequence[str]) -> int:
        scope = _check_scope(scope)
        wanted = set(entity_ids)
        dim = self._declared(model)
        if not wanted or dim is None:
            return 0
        return self._rewrite(model, dim, scope, {}, wanted)

    def delete_scope(self, scope: Scope) -> None:
        scope = _check_scope(scope)
        for model, _ in self._model_names().values():
            path = self.path(model, scope)
            if path.parent.is_dir():  # the file, or a killed writer's temporary file
                with self._writing(path):
                    _remove(path)

    # -- reads ------------------------------------------------------------------------------

    def _loaded(self, model: str, dim: int, scope: Scope, *, keep: bool = True) -> _Scoped:
        return self.cache.get(self.path(model, scope), scope, dim, keep=keep)

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
        held = self._declared(model)
        if held is None:
            return []
        check_declared(model, held, int(query.size))
        entry = self._loaded(model, held, scope)
        norm = float(np.linalg.norm(query))
        if not entry.rows or norm == 0.0 or not np.isfinite(norm):
            return []
        # einsum, not `@`: a BLAS gemv fans out to every core and, on a busy host, waits
        # milliseconds for its threads; one core does 5,000 x 384 in ~0.5 ms.
        scores = np.einsum("ij,j->i", entry.matrix, query / norm, optimize=False)
        top = min(k, scores.size)
        best = np.argpartition(-scores, top - 1)[:top]
        best = best[np.argsort(-scores[best], kind="stable")]
        best = best[scores[best] >= min_cosine]
        # One `take` for every id: an Arrow scalar per hit costs more than the scan at k = 100.
        ids = entry.ids.take(pa.array(best, pa.int64())).to_pylist()
        return [VectorHit(i, s) for i, s in zip(ids, scores[best].tolist(), strict=True)]

    def ids(self, model: str, scope: Scope) -> dict[str, str]:
        scope = _check_scope(scope)
        dim = self._declared(model)
        if dim is None:
            return {}
        # Not kept: a sink reads each file's ids once or twice a run; the cache is for search.
        entry = self._loaded(model, dim, scope, keep=False)
        return dict(zip(entry.ids.to_pylist(), entry.hashes.to_pylist(), strict=True))

    def missing(self, model: str, scope: Scope, wanted: Mapping[str, str]) -> list[str]:
        held = self.ids(model, scope)
        return [eid for eid, text_hash in wanted.items() if held.get(eid) != text_hash]

    def models(self, scope: Scope) -> dict[str, tuple[int, int]]:
        scope = _check_scope(scope)
        out: dict[str, tuple[int, int]] = {}
        for model, dim in sorted(self._model_names().values()):
            rows = self._loaded(model, dim, scope).rows
            if rows:
                out[model] = (dim, rows)
        return out

    def models_many(self, scopes: Sequence[Scope]) -> dict[Scope, dict[str, tuple[int, int]]]:
        """Counted from what each write recorded beside its file where the file is unchanged
        since, else from the file's footer and scope columns; no vector read, nothing added
        to the search cache."""
        wanted = list(dict.fromkeys(_check_scope(s) for s in scopes))
        out: dict[Scope, dict[str, tuple[int, int]]] = {s: {} for s in wanted}
        # `path` spelled out with strings: pathlib's objects cost more than the count
        names = {s: f"{s.tenant_id}{os.sep}{s.ns}.{_scope_digest(s)}" for s in wanted}
        for model, dim in sorted(self._model_names().values()):
            base = f"{self._model_dir(model)}{os.sep}"
            for scope in wanted:
                rows = _held_rows(base + names[scope], scope, dim)
                if rows:
                    out[scope][model] = (dim, rows)
        return out

    def record_counts(self, scopes: Sequence[Scope]) -> int:
        """Write the `.rows` record beside every file of `scopes` that lacks a valid one (a
        file written before records were kept, or by hand), each under its file's write lock;
        returns how many were written. The vector sink and `memflow vectors rebuild` call it
        for the tenants they synced (a file equal to the ledger is not rewritten)."""
        written = 0
        for model, dim in sorted(self._model_names().values()):
            for scope in dict.fromkeys(_check_scope(s) for s in scopes):
                path = self.path(model, scope)
                if _recorded_rows(str(path.with_suffix(""))) is not None:
                    continue  # recorded, or no file
                with self._writing(path):
                    if not path.exists():
                        continue
                    rows = _count(path, scope, dim)
                    stamp = " ".join(str(x) for x in _stamp(os.stat(path)))
                    path.with_suffix(ROWS_SUFFIX).write_text(f"{rows} {stamp}\n")
                    written += 1
        return written

    def close(self) -> None:
        self.cache.clear()
