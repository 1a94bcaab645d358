"""The event log of the local (SQLite) Dagster instance `memflow run` and `make dev` share.

Dagster's `SqliteEventLogStorage` builds a new SQLAlchemy engine for every statement it writes:
each event opens the file, recompiles its INSERT, commits with a full fsync and closes the
connection, and closing the last connection of a WAL database checkpoints it (another fsync).
A run over 40 tenants writes ~700 events (one materialization per asset and tenant), and in a
profile of `memflow run` those connects, compiles, commits and closes were about a third of the
run (bench/bench_ingest_scale.py, BENCHMARKS.md "Ingestion at scale").

It stays although it leans on Dagster internals (the one module besides the fenced
`pipelines/location.py` that tests/test_layers.py allows them): measured side by side, the
default storage makes `memflow run` cost 2.6x the CPU (BENCHMARKS.md, "The local event
log"), mostly because the public per-tenant metadata call (`add_asset_metadata` with a
partition key) queries the dynamic partitions three times, each through a new engine.

`LocalSqliteEventLogStorage` is the same storage with these changes:

- one engine per shard (the index and the most recent runs' shards), kept open, so statements
  compile once and connections are pooled;
- `PRAGMA synchronous=NORMAL` on its connections. In WAL mode that is still crash-safe for
  the database (a power cut can lose the last transactions, never corrupt the file); a lost
  event of a run that was running is what run monitoring and re-execution already handle;
- `store_event_batch` for materializations and observations: with
  `DAGSTER_EVENT_BATCH_SIZE` set (`memflow run` sets it), the per-tenant materializations of
  one asset are written in one transaction per database instead of two per event, as
  Dagster's PostgreSQL storage does;
- a new database (each run's shard, and the index of a new instance) is put in WAL mode
  before its tables are created (not after, as Dagster does: one fsync-free commit per table
  instead of three fsyncs), and stamped with Dagster's migration scripts loaded once per
  process: Dagster's own `_initdb` loads its ~100 revision scripts twice for every new shard
  (to read the head, then to stamp it), ~50 ms of every run; a database that is not new
  (tables, or a revision) still goes through Dagster's `_initdb`;
- `has_table` remembers the tables it found (Dagster asks before most asset-event writes and
  partition queries, opening a new engine each time); tables are only ever added, and `wipe`
  forgets them;
- the dynamic-partition queries (`has_dynamic_partition`, and the stamp `get_dynamic_partitions`
  compares its kept listing with) go through one kept `sqlite3` connection on the index, each
  a single SELECT in autocommit (so each sees the last commit of any process, as Dagster's
  queries do) without SQLAlchemy's per-statement work: every per-tenant metadata call
  (`add_asset_metadata` with a partition key) makes three of them, ~1,700 in a 40-tenant run.

The UI's live run view watches each run's database file for changes; with kept connections new
events land in the `-wal` file first, so `watch` also listens to it.

It is for the embedded instance only; production uses PostgreSQL (deploy/dagster.yaml).
Depends on `SqliteEventLogStorage._connect`, `_initdb`, `watch` and its watchdog (dagster
pinned at 1.13).
"""

from __future__ import annotations

import functools
import os
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from dagster._core.events import DagsterEventType
from dagster._core.events.log import EventLogEntry
from dagster._core.storage.event_log.schema import (
    SqlEventLogStorageMetadata,
    SqlEventLogStorageTable,
)
from dagster._core.storage.event_log.sqlite import sqlite_event_log
from dagster._core.storage.event_log.sqlite.sqlite_event_log import (
    INDEX_SHARD_NAME,
    SqliteEventLogStorage,
    SqliteEventLogStorageWatchdog,
)
from dagster._core.storage.sql import get_alembic_config
from dagster._core.storage.sqlite import create_db_conn_string
from sqlalchemy import create_engine, event, inspect, text
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DatabaseError
from watchdog.events import PatternMatchingEventHandler
from watchdog.observers import Observer

SQLITE_BUSY_TIMEOUT_S = 30
# The index shard plus this many run shards keep an open engine; older ones are disposed.
RUN_SHARDS_KEPT = 8

