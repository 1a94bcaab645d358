"""Make a vector store equal what it should hold, per model key and scope, idempotently.

What a scope should hold is `wanted`: entity_id -> text_hash (an entity-name vector table names
its ids `entity_id`; a fact-vector table, `memflow.fact_embedding.fact_vector_table`, names them
`fact_id` and is synced under the fact-vector key `resources.vector.base.fact_vectors_key`).
Rows missing from the store or held under another text_hash are upserted, store rows absent
from `wanted` are deleted, and a rerun with nothing changed writes nothing. Other models'
vectors are left alone.

`sync_block` does a block of scopes at once: the store's ids are read for the whole block in
one call before and one after (`VectorStore.ids_many`: one read on a server, where each read
waits for the server's time tick), the upserts go scope by scope, the deletes of the whole block
together (`VectorStore.delete_many`), and the vectors of a scope are fetched only for the rows
it must write (a rerun with nothing changed fetches none).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import polars as pl

from resources.vector.base import VectorStore
from schemas.scope import Scope

Wanted = Mapping[str, str]  # entity_id -> text_hash
# (scope, the rows to write: id -> hash) -> (ids, hashes, (n, dim) float32 matrix)
Fetch = Callable[[Scope, dict[str, str]], tuple[list[str], list[str], np.ndarray]]


@dataclass(frozen=True, slots=True)
class VectorSyncReport:
    model: str
    scope: str
    rows: int  # wanted
    written: int
    deleted: int
    unchanged: int
    seconds: float


@dataclass(frozen=True, slots=True)
class VectorDiff:
    missing: list[str]  # wanted, not in the store
    stale: list[str]  # in both, another text_hash
    extra: list[str]  # in the store, not wanted

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


def diff_ids(wanted: Wanted, held: Mapping[str, str]) -> VectorDiff:
    return VectorDiff(
        missing=[e for e in wanted if e not in held],
        stale=[e for e, h in wanted.items() if e in held and held[e] != h],
        extra=[e for e in held if e not in wanted],
    )


def sync_block(
    store: VectorStore, model: str, wanted: Mapping[Scope, Wanted], fetch: Fetch
) -> dict[Scope, tuple[VectorSyncReport, VectorDiff]]:
    """Sync every scope of `wanted` under `model`; per scope, its report and what still differs
    after the sync (read back from the store: empty when the store equals `wanted`)."""
    scopes = list(wanted)
    before = store.ids_many(model, scopes)
    reports: dict[Scope, VectorSyncReport] = {}
    doomed: dict[Scope, list[str]] = {}
    for scope in scopes:
        started = time.perf_counter()
        want = wanted[scope]
        diff = diff_ids(want, before.get(scope, {}))
        todo = {e: want[e] for e in (*diff.missing, *diff.stale)}
        written = 0
        if todo:
            ids, hashes, matrix = fetch(scope, todo)
            got = set(ids)
            lost = [e for e in todo if e not in got]
            if lost:
                raise ValueError(
                    f"no vector of {len(lost)} wanted rows of {scope.key} under {model!r} "
                    f"(e.g. {sorted(lost)[:3]})"
                )
            dim = int(matrix.shape[1])
            # One call per scope: a store writes a scope's rows together.
            written = store.upsert(model, dim, scope, list(zip(ids, hashes, matrix, strict=True)))
        if diff.extra:
            doomed[scope] = diff.extra
        reports[scope] = VectorSyncReport(
            model=model,
            scope=scope.key,
            rows=len(want),
            written=written,
            deleted=0,
            unchanged=len(want) - len(todo),
            seconds=time.perf_counter() - started,
        )
    if doomed:  # the block's deletes together: a server looks them up in one read
        started = time.perf_counter()
        deleted = store.delete_many(model, doomed)
        share = (time.perf_counter() - started) / len(doomed)
        for scope, count in deleted.items():
            r = reports[scope]
            reports[scope] = replace(r, deleted=count, seconds=r.seconds + share)
    after = store.ids_many(model, scopes)
    return {s: (reports[s], diff_ids(wanted[s], after.get(s, {}))) for s in scopes}


# -- one scope, from a table holding its vectors -----------------------------------------------


def _id_column(table: pl.DataFrame) -> str:
    """`entity_id` in an entity-name vector table, `fact_id` in a fact-vector table."""
    return (
        "fact_id"
        if "fact_id" in table.columns and "entity_id" not in table.columns
        else "entity_id"
    )


def table_wanted(table: pl.DataFrame) -> dict[str, str]:
    """entity_id (or fact_id) -> text_hash of a vector table (the last row of an id wins)."""
    if table.is_empty():
        return {}
    column = _id_column(table)
    pairs = table.select(column, "text_hash").unique(column, keep="last", maintain_order=True)
    return dict(zip(pairs[column].to_list(), pairs["text_hash"].to_list(), strict=True))


def table_fetch(table: pl.DataFrame) -> Fetch:
    """A `Fetch` reading the vectors out of `table`."""

    def fetch(scope: Scope, todo: dict[str, str]) -> tuple[list[str], list[str], np.ndarray]:
        column = _id_column(table)
        rows = table.filter(pl.col(column).is_in(list(todo))).unique(column, keep="last")
        dims = rows["dim"].unique().to_list()
        if len(dims) != 1:
            raise ValueError(f"the table of {scope.key} mixes dimensions {sorted(dims)}")
        matrix = rows["vector"].list.to_array(int(dims[0])).to_numpy()
        return rows[column].to_list(), rows["text_hash"].to_list(), matrix

    return fetch


def diff_vectors(store: VectorStore, model: str, scope: Scope, table: pl.DataFrame) -> VectorDiff:
    """What the store lacks or holds too much of, against `table` (an entity-name vector table
    with `entity_id`, or a fact-vector table with `fact_id`, under its fact-vector key)."""
    return diff_ids(table_wanted(table), store.ids(model, scope))


def sync_vectors(
    store: VectorStore, model: str, scope: Scope, table: pl.DataFrame
) -> VectorSyncReport:
    """`sync_block` for one scope whose vectors are in `table`."""
    if not table.is_empty():
        dims = table["dim"].unique().to_list()
        if len(dims) != 1:
            raise ValueError(f"the {model!r} table of {scope.key} mixes dimensions {sorted(dims)}")
    report, _ = sync_block(store, model, {scope: table_wanted(table)}, table_fetch(table))[scope]
    return report


def vectors_equal_table(
    store: VectorStore, model: str, scope: Scope, table: pl.DataFrame
) -> tuple[bool, dict[str, Any]]:
    """(equal, summary of the differences): the asset check "store equals table"."""
    diff = diff_vectors(store, model, scope, table)
    return diff.empty, diff.summary()
