"""What the table store's reads and writes share (resources/tables.py): the layout names, the
keys memflow adds to each commit, the guard against delta-rs in a forked process, one kept
snapshot of each table's log per process (with its data files by tenant), and the content
digests that let a write leave an unchanged tenant alone. Internal to the store and its upkeep
(resources/table_upkeep.py); other modules use `resources.tables`."""

from __future__ import annotations

import json
import os
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from urllib.parse import unquote

import polars as pl
from deltalake import DeltaTable
from deltalake.exceptions import DeltaError, TableNotFoundError

from schemas.scope import Scope
from schemas.tables import Asset

TABLES_DIR = "tables"
PARTITION_BY = ("tenant_id", "ns")
ZONE_TABLES = (Asset.LANDING_PROBLEMS,)
SUMMARIES_DIR = "_summaries"
# Commit-info keys memflow adds to each commit it makes.
RUN_ID_KEY = "memflow.run_id"
TENANTS_KEY = "memflow.tenants"
WRITE_KEY = "memflow.write"
# A checkpoint (the log's state in one Parquet file) every this many commits, not delta-rs's
# default 100: a process opening a table reads the last checkpoint and the commits after it,
# and a first ingest of 10,000 tenants makes ~50 commits a table (one per block), each naming
# its block's files; without a checkpoint every process replays all of them (BENCHMARKS.md,
# "One new file at 10,000 tenants"). Set on the tables memflow creates; a table made before
# gets its checkpoints from `checkpoint_if_due`.
CHECKPOINT_INTERVAL = 10
CHECKPOINT_PROPERTY = "delta.checkpointInterval"
# No per-file column statistics (min, max, null counts) in the log of a table partitioned by
# tenant: memflow picks its files by partition, never by column ranges. At 10,000 tenants the
# statistics made raw_turns' log 5.7x larger, and a process opening that one table paid 1.19x
# the CPU and 40 MiB more, committing to it 1.24x and 55 MiB (BENCHMARKS.md, "Delta column
# statistics"); they also copied the first and last value of every column into log entries
# that an erase cannot rewrite. Row counts (numRecords) are still recorded. A table without
# partitions that holds tenants keeps statistics on the tenant columns alone: the summaries
# replace tenants by predicate, and delta-rs skips the files whose tenant range cannot match
# (without them each commit read every file: 5x the CPU by the 50th block); the landing
# problems, replaced whole, get the same and do not use them.
STATS_PROPERTY = "delta.dataSkippingNumIndexedCols"
STATS_COLUMNS_PROPERTY = "delta.dataSkippingStatsColumns"
TABLE_CONFIGURATION = {CHECKPOINT_PROPERTY: str(CHECKPOINT_INTERVAL), STATS_PROPERTY: "0"}
TENANT_STATS_CONFIGURATION = {
    CHECKPOINT_PROPERTY: str(CHECKPOINT_INTERVAL),
    STATS_COLUMNS_PROPERTY: ",".join(PARTITION_BY),
}


def table_configuration(partitioned: bool, columns: Iterable[str]) -> dict[str, str]:
    """The properties memflow creates a table with (see above)."""
    if not partitioned and set(PARTITION_BY) <= set(columns):
        return TENANT_STATS_CONFIGURATION
    return TABLE_CONFIGURATION


# Conflicts delta-rs cannot resolve itself (two writers replacing the same tenant) are
# retried this many times; writers of disjoint tenants never get here.
CONFLICT_RETRIES = 5

_OWNER_PID: int | None = None  # the process that first used delta-rs


def refuse_forked() -> None:
    """delta-rs's runtime panics in a forked child of a process that used it, and polars'
    thread pool can hang there: say so before either is touched (start such processes with
    spawn)."""
    if _OWNER_PID is not None and os.getpid() != _OWNER_PID:
        raise RuntimeError(
            "the Delta tables cannot be used in a process forked from one that used them "
            "(delta-rs's runtime does not survive fork): start it with the 'spawn' method"
        )


def check_not_forked() -> None:
    """`refuse_forked`, and this process is the one that uses delta-rs from now on."""
    global _OWNER_PID
    refuse_forked()
    _OWNER_PID = os.getpid()


def checkpoint_if_due(table: DeltaTable) -> bool:
    """After a commit: checkpoint a table that lacks the checkpoint interval (created before
    memflow set it) every `CHECKPOINT_INTERVAL` versions, as delta-rs does for a table that
    has it; whether a checkpoint was written."""
    if CHECKPOINT_PROPERTY in table.metadata().configuration:
        return False  # delta-rs writes them itself
    if table.version() % CHECKPOINT_INTERVAL:
        return False
    table.create_checkpoint()
    return True


@dataclass
class Snapshot:
    """A table's log as this process last read it, and its data files by tenant."""

    table: DeltaTable
    version: int
    files: pl.DataFrame  # tenant_id, ns, path (absolute URI), rows
    plain: bool  # readable file by file (no deletion vectors or column mapping)


_FILE_COLUMNS = {"tenant_id": pl.String, "ns": pl.String, "path": pl.String, "rows": pl.Int64}


