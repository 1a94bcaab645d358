"""The tables IO manager: polars DataFrames <-> the Parquet tables of `resources.tables`.

Written here rather than taken from dagster-polars: every asset is per tenant and a run covers a
range of tenants, so outputs and inputs are `{tenant_key: DataFrame}` dicts, and the per-day
tables are stored one file per day with only changed days rewritten
(`TableStore.write_table`).

Hand-off: a table this process wrote whole during a run (every file of it written by that one
call, each file tagged with a fresh token in its Parquet metadata) is kept in memory, and a
later step of the same run that loads it gets the kept frame instead of reading the files back,
as long as the table's files are exactly the ones that write made (same names, same token in
each footer: nobody wrote or removed a file in between, whatever the clock or file system).
A per-day table of which some days were kept (unchanged) is read from its files. With the
in-process executor `memflow run` uses, a run's new tables are handed off this way; a step in
another process (the multiprocess executor) reads the files. At most `HANDOFF_MAX_BYTES` of
frames are kept (polars' estimate), and only for the run that wrote them: a bigger run reads
the rest back, as it did before.
"""

from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass, field

import polars as pl
from dagster import ConfigurableIOManager, InputContext, OutputContext

from assets.partitions import scope_of
from resources.home import resolved_dir
from resources.settings import DATA_SETTING
from resources.tables import TableStore
from schemas import tables

HANDOFF_MAX_BYTES = 512 * 1024 * 1024


@dataclass
class _Handoff:
    run_id: str = ""
    size: int = 0  # bytes kept
    kept: dict[tuple[str, str, str], tuple[dict[str, str | None], pl.DataFrame | None]] = field(
        default_factory=dict
    )
    lock: threading.Lock = field(default_factory=threading.Lock)

    def write(
        self, run_id: str | None, store: TableStore, asset: str, key: str, df: pl.DataFrame
    ) -> None:
        """Store a tenant's table (conformed to its layout) and keep it for this run's later
        steps when the write made every file of it."""
        conformed = tables.conform(df, tables.TABLES[asset])
        token = uuid.uuid4().hex
        wrote = store.write_table(conformed, asset, scope_of(key), token=token)
        if run_id is not None and not wrote.kept:
            self.keep(run_id, store, asset, key, conformed, token, wrote.files)

    def keep(
        self,
        run_id: str,
        store: TableStore,
        asset: str,
        key: str,
        df: pl.DataFrame,
        token: str,
        files: list[str],
    ) -> None:
        """`df` (conformed) was just written whole by one `write_table(..., token)`, making
        `files` (their names)."""
        try:
            frame = TableStore.as_read(df, asset)
        except ValueError:
            return
        fingerprint = dict.fromkeys(files, token)
        with self.lock:
            if run_id != self.run_id:
                self.run_id, self.size = run_id, 0
                self.kept.clear()
            slot = (str(store.root), asset, key)
            old = self.kept.pop(slot, None)
            if old is not None and old[1] is not None:
                self.size -= old[1].estimated_size()
            size = 0 if frame is None else frame.estimated_size()
            if self.size + size > HANDOFF_MAX_BYTES:
                return
            self.kept[slot] = (fingerprint, frame)
            self.size += size

    def take(
        self, run_id: str, store: TableStore, asset: str, key: str
    ) -> tuple[bool, pl.DataFrame | None]:
        """(found, frame as `read_table` would return it)."""
        with self.lock:
            if run_id != self.run_id:
                return False, None
            kept = self.kept.get((str(store.root), asset, key))
        if kept is None or kept[0] != store.write_tokens(asset, scope_of(key)):
            return False, None
        return True, None if kept[1] is None else kept[1].clone()


HANDOFF = _Handoff()


def _run_id(context: InputContext | OutputContext) -> str | None:
    """The run a step belongs to; None outside a run (contexts built by hand): no hand-off."""
    try:
        step = context.step_context
    except Exception:  # Dagster raises its own error types for a context without a step
        return None
    return step.run_id if step is not None else None


class ParquetTablesIOManager(ConfigurableIOManager):
    data_dir: str = ""

    def _store(self) -> TableStore:
        # empty: the state home's data directory, never one relative to the process's cwd
        return TableStore(resolved_dir(DATA_SETTING, self.data_dir))

    def handle_output(self, context: OutputContext, obj: object) -> None:
        asset = context.asset_key.path[-1]
        if not isinstance(obj, dict):
            raise TypeError(f"{asset} must produce {{tenant: DataFrame}}, got {type(obj).__name__}")
        store = self._store()
        run_id = _run_id(context)
        for key, df in obj.items():
            if not isinstance(df, pl.DataFrame):
                raise TypeError(f"{asset} must produce polars DataFrames, got {type(df).__name__}")
            HANDOFF.write(run_id, store, asset, key, df)

    def load_input(self, context: InputContext) -> dict[str, pl.DataFrame]:
        """`{tenant_key: DataFrame}` for every tenant of the run (empty tables where none)."""
        asset = context.asset_key.path[-1]
        store = self._store()
        columns = tables.TABLES[asset]
        out: dict[str, pl.DataFrame] = {}
        run_id = _run_id(context)
        for key in context.asset_partition_keys:
            found, df = (False, None) if run_id is None else HANDOFF.take(run_id, store, asset, key)
            if not found:
                df = store.read_table(asset, scope_of(key))
            out[key] = tables.conform(df, columns) if df is not None else tables.empty(columns)
        return out
