"""The embedding ledger: every vector a model made for a scope, kept as append-only Parquet parts.

It is the cursor of the embedding sweep. Each batch is written as one part file (temp file,
fsync, rename), so a run killed mid-sweep loses at most the batch in flight and the rerun embeds
only what no part holds yet. Layout::

    <data_dir>/embedding-ledger/<model-slug>-<hash>/<org>/<repo>/part-<time_ns>-<pid>-<rand>.parquet

Parts hold entity_id, text_hash (sha256 of the embedded name), dim and vector. A later part wins
for the same (entity_id, text_hash); `compact` merges a scope's parts into one. The model's
dimension is declared once, at its first append, in `<model-slug>-<hash>/model.json`, so no
call has to look at other tenants' parts (a ledger written before declarations is scanned once
and declared then).

Readers that need only which (entity_id, text_hash) pairs hold a vector (`pairs`: the sweep's
cursor, the sink's diff) read those two columns; `vectors_of` reads the vectors of given pairs.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import polars as pl

from resources.fs import as_storage_error, atomic_write_parquet, file_lock
from resources.vector.declaration import MODEL_FILE, declare, model_dir_name, read_declaration
from schemas.ids import sha256_text
from schemas.scope import Scope

LEDGER_DIR = "embedding-ledger"
SCHEMA: dict[str, pl.DataType] = {
    "entity_id": pl.String(),
    "text_hash": pl.String(),
    "dim": pl.Int32(),
    "vector": pl.List(pl.Float32()),
}

Rows = pl.DataFrame | Sequence[tuple[str, str, Sequence[float]]]


class EmbeddingLedger:
    def __init__(self, data_dir: str | os.PathLike[str]) -> None:
        self.root = Path(data_dir) / LEDGER_DIR
        self._dims: dict[str, set[int]] = {}

    def scope_dir(self, model: str, scope: Scope) -> Path:
        return self.root / model_dir_name(model) / scope.tenant_id / scope.ns

    def parts(self, model: str, scope: Scope) -> list[Path]:
        folder = self.scope_dir(model, scope)
        return sorted(folder.glob("part-*.parquet")) if folder.is_dir() else []

    def load(self, model: str, scope: Scope) -> pl.DataFrame:
        """entity_id, text_hash, dim, vector: one row per (entity_id, text_hash), latest wins."""
        for _ in range(5):
            paths = self.parts(model, scope)
            if not paths:
                return pl.DataFrame(schema=SCHEMA)
            try:
                frame = pl.read_parquet(paths)
            except FileNotFoundError:
                continue  # a compaction replaced the parts between listing and reading
            return frame.unique(["entity_id", "text_hash"], keep="last", maintain_order=True)
        raise RuntimeError(f"embedding ledger for {scope.key} kept changing while read")

    def pairs(self, model: str, scope: Scope) -> pl.DataFrame:
        """entity_id, text_hash: every pair the ledger holds a vector of (no vectors read)."""
        return self._scan(model, scope, ["entity_id", "text_hash"]).unique(maintain_order=True)

    def vectors_of(
        self, model: str, scope: Scope, wanted: dict[str, str]
    ) -> tuple[list[str], list[str], np.ndarray]:
        """(ids, text hashes, (n, dim) float32 matrix) of the held vectors of exactly the
        `wanted` entity_id -> text_hash pairs (the latest vector of each)."""
        if not wanted:
            return [], [], np.zeros((0, 0), np.float32)
        pairs = pl.DataFrame(
            {"entity_id": list(wanted), "text_hash": list(wanted.values())},
            schema={"entity_id": pl.String, "text_hash": pl.String},
        )
        frame = self._scan(model, scope, list(SCHEMA), ids=list(wanted))
        frame = frame.join(pairs, on=["entity_id", "text_hash"], how="semi")
        frame = frame.unique(["entity_id", "text_hash"], keep="last", maintain_order=True)
        if frame.is_empty():
            return [], [], np.zeros((0, 0), np.float32)
        dims = frame["dim"].unique().to_list()
        if len(dims) != 1:
            raise ValueError(f"the ledger of {scope.key} mixes dimensions {sorted(dims)}")
        matrix = frame["vector"].list.to_array(int(dims[0])).to_numpy()
        return frame["entity_id"].to_list(), frame["text_hash"].to_list(), matrix

    def _scan(
        self, model: str, scope: Scope, columns: list[str], ids: list[str] | None = None
    ) -> pl.DataFrame:
        # `read_parquet` then a filter in memory: a lazy scan with a pushed-down filter plans
        # for milliseconds, more than a tenant's parts take to read whole.
        for _ in range(5):
            paths = self.parts(model, scope)
            if not paths:
                return pl.DataFrame(schema={c: SCHEMA[c] for c in columns})
            try:
                frame = pl.read_parquet(paths, columns=columns)
            except FileNotFoundError:
                continue  # a compaction replaced the parts between listing and reading
            return frame if ids is None else frame.filter(pl.col("entity_id").is_in(ids))
        raise RuntimeError(f"embedding ledger for {scope.key} kept changing while read")

    def dims(self, model: str) -> set[int]:
        """The dimension the ledger holds for `model` (a set: a ledger written before
        declarations may hold several, if something went wrong); empty before any vector."""
        if model in self._dims:
            return set(self._dims[model])
        declared = self._declared(model)
        if declared is not None:
            self._dims[model] = {declared}
            return {declared}
        folder = self.root / model_dir_name(model)
        paths = sorted(folder.glob("*/*/part-*.parquet")) if folder.is_dir() else []
        found: set[int] = set()
        if paths:  # a ledger from before declarations: scanned once, then declared
            with contextlib.suppress(FileNotFoundError):
                found = set(pl.scan_parquet(paths).select("dim").unique().collect()["dim"])
        if len(found) == 1:
            self._declare(model, next(iter(found)))
        if found:
            self._dims[model] = found
        return found

    def _declared(self, model: str) -> int | None:
        try:
            return read_declaration(self.root / model_dir_name(model), model)
        except ValueError as err:
            raise ValueError(f"the embedding ledger's {err}") from err

    def _declare(self, model: str, dim: int) -> int:
        """Declare `model`'s dimension unless declared already; returns the declared one."""
        folder = self.root / model_dir_name(model)
        try:
            return declare(folder, model, dim)
        except OSError as exc:
            raise as_storage_error(folder / MODEL_FILE, exc) or exc from exc

    def append(self, model: str, scope: Scope, rows: Rows) -> int:
        """Persist one batch as one part file; returns rows written.

        Raises ValueError when a vector's dimension differs from the batch or from what the
        ledger already holds for `model`.
        """
        frame = _frame(rows)
        if frame.is_empty():
            return 0
        batch_dims = set(frame["dim"].unique().to_list())
        if len(batch_dims) != 1:
            raise ValueError(f"one batch holds vectors of {sorted(batch_dims)} dimensions")
        held = self.dims(model)
        if not held:
            held = {self._declare(model, next(iter(batch_dims)))}
            self._dims[model] = held
        if not batch_dims <= held:
            raise ValueError(
                f"model {model!r} holds {sorted(held)}-dimensional vectors; "
                f"got {sorted(batch_dims)}"
            )
        folder = self.scope_dir(model, scope)
        _write_atomic(frame, folder / _part_name())  # creates the folder
        return frame.height

    def compact(self, model: str, scope: Scope, *, min_parts: int = 2) -> int:
        """Merge the scope's parts into one; returns how many parts were replaced."""
        folder = self.scope_dir(model, scope)
        if not folder.is_dir():
            return 0
        with _locked(folder):
            paths = self.parts(model, scope)
            if len(paths) < min_parts:
                return 0
            merged = pl.read_parquet(paths).unique(
                ["entity_id", "text_hash"], keep="last", maintain_order=True
            )
            _write_atomic(merged, folder / _part_name(paths[-1]))
            for path in paths:
                path.unlink(missing_ok=True)
        return len(paths)

    def drop(self, scope: Scope, model: str | None = None) -> int:
        """Delete the scope's parts (of one model, or of all); returns files removed."""
        models = [model_dir_name(model)] if model else _children(self.root)
        removed = 0
        for name in models:
            folder = self.root / name / scope.tenant_id / scope.ns
            for path in sorted(folder.glob("*.parquet")) if folder.is_dir() else []:
                path.unlink(missing_ok=True)
                removed += 1
        self._dims.clear()
        return removed


