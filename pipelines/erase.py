"""`memflow erase --tenant ORG/REPO [--yes]` and the API's tenant eraser
(`recall.ports.TenantEraser`): everything memflow holds for one tenant, and a report of it.

What goes, in this order (so a run started meanwhile finds nothing to read back):

1. the tenant's landing directory (`<landing>/<org>/<repo>`, every file in it);
2. its rows in every table (`TableStore.delete_tenant`: its files, its summary entries, the
   landing survey's rows naming its directory);
3. its embedding ledger (every model's vectors), its vectors in the vector store, its entities
   and facts in the graph store (the stores' own `delete_scope`);
4. in the Dagster instance: the runs that covered the tenant alone, with their event logs
   (every materialization and check of the tenant they recorded) and compute logs; with
   `shared_runs`, also the runs that covered it among other tenants (their history of the
   other tenants goes with them, which is why it is a choice); then the tenant's partition.

The whole erase holds the tenant's block lock and every later block's (deleting a partition
moves the tenants after it to other positions, hence other blocks): no run of those tenants
writes meanwhile. A dry run (the default of the command) counts the same things and removes
nothing. What memflow cannot remove is reported in `problems`: shared runs that were kept, or
a step that failed (the other steps still run, and the erase can be repeated). What stays only
until it expires is in `notes`, not a failure: Delta log entries that describe the tenant's
files with column values (tables written before they had memflow's current properties; log
entries are never rewritten).

Dagster's SQL event log cannot wipe one partition's materializations from a run that covered
several tenants (`wipe_asset_partitions` is not implemented for it in 1.13): deleting the run is
the public way. Left by Dagster, and said in the printed report: each asset's cached latest
materialization (replaced by the next run of any tenant), freed pages of the local SQLite
instance until it is vacuumed, and the landing sensor's cursor and tick history (file names
and run keys, until their retention drops them).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pipelines.shown import shown
from recall.ports import EraseReport
from resources.settings import Settings
from schemas.scope import Scope

PARTITION_TAG = "dagster/partition"
RUNS_PAGE = 1000


def erase_tenant(
    cfg: Settings, scope: Scope, *, apply: bool = True, shared_runs: bool = False
) -> EraseReport:
    """Erase (or with `apply=False` count) everything of `scope`; see the module docstring."""
    from pipelines.block_lock import BlockLocks
    from pipelines.runner import instance_for, quiet_dagster

    quiet_dagster()
    removed: dict[str, int] = {}
    problems: list[str] = []
    notes: list[str] = []
    instance = instance_for(str(cfg.data_dir))
    try:
        blocks = _blocks_from(instance, scope.key)
        locks = BlockLocks(cfg.data_dir, blocks)
        if apply:
            locks.acquire()
        try:
            steps: list[tuple[str, Callable[[], dict[str, int]]]] = [
                ("landing", lambda: _landing(cfg.landing_dir, scope, apply, problems)),
                ("tables", lambda: _tables(cfg, scope, apply)),
                ("table logs", lambda: _table_logs(cfg, scope, problems, notes)),
                ("ledger", lambda: _ledger(cfg, scope, apply)),
                ("vectors", lambda: _vectors(cfg, scope, apply)),
                ("graph", lambda: _graph(cfg, scope, apply)),
                ("dagster", lambda: _dagster(instance, scope, apply, shared_runs, problems)),
                ("up to date", lambda: _up_to_date(cfg, scope, apply)),
            ]
            for name, step in steps:
                try:
                    removed.update(step())
                except Exception as exc:  # the other places are still erased
                    problems.append(f"{name}: {type(exc).__name__}: {shown(exc)}"[:500])
        finally:
            locks.release()
    finally:
        instance.dispose()
    return EraseReport(
        scope, {k: v for k, v in removed.items() if v}, tuple(problems), tuple(notes)
    )


class TenantEraser:
    """`recall.ports.TenantEraser` for the API: erases at once (the runs the tenant shared with
    others are kept and reported, as the command does by default)."""

    def __init__(self, cfg: Settings, *, shared_runs: bool = False) -> None:
        self.cfg = cfg
        self.shared_runs = shared_runs

    def __call__(self, scope: Scope) -> EraseReport:
        return erase_tenant(self.cfg, scope, apply=True, shared_runs=self.shared_runs)


def _blocks_from(instance: Any, key: str) -> list[int]:
    """The tenant's block and every later one (empty when it is no partition)."""
    from assets.partitions import TENANTS
    from pipelines.batches import BLOCK_SIZE

    ordered = list(instance.get_dynamic_partitions(TENANTS))
    if key not in ordered:
        return []
    return list(range(ordered.index(key) // BLOCK_SIZE, (len(ordered) - 1) // BLOCK_SIZE + 1))


def _up_to_date(cfg, scope: Scope, apply: bool) -> dict[str, int]:
    """The tenant's entry in `memflow run`'s record (`pipelines.up_to_date`): a re-landed
    tenant runs again whatever its files' listing."""
    from pipelines import up_to_date

    if apply:
        up_to_date.update(cfg.data_dir, forget=[scope.key])
    return {}


def _landing(root: Path, scope: Scope, apply: bool, problems: list[str]) -> dict[str, int]:
    folder = Path(root) / scope.tenant_id / scope.ns
    if folder.is_symlink():
        # the reader never follows it either; the link goes, never what it points to
        problems.append(f"landing: {shown(folder)} is a symbolic link: removed the link only")
        if apply:
            folder.unlink()
        return {"landing links": 1}
    if not folder.is_dir():
        return {}
    files = sum(len(names) for _, _, names in os.walk(folder))
    if apply:
        shutil.rmtree(folder)
        org = folder.parent
        if org.is_dir() and not any(org.iterdir()):
            org.rmdir()
    return {"landing files": files}


def _tables(cfg: Settings, scope: Scope, apply: bool) -> dict[str, int]:
    from resources.tables import open_tables

    rows = open_tables(cfg).delete_tenant(scope, apply=apply)
    return {f"table {asset}": n for asset, n in rows.items()}


def _table_logs(cfg: Settings, scope: Scope, problems: list[str], notes: list[str]) -> dict:
    """Delta log entries that still describe the tenant's files with column values: a note
    (they expire; nothing to act on), or a problem when a log could not be read."""
    from resources.table_upkeep import logged_statistics
    from resources.tables import open_tables

    logged, unread = logged_statistics(open_tables(cfg), scope)
    if logged:
        notes.append(
            f"tables: the Delta logs of {', '.join(logged)} still hold column statistics of "
            "the tenant's files (each column's first and last value in each file), written "
            "before the table had memflow's current properties; log entries are never "
            "rewritten: these go when they expire (`memflow tables --maintain`, daily, drops "
            "entries older than delta.logRetentionDuration, 30 days by default)"
        )
    for name, why in unread:
        problems.append(f"tables: the Delta log of {name} could not be read ({why})")
    return {}


def _ledger(cfg: Settings, scope: Scope, apply: bool) -> dict[str, int]:
    from resources.vector.ledger import EmbeddingLedger

    ledger = EmbeddingLedger(cfg.data_dir)
    root = ledger.root
    files = 0
    if root.is_dir():
        for model in root.iterdir():
            folder = model / scope.tenant_id / scope.ns
            if folder.is_dir():
                files += sum(1 for p in folder.iterdir() if p.is_file())
    if apply and files:
        ledger.drop(scope)
        for model in root.iterdir():
            folder = model / scope.tenant_id / scope.ns
            if folder.is_dir():
                shutil.rmtree(folder)
            org = model / scope.tenant_id
            if org.is_dir() and not any(org.iterdir()):
                org.rmdir()
    return {"embedding ledger files": files}


def _vectors(cfg: Settings, scope: Scope, apply: bool) -> dict[str, int]:
    store = cfg.open_vectors()
    try:
        held = sum(n for _, n in store.models(scope).values())
        if apply and held:
            store.delete_scope(scope)
    finally:
        store.close()
    return {"vectors": held}


def _graph(cfg: Settings, scope: Scope, apply: bool) -> dict[str, int]:
    if cfg["MEMFLOW_GRAPH_BACKEND"].strip().lower() == "sqlite" and not cfg.graph_path.exists():
        return {}  # no graph was ever written: none is created to find nothing
    graph = cfg.open_graph()
    try:
        counts = graph.counts(scope)
        if apply and (counts["entities"] or counts["facts"]):
            graph.delete_scope(scope)
    finally:
        graph.close()
    return {"graph entities": counts["entities"], "graph facts": counts["facts"]}


def tenant_runs(instance: Any, key: str) -> tuple[list[str], list[str]]:
    """(runs that covered only `key`, runs that covered it among other tenants), by run id."""
    from dagster import RunsFilter

    from assets.partitions import TENANTS
    from pipelines.batches import RANGE_END_TAG, RANGE_START_TAG

    ordered = list(instance.get_dynamic_partitions(TENANTS))
    position = {k: i for i, k in enumerate(ordered)}
    own: list[str] = []
    shared: list[str] = []
    seen: set[str] = set()
    for tags in ({PARTITION_TAG: key}, {RANGE_START_TAG: key}, {RANGE_END_TAG: key}):
        for run in instance.get_runs(RunsFilter(tags=tags)):
            if run.run_id not in seen:
                seen.add(run.run_id)
                _sort_run(run.tags, key, position, run.run_id, own, shared)
    if key in position:  # ranges that hold the tenant inside them name other tenants
        cursor = None
        while True:
            page = instance.get_runs(cursor=cursor, limit=RUNS_PAGE)
            for run in page:
                if run.run_id not in seen and RANGE_START_TAG in run.tags:
                    seen.add(run.run_id)
                    _sort_run(run.tags, key, position, run.run_id, own, shared)
            if len(page) < RUNS_PAGE:
                break
            cursor = page[-1].run_id
    return own, shared


def _sort_run(
    tags: dict[str, str],
    key: str,
    position: dict[str, int],
    run_id: str,
    own: list[str],
    shared: list[str],
) -> None:
    from pipelines.batches import RANGE_END_TAG, RANGE_START_TAG

    first = tags.get(RANGE_START_TAG) or tags.get(PARTITION_TAG)
    last = tags.get(RANGE_END_TAG) or first
    if first == last == key:
        own.append(run_id)
        return
    if first in position and last in position and key in position:
        if position[first] <= position[key] <= position[last]:
            shared.append(run_id)
    elif key in (first, last):
        shared.append(run_id)


def _dagster(
    instance: Any, scope: Scope, apply: bool, shared_runs: bool, problems: list[str]
) -> dict[str, int]:
    from assets.partitions import TENANTS

    key = scope.key
    partition = instance.has_dynamic_partition(TENANTS, key)
    own, shared = tenant_runs(instance, key)
    doomed = own + (shared if shared_runs else [])
    if shared and not shared_runs:
        problems.append(
            f"dagster: {len(shared)} run(s) covered {shown(key)} among other tenants and "
            f"{'were' if apply else 'would be'} kept: their event logs hold its "
            "materializations (memflow erase --with-shared-runs deletes them, and their history "
            "of the other tenants)"
        )
    if apply:
        for run_id in doomed:
            instance.delete_run(run_id)
            _delete_compute_logs(instance, run_id, problems)
        if partition:
            instance.delete_dynamic_partition(TENANTS, key)
    return {
        "dagster runs": len(doomed),
        "dagster partition": int(partition),
    }


def _delete_compute_logs(instance: Any, run_id: str, problems: list[str]) -> None:
    """The run's captured stdout and stderr (the instance's compute log manager)."""
    try:
        instance.compute_log_manager.delete_logs(prefix=[run_id])
    except (NotImplementedError, OSError) as exc:
        problems.append(f"dagster: the compute logs of run {run_id} stay ({type(exc).__name__})")


def format_report(report: EraseReport, *, applied: bool) -> str:
    verb = "erased" if applied else "would erase (a dry run: --yes erases)"
    lines = [f"memflow erase {shown(report.scope.key)}: {verb}"]
    if not report.removed:
        lines.append("  nothing is stored for this tenant")
    for what, n in sorted(report.removed.items()):
        lines.append(f"  {what}: {n}")
    for problem in report.problems:
        lines.append(f"  NOT ERASED: {problem}")
    for note in report.notes:
        lines.append(f"  STAYS UNTIL IT EXPIRES: {note}")
    if applied and report.removed.get("dagster runs"):
        lines.append(
            "  note: Dagster caches each asset's latest materialization; where that was this "
            "tenant's, the UI shows it until the next run of any tenant replaces it (no public "
            "API clears one partition's). The local instance's SQLite files keep freed pages "
            "until vacuumed (sqlite3 <data>/dagster/history/runs/index.db VACUUM, with memflow "
            "stopped)"
        )
    return "\n".join(lines)
