"""Make a vector store equal the embeddings table of one model and scope, idempotently.

The table (entity_id, text_hash, dim, vector) is the truth; a fact-vector table
(`memflow.fact_embedding.fact_vector_table`) names its ids `fact_id` and is synced under the
fact-vector key (`resources.vector.base.fact_vectors_key`). Rows missing from the store or held
under another text_hash are upserted, store rows absent from the table are deleted, and a rerun
with nothing changed writes nothing. Other models' vectors are left alone.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import polars as pl

from resources.vector.base import VectorStore
from schemas.scope import Scope


@dataclass(frozen=True, slots=True)
class VectorSyncReport:
    model: str
    scope: str
    rows: int  # in the table
    written: int
    deleted: int
    unchanged: int
    seconds: float


@dataclass(frozen=True, slots=True)
class VectorDiff:
    missing: list[str]  # in the table, not in the store
    stale: list[str]  # in both, another text_hash
    extra: list[str]  # in the store, not in the table

    @property
    def empty(self) -> bool:
        return not (self.missing or self.stale or self.extra)

    def summary(self, sample: int = 5) -> dict[str, Any]:
        """Counts and a few ids of each kind, for run metadata."""
        return {
            kind: {"count": len(ids), "sample": sorted(ids)[:sample]}
            for kind, ids in (
                ("missing", self.missing),
                ("stale", self.stale),
                ("extra", self.extra),
            )
        }


def _id_column(table: pl.DataFrame) -> str:
    """`entity_id` in an entity-name vector table, `fact_id` in a fact-vector table."""
    return (
        "fact_id"
        if "fact_id" in table.columns and "entity_id" not in table.columns
        else "entity_id"
    )


def _wanted(table: pl.DataFrame) -> dict[str, str]:
    if table.is_empty():
        return {}
    column = _id_column(table)
    pairs = table.select(column, "text_hash").unique(column, keep="last")
    return dict(zip(pairs[column].to_list(), pairs["text_hash"].to_list(), strict=True))


def diff_vectors(store: VectorStore, model: str, scope: Scope, table: pl.DataFrame) -> VectorDiff:
    """What the store lacks or holds too much of, against `table` (an entity-name vector table
    with `entity_id`, or a fact-vector table with `fact_id`, under its fact-vector key)."""
    wanted = _wanted(table)
    held = store.ids(model, scope)
    return VectorDiff(
        missing=[e for e in wanted if e not in held],
        stale=[e for e, h in wanted.items() if e in held and held[e] != h],
        extra=[e for e in held if e not in wanted],
    )


def sync_vectors(
    store: VectorStore, model: str, scope: Scope, table: pl.DataFrame
) -> VectorSyncReport:
    started = time.perf_counter()
    if not table.is_empty():
        dims = table["dim"].unique().to_list()
        if len(dims) != 1:
            raise ValueError(f"the {model!r} table of {scope.key} mixes dimensions {sorted(dims)}")
    diff = diff_vectors(store, model, scope, table)
    todo = set(diff.missing) | set(diff.stale)
    written = 0
    if todo:
        column = _id_column(table)
        rows = table.filter(pl.col(column).is_in(list(todo))).unique(column, keep="last")
        dim = int(rows["dim"][0])
        ids, hashes = rows[column].to_list(), rows["text_hash"].to_list()
        vectors = list(rows["vector"].list.to_array(dim).to_numpy())  # (n, dim) float32 rows
        # One call: the store flushes once per call, and a flush is the expensive part in Lite.
        written = store.upsert(model, dim, scope, list(zip(ids, hashes, vectors, strict=True)))
    deleted = store.delete(model, scope, diff.extra) if diff.extra else 0
    wanted = len(_wanted(table))
    return VectorSyncReport(
        model=model,
        scope=scope.key,
        rows=wanted,
        written=written,
        deleted=deleted,
        unchanged=wanted - len(todo),
        seconds=time.perf_counter() - started,
    )


def vectors_equal_table(
    store: VectorStore, model: str, scope: Scope, table: pl.DataFrame
) -> tuple[bool, dict[str, Any]]:
    """(equal, summary of the differences): the asset check "store equals table"."""
    diff = diff_vectors(store, model, scope, table)
    return diff.empty, diff.summary()
