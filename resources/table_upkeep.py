"""The table store's work on whole tables (resources/tables.py): refusing the Parquet layout
before Delta, erasing a tenant from every table (`TableStore.delete_tenant`) and compaction,
vacuum and checkpoints (`TableStore.maintain`, the `table_maintenance` job). Internal to the
store: other modules call those methods."""

from __future__ import annotations

import json
import os
import random
import shutil
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import polars as pl
from deltalake import CommitProperties, DeltaTable
from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError
from deltalake.fs import DeltaStorageHandler

from resources.table_log import (
    CONFLICT_RETRIES,
    SNAPSHOTS,
    STATS_COLUMNS_PROPERTY,
    STATS_PROPERTY,
    SUMMARIES_DIR,
    TENANTS_KEY,
    ZONE_TABLES,
    table_configuration,
    tenants_predicate,
)
from schemas.scope import Scope
from schemas.tables import TABLES

if TYPE_CHECKING:
    from resources.tables import TableStore

DEFAULT_RETENTION_HOURS = 168  # vacuum keeps a week of history readable by time travel


# ------------------------------------------------------------------ the layout before Delta


class LegacyTablesError(RuntimeError):
    """The tables root holds tables of the Parquet layout before the Delta tables."""


def legacy_layout(tables: Path) -> bool:
    """Whether `tables` holds tables of a Parquet layout (an entry that is neither hidden nor
    a Delta table)."""
    if not tables.is_dir():
        return False
    for entry in tables.iterdir():
        if entry.name.startswith((".", "_")):
            continue
        if entry.is_file() and entry.suffix == ".parquet":
            return True
        if entry.is_dir() and not (entry / "_delta_log").is_dir():
            return True
    return False


_CHECKED_ROOTS: set[str] = set()


def refuse_legacy(root: str) -> None:
    """Once per process and root: Parquet tables of the earlier layout are migrated first
    (`memflow migrate`), never read as empty Delta tables nor written beside."""
    if root in _CHECKED_ROOTS:
        return
    if legacy_layout(Path(root)):
        raise LegacyTablesError(
            f"{root} holds tables of the Parquet layout memflow used before its Delta tables: "
            f"run `memflow migrate --data {Path(root).parent}` first"
        )
    _CHECKED_ROOTS.add(root)


def forget_tables(root: str | os.PathLike[str]) -> None:
    """Drop this process's kept snapshots of the tables under `root` (they were removed or
    replaced on disk, as a migration or an erase does)."""
    SNAPSHOTS.forget_under(os.path.abspath(root) if "://" not in str(root) else str(root))
    _CHECKED_ROOTS.discard(os.path.abspath(root))


# ------------------------------------------------------------------------ which tables


def known_tables(store: TableStore, extra: Iterable[str] = ()) -> list[tuple[str, str]]:
    """Every table of the store: the assets', the zone's and the summaries, and (on local
    disk) any other Delta table under the root, such as one another module keeps through
    this store (`write_tenants` takes any table name)."""
    names = [*TABLES, *ZONE_TABLES, *(n for n in extra if n not in TABLES)]
    if store.local and Path(store.root).is_dir():
        names += sorted(
            p.name
            for p in Path(store.root).iterdir()
            if p.name not in names and (p / "_delta_log").is_dir()
        )
    out = [(n, store.uri(n)) for n in names]
    out += [(f"{SUMMARIES_DIR}/{n}", store.summary_uri(n)) for n in TABLES]
    return out


# ------------------------------------------------------------------------ erasing a tenant


def delete_tenant(
    store: TableStore, scope: Scope, *, purge: bool, tables: Iterable[str], apply: bool
) -> dict[str, int]:
    """`TableStore.delete_tenant`: {table: rows removed (or that would go)}."""
    removed: dict[str, int] = {}
    metadata = {TENANTS_KEY: json.dumps([scope.key])}
    known = known_tables(store, tables)
    own = (pl.col("tenant_id") == scope.tenant_id) & (pl.col("ns") == scope.ns)
    for name, uri in known:
        if name in ZONE_TABLES:
            n = _delete_zone_rows(store, name, scope, apply)
            if n:
                removed[name] = n
            continue
        if not name.startswith(SUMMARIES_DIR):  # partitioned: counted from the log
            snap = store.snapshot(uri)
            n = 0 if snap is None else int(snap.files.filter(own)["rows"].sum())
        else:
            df = store.read_all(uri)
            n = 0 if df is None or "tenant_id" not in df.columns else df.filter(own).height
        if not n:
            continue
        if apply:
            _delete(store, uri, scope, metadata)
        removed[name] = n
    if purge and apply:
        _purge(store, scope, [(n, u) for n, u in known if n not in ZONE_TABLES])
    return removed