def file_index(table: DeltaTable, uri: str) -> pl.DataFrame:
    adds = pl.DataFrame(table.get_add_actions(flatten=True))
    if adds.is_empty():
        return pl.DataFrame(schema=_FILE_COLUMNS)
    base = uri.rstrip("/")
    raw = adds["path"]
    if raw.str.contains("%", literal=True).any():  # escaped names: decoded one by one
        paths = pl.Series(
            [
                unquote(p) if "://" in p or p.startswith("/") else f"{base}/{unquote(p)}"
                for p in raw.to_list()
            ],
            dtype=pl.String,
        )
    else:  # nothing to decode (the usual case): one expression over 10,000 files
        absolute = raw.str.contains("://", literal=True) | raw.str.starts_with("/")
        paths = adds.select(
            pl.when(absolute).then(raw).otherwise(pl.lit(f"{base}/") + raw)
        ).to_series()
    cols = {
        c: adds[f"partition.{c}"] if f"partition.{c}" in adds.columns else None
        for c in PARTITION_BY
    }
    return pl.DataFrame(
        {
            "tenant_id": cols["tenant_id"],
            "ns": cols["ns"],
            "path": paths,
            "rows": adds["num_records"],
        },
        schema=_FILE_COLUMNS,
    )


def plain_files(table: DeltaTable) -> bool:
    features = set(table.protocol().reader_features or [])
    return not features & {"deletionVectors", "columnMapping"}


class Snapshots:
    """One kept `DeltaTable` per table URI in this process, brought up to date before each
    use (listing the log: ~1 ms locally), its file index rebuilt only when the version
    moved."""

    def __init__(self) -> None:
        self._kept: dict[tuple[str, str], Snapshot] = {}
        self._locks: dict[tuple[str, str], threading.Lock] = {}
        self._lock = threading.Lock()

    def lock(self, uri: str, options: Mapping[str, str]) -> threading.Lock:
        key = (uri, json.dumps(sorted(options.items())))
        with self._lock:
            return self._locks.setdefault(key, threading.Lock())

    def get(self, uri: str, options: Mapping[str, str]) -> Snapshot | None:
        """The table as it stands, or None when it does not exist. Call under `lock`."""
        check_not_forked()
        key = (uri, json.dumps(sorted(options.items())))
        kept = self._kept.get(key)
        try:
            if kept is not None:
                try:
                    kept.table.update_incremental()
                except (DeltaError, OSError):  # the table was removed or made anew meanwhile
                    self._kept.pop(key, None)
                    kept = None
            table = (
                kept.table
                if kept is not None
                else DeltaTable(uri, storage_options=dict(options) or None)
            )
        except TableNotFoundError:
            self._kept.pop(key, None)
            return None
        version = table.version()
        if kept is None or kept.version != version:
            kept = Snapshot(table, version, file_index(table, uri), plain_files(table))
            self._kept[key] = kept
        return kept

    def forget(self, uri: str, options: Mapping[str, str]) -> None:
        self._kept.pop((uri, json.dumps(sorted(options.items()))), None)

    def forget_under(self, root: str) -> None:
        """Every kept table under `root` (its tables were removed or replaced)."""
        prefix = root.rstrip("/") + "/"
        for key in [k for k in self._kept if k[0].startswith(prefix)]:
            self._kept.pop(key, None)


SNAPSHOTS = Snapshots()


class Digests:
    """Content digests of tenants' tables as this process last read or wrote them, keyed by
    the data files they came from (Delta files are never edited in place, so the same files
    mean the same content). A write compares against them to leave unchanged tenants alone:
    a re-run commits nothing and the version stays."""

    def __init__(self, size: int = 50_000) -> None:
        self._kept: OrderedDict[tuple[str, str], tuple[tuple[str, ...], str]] = OrderedDict()
        self._size = size
        self._lock = threading.Lock()

    def get(self, uri: str, scope: Scope, files: tuple[str, ...]) -> str | None:
        with self._lock:
            kept = self._kept.get((uri, scope.key))
        return kept[1] if kept is not None and kept[0] == files else None

    def put(self, uri: str, scope: Scope, files: tuple[str, ...], digest: str) -> None:
        with self._lock:
            self._kept[(uri, scope.key)] = (files, digest)
            self._kept.move_to_end((uri, scope.key))
            while len(self._kept) > self._size:
                self._kept.popitem(last=False)


DIGESTS = Digests()


def digest(df: pl.DataFrame) -> str:
    """A content hash of a tenant's rows, blind to their order (the writers sort
    deterministically, and a reordering is no change worth a commit)."""
    if df.is_empty():
        return f"0::{','.join(df.columns)}"
    first = df.hash_rows(seed=0).sum()
    second = df.hash_rows(seed=7).sum()
    return f"{df.height}:{first}:{second}:{','.join(df.columns)}"


def _sql(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def tenants_predicate(scopes: Iterable[Scope]) -> str:
    return " OR ".join(f"(tenant_id = {_sql(s.tenant_id)} AND ns = {_sql(s.ns)})" for s in scopes)
