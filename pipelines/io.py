"""The tables IO manager: polars DataFrames <-> Parquet files of `resources.tables.TableStore`.

Written here rather than taken from dagster-polars: per-tenant inputs of per-day assets must read
only the days that exist (most of the calendar never has turns), and per-tenant assets run for
many tenants in one backfill run, exchanging `{tenant_key: DataFrame}` dicts.
"""

from __future__ import annotations

import polars as pl
from dagster import ConfigurableIOManager, InputContext, OutputContext

from assets.partitions import split_key
from resources.tables import TableStore
from schemas import tables
from schemas.scope import Scope


class ParquetTablesIOManager(ConfigurableIOManager):
    data_dir: str = ".memflow"

    def _store(self) -> TableStore:
        return TableStore(self.data_dir)

    def handle_output(self, context: OutputContext, obj: object) -> None:
        asset = context.asset_key.path[-1]
        store = self._store()
        frames = obj if isinstance(obj, dict) else {context.partition_key: obj}
        rows = 0
        for key, df in frames.items():
            if not isinstance(df, pl.DataFrame):
                raise TypeError(f"{asset} must produce polars DataFrames, got {type(df).__name__}")
            scope, day = split_key(key)
            store.write(df, asset, scope, day)
            rows += df.height
        context.add_output_metadata({"stored_rows": rows})

    def load_input(self, context: InputContext) -> object:
        """A DataFrame for a per-day consumer; `{tenant_key: DataFrame}` for a per-tenant one."""
        asset = context.asset_key.path[-1]
        store = self._store()
        columns = tables.TABLES[asset]
        wanted: dict[Scope, set[str]] = {}
        for key in context.asset_partition_keys:
            scope, day = split_key(key)
            wanted.setdefault(scope, set())
            if day:
                wanted[scope].add(day)
        per_day_consumer = context.has_partition_key and "|" in str(context.partition_key)
        out: dict[str, pl.DataFrame] = {}
        for scope, days in wanted.items():
            df = store.read_days(asset, scope, days) if days else store.read(asset, scope)
            out[scope.key] = (
                tables.conform(df, columns) if df is not None else tables.empty(columns)
            )
        if per_day_consumer:
            (frame,) = out.values()
            return frame
        return out