def _delete_zone_rows(store: TableStore, asset: str, scope: Scope, apply: bool) -> int:
    """The zone table's rows naming a path under the tenant's landing folder."""
    zone = store.read_zone(asset)
    if zone is None or "path" not in zone.columns:
        return 0
    prefix = f"{scope.tenant_id}/{scope.ns}"
    named = (zone["path"] == prefix) | zone["path"].str.starts_with(prefix + "/")
    n = int(named.sum())
    if n and apply:
        store.write_zone(zone.filter(~named), asset)
    return n


def _delete(store: TableStore, uri: str, scope: Scope, metadata: dict[str, str]) -> None:
    """Delta's DELETE of a tenant's rows (a partition's files go whole; a table without
    partitions has the files holding them rewritten), conflicts retried."""
    options = store.storage_options
    lock = SNAPSHOTS.lock(uri, options)
    for attempt in range(CONFLICT_RETRIES + 1):
        try:
            with lock:
                snap = SNAPSHOTS.get(uri, options)
                if snap is None:
                    return
                snap.table.delete(
                    tenants_predicate([scope]),
                    commit_properties=CommitProperties(custom_metadata=metadata),
                )
                SNAPSHOTS.get(uri, options)
                return
        except CommitFailedError:
            if attempt == CONFLICT_RETRIES:
                raise
            SNAPSHOTS.forget(uri, options)
            time.sleep(random.uniform(0.01, 0.05) * (attempt + 1))


def _purge(store: TableStore, scope: Scope, known: list[tuple[str, str]]) -> None:
    """The tenant's files that older versions still name: its partition folders (local
    disk), or every file no current version names (object storage, and the tables
    without partitions)."""
    for name, uri in known:
        partitioned = not name.startswith(SUMMARIES_DIR)
        if partitioned and store.local:
            folder = Path(uri) / f"tenant_id={scope.tenant_id}" / f"ns={scope.ns}"
            if folder.is_dir():
                shutil.rmtree(folder)
            continue
        snap = store.snapshot(uri)
        if snap is not None:
            with SNAPSHOTS.lock(uri, store.storage_options):
                snap.table.vacuum(
                    retention_hours=0, dry_run=False, enforce_retention_duration=False
                )


def logged_statistics(store: TableStore, scope: Scope) -> tuple[list[str], list[tuple[str, str]]]:
    """The tables whose Delta log still holds column statistics of `scope`'s files (the first
    and last value of each column in each file, as delta-rs records them unless told not to,
    `STATS_PROPERTY`), and the tables whose log could not be read, with why. An erase removes
    the files, not the log entries that describe them, which go once they expire (`maintain`,
    after the log retention).

    Read: the oldest retained checkpoint (every part) and every retained commit. A later
    checkpoint only lists files that are in one of those, so it is not read."""
    from pyarrow.fs import FileSelector, PyFileSystem

    found, unread = [], []
    for name, uri in known_tables(store):
        if name in ZONE_TABLES or name.startswith(SUMMARIES_DIR):
            continue  # not partitioned: their columns are figures and landing paths
        try:
            fs = PyFileSystem(DeltaStorageHandler(uri, store.storage_options or None))
            infos = fs.get_file_info(FileSelector("_delta_log", allow_not_found=True))
            logs = sorted(
                (int(i.base_name[:20]), i.path)
                for i in infos
                if i.base_name[:20].isdigit() and i.base_name.endswith((".json", ".parquet"))
            )
            if any(_names_statistics(fs, path, scope) for path in _to_read(logs)):
                found.append(name)
        except TableNotFoundError:
            continue  # no such table here
        except (OSError, ValueError, DeltaError) as exc:
            unread.append((name, f"{type(exc).__name__}: {exc}"[:200]))
    return found, unread


def _to_read(logs: list[tuple[int, str]]) -> list[str]:
    """The oldest checkpoint's parts (the files live then, whose commits may be gone), then
    every commit still kept, before that checkpoint too (a file it added and a later commit
    removed is in no checkpoint, and its entry still holds its statistics)."""
    checkpoints = [(v, p) for v, p in logs if p.endswith(".parquet")]
    oldest = checkpoints[0][0] if checkpoints else None
    return [p for v, p in checkpoints if v == oldest] + [p for _, p in logs if p.endswith(".json")]


def _lines(fs, path: str) -> list[str]:
    with fs.open_input_stream(path) as stream:
        return stream.read().decode().splitlines()


