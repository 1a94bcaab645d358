"""The embedded graph store: one SQLite file in WAL mode, shared by a writer and readers.

A pipeline process writes while the recall API reads: WAL lets readers keep their snapshot while
a writer commits, `busy_timeout` makes writers queue instead of failing, and every write runs in
one `BEGIN IMMEDIATE` transaction that also bumps the scope's version counter.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from resources.graph.base import GraphStore, GraphStoreError
from resources.graph.common import (
    ENTITY_FIELDS,
    FACT_FIELDS,
    assemble_expansion,
    fact_from_row,
    fact_row,
    stored_fact_content,
    to_micros,
    unique_ids,
)
from schemas.records import EntityRecord, ExpandedFact, FactRecord
from schemas.scope import Scope

# From this many scopes, `counts_many` groups the whole table instead of asking per scope.
_GROUPED_FROM = 64

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS entities (
        tenant_id TEXT NOT NULL, ns TEXT NOT NULL, entity_id TEXT NOT NULL,
        name TEXT NOT NULL, aliases TEXT NOT NULL, types TEXT NOT NULL, row_hash TEXT NOT NULL,
        PRIMARY KEY (tenant_id, ns, entity_id)) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS facts (
        tenant_id TEXT NOT NULL, ns TEXT NOT NULL, fact_id TEXT NOT NULL,
        subject_id TEXT NOT NULL, subject TEXT NOT NULL, predicate TEXT NOT NULL,
        object_id TEXT NOT NULL, object TEXT NOT NULL, confidence REAL NOT NULL,
        valid_from INTEGER NOT NULL, valid_to INTEGER,
        supersedes TEXT, superseded_by TEXT,
        session_id TEXT NOT NULL, turn_id TEXT NOT NULL, client TEXT NOT NULL,
        model TEXT NOT NULL, source TEXT NOT NULL, sources TEXT NOT NULL DEFAULT '[]',
        row_hash TEXT NOT NULL, PRIMARY KEY (tenant_id, ns, fact_id))""",
    """CREATE INDEX IF NOT EXISTS facts_by_subject ON facts (tenant_id, ns, subject_id)""",
    """CREATE INDEX IF NOT EXISTS facts_by_object ON facts (tenant_id, ns, object_id)""",
    """CREATE TABLE IF NOT EXISTS scope_versions (
        tenant_id TEXT NOT NULL, ns TEXT NOT NULL, version INTEGER NOT NULL,
        PRIMARY KEY (tenant_id, ns)) WITHOUT ROWID""",
)

_FACT_COLUMNS = ", ".join((*FACT_FIELDS, "row_hash"))
_ENTITY_COLUMNS = ", ".join((*ENTITY_FIELDS, "row_hash"))
_FACT_CONTENT = ", ".join(FACT_FIELDS)
_ENTITY_CONTENT = ", ".join(ENTITY_FIELDS)
_FACT_PARAMS = ", ".join("?" * (2 + len(FACT_FIELDS) + 1))  # scope, content, row_hash
_IN_IDS = "(SELECT value FROM json_each(?))"  # a JSON array bound as one parameter
_VALID_AT = "valid_from <= ? AND (valid_to IS NULL OR valid_to > ?)"


