"""The tables, the source of truth: Delta Lake tables (delta-rs), one per asset.

Layout under the tables root (``<data>/tables`` by default, or any URI delta-rs opens, such
as ``s3://bucket/prefix``; ``MEMFLOW_TABLES_URI``)::

    <asset>/                          one Delta table per asset, every tenant in it,
      _delta_log/                     partitioned by tenant_id, ns (the scope columns
      tenant_id=<org>/ns=<repo>/*.parquet     every row carries)
    landing_problems/                 the landing zone's table (no tenant): replaced whole
    _summaries/<asset>/               small per-tenant summaries (counts a check reads)

Chosen by measurement (bench/bench_table_layout.py, BENCHMARKS.md "Table layout"): one table
per asset partitioned by tenant writes a run's tenants in **one commit** per asset (a
partition replace: other tenants' files are not touched), reads a tenant's files directly
from one kept snapshot of the log, and a tenant's table is written whole (a per-day
partition was slower on every path measured, the table per tenant 10x slower for a block of
200 tenants, the unpartitioned table rewrites other tenants' rows).

What Delta gives that the Parquet layout before it hand-wrote: atomic multi-file commits
(no manifests, write tokens or temp files), a version per commit (`version`, `history`) and
time travel (`read(..., version=, as_of=)`), schema evolution (`schema_mode="merge"`),
concurrent writers resolved by Delta's conflict checker (writes of disjoint tenants never
conflict), object storage through the same code, and tables that polars (`scan_delta`),
DuckDB (`delta_scan`) and Spark read with no memflow code. Compaction and vacuum are
`maintain` (the `table_maintenance` job).

Each commit carries in its `commitInfo` the run that made it (``memflow.run_id``) and the
tenants it replaced (``memflow.tenants``). delta-rs cannot be used in a process forked from
one that used it (its runtime panics): processes that touch tables start by spawn.

This module is the store (locations, reads and time travel, writes, the zone's tables,
summaries); what its reads and writes share (the kept log snapshots, content digests, commit
keys, the fork guard) is `resources/table_log.py`, and its work on whole tables (the earlier
layout's refusal, erasing a tenant, compaction and vacuum) `resources/table_upkeep.py`.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import polars as pl
from deltalake import CommitProperties, DeltaTable, write_deltalake
from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError

from resources import table_upkeep
from resources.fs import StorageError, as_storage_error
from resources.table_log import (
    CONFLICT_RETRIES,
    DIGESTS,
    PARTITION_BY,
    RUN_ID_KEY,
    SNAPSHOTS,
    SUMMARIES_DIR,
    TABLES_DIR,
    TENANTS_KEY,
    WRITE_KEY,
    Snapshot,
    check_not_forked,
    checkpoint_if_due,
    digest,
    file_index,
    plain_files,
    refuse_forked,
    table_configuration,
    tenants_predicate,
)
from resources.table_upkeep import (
    DEFAULT_RETENTION_HOURS,
    LegacyTablesError,
    TableMaintenance,
    forget_tables,
    legacy_layout,
    refuse_legacy,
)
from schemas.scope import Scope
from schemas.tables import FIGURES, LANDING_PROBLEMS, PER_DAY, TABLES, Asset, conform

_ZONE_LAYOUTS = {Asset.LANDING_PROBLEMS: LANDING_PROBLEMS}
# Each summary table's rows as last read in this process, with the data files they came from.
_SUMMARY_FRAMES: dict[str, tuple[tuple[str, ...], pl.DataFrame]] = {}
_SUMMARY_COLUMNS = {"tenant_id": pl.String, "ns": pl.String, "summary": pl.String}

__all__ = [
    "DEFAULT_RETENTION_HOURS",
    "TABLES_DIR",
    "LegacyTablesError",
    "StorageError",
    "TableCommit",
    "TableMaintenance",
    "TableStore",
    "TableVersion",
    "forget_tables",
    "legacy_layout",
    "open_tables",
    "tables_uri",
]


def open_tables(settings: Mapping[str, str]) -> TableStore:
    """The table store of resolved settings (``MEMFLOW_DATA_DIR``, ``MEMFLOW_TABLES_URI``)."""
    return TableStore(settings["MEMFLOW_DATA_DIR"], uri=settings.get("MEMFLOW_TABLES_URI") or None)


def tables_uri(data_dir: str | os.PathLike[str], uri: str | None = None) -> str:
    """Where the tables live: `uri` when set (a local path or an object-store URI), else
    ``<data_dir>/tables`` as an absolute path. A `file://` URL is a local path, and is made
    one: the store works on local paths with the file system (an erase's purge, the layout
    check), which a URL would silently miss."""
    if uri and uri.startswith("file://"):
        parsed = urlparse(uri)
        if parsed.netloc not in ("", "localhost"):
            raise ValueError(f"{uri}: a file:// URL of another host is not a local path")
        uri = unquote(parsed.path)
    if uri:
        return uri if "://" in uri else os.path.abspath(uri)
    return os.path.abspath(os.path.join(os.fspath(data_dir), TABLES_DIR))


@dataclass(frozen=True, slots=True)
class TableCommit:
    """What a write did: the table's version after it (None: the table does not exist),
    whether it committed (a write that changes nothing, such as removing a tenant that has
    no row, makes no commit), and the rows it stored per tenant."""

    asset: str
    uri: str
    version: int | None
    committed: bool
    rows: dict[str, int] = field(default_factory=dict)
    written: tuple[str, ...] = ()  # the tenants whose rows the commit replaced


@dataclass(frozen=True, slots=True)
class TableVersion:
    """One version of a table (a commit), newest first in `TableStore.history`."""

    version: int
    timestamp: datetime
    operation: str
    run_id: str | None
    tenants: list[str] | None
    rows_added: int | None


def _as_scope(key: Scope | str) -> Scope:
    return key if isinstance(key, Scope) else Scope.parse(key)


# ------------------------------------------------------------------------- the store


class TableStore:
    """memflow's tables: per-tenant reads and writes of one Delta table per asset (see the
    module). `data_dir` is the data directory; `uri` (``MEMFLOW_TABLES_URI``) puts the
    tables elsewhere, `storage_options` are delta-rs's and polars' object-store options
    (credentials otherwise come from the usual ``AWS_*`` environment)."""

    def __init__(
        self,
        data_dir: str | os.PathLike[str] = ".memflow",
        *,
        uri: str | None = None,
        storage_options: Mapping[str, str] | None = None,
    ) -> None:
        refuse_forked()
        self.root = tables_uri(data_dir, uri).rstrip("/")
        self.storage_options: dict[str, str] = dict(storage_options or {})
        self.local = "://" not in self.root

    # ---------------------------------------------------------------------- locations

    def uri(self, asset: str) -> str:
        """The URI of `asset`'s Delta table (what polars, DuckDB or Spark open)."""
        return f"{self.root}/{asset}"

    def summary_uri(self, asset: str) -> str:
        """The URI of the small table of `asset`'s per-tenant summaries."""
        return f"{self.root}/{SUMMARIES_DIR}/{asset}"

    def snapshot(self, uri: str) -> Snapshot | None:
        """The table at `uri` as it stands (this process's kept snapshot of its log, brought
        up to date), or None when it does not exist."""
        if self.local:
            refuse_legacy(self.root)
        with SNAPSHOTS.lock(uri, self.storage_options):
            return SNAPSHOTS.get(uri, self.storage_options)

    def version(self, asset: str) -> int | None:
        """The table's current version (None: never written). Changes only when a write
        commits."""
        snap = self.snapshot(self.uri(asset))
        return None if snap is None else snap.version

    def exists(self, asset: str) -> bool:
        return self.snapshot(self.uri(asset)) is not None

    # --------------------------------------------------------------------------- reads

    def read(
        self,
        asset: str,
        scope: Scope,
        *,
        version: int | None = None,
        as_of: datetime | None = None,
    ) -> pl.DataFrame | None:
        """A tenant's table (None when it has no row), as it stands or as it was at
        `version` / at the time `as_of` (time travel)."""
        return self.read_many(asset, [scope], version=version, as_of=as_of).get(scope)

    read_table = read  # the name the assets and the status use

    def read_many(
        self,
        asset: str,
        scopes: Iterable[Scope],
        *,
        version: int | None = None,
        as_of: datetime | None = None,
        columns: list[str] | None = None,
    ) -> dict[Scope, pl.DataFrame]:
        """Several tenants' tables from one snapshot (tenants without a row are left out);
        only `columns` when given (a column a file lacks comes back null)."""
        refuse_forked()
        wanted = list(scopes)
        snap_uri = self.uri(asset)
        snap = self._at(snap_uri, version, as_of)
        if snap is None or not wanted:
            return {}
        keys = pl.DataFrame(
            [(s.tenant_id, s.ns) for s in wanted], schema=["tenant_id", "ns"], orient="row"
        )
        hits = snap.files.join(keys, on=["tenant_id", "ns"])
        if hits.is_empty():
            return {}
        by_scope: dict[Scope, list[str]] = {}
        for org, repo, path in hits.select("tenant_id", "ns", "path").iter_rows():
            by_scope.setdefault(Scope(org, repo), []).append(path)
        out: dict[Scope, pl.DataFrame] = {}
        for scope in wanted:
            paths = by_scope.get(scope)
            if not paths:
                continue
            try:
                df = self._read_files(snap, asset, scope, paths, columns)
            except LookupError:
                if version is not None or as_of is not None:
                    raise
                # files gone under the kept snapshot: the table was replaced; read it anew
                SNAPSHOTS.forget(snap_uri, self.storage_options)
                return self.read_many(asset, wanted, version=version, as_of=as_of, columns=columns)
            if df.height:
                out[scope] = self._shape(df, asset, columns)
                if columns is None and version is None and as_of is None:
                    DIGESTS.put(snap_uri, scope, tuple(sorted(paths)), digest(out[scope]))
        return out

    def read_columns(self, asset: str, scopes: Iterable[Scope], columns: list[str]) -> pl.DataFrame:
        """tenant_id, ns and `columns` of every row of `scopes`, in one scan of their files
        (`resources.table_figures.read_columns`)."""
        from resources.table_figures import read_columns

        return read_columns(self, asset, scopes, columns)

    def file_index(self, asset: str) -> tuple[pl.DataFrame, bool] | None:
        """The table's data files as this process last read its log (tenant_id, ns, path,
        rows), and whether they read file by file (no deletion vectors); None: no table."""
        snap = self.snapshot(self.uri(asset))
        return None if snap is None else (snap.files, snap.plain)

    def forget_snapshot(self, asset: str) -> None:
        """Read the table's log anew at the next call (its files were vacuumed meanwhile)."""
        SNAPSHOTS.forget(self.uri(asset), self.storage_options)

    def _at(self, uri: str, version: int | None, as_of: datetime | None) -> Snapshot | None:
        if version is None and as_of is None:
            return self.snapshot(uri)
        check_not_forked()
        try:
            table = DeltaTable(uri, storage_options=self.storage_options or None)
        except TableNotFoundError:
            return None
        try:
            if version is None:
                assert as_of is not None
                version = self._version_at(table, as_of)
            table.load_as_version(version)
        except (DeltaError, ValueError, OSError) as exc:
            raise LookupError(f"{uri} has no version {version or as_of}: {exc}") from exc
        return Snapshot(table, table.version(), file_index(table, uri), plain_files(table))

    @staticmethod
    def _version_at(table: DeltaTable, as_of: datetime) -> int:
        """The last version committed at or before `as_of`, by the commits' own timestamps
        (an object store's modification times have a coarser grain)."""
        when = as_of if as_of.tzinfo else as_of.replace(tzinfo=UTC)
        millis = when.timestamp() * 1000
        for entry in table.history():  # newest first
            if entry["timestamp"] <= millis:
                return int(entry["version"])
        raise ValueError(f"no version was committed at or before {when.isoformat()}")

    def _read_files(
        self,
        snap: Snapshot,
        asset: str,
        scope: Scope,
        paths: list[str],
        columns: list[str] | None = None,
    ) -> pl.DataFrame:
        if not snap.plain:  # features the file-by-file read does not apply: delta-rs reads
            return pl.from_arrow(
                snap.table.to_pyarrow_table(
                    filters=[("tenant_id", "=", scope.tenant_id), ("ns", "=", scope.ns)]
                )
            )  # type: ignore[return-value]
        options = self.storage_options or None
        wanted = None if columns is None else [c for c in columns if c not in PARTITION_BY]
        try:
            frames = [_read_parquet(p, wanted, options) for p in paths]
        except FileNotFoundError as exc:
            raise LookupError(
                f"{self.uri(asset)} version {snap.version}: a data file is gone (vacuumed: "
                f"history older than the vacuum retention cannot be read): {exc}"
            ) from exc
        df = frames[0] if len(frames) == 1 else pl.concat(frames, how="diagonal_relaxed")
        return df.with_columns(
            pl.lit(scope.tenant_id, pl.String).alias("tenant_id"),
            pl.lit(scope.ns, pl.String).alias("ns"),
        )

    @staticmethod
    def as_read(df: pl.DataFrame, asset: str) -> pl.DataFrame:
        """What reading `df` back after writing it returns (the asset's layout; per-day
        tables in day order)."""
        return TableStore._shape(df, asset)

    @staticmethod
    def _shape(df: pl.DataFrame, asset: str, columns: list[str] | None = None) -> pl.DataFrame:
        """Stored rows in the asset's layout (its `columns` only, when given); per-day
        tables in day order."""
        layout = TABLES.get(asset)
        if layout is not None:
            if columns is not None:
                layout = {c: layout[c] for c in columns if c in layout}
            df = conform(df, layout)
        if asset in PER_DAY and "day" in df.columns and not df["day"].is_sorted():
            df = df.sort("day", maintain_order=True, nulls_last=True)
        return df

    def files_by_scope(
        self, asset: str, scopes: Iterable[Scope], *, version: int | None = None
    ) -> dict[Scope, tuple[str, ...]]:
        """The data files of each tenant at `version` (now when None), sorted: they change
        exactly when the tenant's rows are rewritten (files are never edited in place)."""
        uri = self.uri(asset)
        snap = self.snapshot(uri)
        if snap is not None and version is not None and snap.version != version:
            snap = self._at(uri, version, None)
        if snap is None:
            return {}
        wanted = {(s.tenant_id, s.ns): s for s in scopes}
        hits = snap.files.join(_keys(wanted.values()), on=["tenant_id", "ns"], how="semi")
        out: dict[Scope, list[str]] = {}
        for org, repo, path in hits.select("tenant_id", "ns", "path").iter_rows():
            out.setdefault(wanted[(org, repo)], []).append(path)
        return {s: tuple(sorted(p)) for s, p in out.items()}

    def total_rows(self, asset: str) -> int:
        """Rows of the whole table (every tenant), from the log alone."""
        snap = self.snapshot(self.uri(asset))
        return 0 if snap is None or snap.files.is_empty() else int(snap.files["rows"].sum())

    def scopes(self, asset: str) -> list[Scope]:
        """Tenants that have rows in `asset`'s table."""
        snap = self.snapshot(self.uri(asset))
        if snap is None or snap.files.is_empty():
            return []
        pairs = snap.files.select("tenant_id", "ns").unique().drop_nulls().iter_rows()
        found = []
        for org, repo in pairs:
            try:
                found.append(Scope(org, repo))
            except ValueError:
                continue
        return sorted(found, key=lambda s: s.key)

    def count_rows(self, asset: str, scope: Scope, where: pl.Expr | None = None) -> int:
        """Rows of a tenant's table (0 when none): from the log alone, or the rows matching
        `where` (reading only the columns it names)."""
        snap = self.snapshot(self.uri(asset))
        if snap is None:
            return 0
        mine = snap.files.filter(
            (pl.col("tenant_id") == scope.tenant_id) & (pl.col("ns") == scope.ns)
        )
        if mine.is_empty():
            return 0
        if where is None and snap.plain:
            return int(mine["rows"].sum())
        df = self.read(asset, scope)
        if df is None:
            return 0
        return df.height if where is None else df.filter(where).height

    def rows_per_tenant(
        self, asset: str, scopes: Iterable[Scope], where: pl.Expr | None = None
    ) -> dict[Scope, int]:
        """Each tenant's rows (matching `where`): from the log alone without `where`, else
        reading only the columns `where` names."""
        wanted = list(scopes)
        out = dict.fromkeys(wanted, 0)
        if where is None:
            snap = self.snapshot(self.uri(asset))
            if snap is None or snap.files.is_empty():
                return out
            if snap.plain:
                counts = (
                    snap.files.join(_keys(wanted), on=["tenant_id", "ns"], how="semi")
                    .group_by("tenant_id", "ns")
                    .agg(pl.col("rows").sum())
                )
                by_pair = {(o, r): n for o, r, n in counts.iter_rows()}
                return {s: int(by_pair.get((s.tenant_id, s.ns), 0)) for s in wanted}
        names = where.meta.root_names() if where is not None else ["tenant_id"]
        for scope, df in self.read_many(asset, wanted, columns=names).items():
            out[scope] = df.height if where is None else df.filter(where).height
        return out

    def days(self, asset: str, scope: Scope) -> list[str]:
        """The days a per-day table holds for a tenant."""
        df = self.read(asset, scope)
        if df is None or "day" not in df.columns:
            return []
        return sorted(d for d in df["day"].unique().to_list() if d is not None)

    def read_days(
        self, asset: str, scope: Scope, days: Iterable[str] | None = None
    ) -> pl.DataFrame | None:
        """A per-day table's rows of the given days (every day when None); None if none."""
        df = self.read(asset, scope)
        if df is None or days is None:
            return df
        out = df.filter(pl.col("day").is_in(list(days)))
        return out if out.height else None

    def history(self, asset: str, limit: int | None = None) -> list[TableVersion]:
        """The table's versions, newest first: when, which operation, which run, which
        tenants."""
        snap = self.snapshot(self.uri(asset))
        if snap is None:
            return []
        with SNAPSHOTS.lock(self.uri(asset), self.storage_options):
            entries = snap.table.history(limit)
        out = []
        for e in entries:
            tenants = e.get(TENANTS_KEY)
            metrics = e.get("operationMetrics") or {}
            out.append(
                TableVersion(
                    version=int(e["version"]),
                    timestamp=datetime.fromtimestamp(e["timestamp"] / 1000, UTC),
                    operation=str(e.get("operation", "")),
                    run_id=e.get(RUN_ID_KEY) or None,
                    tenants=json.loads(tenants) if isinstance(tenants, str) else None,
                    rows_added=metrics.get("num_added_rows"),
                )
            )
        return out

    # -------------------------------------------------------------------------- writes

    def write_table(
        self, df: pl.DataFrame, asset: str, scope: Scope, *, run_id: str | None = None
    ) -> TableCommit:
        """Replace one tenant's table with `df` (see `write_tenants`)."""
        return self.write_tenants(asset, {scope: df}, run_id=run_id)

    write = write_table

    def write_tenants(
        self,
        asset: str,
        frames: Mapping[Scope, pl.DataFrame] | Mapping[str, pl.DataFrame],
        *,
        run_id: str | None = None,
    ) -> TableCommit:
        """Replace these tenants' tables in one commit (an empty frame removes the tenant's
        rows); every other tenant is left as it is. Frames are conformed to the asset's
        layout; a row of another scope than its key is refused (ValueError). Storage
        failures raise `StorageError`, naming the table and the cause."""
        refuse_forked()
        items = [(_as_scope(k), df) for k, df in frames.items()]
        layout = TABLES.get(asset)
        parts: list[pl.DataFrame] = []
        rows: dict[str, int] = {}
        for scope, df in items:
            if not isinstance(df, pl.DataFrame):
                raise TypeError(f"{asset}: {scope.key} must be a polars DataFrame")
            if layout is not None:
                df = conform(df, layout)
            _check_scope(asset, scope, df)
            parts.append(df)
            rows[scope.key] = df.height
        uri = self.uri(asset)
        changed = self._changed(asset, [s for s, _ in items], parts)
        if asset in FIGURES and len(changed) < len(items):
            from resources.table_figures import record_missing

            same = set(range(len(items))) - set(changed)
            record_missing(self, asset, {items[i][0]: parts[i] for i in sorted(same)})
        if not changed:
            return TableCommit(asset, uri, self.version(asset), False, rows)
        scopes = [items[i][0] for i in changed]
        kept = [parts[i] for i in changed]
        data = pl.concat(kept, how="vertical_relaxed") if len(kept) > 1 else kept[0]
        metadata = {
            RUN_ID_KEY: run_id or "",
            TENANTS_KEY: json.dumps(sorted(s.key for s in scopes)),
        }
        version, committed = self._replace(uri, data, scopes, metadata, partitioned=True)
        if committed and version is not None:
            files = self.files_by_scope(asset, scopes, version=version)
            for scope, df in zip(scopes, kept, strict=True):
                DIGESTS.put(uri, scope, files.get(scope, ()), digest(df))
            if asset in FIGURES:
                from resources.table_figures import record_figures

                record_figures(self, asset, dict(zip(scopes, kept, strict=True)), files)
        return TableCommit(asset, uri, version, committed, rows, tuple(s.key for s in scopes))

    def _changed(self, asset: str, scopes: list[Scope], frames: list[pl.DataFrame]) -> list[int]:
        """Indexes of the tenants whose new rows differ from what is stored: a tenant with as
        many rows stored is compared by content (digests kept from earlier reads and writes,
        else a read), any other is changed."""
        uri = self.uri(asset)
        snap = self.snapshot(uri)
        if snap is None or not snap.plain:
            return [i for i, df in enumerate(frames) if snap is not None or df.height]
        counts = self.rows_per_tenant(asset, scopes)
        files = self.files_by_scope(asset, scopes)
        out = []
        for i, (scope, df) in enumerate(zip(scopes, frames, strict=True)):
            if counts.get(scope, 0) != df.height:
                out.append(i)
                continue
            if not df.height:
                continue  # nothing stored, nothing to store
            stored = DIGESTS.get(uri, scope, files.get(scope, ()))
            if stored is None:
                current = self.read(asset, scope)
                stored = digest(current) if current is not None else ""
            if stored != digest(df):
                out.append(i)
        return out

    def _replace(
        self,
        uri: str,
        data: pl.DataFrame,
        scopes: list[Scope] | None,
        metadata: dict[str, str],
        *,
        partitioned: bool,
    ) -> tuple[int | None, bool]:
        """Commit `data` in place of the rows of `scopes` (all rows when None): (the
        table's version after it, whether a commit was made). Nothing to do (no rows to
        store, none stored) makes no commit."""
        arrow = data.to_arrow()
        lock = SNAPSHOTS.lock(uri, self.storage_options)
        for attempt in range(CONFLICT_RETRIES + 1):
            try:
                with lock:
                    snap = SNAPSHOTS.get(uri, self.storage_options)
                    if snap is None:
                        if data.is_empty() and scopes is not None:
                            return None, False
                        self._create(uri, arrow.schema, partitioned)
                        snap = SNAPSHOTS.get(uri, self.storage_options)
                        assert snap is not None
                    if (
                        data.is_empty()
                        and scopes is not None
                        and not self._holds(snap, scopes, partitioned)
                    ):
                        return snap.version, False  # nothing stored or to store
                    metadata = {**metadata, WRITE_KEY: uuid.uuid4().hex}
                    write_deltalake(
                        snap.table,
                        arrow,
                        mode="overwrite",
                        predicate=tenants_predicate(scopes) if scopes is not None else None,
                        schema_mode="merge" if scopes is not None else "overwrite",
                        storage_options=self.storage_options or None,
                        commit_properties=CommitProperties(custom_metadata=metadata),
                    )
                    version = snap.table.version()
                    checkpoint_if_due(snap.table)
                    SNAPSHOTS.get(uri, self.storage_options)  # re-index at the new version
                    return version, True
            except CommitFailedError:
                if attempt == CONFLICT_RETRIES:
                    raise
                SNAPSHOTS.forget(uri, self.storage_options)
                time.sleep(random.uniform(0.01, 0.05) * (attempt + 1))
            except (OSError, DeltaError) as exc:
                error = as_storage_error(uri, exc) if _is_storage(exc) else None
                if error is None:
                    raise
                raise error from exc
        raise AssertionError("unreachable")

    def _create(self, uri: str, schema: Any, partitioned: bool) -> None:
        if self.local:
            refuse_legacy(self.root)
            try:
                Path(uri).mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise as_storage_error(uri, exc) or exc from exc
        # created at the same moment by another writer: use theirs
        with contextlib.suppress(CommitFailedError):
            DeltaTable.create(
                uri,
                schema=schema,
                partition_by=list(PARTITION_BY) if partitioned else None,
                mode="ignore",
                configuration=table_configuration(partitioned, schema.names),
                storage_options=self.storage_options or None,
            )

    @staticmethod
    def _holds(snap: Snapshot, scopes: list[Scope], partitioned: bool) -> bool:
        """Whether the table may hold rows of `scopes` (known exactly when partitioned)."""
        if not partitioned:
            return not snap.files.is_empty()
        keys = pl.DataFrame(
            [(s.tenant_id, s.ns) for s in scopes], schema=["tenant_id", "ns"], orient="row"
        )
        return not snap.files.join(keys, on=["tenant_id", "ns"]).is_empty()

    def delete_tenant(
        self,
        scope: Scope,
        *,
        purge: bool = True,
        tables: Iterable[str] = (),
        apply: bool = True,
    ) -> dict[str, int]:
        """Remove a tenant's rows from every table and summary ({table: rows removed}), and
        from `tables` (names of other modules' tables; found by themselves on local disk);
        with `purge`, also the data files older versions still name (its history). The zone
        tables lose the rows naming a path under the tenant's landing folder. Without `apply`,
        only counts what would go (`memflow erase` without `--yes`)."""
        return table_upkeep.delete_tenant(self, scope, purge=purge, tables=tables, apply=apply)

    # ---------------------------------------------------------------- zone-wide tables

    def write_zone(self, df: pl.DataFrame, asset: str) -> TableCommit:
        """A table of the landing zone as a whole (no tenant), replaced whole; the same rows
        as stored commit nothing (a re-run makes no version)."""
        refuse_forked()
        layout = _ZONE_LAYOUTS.get(asset)
        data = conform(df, layout) if layout is not None else df
        stored = self.read_zone(asset)
        if stored is not None and stored.schema == data.schema and stored.equals(data):
            return TableCommit(
                asset, self.uri(asset), self.version(asset), False, {"": data.height}
            )
        version, committed = self._replace(self.uri(asset), data, None, {}, partitioned=False)
        return TableCommit(asset, self.uri(asset), version, committed, {"": data.height})

    def read_zone(self, asset: str) -> pl.DataFrame | None:
        return self.read_all(self.uri(asset))

    def read_all(self, uri: str) -> pl.DataFrame | None:
        """Every row of the table at `uri` (None when it does not exist)."""
        snap = self.snapshot(uri)
        return None if snap is None else self._read_whole(uri, snap)

    def _read_whole(self, uri: str, snap: Snapshot) -> pl.DataFrame:
        if snap.files.is_empty():
            with SNAPSHOTS.lock(uri, self.storage_options):
                schema = pl.DataFrame(snap.table.to_pyarrow_table()).schema
            return pl.DataFrame(schema=schema)
        paths = snap.files["path"].to_list()
        frames = [pl.read_parquet(p, storage_options=self.storage_options or None) for p in paths]
        return frames[0] if len(frames) == 1 else pl.concat(frames, how="diagonal_relaxed")

    # --------------------------------------------------------------- per-tenant summaries

    def record_summary(self, asset: str, scope: Scope, values: dict[str, int]) -> None:
        """Remember a small summary of a tenant's table (counts a check reads for every
        tenant without opening every table)."""
        self.record_summaries(asset, {scope: values})

    def record_summaries(
        self,
        asset: str,
        values: Mapping[Scope, Mapping[str, int]] | Mapping[str, Mapping[str, int]],
    ) -> None:
        """Several tenants' summaries (keyed by scope or tenant key) in one commit
        (`_summaries/<asset>`, a small table without partitions: the commit rewrites the file
        holding these tenants' rows)."""
        if not values:
            return
        given = {_as_scope(k): v for k, v in values.items()}
        stored = self.summaries(asset, given)
        values = {scope: v for scope, v in given.items() if stored.get(scope.key) != dict(v)}
        if not values:
            return  # every summary as stored: a re-run commits nothing
        rows = pl.DataFrame(
            {
                "tenant_id": [s.tenant_id for s in values],
                "ns": [s.ns for s in values],
                "summary": [json.dumps(dict(sorted(v.items()))) for v in values.values()],
            },
            schema=_SUMMARY_COLUMNS,
        )
        metadata = {TENANTS_KEY: json.dumps(sorted(s.key for s in values))}
        self._replace(self.summary_uri(asset), rows, list(values), metadata, partitioned=False)

    def summaries(
        self, asset: str, scopes: Iterable[Scope] | None = None
    ) -> dict[str, dict[str, int]]:
        """Every tenant's recorded summary of `asset` (tenant key -> values), or only those of
        `scopes` (what a write of a few tenants compares: the others' are not decoded)."""
        df = self._summary_frame(asset)
        if df is None or df.is_empty():
            return {}
        if scopes is not None:
            df = df.join(_keys(scopes), on=["tenant_id", "ns"], how="semi")
        return {
            f"{org}/{repo}": json.loads(text)
            for org, repo, text in df.select("tenant_id", "ns", "summary")
            .sort("tenant_id", "ns")
            .iter_rows()
        }

    def _summary_frame(self, asset: str) -> pl.DataFrame | None:
        """The summary table's rows, read once for the files its log names now (a run reads
        it several times between its commits; its files are never edited in place)."""
        uri = self.summary_uri(asset)
        snap = self.snapshot(uri)
        if snap is None:
            return None
        files = tuple(snap.files["path"].to_list())
        kept = _SUMMARY_FRAMES.get(uri)
        if kept is not None and kept[0] == files:
            return kept[1]
        df = self._read_whole(uri, snap)
        _SUMMARY_FRAMES[uri] = (files, df)
        return df

    def figures(self, asset: str, scopes: Iterable[Scope]) -> dict[Scope, dict[str, int]]:
        """Each tenant's figures of `asset` (`schemas.tables.FIGURES`) as its current files
        hold them (`resources.table_figures.figures`)."""
        from resources.table_figures import figures

        return figures(self, asset, scopes)

    # ----------------------------------------------------------------------- maintenance

    def maintain(
        self, *, retention_hours: int = DEFAULT_RETENTION_HOURS, tables: Iterable[str] | None = None
    ) -> list[TableMaintenance]:
        """Compact small files (per tenant partition), vacuum files no version younger than
        `retention_hours` names (and files older than that no version names at all: a killed
        write's), checkpoint the log and drop expired log entries, for every
        table (or the named `tables`). Time travel to versions older than the retention is
        no longer possible afterwards."""
        done = table_upkeep.maintain(self, retention_hours=retention_hours, tables=tables)
        from resources.table_figures import refresh_figures

        wanted = set(tables) if tables is not None else None
        for asset in FIGURES:  # a compaction renames a tenant's files: record its figures anew
            if (wanted is None or asset in wanted) and self.exists(asset):
                refresh_figures(self, asset)
        return done


