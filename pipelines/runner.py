"""`memflow run`: every asset for every tenant of the landing zone, in-process.

One ingest run per (tenant, day) a landing file touches, then one run over all tenants for the
per-tenant assets (facts, entities, quarantine, embeddings, sinks). Runs are recorded in the
Dagster instance under `<data>/dagster` (or $DAGSTER_HOME), so `dagster dev` shows them.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from dagster import AssetSelection, DagsterInstance, materialize

from assets.partitions import TENANTS, scope_day_key
from memflow import landing
from memflow.turns import file_days
from pipelines.definitions import ALL_ASSETS, defs
from pipelines.jobs import INGEST_ASSETS, TENANT_ASSETS
from schemas.scope import Scope


@dataclass
class RunOutcome:
    tenants: list[Scope]
    ingest_runs: int
    tenant_runs: int
    seconds: float
    problems: list[str] = field(default_factory=list)


def instance_for(data_dir: str) -> DagsterInstance:
    home = os.environ.get("DAGSTER_HOME") or str(Path(data_dir, "dagster").resolve())
    Path(home).mkdir(parents=True, exist_ok=True)
    config = Path(home, "dagster.yaml")
    if not config.exists():
        # Local by design: no telemetry, and no first-run banner in the CLI's output.
        config.write_text("telemetry:\n  enabled: false\n")
    os.environ["DAGSTER_HOME"] = home
    return DagsterInstance.get()


# Dagster's console logger prints every event at DEBUG; the CLI prints its own progress.
QUIET = {"loggers": {"console": {"config": {"log_level": "ERROR"}}}}


def quiet_dagster() -> None:
    for name in ("dagster", "dagster.builtin", "dagster.code_server"):
        logging.getLogger(name).setLevel(logging.ERROR)


def run_all(
    landing_dir: str,
    data_dir: str,
    *,
    progress: Callable[[str], None] | None = None,
    tenants: list[str] | None = None,
) -> RunOutcome:
    started = time.perf_counter()
    say = progress or (lambda _msg: None)
    quiet_dagster()
    instance = instance_for(data_dir)
    resources = defs.resources
    root = Path(landing_dir)
    found = landing.discover(root)
    problems = [f"{p.path}: {p.reason} ({p.detail})" for p in found.problems]
    scopes = [s for s in found if tenants is None or s.key in tenants]
    if not scopes:
        return RunOutcome([], 0, 0, time.perf_counter() - started, problems)

    known = set(instance.get_dynamic_partitions(TENANTS))
    instance.add_dynamic_partitions(TENANTS, [s.key for s in scopes if s.key not in known])
    model_sources = [a for a in ALL_ASSETS if getattr(a, "is_observable", False)]
    materialize(
        ALL_ASSETS,
        selection=AssetSelection.assets(*[a.key for a in model_sources]),
        instance=instance,
        resources=resources,
        run_config=QUIET,
    )

    work = []
    for scope in scopes:
        days = sorted({d for path in found[scope] for d in file_days(path, root)})
        work += [(scope, day) for day in days]
    for i, (scope, day) in enumerate(work, 1):
        say(f"[{i}/{len(work)}] {scope.key} {day}: raw_turns, extracted_triples")
        materialize(
            ALL_ASSETS,
            selection=INGEST_ASSETS,
            partition_key=scope_day_key(scope, day),
            instance=instance,
            resources=resources,
            run_config=QUIET,
        )
    keys = {s.key for s in scopes}
    all_known = instance.get_dynamic_partitions(TENANTS)
    ordered = [k for k in all_known if k in keys]
    say(
        f"{len(ordered)} tenants: validated_facts, entities, quarantine, entity_embeddings, "
        "graph_sink, vector_sink"
    )
    start, end = all_known.index(ordered[0]), all_known.index(ordered[-1])
    if all_known[start : end + 1] == ordered:
        # One run for every tenant (the per-tenant assets backfill a range in a single run).
        ranges = [(ordered[0], ordered[-1])]
    else:
        ranges = [(k, k) for k in ordered]  # a subset: never touch tenants not asked for
    for first, last in ranges:
        materialize(
            ALL_ASSETS,
            selection=TENANT_ASSETS,
            instance=instance,
            resources=resources,
            run_config=QUIET,
            tags={
                "dagster/asset_partition_range_start": first,
                "dagster/asset_partition_range_end": last,
            },
        )
    return RunOutcome(scopes, len(work), len(ranges), time.perf_counter() - started, problems)


def terminal_progress() -> Callable[[str], None] | None:
    """Progress lines on a terminal; nothing in CI logs or pipes."""
    if not sys.stderr.isatty() or os.environ.get("CI"):
        return None
    return lambda msg: print(msg, file=sys.stderr, flush=True)
