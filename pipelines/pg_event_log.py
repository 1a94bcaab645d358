"""The event log of memflow's production Dagster instance on PostgreSQL (deploy/dagster.yaml).

Dagster's `PostgresEventLogStorage` opens a new database connection for every statement
(SQLAlchemy's `NullPool`: nothing is held between calls), and asks whether a table exists, on
a connection of its own, before each partition query. A run's per-tenant metadata
(`add_asset_metadata` with a partition key, one call per asset and tenant) checks the key
against the run's range: two `has_dynamic_partition` and one `get_dynamic_partitions`, which
lists every tenant partition. That is six connections a call, each a PostgreSQL backend
started and torn down, plus a row object per tenant of the listing; measured on the production
stack it grew the first ingest's cost per tenant with the number of tenants (BENCHMARKS.md,
"Tenants at scale: the production stack").

`PostgresEventLog` is the same storage with three changes:

- its engine holds one open connection (and opens more only while several threads query at
  once), as Dagster's own `optimize_for_webserver` sets it up for the webserver, without a
  statement timeout; every statement of the process reuses it (event writes too: the
  materializations a run plans, one per asset and tenant, are written one by one). `dispose`
  closes it; a forked child lets the parent's go and opens its own;
- `has_table` remembers the tables it found (Dagster only ever adds them; `wipe` forgets);
- `get_dynamic_partitions` reads the keys in Dagster's order as one length-prefixed string
  (one row, however many tenants) and keeps the list it decodes while the string is the same:
  every call sees every key added, deleted or re-added by any process, and a step's hundreds
  of calls with no change between them build no row object and no list per tenant.

Public API only: `PostgresEventLogStorage` and its config helpers are `dagster_postgres`'s
exports, the overridden methods are the storage interface's, and the listing reads Dagster's
`dynamic_partitions` table with the columns and order of Dagster's own query (dagster pinned at
1.13). A PostgreSQL restart drops the held connection: the statement that finds it dead fails
(a step's retry or the run's retry repeats it) and the pool opens a new one.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

from dagster_postgres import PostgresEventLogStorage
from dagster_postgres.utils import get_token_provider_from_config, pg_url_from_config
from sqlalchemy import text
from sqlalchemy.exc import ProgrammingError

# Connections a process may open beyond the held one while its threads query at once (the
# daemon's sensor threads); they are closed again when returned.
MAX_OVERFLOW = 10
POOL_RECYCLE_S = 3600
NO_STATEMENT_TIMEOUT = 0

# A definition's keys in Dagster's order (by id), each as `<length>:<key>`: a string that
# only one list of keys makes.
_LISTING = text(
    "SELECT count(*), coalesce(string_agg(length(partition)::text || ':' || partition, '' "
    "ORDER BY id), '') FROM dynamic_partitions WHERE partitions_def_name = :name"
)


def listing_stamp(keys: Sequence[str]) -> str:
    """The string `_LISTING` returns for `keys`."""
    return "".join(f"{len(k)}:{k}" for k in keys)


def listing_keys(stamp: str) -> list[str]:
    """The keys a `listing_stamp` string was made of."""
    keys, at = [], 0
    while at < len(stamp):
        colon = stamp.index(":", at)
        end = colon + 1 + int(stamp[at:colon])
        keys.append(stamp[colon + 1 : end])
        at = end
    return keys


class PostgresEventLog(PostgresEventLogStorage):
    """`PostgresEventLogStorage` with a held connection, remembered tables and a kept
    partition listing (see the module)."""

    def __init__(
        self,
        postgres_url: str,
        should_autocreate_tables: bool = True,
        inst_data: Any = None,
        token_provider: Any = None,
    ) -> None:
        self._tables_found: set[str] = set()
        self._listings: dict[str, tuple[str, tuple[str, ...]]] = {}  # name -> (stamp, keys)
        self._listings_lock = threading.Lock()
        super().__init__(
            postgres_url,
            should_autocreate_tables=should_autocreate_tables,
            inst_data=inst_data,
            token_provider=token_provider,
        )
        self.optimize_for_webserver(
            statement_timeout=NO_STATEMENT_TIMEOUT,
            pool_recycle=POOL_RECYCLE_S,
            max_overflow=MAX_OVERFLOW,
        )
        # The engine that now holds the connection, through SQLAlchemy's public API: closed
        # by `dispose`, and let go (not closed: it is the parent's) in a forked child, as
        # SQLAlchemy's pooling guide says.
        with self.index_connection() as conn:
            self._held = conn.engine
        _LIVE.add(self)

    @classmethod
    def from_config_value(  # type: ignore[override]
        cls, inst_data: Any, config_value: Mapping[str, Any]
    ) -> PostgresEventLog:
        return cls(
            inst_data=inst_data,
            postgres_url=pg_url_from_config(config_value),
            should_autocreate_tables=config_value.get("should_autocreate_tables", True),
            token_provider=get_token_provider_from_config(config_value),
        )

    def has_table(self, table_name: str) -> bool:
        if table_name in self._tables_found:
            return True
        found = super().has_table(table_name)
        if found:
            self._tables_found.add(table_name)
        return found

    def get_dynamic_partitions(self, partitions_def_name: str) -> Sequence[str]:
        try:
            with self.index_connection() as conn:
                count, stamp = conn.execute(_LISTING, {"name": partitions_def_name}).one()
        except ProgrammingError:  # no partitions table: Dagster's own call says so
            return super().get_dynamic_partitions(partitions_def_name)
        with self._listings_lock:
            kept = self._listings.get(partitions_def_name)
        if kept is not None and kept[0] == stamp:
            return list(kept[1])
        keys = listing_keys(stamp)
        if len(keys) != count:  # cannot happen; Dagster's own query then
            return super().get_dynamic_partitions(partitions_def_name)
        with self._listings_lock:
            self._listings[partitions_def_name] = (stamp, tuple(keys))
        return keys

    def dispose(self) -> None:
        super().dispose()
        self._held.dispose()

    def wipe(self) -> None:
        self._tables_found.clear()
        with self._listings_lock:
            self._listings.clear()
        super().wipe()


_LIVE: weakref.WeakSet[PostgresEventLog] = weakref.WeakSet()


def _let_go() -> None:
    for storage in list(_LIVE):
        storage._held.dispose(close=False)


os.register_at_fork(after_in_child=_let_go)

__all__ = ["PostgresEventLog", "listing_keys", "listing_stamp"]