class SqliteGraphStore(GraphStore):
    """Safe to open from several processes and threads; each thread gets its own connection."""

    backend = "sqlite"

    def __init__(self, path: str | os.PathLike[str], *, busy_timeout_ms: int = 30_000) -> None:
        self.path = Path(path)
        self._busy_timeout_ms = busy_timeout_ms
        self._local = threading.local()
        self._connections: list[tuple[int, sqlite3.Connection]] = []
        self._lock = threading.Lock()
        self._closed = False
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._write() as db:
            for statement in _SCHEMA:
                db.execute(statement)
            _add_missing_columns(db)
            db.execute(
                "INSERT OR IGNORE INTO meta (key, value) VALUES ('instance', ?)",
                (uuid.uuid4().hex,),
            )
        with self._read() as db:
            row = db.execute("SELECT value FROM meta WHERE key = 'instance'").fetchone()
        # Part of every version token, so a recreated file never repeats an old token.
        self._instance: str = row[0]

    def __repr__(self) -> str:
        return f"SqliteGraphStore({str(self.path)!r})"

    # -- connections -------------------------------------------------------------------------

    def _conn(self) -> sqlite3.Connection:
        if self._closed:
            raise GraphStoreError(f"sqlite graph store {self.path} is closed")
        # A connection must never cross a fork: key it by process as well as by thread.
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is not None and self._local.pid == os.getpid():
            return conn
        try:
            conn = sqlite3.connect(
                self.path,
                timeout=self._busy_timeout_ms / 1000,
                isolation_level=None,
                check_same_thread=False,
            )
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
        except sqlite3.Error as exc:
            raise GraphStoreError(f"sqlite graph store {self.path}: {exc}") from exc
        self._local.conn, self._local.pid = conn, os.getpid()
        with self._lock:
            self._connections.append((os.getpid(), conn))
        return conn

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        db = self._conn()
        try:
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
        except sqlite3.Error as exc:
            raise GraphStoreError(f"sqlite graph store {self.path}: {exc}") from exc

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        """One snapshot for every statement inside (a deferred transaction)."""
        db = self._conn()
        try:
            db.execute("BEGIN")
            try:
                yield db
            finally:
                db.execute("COMMIT")
        except sqlite3.Error as exc:
            raise GraphStoreError(f"sqlite graph store {self.path}: {exc}") from exc

    @staticmethod
    def _bump(db: sqlite3.Connection, scope: Scope) -> None:
        db.execute(
            "INSERT INTO scope_versions (tenant_id, ns, version) VALUES (?, ?, 1) "
            "ON CONFLICT (tenant_id, ns) DO UPDATE SET version = version + 1",
            (scope.tenant_id, scope.ns),
        )

    # -- writes ------------------------------------------------------------------------------

    def upsert_entities(self, scope: Scope, entities: Sequence[EntityRecord]) -> int:
        rows = {e.entity_id: e for e in entities}
        if not rows:
            return 0
        params = [
            (
                scope.tenant_id,
                scope.ns,
                e.entity_id,
                e.name,
                json.dumps(list(e.aliases), ensure_ascii=False),
                json.dumps(list(e.types), ensure_ascii=False),
                e.row_hash,
            )
            for e in rows.values()
        ]
        with self._write() as db:
            db.executemany(
                "INSERT INTO entities (tenant_id, ns, entity_id, name, aliases, types, row_hash) "
                "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (tenant_id, ns, entity_id) DO UPDATE SET "
                "name = excluded.name, aliases = excluded.aliases, types = excluded.types, "
                "row_hash = excluded.row_hash",
                params,
            )
            self._bump(db, scope)
        return len(rows)

    def upsert_facts(self, scope: Scope, facts: Sequence[FactRecord]) -> int:
        rows = {f.fact_id: f for f in facts}
        if not rows:
            return 0
        params = [_fact_params(scope, f) for f in rows.values()]
        endpoints = sorted({e for f in rows.values() for e in (f.subject_id, f.object_id)})
        with self._write() as db:
            found = {
                r[0]
                for r in db.execute(
                    f"SELECT entity_id FROM entities WHERE tenant_id = ? AND ns = ? "
                    f"AND entity_id IN {_IN_IDS}",
                    (scope.tenant_id, scope.ns, json.dumps(endpoints)),
                )
            }
            missing = [e for e in endpoints if e not in found]
            if missing:
                raise ValueError(f"facts reference entities not in scope {scope}: {missing[:5]}")
            db.executemany(
                f"INSERT INTO facts (tenant_id, ns, {_FACT_COLUMNS}) VALUES "
                f"({_FACT_PARAMS}) ON CONFLICT (tenant_id, ns, fact_id) DO UPDATE SET "
                + ", ".join(
                    f"{c} = excluded.{c}" for c in _FACT_COLUMNS.split(", ") if c != "fact_id"
                ),
                params,
            )
            self._bump(db, scope)
        return len(rows)

    def supersede(self, scope: Scope, old_fact_id: str, new_fact_id: str, at: datetime) -> None:
        at_us = to_micros(at)
        key = (scope.tenant_id, scope.ns)
        with self._write() as db:
            old = db.execute(
                "SELECT valid_from, valid_to FROM facts WHERE tenant_id = ? AND ns = ? "
                "AND fact_id = ?",
                (*key, old_fact_id),
            ).fetchone()
            new_exists = db.execute(
                "SELECT 1 FROM facts WHERE tenant_id = ? AND ns = ? AND fact_id = ?",
                (*key, new_fact_id),
            ).fetchone()
            _check_supersede(scope, old_fact_id, new_fact_id, old, new_exists, at_us)
            valid_to = at_us if old[1] is None else min(old[1], at_us)
            # Cleared row hashes make the next sync rewrite both rows from the table.
            db.execute(
                "UPDATE facts SET valid_to = ?, superseded_by = ?, row_hash = '' "
                "WHERE tenant_id = ? AND ns = ? AND fact_id = ?",
                (valid_to, new_fact_id, *key, old_fact_id),
            )
            db.execute(
                "UPDATE facts SET supersedes = ?, row_hash = '' "
                "WHERE tenant_id = ? AND ns = ? AND fact_id = ?",
                (old_fact_id, *key, new_fact_id),
            )
            self._bump(db, scope)

    def delete_entities(self, scope: Scope, entity_ids: Iterable[str]) -> int:
        """Deletes the entities and every fact touching them (a fact needs both ends)."""
        ids = json.dumps(unique_ids(entity_ids))
        key = (scope.tenant_id, scope.ns)
        with self._write() as db:
            for end in ("subject", "object"):
                db.execute(
                    f"DELETE FROM facts INDEXED BY facts_by_{end} WHERE tenant_id = ? AND ns = ? "
                    f"AND {end}_id IN {_IN_IDS}",
                    (*key, ids),
                )
            n = db.execute(
                f"DELETE FROM entities WHERE tenant_id = ? AND ns = ? AND entity_id IN {_IN_IDS}",
                (*key, ids),
            ).rowcount
            if n:
                self._bump(db, scope)
        return n

    def delete_facts(self, scope: Scope, fact_ids: Iterable[str]) -> int:
        ids = json.dumps(unique_ids(fact_ids))
        with self._write() as db:
            n = db.execute(
                f"DELETE FROM facts WHERE tenant_id = ? AND ns = ? AND fact_id IN {_IN_IDS}",
                (scope.tenant_id, scope.ns, ids),
            ).rowcount
            if n:
                self._bump(db, scope)
        return n

    def delete_scope(self, scope: Scope) -> None:
        key = (scope.tenant_id, scope.ns)
        with self._write() as db:
            db.execute("DELETE FROM facts WHERE tenant_id = ? AND ns = ?", key)
            db.execute("DELETE FROM entities WHERE tenant_id = ? AND ns = ?", key)
            # The counter survives so that a rebuilt scope never repeats an old version token.
            self._bump(db, scope)

    # -- reads -------------------------------------------------------------------------------

    def entities(self, scope: Scope) -> list[EntityRecord]:
        with self._read() as db:
            rows = db.execute(
                f"SELECT {_ENTITY_COLUMNS} FROM entities WHERE tenant_id = ? AND ns = ? "
                "ORDER BY entity_id",
                (scope.tenant_id, scope.ns),
            ).fetchall()
        return [_entity(r) for r in rows]

    def get_entities(self, scope: Scope, entity_ids: Iterable[str]) -> list[EntityRecord]:
        with self._read() as db:
            rows = db.execute(
                f"SELECT {_ENTITY_COLUMNS} FROM entities WHERE tenant_id = ? AND ns = ? "
                f"AND entity_id IN {_IN_IDS} ORDER BY entity_id",
                (scope.tenant_id, scope.ns, json.dumps(unique_ids(entity_ids))),
            ).fetchall()
        return [_entity(r) for r in rows]

    def facts(self, scope: Scope) -> list[FactRecord]:
        with self._read() as db:
            rows = db.execute(
                f"SELECT {_FACT_COLUMNS} FROM facts WHERE tenant_id = ? AND ns = ? "
                "ORDER BY fact_id",
                (scope.tenant_id, scope.ns),
            ).fetchall()
        return [_fact(r) for r in rows]

    def expand(
        self,
        scope: Scope,
        seeds: Sequence[str],
        *,
        hops: int = 1,
        limit: int = 40,
        as_of: datetime,
    ) -> list[ExpandedFact]:
        t = to_micros(as_of)
        with self._read() as db:

            def fetch(ids: Sequence[str], n: int) -> list[FactRecord]:
                # Two indexed lookups (by subject, by object) instead of one OR over both.
                arg = json.dumps(list(ids))
                sql = (
                    f"SELECT {_FACT_COLUMNS} FROM facts INDEXED BY facts_by_{{end}} "
                    f"WHERE tenant_id = ? AND ns = ? AND {{end}}_id IN {_IN_IDS} AND {_VALID_AT}"
                )
                rows = db.execute(
                    f"{sql.format(end='subject')} UNION {sql.format(end='object')} "
                    "ORDER BY confidence DESC, fact_id LIMIT ?",
                    (scope.tenant_id, scope.ns, arg, t, t) * 2 + (n,),
                ).fetchall()
                return [_fact(r) for r in rows]

            return assemble_expansion(seeds, hops=hops, limit=limit, fetch=fetch)

    def content_rows(self, scope: Scope) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
        """`GraphStore.content_rows` straight from the columns (no records built)."""
        key = (scope.tenant_id, scope.ns)
        with self._read() as db:
            ents = db.execute(
                f"SELECT {_ENTITY_CONTENT} FROM entities WHERE tenant_id = ? AND ns = ? "
                "ORDER BY entity_id",
                key,
            ).fetchall()
            facts = db.execute(
                f"SELECT {_FACT_CONTENT} FROM facts WHERE tenant_id = ? AND ns = ? "
                "ORDER BY fact_id",
                key,
            ).fetchall()
        return (
            [(i, n, json.loads(a), json.loads(t)) for i, n, a, t in ents],
            [stored_fact_content(r) for r in facts],
        )

    def row_hashes(self, scope: Scope) -> tuple[dict[str, str], dict[str, str]]:
        key = (scope.tenant_id, scope.ns)
        with self._read() as db:
            ents = dict(
                db.execute(
                    "SELECT entity_id, row_hash FROM entities WHERE tenant_id = ? AND ns = ?", key
                ).fetchall()
            )
            facts = dict(
                db.execute(
                    "SELECT fact_id, row_hash FROM facts WHERE tenant_id = ? AND ns = ?", key
                ).fetchall()
            )
        return ents, facts

    def counts(self, scope: Scope) -> dict[str, int]:
        key = (scope.tenant_id, scope.ns)
        with self._read() as db:
            (ents,) = db.execute(
                "SELECT count(*) FROM entities WHERE tenant_id = ? AND ns = ?", key
            ).fetchone()
            (facts,) = db.execute(
                "SELECT count(*) FROM facts WHERE tenant_id = ? AND ns = ?", key
            ).fetchone()
        return {"entities": ents, "facts": facts}

    def counts_many(self, scopes: Sequence[Scope]) -> dict[Scope, dict[str, int]]:
        """Few scopes: their counts from the primary keys; many: one grouped read of each
        table (a scan of its primary key), from one snapshot."""
        wanted = list(dict.fromkeys(scopes))
        out = {s: {"entities": 0, "facts": 0} for s in wanted}
        by_pair = {(s.tenant_id, s.ns): s for s in wanted}
        with self._read() as db:
            for kind in ("entities", "facts"):
                if len(wanted) <= _GROUPED_FROM:
                    for scope in wanted:
                        (out[scope][kind],) = db.execute(
                            f"SELECT count(*) FROM {kind} WHERE tenant_id = ? AND ns = ?",
                            (scope.tenant_id, scope.ns),
                        ).fetchone()
                    continue
                rows = db.execute(f"SELECT tenant_id, ns, count(*) FROM {kind} GROUP BY 1, 2")
                for org, repo, n in rows:
                    scope = by_pair.get((org, repo))
                    if scope is not None:  # another scope's count is not answered
                        out[scope][kind] = n
        return out

    def version(self, scope: Scope) -> str:
        with self._read() as db:
            row = db.execute(
                "SELECT version FROM scope_versions WHERE tenant_id = ? AND ns = ?",
                (scope.tenant_id, scope.ns),
            ).fetchone()
        return f"{self._instance}:{row[0] if row else 0}"

    def scopes(self) -> list[Scope]:
        with self._read() as db:
            rows = db.execute(
                "SELECT DISTINCT tenant_id, ns FROM entities UNION "
                "SELECT DISTINCT tenant_id, ns FROM facts ORDER BY 1, 2"
            ).fetchall()
        return [Scope(t, n) for t, n in rows]

    def close(self) -> None:
        with self._lock:
            self._closed = True
            connections, self._connections = self._connections, []
        for pid, conn in connections:
            # Closing a parent's connection in a forked child could checkpoint or remove the
            # WAL under the parent; only this process's connections are closed.
            if pid == os.getpid():
                conn.close()


