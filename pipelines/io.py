"""The tables IO manager: `{tenant_key: polars DataFrame}` <-> the Delta tables of
`resources.tables` (one table per asset, partitioned by tenant).

Written here rather than taken from a library: a run covers a range of tenants, so outputs
and inputs are `{tenant: DataFrame}` dicts, and a step's tenants are written in one commit.
(`dagster-deltalake-polars` fails to load a multi-tenant range: "Array partition values are
not yet supported".)

Output metadata of every materialization: the table's URI, its rows (all tenants), and the
Delta version the commit made (`delta_version`), which `memflow tables --version` reads back
(time travel). The table's name and column schema are the asset's own metadata
(`pipelines/catalog.py`, from the fixed layout in `schemas.tables`), not repeated on each
materialization: Dagster copies a step's output metadata onto every tenant's materialization,
and the schema was ~70% of each event's bytes (a run over 40 tenants stored ~640 copies of it;
BENCHMARKS.md "Ingestion at scale").

Hand-off: a table this process wrote during a run is kept in memory, and a later step of the
same run that loads it gets the kept frame instead of reading the files back, as long as the
tenant's data files are still the ones that commit made (the table version is unchanged, or
the commits since touched other tenants). At most `HANDOFF_MAX_BYTES` of frames are kept
(polars' estimate), and only for the run that wrote them.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import polars as pl
from dagster import (
    ConfigurableIOManager,
    InputContext,
    MetadataValue,
    OutputContext,
)

from assets.retries import retry_transient_only
from resources.home import resolved_dir
from resources.settings import DATA_SETTING
from resources.tables import TableCommit, TableStore
from schemas import tables
from schemas.scope import Scope

HANDOFF_MAX_BYTES = 512 * 1024 * 1024
DELTA_VERSION = "delta_version"  # the output metadata key of the commit's version


@dataclass
class _Handoff:
    run_id: str = ""
    size: int = 0  # bytes kept
    kept: dict[tuple[str, str, str], tuple[int, tuple[str, ...], pl.DataFrame]] = field(
        default_factory=dict
    )
    lock: threading.Lock = field(default_factory=threading.Lock)

    def keep(
        self, run_id: str, store: TableStore, commit: TableCommit, frames: dict[Scope, pl.DataFrame]
    ) -> None:
        """`frames` were just committed (as `commit`): keep the ones it wrote (a tenant left
        unchanged keeps its stored rows, in their stored order) for this run's later steps,
        as reading them back would return them."""
        written = set(commit.written)
        frames = {s: f for s, f in frames.items() if s.key in written and f.height}
        if commit.version is None or not frames:
            return
        files = store.files_by_scope(commit.asset, list(frames), version=commit.version)
        with self.lock:
            if run_id != self.run_id:
                self.run_id, self.size = run_id, 0
                self.kept.clear()
            for scope, df in frames.items():
                slot = (store.root, commit.asset, scope.key)
                old = self.kept.pop(slot, None)
                if old is not None:
                    self.size -= old[2].estimated_size()
                size = df.estimated_size()
                if self.size + size > HANDOFF_MAX_BYTES:
                    continue
                frame = TableStore.as_read(df, commit.asset)
                self.kept[slot] = (commit.version, files.get(scope, ()), frame)
                self.size += size

    def take(
        self, run_id: str, store: TableStore, asset: str, scopes: list[Scope]
    ) -> dict[Scope, pl.DataFrame]:
        """The kept frames of `scopes` whose data files are still the ones written."""
        with self.lock:
            if run_id != self.run_id:
                return {}
            kept = {s: self.kept.get((store.root, asset, s.key)) for s in scopes}
        kept = {s: k for s, k in kept.items() if k is not None}
        if not kept:
            return {}
        version = store.version(asset)
        moved = [s for s, (v, _, _) in kept.items() if v != version]
        now = store.files_by_scope(asset, moved) if moved else {}
        return {
            s: df.clone()
            for s, (v, files, df) in kept.items()
            if v == version or now.get(s, ()) == files
        }


HANDOFF = _Handoff()


def _run_id(context: InputContext | OutputContext) -> str | None:
    """The run a step belongs to; None outside a run (contexts built by hand): no hand-off."""
    try:
        step = context.step_context
    except Exception:  # Dagster raises its own error types for a context without a step
        return None
    return step.run_id if step is not None else None


class DeltaTablesIOManager(ConfigurableIOManager):
    data_dir: str = ""
    tables_uri: str = ""  # empty: <data_dir>/tables

    def _store(self) -> TableStore:
        # empty: the state home's data directory, never one relative to the process's cwd
        return TableStore(resolved_dir(DATA_SETTING, self.data_dir), uri=self.tables_uri or None)

    @retry_transient_only
    def handle_output(self, context: OutputContext, obj: object) -> None:
        asset = context.asset_key.path[-1]
        if not isinstance(obj, dict):
            raise TypeError(f"{asset} must produce {{tenant: DataFrame}}, got {type(obj).__name__}")
        frames: dict[Scope, pl.DataFrame] = {}
        for key, df in obj.items():
            if not isinstance(df, pl.DataFrame):
                raise TypeError(f"{asset} must produce polars DataFrames, got {type(df).__name__}")
            frames[Scope.parse(key)] = tables.conform(df, tables.TABLES[asset])
        store = self._store()
        run_id = _run_id(context)
        commit = store.write_tenants(asset, frames, run_id=run_id)
        if run_id is not None and commit.committed:
            HANDOFF.keep(run_id, store, commit, frames)
        context.add_output_metadata(
            {
                "dagster/uri": MetadataValue.path(commit.uri),
                "dagster/row_count": store.total_rows(asset),
                DELTA_VERSION: commit.version if commit.version is not None else -1,
            }
        )

    @retry_transient_only
    def load_input(self, context: InputContext) -> dict[str, pl.DataFrame]:
        """`{tenant_key: DataFrame}` for every tenant of the run (empty tables where none)."""
        asset = context.asset_key.path[-1]
        store = self._store()
        columns = tables.TABLES[asset]
        scopes = [Scope.parse(k) for k in context.asset_partition_keys]
        run_id = _run_id(context)
        found = HANDOFF.take(run_id, store, asset, scopes) if run_id is not None else {}
        missing = [s for s in scopes if s not in found]
        if missing:
            found.update(store.read_many(asset, missing))
        return {
            s.key: tables.conform(found[s], columns) if s in found else tables.empty(columns)
            for s in scopes
        }