def _names_statistics(fs, path: str, scope: Scope) -> bool:
    """Whether the log file at `path` (a commit or a checkpoint) adds or removes a file of
    `scope`'s partition with column statistics."""
    want = {"tenant_id": scope.tenant_id, "ns": scope.ns}
    if path.endswith(".json"):
        actions = (
            json.loads(line) for line in _lines(fs, path) if any(m in line for m in _STATS_MARKS)
        )
        return any(
            _has_statistics(action.get(kind) or {}, want)
            for action in actions
            for kind in ("add", "remove")
        )
    if path.endswith(".parquet"):  # a checkpoint: the live files' actions at its version
        import pyarrow.parquet as pq

        with fs.open_input_file(path) as f:
            adds = pq.read_table(f, columns=["add"]).column("add").to_pylist()
        return any(
            _has_statistics({**a, "partitionValues": dict(a.get("partitionValues") or [])}, want)
            for a in adds
            if a
        )
    return False


# A non-empty minValues or maxValues, as it reads inside a JSON line's stats string.
_STATS_MARKS = ('\\"minValues\\":{\\"', '\\"maxValues\\":{\\"')


def _has_statistics(action: dict, want: dict[str, str]) -> bool:
    """Whether a file action of `want`'s partition records column values: in its `stats`
    JSON, or in a checkpoint's `stats_parsed` struct (`delta.checkpoint.writeStatsAsStruct`)."""
    if action.get("partitionValues") != want:
        return False
    parsed = action.get("stats_parsed") or {}
    if _any_value(parsed.get("minValues")) or _any_value(parsed.get("maxValues")):
        return True
    if not action.get("stats"):
        return False
    stats = json.loads(action["stats"])
    return bool(stats.get("minValues") or stats.get("maxValues"))


def _any_value(values: object) -> bool:
    return isinstance(values, dict) and any(v is not None for v in values.values())


# ------------------------------------------------------------------------- maintenance


@dataclass(frozen=True, slots=True)
class TableMaintenance:
    """What `TableStore.maintain` did to one table."""

    table: str
    version_before: int
    version_after: int
    files_compacted: int
    files_added: int
    files_vacuumed: int
    properties_set: tuple[str, ...] = ()


def missing_properties(table: DeltaTable) -> dict[str, str]:
    """The properties memflow creates its tables with (`table_configuration`) that `table`
    lacks, a table an earlier memflow created; a value someone set is kept."""
    metadata = table.metadata()
    wanted = table_configuration(bool(metadata.partition_columns), table.schema().to_arrow().names)
    have = metadata.configuration
    if STATS_COLUMNS_PROPERTY in have:  # statistics chosen by column: that choice stands
        wanted = {k: v for k, v in wanted.items() if k != STATS_PROPERTY}
    if have.get(STATS_PROPERTY, "0") != "0":
        # a number of columns chosen stands too (adding columns would override it)
        wanted = {k: v for k, v in wanted.items() if k != STATS_COLUMNS_PROPERTY}
    return {k: v for k, v in wanted.items() if k not in have}


def _set_properties(store: TableStore, uri: str) -> tuple[str, ...]:
    """`missing_properties` set on the table, conflicts with other writers retried; the keys
    set."""
    options = store.storage_options
    for attempt in range(CONFLICT_RETRIES + 1):
        try:
            snap = SNAPSHOTS.get(uri, options)
            missing = {} if snap is None else missing_properties(snap.table)
            if missing:
                snap.table.alter.set_table_properties(missing, raise_if_not_exists=False)
            return tuple(sorted(missing))
        except CommitFailedError:
            if attempt == CONFLICT_RETRIES:
                raise
            SNAPSHOTS.forget(uri, options)
            time.sleep(random.uniform(0.01, 0.05) * (attempt + 1))
    raise AssertionError("unreachable")


def maintain(
    store: TableStore, *, retention_hours: int, tables: Iterable[str] | None
) -> list[TableMaintenance]:
    """`TableStore.maintain`: compact, vacuum and checkpoint each table."""
    wanted = set(tables) if tables is not None else None
    out = []
    for name, uri in known_tables(store, wanted or ()):
        if wanted is not None and name not in wanted:
            continue
        snap = store.snapshot(uri)
        if snap is None:
            continue
        with SNAPSHOTS.lock(uri, store.storage_options):
            before = snap.table.version()
            # first: the compacted files are then written as new ones are
            properties_set = _set_properties(store, uri)
            table = SNAPSHOTS.get(uri, store.storage_options).table
            metrics = table.optimize.compact()
            # full: also the files of a write killed before its commit (no version
            # names them); older than the retention, so never a running write's
            vacuumed = table.vacuum(
                retention_hours=retention_hours,
                dry_run=False,
                enforce_retention_duration=False,
                full=True,
            )
            table.create_checkpoint()
            table.cleanup_metadata()
            after = table.version()
        out.append(
            TableMaintenance(
                table=name,
                version_before=before,
                version_after=after,
                files_compacted=int(metrics.get("numFilesRemoved", 0)),
                files_added=int(metrics.get("numFilesAdded", 0)),
                files_vacuumed=len(vacuumed),
                properties_set=properties_set,
            )
        )
    return out
