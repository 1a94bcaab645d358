"""The embedding ledger: every vector a model made for a scope, kept as append-only Parquet parts.

It is the cursor of the embedding sweep. Each batch is written as one part file (temp file,
fsync, rename), so a run killed mid-sweep loses at most the batch in flight and the rerun embeds
only what no part holds yet. Layout::

    <data_dir>/embedding-ledger/<model-slug>-<hash>/<org>/<repo>/part-<time_ns>-<pid>-<rand>.parquet

Parts hold entity_id, text_hash (sha256 of the embedded name), dim and vector. A later part wins
for the same (entity_id, text_hash); `compact` merges a scope's parts into one.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import polars as pl

from resources.fs import atomic_write_parquet, file_lock
from schemas.ids import sha256_text
from schemas.scope import Scope

LEDGER_DIR = "embedding-ledger"
SCHEMA: dict[str, pl.DataType] = {
    "entity_id": pl.String(),
    "text_hash": pl.String(),
    "dim": pl.Int32(),
    "vector": pl.List(pl.Float32()),
}
_SLUG = re.compile(r"[^a-z0-9]+")

Rows = pl.DataFrame | Sequence[tuple[str, str, Sequence[float]]]


def model_dir_name(model: str) -> str:
    slug = _SLUG.sub("-", model.lower()).strip("-")[:60] or "model"
    return f"{slug}-{hashlib.sha256(model.encode('utf-8')).hexdigest()[:10]}"


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

    def dims(self, model: str) -> set[int]:
        """Every dimension the ledger holds for `model` (one, unless something went wrong)."""
        folder = self.root / model_dir_name(model)
        paths = sorted(folder.glob("*/*/part-*.parquet")) if folder.is_dir() else []
        found: set[int] = set()
        if paths:
            with contextlib.suppress(FileNotFoundError):
                found = set(pl.scan_parquet(paths).select("dim").unique().collect()["dim"])
        self._dims[model] = found | self._dims.get(model, set())
        return set(self._dims[model])

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
        held = self._dims.get(model) or self.dims(model)
        if held and not batch_dims <= held:
            raise ValueError(
                f"model {model!r} holds {sorted(held)}-dimensional vectors; "
                f"got {sorted(batch_dims)}"
            )
        folder = self.scope_dir(model, scope)
        _write_atomic(frame, folder / _part_name())  # creates the folder
        self._dims.setdefault(model, set()).update(batch_dims)
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
