"""Reports over every tenant without reading every tenant's data files.

The tables are partitioned by tenant, so a table of 10,000 tenants has at least 10,000 data
files, and reading even one column of each costs ~0.2 ms a file (BENCHMARKS.md, "Tenants at
scale"): seconds for a report. Two remedies, both used by `memflow status`:

- `read_columns`: the few columns a report needs, of many tenants, in one scan (one plan for
  all the files instead of one per tenant).
- figures (`schemas.tables.FIGURES`): per-tenant numbers a report needs (lines read, turns
  awaiting extraction, rejects by reason), recorded by each write beside the table
  (`_summaries/<asset>`, one small table) together with a digest of the names of the files
  they were made from. Delta never edits a file in place, so figures whose digest names the
  tenant's current files are exact; any other tenant's (a write that died between its two
  commits, a compaction, a table written before figures were recorded) are made from its
  files. A write records them also for the tenants it leaves as they were, where none are
  recorded (a table written before figures were kept), and `TableStore.maintain` records
  every missing one.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

import polars as pl

from schemas.scope import Scope
from schemas.tables import COLUMN_DEFAULTS, FIGURES, TABLES

if TYPE_CHECKING:
    from resources.tables import TableStore

FILES_KEY = "_files"  # in a tenant's recorded figures: the digest of the files they came from
# Tenants whose figures one commit records: a commit names its tenants in one predicate, and
# delta-rs crashes (a stack overflow) on one of 10,000 (measured); a block of `memflow run`
# is 200.
REFRESH_CHUNK = 500
_KEY = ["tenant_id", "ns"]


def files_digest(paths: Iterable[str]) -> int:
    """A number naming a tenant's data files, by their names in any order (the same names
    hold the same rows); under 2**52, exact in any JSON reader."""
    names = "\n".join(sorted(p.rsplit("/", 1)[-1] for p in paths))
    return int.from_bytes(hashlib.blake2b(names.encode(), digest_size=8).digest()) >> 12


def read_columns(
    store: TableStore, asset: str, scopes: Iterable[Scope], columns: list[str]
) -> pl.DataFrame:
    """tenant_id, ns and `columns` (typed as the asset's layout, its column defaults filled
    in as a tenant's read fills them) of every row of `scopes`, their files read in one scan.
    A column a file lacks comes back null. A table the scan cannot read file by file
    (deletion vectors), or files that disagree on a column's type, are read tenant by
    tenant."""
    layout = TABLES.get(asset, {})
    wanted = [c for c in dict.fromkeys(columns) if c not in _KEY]
    schema = {"tenant_id": pl.String(), "ns": pl.String()}
    schema |= {c: layout.get(c, pl.String()) for c in wanted}
    scopes = list(dict.fromkeys(scopes))
    index = store.file_index(asset)
    if index is None or not scopes:
        return pl.DataFrame(schema=schema)
    keys = pl.DataFrame([(s.tenant_id, s.ns) for s in scopes], schema=_KEY, orient="row")
    files, plain = index[0].join(keys, on=_KEY), index[1]
    if files.is_empty():
        return pl.DataFrame(schema=schema)
    if plain:
        try:
            found = pl.scan_parquet(
                files["path"].to_list(),
                schema={c: schema[c] for c in wanted},
                missing_columns="insert",
                extra_columns="ignore",
                include_file_paths="_path",
                hive_partitioning=False,
                storage_options=store.storage_options or None,
            ).collect()
        except FileNotFoundError:  # vacuumed under the kept log: read it anew
            store.forget_snapshot(asset)
            return read_columns(store, asset, scopes, columns)
        except pl.exceptions.PolarsError:
            found = None  # files that disagree on a column's type
        if found is not None:
            paths = files.select(pl.col("path").alias("_path"), *_KEY)
            return (
                found.join(paths, on="_path")
                .select(list(schema))
                .with_columns(
                    pl.col(c).fill_null(pl.lit(v, dtype=schema[c]))
                    for c, v in COLUMN_DEFAULTS.items()
                    if c in wanted
                )
            )
    frames = [
        df.select(list(schema))
        for df in store.read_many(asset, scopes, columns=[*_KEY, *wanted]).values()
    ]
    return pl.concat([pl.DataFrame(schema=schema), *frames], how="vertical_relaxed")


def record_figures(
    store: TableStore,
    asset: str,
    written: Mapping[Scope, pl.DataFrame],
    files: Mapping[Scope, tuple[str, ...]],
) -> None:
    """Record the figures of the tenants a write just committed (`written`: each tenant's
    rows as written, `files`: its files after the commit), in one commit."""
    made = FIGURES[asset][1]
    store.record_summaries(
        asset,
        {s: {**made(df), FILES_KEY: files_digest(files.get(s, ()))} for s, df in written.items()},
    )


def record_missing(store: TableStore, asset: str, unchanged: Mapping[Scope, pl.DataFrame]) -> int:
    """Record the figures of tenants a write left as they were (`unchanged`: their rows, as
    stored) where none name their files, so a table written before figures were kept gets
    them at its next run; returns how many were recorded."""
    index = store.file_index(asset)
    if index is None or not index[1]:
        return 0  # no table; or deletion vectors, under which no figure is trusted
    files = store.files_by_scope(asset, list(unchanged))
    held = {s: df for s, df in unchanged.items() if files.get(s)}
    if not held:
        return 0
    recorded = store.summaries(asset, held)
    made = FIGURES[asset][1]
    todo = {}
    for scope, df in held.items():
        digest = files_digest(files[scope])
        if recorded.get(scope.key, {}).get(FILES_KEY) != digest:
            todo[scope] = {**made(df), FILES_KEY: digest}
    scopes = list(todo)
    for start in range(0, len(scopes), REFRESH_CHUNK):
        store.record_summaries(asset, {s: todo[s] for s in scopes[start : start + REFRESH_CHUNK]})
    return len(todo)


def figures(store: TableStore, asset: str, scopes: Iterable[Scope]) -> dict[Scope, dict[str, int]]:
    """Each tenant's figures of `asset` as its current files hold them: the recorded ones
    where they name the tenant's files, made from the files for the others."""
    wanted = list(dict.fromkeys(scopes))
    out, stale = _recorded(store, asset, wanted)
    out.update(_made(store, asset, stale))
    return {s: out[s] for s in wanted}


def refresh_figures(store: TableStore, asset: str) -> int:
    """Record the figures of every tenant of `asset` whose recorded ones are missing or name
    other files, `REFRESH_CHUNK` tenants a commit; returns how many were recorded."""
    _, stale = _recorded(store, asset, store.scopes(asset))
    for start in range(0, len(stale), REFRESH_CHUNK):
        chunk = stale[start : start + REFRESH_CHUNK]
        files = store.files_by_scope(asset, chunk)
        store.record_summaries(
            asset,
            {
                s: {**f, FILES_KEY: files_digest(files.get(s, ()))}
                for s, f in _made(store, asset, chunk).items()
            },
        )
    return len(stale)


def _recorded(
    store: TableStore, asset: str, scopes: list[Scope]
) -> tuple[dict[Scope, dict[str, int]], list[Scope]]:
    """(the figures recorded for the tenants' current files, and those of tenants without
    files; the tenants whose figures must be made from their files)."""
    columns, made = FIGURES[asset]
    none = made(_no_rows(asset, columns))
    index = store.file_index(asset)
    if index is None:
        return {s: dict(none) for s in scopes}, []
    files = store.files_by_scope(asset, scopes)
    # deletion vectors change a file's rows under the same name: nothing recorded holds then
    recorded = store.summaries(asset, scopes) if index[1] else {}
    out: dict[Scope, dict[str, int]] = {}
    stale: list[Scope] = []
    for scope in scopes:
        paths = files.get(scope)
        kept = recorded.get(scope.key)
        if not paths:
            out[scope] = dict(none)
        elif kept is not None and kept.get(FILES_KEY) == files_digest(paths):
            out[scope] = {k: v for k, v in kept.items() if k != FILES_KEY}
        else:
            stale.append(scope)
    return out, stale


def _made(store: TableStore, asset: str, scopes: list[Scope]) -> dict[Scope, dict[str, int]]:
    if not scopes:
        return {}
    columns, made = FIGURES[asset]
    parts = read_columns(store, asset, scopes, list(columns)).partition_by(_KEY, as_dict=True)
    none = _no_rows(asset, columns)
    return {s: made(parts.get((s.tenant_id, s.ns), none)) for s in scopes}


def _no_rows(asset: str, columns: tuple[str, ...]) -> pl.DataFrame:
    return pl.DataFrame(schema={c: TABLES[asset][c] for c in columns})