# Columns added to a table after its first layout: (table, column, definition). A file made
# by an older version gains them when opened; rows it holds get the default, which their
# row hash does not cover, so the next sync rewrites them from the tables.
_ADDED_COLUMNS = (("facts", "sources", "TEXT NOT NULL DEFAULT '[]'"),)


def _add_missing_columns(db: sqlite3.Connection) -> None:
    for table, column, definition in _ADDED_COLUMNS:
        held = {r[1] for r in db.execute(f"PRAGMA table_info({table})")}
        if column not in held:
            db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {definition}")


def _check_supersede(
    scope: Scope,
    old_fact_id: str,
    new_fact_id: str,
    old: tuple[int, int | None] | None,
    new_exists: object,
    at_us: int,
) -> None:
    if old_fact_id == new_fact_id:
        raise ValueError(f"fact {old_fact_id} cannot supersede itself")
    if old is None:
        raise KeyError(f"fact {old_fact_id} is not in scope {scope}")
    if not new_exists:
        raise KeyError(f"replacement fact {new_fact_id} is not in scope {scope}")
    if at_us < old[0]:
        raise ValueError(f"fact {old_fact_id} cannot be closed before it became valid")


def _fact_params(scope: Scope, f: FactRecord) -> tuple[object, ...]:
    return (scope.tenant_id, scope.ns, *fact_row(f), f.row_hash)


def _entity(row: tuple[str, str, str, str, str]) -> EntityRecord:
    entity_id, name, aliases, types, row_hash = row
    return EntityRecord(
        entity_id=entity_id,
        name=name,
        aliases=tuple(json.loads(aliases)),
        types=tuple(json.loads(types)),
        row_hash=row_hash,
    )


def _fact(row: tuple[Any, ...]) -> FactRecord:
    return fact_from_row(row[:-1], row[-1])  # _FACT_COLUMNS: the content, then row_hash