INSTANCE_YAML = """\
# Written by memflow (pipelines/runner.py). Local by design: no telemetry.
telemetry:
  enabled: false
event_log_storage:
  module: pipelines.event_log
  class: LocalSqliteEventLogStorage
  config:
    base_dir: {base_dir}
"""


# Dagster's membership query of `has_dynamic_partition`, as plain SQL for the kept reader.
_HAS_PARTITION = (
    "SELECT 1 FROM dynamic_partitions WHERE partitions_def_name = ? AND partition = ? LIMIT 1"
)
# A definition's partition keys in Dagster's order (by id) as one string: what
# `get_dynamic_partitions` compares with the listing it kept.
_SEP = "\x00"
_STAMP = (
    "SELECT group_concat(partition, char(0)) FROM (SELECT partition FROM dynamic_partitions "
    "WHERE partitions_def_name = ? ORDER BY id)"
)

_BATCHED = frozenset({DagsterEventType.ASSET_MATERIALIZATION, DagsterEventType.ASSET_OBSERVATION})


class _WalWatchdog(SqliteEventLogStorageWatchdog):
    """Dagster's run-log watcher (the UI's live run view), also woken by the run's `-wal` file:
    with connections kept open, new events stay in the write-ahead log and the `.db` file
    itself changes only at a checkpoint."""

    def __init__(self, storage: SqliteEventLogStorage, run_id: str, callback: Any, cursor: Any):
        super().__init__(storage, run_id, callback, cursor)
        PatternMatchingEventHandler.__init__(
            self, patterns=[self._log_path, self._log_path + "-wal"]
        )

    def on_modified(self, event: Any) -> None:
        self._process_log()


@functools.cache
def _migrations() -> ScriptDirectory:
    """Dagster's event-log migration scripts, the ones its `_initdb` stamps with."""
    return ScriptDirectory.from_config(get_alembic_config(sqlite_event_log.__file__))


class _NotNew(Exception):
    """The database has tables but no revision: Dagster's `_initdb` knows what to stamp."""


_INSERT_RETURNING_IDS = SqlEventLogStorageTable.insert().returning(
    SqlEventLogStorageTable.c.id, sort_by_parameter_order=True
)


def _insert_all(conn: Connection, rows: list[dict[str, Any]]) -> list[int]:
    """Insert event rows with one compiled statement; their ids, in the rows' order. (SQLite
    has no sentinel column here, so SQLAlchemy sends the rows one at a time to keep that order:
    still ~6x faster than an `insert().values()` per row.)"""
    return list(conn.execute(_INSERT_RETURNING_IDS, rows).scalars())


def _pragmas(dbapi_conn: Any, _record: Any) -> None:
    cursor = dbapi_conn.cursor()
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


