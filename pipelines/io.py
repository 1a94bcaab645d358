"""The tables IO manager: polars DataFrames <-> the Parquet tables of `resources.tables`.

Written here rather than taken from dagster-polars: every asset is per tenant and a run covers a
range of tenants, so outputs and inputs are `{tenant_key: DataFrame}` dicts, and the per-day
tables are stored one file per day with only changed days rewritten
(`TableStore.write_table`).
"""

from __future__ import annotations

import polars as pl
from dagster import ConfigurableIOManager, InputContext, OutputContext

from assets.partitions import scope_of
from resources.tables import TableStore
from schemas import tables


class ParquetTablesIOManager(ConfigurableIOManager):
    data_dir: str = ".memflow"

    def _store(self) -> TableStore:
        return TableStore(self.data_dir)

    def handle_output(self, context: OutputContext, obj: object) -> None:
        asset = context.asset_key.path[-1]
        if not isinstance(obj, dict):
            raise TypeError(f"{asset} must produce {{tenant: DataFrame}}, got {type(obj).__name__}")
        store = self._store()
        for key, df in obj.items():
            if not isinstance(df, pl.DataFrame):
                raise TypeError(f"{asset} must produce polars DataFrames, got {type(df).__name__}")
            store.write_table(tables.conform(df, tables.TABLES[asset]), asset, scope_of(key))

    def load_input(self, context: InputContext) -> dict[str, pl.DataFrame]:
        """`{tenant_key: DataFrame}` for every tenant of the run (empty tables where none)."""
        asset = context.asset_key.path[-1]
        store = self._store()
        columns = tables.TABLES[asset]
        out: dict[str, pl.DataFrame] = {}
        for key in context.asset_partition_keys:
            df = store.read_table(asset, scope_of(key))
            out[key] = tables.conform(df, columns) if df is not None else tables.empty(columns)
        return out