def _keys(scopes: Iterable[Scope]) -> pl.DataFrame:
    """tenant_id, ns of each scope: what a join picks these tenants' rows or files with."""
    return pl.DataFrame(
        [(s.tenant_id, s.ns) for s in scopes],
        schema={"tenant_id": pl.String, "ns": pl.String},
        orient="row",
    )


def _read_parquet(
    path: str, columns: list[str] | None, options: dict[str, str] | None
) -> pl.DataFrame:
    if columns is None:
        return pl.read_parquet(path, storage_options=options)
    present = set(pl.read_parquet_schema(path)) if "://" not in path else None
    if present is not None:
        keep = [c for c in columns if c in present]
        return pl.read_parquet(path, columns=keep, storage_options=options)
    return (
        pl.scan_parquet(path, storage_options=options, missing_columns="insert")
        .select([pl.col(c) for c in columns])
        .collect()
    )


def _check_scope(asset: str, scope: Scope, df: pl.DataFrame) -> None:
    """Every row carries its tenant's scope: the rows are stored under it."""
    if not df.height:
        return
    if "tenant_id" not in df.columns or "ns" not in df.columns:
        raise ValueError(f"{asset}: rows for {scope.key} lack tenant_id/ns")
    own = (pl.col("tenant_id") == scope.tenant_id) & (pl.col("ns") == scope.ns)
    foreign = df.height - int(df.select(own.fill_null(False).sum()).item())
    if foreign:
        raise ValueError(
            f"{asset}: {foreign} of {df.height} rows for {scope.key} carry another scope "
            "(or none); a tenant's table holds only its own rows"
        )


def _is_storage(exc: BaseException) -> bool:
    from resources.fs import storage_errno

    return storage_errno(exc) is not None