class LocalSqliteEventLogStorage(SqliteEventLogStorage):
    """SQLite event log with a kept engine per shard and synchronous=NORMAL (see module)."""

    def __init__(self, base_dir: str, inst_data: Any = None) -> None:
        self._engines: OrderedDict[str, Engine] = OrderedDict()
        self._engines_lock = threading.Lock()
        self._tables_found: set[str] = set()
        # definition -> (the reader's data_version when last checked, stamp, keys)
        self._partitions_kept: dict[str, tuple[tuple[int, int], str | None, tuple[str, ...]]] = {}
        self._partitions_lock = threading.Lock()
        self._reader: tuple[int, sqlite3.Connection] | None = None  # (pid, connection)
        self._readers_opened = 0  # tells one kept reader's data_version from another's
        self._reader_lock = threading.Lock()
        super().__init__(base_dir, inst_data=inst_data)

    @classmethod
    def from_config_value(  # type: ignore[override]
        cls, inst_data: Any, config_value: Any
    ) -> LocalSqliteEventLogStorage:
        return cls(inst_data=inst_data, **config_value)

    def _engine(self, shard: str) -> Engine:
        with self._engines_lock:
            engine = self._engines.get(shard)
            if engine is not None:
                self._engines.move_to_end(shard)
                return engine
            engine = create_engine(
                create_db_conn_string(self._base_dir, shard),
                connect_args={"timeout": SQLITE_BUSY_TIMEOUT_S, "check_same_thread": False},
            )
            event.listen(engine, "connect", _pragmas)
            self._engines[shard] = engine
            runs = [s for s in self._engines if s != INDEX_SHARD_NAME]
            for old in runs[: max(0, len(runs) - RUN_SHARDS_KEPT)]:
                self._engines.pop(old).dispose()
            return engine

    @contextmanager
    def _connect(self, shard: str) -> Iterator[Connection]:
        with self._db_lock:
            engine = self._engine(shard)
            if shard not in self._initialized_dbs:
                self._initdb(engine)
                self._initialized_dbs.add(shard)
            with engine.connect() as conn, conn.begin():
                yield conn

    def _initdb(self, engine: Engine, for_index_shard: bool = False) -> None:
        """Dagster's tables in a new database, stamped at the head revision, as Dagster's
        `_initdb` does, with the migration scripts loaded once (see module)."""
        try:
            with engine.connect() as conn:
                migration = MigrationContext.configure(conn)
                if migration.get_current_revision() is not None:
                    return  # initialised before; Dagster's `_initdb` leaves it as it is too
                if inspect(conn).get_table_names():
                    raise _NotNew
                # Write-ahead log first, then the tables: each CREATE is its own transaction
                # (the driver begins none for DDL), and in the rollback-journal mode Dagster
                # creates them in, each costs three fsyncs (journal, database, directory):
                # ~130 of a 40-tenant `memflow run` on a fresh data directory. The file ends
                # the same: WAL mode, the same tables, stamped at the head.
                conn.execute(text("PRAGMA journal_mode=WAL;"))
                conn.execute(text("PRAGMA synchronous=NORMAL;"))
                SqlEventLogStorageMetadata.create_all(conn)
                migration.stamp(_migrations(), "head")
                conn.commit()
        except (_NotNew, DatabaseError, sqlite3.DatabaseError):
            # Not new, or created at the same moment by another process (whose retries on
            # "already exists" and "locked" are Dagster's).
            super()._initdb(engine, for_index_shard=for_index_shard)

    def _read_index(self, sql: str, params: tuple[Any, ...]) -> Any:
        """The first column of the first row of one SELECT on the index (None for no row),
        through the kept reader: autocommit, so the statement is its own read transaction and
        sees every commit made before it, by this process or another. A forked child opens its
        own."""
        if self._reader is None or self._reader[0] != os.getpid():
            with self.index_connection():  # the index exists and is initialised
                pass
        with self._reader_lock:
            reader = self._reader
            if reader is None or reader[0] != os.getpid():
                conn = sqlite3.connect(
                    self.path_for_shard(INDEX_SHARD_NAME),
                    timeout=SQLITE_BUSY_TIMEOUT_S,
                    isolation_level=None,
                    check_same_thread=False,
                )
                reader = self._reader = (os.getpid(), conn)
                self._readers_opened += 1
            row = reader[1].execute(sql, params).fetchone()
        return None if row is None else row[0]

    def _close_reader(self) -> None:
        with self._reader_lock:
            reader, self._reader = self._reader, None
        if reader is not None and reader[0] == os.getpid():
            reader[1].close()

    def has_dynamic_partition(self, partitions_def_name: str, partition_key: str) -> bool:
        """Dagster's query (is the key stored?) on the kept reader (see module)."""
        self._check_partitions_table()
        return self._read_index(_HAS_PARTITION, (partitions_def_name, partition_key)) is not None

    def get_dynamic_partitions(self, partitions_def_name: str) -> Sequence[str]:
        """Dagster's listing of a dynamic partitions definition, kept while the stored keys
        are the same. Dagster lists every tenant for each per-tenant metadata call (three
        times in `add_asset_metadata`: 17.5 ms CPU a call at 10,000 tenants against 1.2 ms at
        1,000, BENCHMARKS.md "Tenants at scale"). Two checks, cheapest first: the kept reader's
        `PRAGMA data_version` (it changes when any other connection, of this process or
        another, commits to the index; the reader itself never writes), so a step's hundreds
        of calls with no commit in between cost a constant each; when it moved, one statement
        returning the keys in order as one string (no row objects), compared with the string
        the kept list came from, so a change by any process (a key added, erased, re-added) is
        seen at the next call."""
        self._check_partitions_table()
        version = self._data_version()
        with self._partitions_lock:
            kept = self._partitions_kept.get(partitions_def_name)
        if kept is not None and kept[0] == version:
            return list(kept[2])
        stamp = self._read_index(_STAMP, (partitions_def_name,))
        if kept is not None and kept[1] == stamp:
            with self._partitions_lock:
                self._partitions_kept[partitions_def_name] = (version, stamp, kept[2])
            return list(kept[2])
        keys = list(super().get_dynamic_partitions(partitions_def_name))
        # Kept under the version and stamp read before the listing: a commit in between moves
        # the version and makes the next stamp differ, so the next call lists again.
        if stamp == _SEP.join(keys) or (stamp is None and not keys):
            with self._partitions_lock:
                self._partitions_kept[partitions_def_name] = (version, stamp, tuple(keys))
        return keys

    def _data_version(self) -> tuple[int, int]:
        """The kept reader's identity and its `PRAGMA data_version`: equal twice only if no
        other connection committed to the index in between (a new reader, after a fork or a
        wipe, never matches an older one's)."""
        version = self._read_index("PRAGMA data_version", ())
        return (self._readers_opened, int(version))

    def has_table(self, table_name: str) -> bool:
        if table_name in self._tables_found:
            return True
        found = super().has_table(table_name)
        if found:
            self._tables_found.add(table_name)
        return found

    def store_event_batch(self, events: Sequence[EventLogEntry]) -> None:
        """A batch of one run's asset materializations (or observations: one kind) in one
        transaction on the run's database and one on the index; other batches are stored
        one by one. If the index refuses the batch, the run's rows are taken back before the
        error goes up, so Dagster's fallback (store each event alone) stores each event
        once."""
        kinds = {e.dagster_event_type for e in events}
        if not events or len(kinds) != 1 or not kinds <= _BATCHED:
            super().store_event_batch(events)
            return
        if any(e.run_id != events[0].run_id for e in events):
            super().store_event_batch(events)
            return
        rows = [self._event_to_row(e) for e in events]
        with self.run_connection(events[0].run_id) as conn:
            run_ids = _insert_all(conn, rows)
        try:
            with self.index_transaction() as conn:
                ids = _insert_all(conn, rows)
                self._store_asset_event_tags(conn, list(events), ids)
                pairs = list(zip(events, ids, strict=True))
                # the asset table keeps each asset's last event, as Dagster's batches do
                keep = list({e.dagster_event.asset_key: (e, i) for e, i in pairs}.values())
                for event, event_id in keep:
                    self._store_asset_event(conn, event, event_id)
        except Exception:
            with self.run_connection(events[0].run_id) as conn:
                conn.execute(
                    SqlEventLogStorageTable.delete().where(
                        SqlEventLogStorageTable.c.id.in_(run_ids)
                    )
                )
            raise

    def watch(self, run_id: str, cursor: str | None, callback: Any) -> None:
        if not self._obs:
            self._obs = Observer()
            self._obs.start()
        watchdog = _WalWatchdog(self, run_id, callback, cursor)
        self._watchers[run_id][callback] = (
            watchdog,
            self._obs.schedule(watchdog, self._base_dir, recursive=True),
        )

    def _dispose_engines(self) -> None:
        self._close_reader()
        with self._engines_lock:
            while self._engines:
                self._engines.popitem()[1].dispose()

    def wipe(self) -> None:
        # Run shards are deleted as files: no connection may stay open on them.
        self._tables_found.clear()
        with self._partitions_lock:
            self._partitions_kept.clear()
        self._dispose_engines()
        super().wipe()

    def dispose(self) -> None:
        self._dispose_engines()
        super().dispose()