def _children(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []


def _part_name(after: Path | None = None) -> str:
    stamp = time.time_ns()
    if after is not None:  # sorts after every part it replaces, whatever the clocks say
        stamp = max(stamp, int(after.name.split("-")[1]) + 1)
    return f"part-{stamp:020d}-{os.getpid()}-{os.urandom(4).hex()}.parquet"


def _frame(rows: Rows) -> pl.DataFrame:
    if isinstance(rows, pl.DataFrame):
        frame = rows
        if "dim" not in frame.columns:
            frame = frame.with_columns(pl.col("vector").list.len().alias("dim"))
    else:
        items = list(rows)
        frame = pl.DataFrame(
            {
                "entity_id": [r[0] for r in items],
                "text_hash": [r[1] for r in items],
                "dim": [len(r[2]) for r in items],
                "vector": [list(map(float, r[2])) for r in items],
            },
            schema=SCHEMA,
        )
    frame = frame.select([pl.col(c).cast(t) for c, t in SCHEMA.items()])
    if frame.height and (
        frame["entity_id"].null_count()
        or frame["text_hash"].null_count()
        or not frame["dim"].eq(frame["vector"].list.len()).all()
    ):
        raise ValueError("ledger rows need entity_id, text_hash and a vector matching dim")
    return frame


def _write_atomic(frame: pl.DataFrame, target: Path) -> None:
    """Temp file (named for its writer, so later writers sweep it if this one is killed),
    fsync, rename; a full or read-only disk raises `StorageError` naming the part."""
    atomic_write_parquet(frame, target, statistics=False, fsync=True)


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    with file_lock(folder / ".compact.lock", timeout_s=-1):
        yield


def with_text_hash(entities: pl.DataFrame) -> pl.DataFrame:
    """entity_id, name, text_hash (sha256 of the name); one row per entity, first one wins."""
    missing = {"entity_id", "name"} - set(entities.columns)
    if missing:
        raise ValueError(f"entities need columns {sorted(missing)}")
    frame = entities.select("entity_id", "name").unique(
        "entity_id", keep="first", maintain_order=True
    )
    if frame["entity_id"].null_count() or frame["name"].null_count():
        raise ValueError("entities with a null id or name cannot be embedded")
    hashes = [sha256_text(name) for name in frame["name"].to_list()]
    return frame.with_columns(pl.Series("text_hash", hashes, dtype=pl.String))


def vector_table(
    ledger: EmbeddingLedger,
    model: str,
    scope: Scope,
    entities: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """The model's vectors of the scope: tenant_id, ns, entity_id, model, dim, text_hash, vector.

    With `entities` (entity_id, name), exactly the vectors of their current names (an entity
    renamed back to an earlier name reuses that name's vector); without, the latest vector per
    entity.
    """
    held = ledger.load(model, scope)
    if entities is not None:
        current = (
            with_text_hash(entities).select("entity_id", "text_hash") if entities.height else None
        )
        held = (
            held.join(current, on=["entity_id", "text_hash"], how="semi", maintain_order="left")
            if current is not None
            else held.clear()
        )
    held = held.unique("entity_id", keep="last", maintain_order=True)
    return held.select(
        pl.lit(scope.tenant_id, dtype=pl.String).alias("tenant_id"),
        pl.lit(scope.ns, dtype=pl.String).alias("ns"),
        pl.col("entity_id"),
        pl.lit(model, dtype=pl.String).alias("model"),
        pl.col("dim").cast(SCHEMA["dim"]),
        pl.col("text_hash"),
        pl.col("vector"),
    )
