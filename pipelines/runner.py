"""`memflow run`: every asset for every tenant of the landing zone, in-process.

One run per range of tenants (`pipelines.batches`; by default every tenant of the landing zone
in one run): the first is a `run_job` run, which also observes the models and surveys the
landing zone (`survey_job`'s assets) so that a `memflow run` is one Dagster run; any other
range is an `ingest_job` run. With no tenant at all, a `survey_job` run. Runs are recorded in
the Dagster instance under `<data>/dagster` (or $DAGSTER_HOME) as runs of the code location's
own jobs, tagged `memflow/source=cli`, so `dagster dev` shows them and can re-execute them. A
failed range is rerun in halves down to single tenants: every other tenant still lands, and
each tenant that failed is reported with the asset, a one-line reason and the run that holds
the full error. A failed survey step is reported the same way (as the tenant "(survey)"), and
the range it held back is rerun as an `ingest_job` run.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from dagster import DagsterInstance

from assets.partitions import TENANTS
from memflow import landing
from pipelines import location, up_to_date
from pipelines.batches import (
    BLOCK_TAG,
    MAX_GAP,
    MAX_TENANTS,
    SOURCE_TAG,
    batch_ranges,
    range_keys,
    run_tags,
    split_range,
)
from pipelines.instance import ensure_instance_config
from pipelines.jobs import SURVEY
from pipelines.progress import watch_run
from pipelines.sensors import listing_digest
from resources.tables import TableStore
from schemas.scope import Scope, ScopeError
from schemas.tables import Asset


@dataclass(frozen=True)
class PartitionFailure:
    """A tenant whose run failed even alone."""

    asset: str  # the step that failed
    tenant: str
    reason: str  # one line
    run_id: str

    def line(self, dagster_home: str) -> str:
        return (
            f"FAILED {self.asset} [{self.tenant}]: {self.reason} "
            f"(full error: run {self.run_id} in {dagster_home}; `make dev` shows it)"
        )


@dataclass
class RunOutcome:
    tenants: list[Scope]  # the tenants that had something to do (and ran)
    runs: int
    seconds: float
    up_to_date: list[Scope] = field(default_factory=list)  # found, skipped (pipelines.up_to_date)
    problems: list[str] = field(default_factory=list)
    failures: list[PartitionFailure] = field(default_factory=list)
    dagster_home: str = ""


# One ASSET_MATERIALIZATION_PLANNED event per asset for a run over a range of tenants, not one
# per tenant (Dagster's own switch for large single-run backfills, an environment variable):
# at 40 tenants that is 520 fewer events per run, 17% of the run's CPU (bench_event_log.py).
# The cost, per Dagster: the tenants of a run that fails are not marked "failed" in the UI
# (they show as not materialized); `memflow run` reruns a failed range in halves and names
# every tenant that still fails.
PLANNED_EVENTS_ENV = "DAGSTER_EMIT_PARTITION_SUBSET_IN_PLANNED_EVENTS"
# A step's per-tenant materializations of one asset are written as one batch (one transaction
# per database: pipelines/event_log.py; PostgreSQL batches them the same way).
EVENT_BATCH_ENV = "DAGSTER_EVENT_BATCH_SIZE"
EVENT_BATCH_SIZE = "500"


def instance_for(data_dir: str) -> DagsterInstance:
    home = os.environ.get("DAGSTER_HOME") or str(Path(data_dir, "dagster").resolve())
    # Local by design: no telemetry, and no first-run banner in the CLI's output; events in
    # the SQLite event log with kept connections (pipelines/event_log.py); the run queue with
    # one run per tenant block (pipelines/instance.py).
    ensure_instance_config(Path(home))
    os.environ["DAGSTER_HOME"] = home
    return DagsterInstance.get()


# Dagster's console logger prints every event at DEBUG; the CLI prints its own progress.
QUIET = {"loggers": {"console": {"config": {"log_level": "ERROR"}}}}
CLI_TAGS = {SOURCE_TAG: "cli"}


def quiet_dagster() -> None:
    for name in ("dagster", "dagster.builtin", "dagster.code_server"):
        logging.getLogger(name).setLevel(logging.ERROR)


SURVEY_TENANT = "(survey)"  # the "tenant" a failed survey step is reported as
SURVEY_STEPS = frozenset(SURVEY)  # each survey asset is its own op: the step key is its name


def _failed_steps(result) -> dict[str, str]:
    """{step: one-line reason} of a run's failed steps, in the order they failed."""
    out: dict[str, str] = {}
    for event in result.all_events:
        if event.is_step_failure:
            error = event.event_specific_data.error
            while error is not None and error.cause is not None:  # Dagster wraps the user's error
                error = error.cause
            message = (error.message if error else "").strip().splitlines()
            out.setdefault(event.step_key or "?", (message[0] if message else "failed")[:300])
    return out


def _first_failure(result) -> tuple[str, str]:
    """(step, one-line reason) of the first failed tenant step of a run."""
    failed = {k: v for k, v in _failed_steps(result).items() if k not in SURVEY_STEPS}
    return next(iter(failed.items()), ("?", "the run failed before any step"))


def _held_back(result) -> bool:
    """Whether a step of the run's tenants did not succeed (failed, or not run after a failed
    step it depends on)."""
    done = {e.step_key for e in result.all_events if e.is_step_success}
    return any(n.name not in done and n.name not in SURVEY_STEPS for n in result.job_def.nodes)


def _survey_failures(result) -> list[PartitionFailure]:
    return [
        PartitionFailure(step, SURVEY_TENANT, reason, result.run_id)
        for step, reason in _failed_steps(result).items()
        if step in SURVEY_STEPS
    ]


def _problems(data_dir: str) -> list[str]:
    """The landing zone's problems as the survey stored them, one line each (escaped: a name
    in the landing zone cannot forge an output line)."""
    from resources.settings import TABLES_URI_SETTING, env_path

    tables = TableStore(data_dir, uri=env_path(TABLES_URI_SETTING) or None)
    frame = tables.read_zone(Asset.LANDING_PROBLEMS)
    if frame is None:
        return []
    return [landing.problem_line(row) for row in frame.iter_rows(named=True)]


def _completed(
    data_dir: str,
    ordered: list[str],
    first: str,
    last: str,
    digests: dict[str, str],
    current: str,
) -> None:
    """Record the tenants of a range whose tenant steps all succeeded."""
    keys = range_keys(ordered, first, last)
    up_to_date.update(data_dir, done={k: digests[k] for k in keys if k in digests}, current=current)


def _listings(
    landing_dir: str, tenants: list[str] | None
) -> dict[Scope, tuple[landing.Listed, ...]]:
    """The landing files of the tenants to run: with `tenants`, their directories only (a
    run of one tenant does not walk the other 10,000); a name that is no valid ORG/REPO is
    no tenant of the zone. The landing zone's problems are the survey's (run_job) to report,
    the whole zone's, with or without `tenants`."""
    if tenants is None:
        return landing.zone_listing(Path(landing_dir))[0]
    scopes = []
    for name in tenants:
        try:
            scope = Scope.parse(name)
        except ScopeError:
            continue
        if scope.key == name:
            scopes.append(scope)
    return landing.tenant_listings(landing_dir, scopes)


def run_all(
    landing_dir: str,
    data_dir: str,
    *,
    progress: Callable[[str], None] | None = None,
    tenants: list[str] | None = None,
    max_tenants_per_run: int = MAX_TENANTS,
    all_tenants: bool = False,
) -> RunOutcome:
    """Run the tenants of the landing zone. `tenants`: only those; otherwise the tenants with
    something to do (`pipelines.up_to_date`), or every tenant with `all_tenants`."""
    started = time.perf_counter()
    say = progress or (lambda _msg: None)
    quiet_dagster()
    os.environ.setdefault(PLANNED_EVENTS_ENV, "1")
    os.environ.setdefault(EVENT_BATCH_ENV, EVENT_BATCH_SIZE)
    instance = instance_for(data_dir)
    home = os.environ["DAGSTER_HOME"]
    listings = _listings(landing_dir, tenants)
    # The listings' digests, taken before any range runs: a file landing mid-run leaves the
    # tenant's recorded digest stale, so the next run picks it up again.
    digests = {s.key: listing_digest(listed) for s, listed in listings.items()}
    chosen = [s for s in listings if tenants is None or s.key in tenants]
    current = up_to_date.fingerprint()
    skipped: list[Scope] = []
    if tenants is None and not all_tenants:
        due = set(up_to_date.to_do(digests, up_to_date.load(data_dir), current))
        skipped = [s for s in chosen if s.key not in due]
        chosen = [s for s in chosen if s.key in due]
    scopes = chosen
    outcome = RunOutcome(scopes, 0, 0.0, up_to_date=skipped, dagster_home=home)
    if not scopes:
        survey = location.execute("survey_job", instance, run_config=QUIET, tags=CLI_TAGS)
        outcome.runs, outcome.failures = 1, _survey_failures(survey)
        outcome.problems = _problems(data_dir)
        outcome.seconds = time.perf_counter() - started
        return outcome

    known = set(instance.get_dynamic_partitions(TENANTS))
    instance.add_dynamic_partitions(TENANTS, [s.key for s in scopes if s.key not in known])

    ordered = instance.get_dynamic_partitions(TENANTS)
    # A subset of tenants never touches the others: no gaps inside a range. Tenants with
    # something to do among up-to-date ones: short gaps are run along (rerunning an unchanged
    # tenant changes nothing), so scattered changes stay a few runs.
    if tenants is not None:
        gap = 0
    elif skipped:
        gap = MAX_GAP
    else:
        gap = len(ordered)
    queue = batch_ranges(
        ordered, [s.key for s in scopes], max_tenants=max_tenants_per_run, max_gap=gap
    )
    # Before anything runs: no entry for a tenant this run touches, so a failed or killed
    # range leaves its tenants to run again.
    up_to_date.update(
        data_dir, forget={k for first, last in queue for k in range_keys(ordered, first, last)}
    )
    total = len(scopes)
    job = "run_job"  # the first range with the survey; then ingest_job
    while queue:
        first, last = queue.pop(0)
        label = first if first == last else f"{first} .. {last}"
        tags = {**run_tags(ordered, first, last), **CLI_TAGS}
        title = f"{job} [{label}] block {tags[BLOCK_TAG]} ({total} tenants in all)"
        with watch_run(instance, progress, title) as run_id:
            result = location.execute(job, instance, run_config=QUIET, tags=tags, run_id=run_id)
        outcome.runs += 1
        surveyed, job = job == "run_job", "ingest_job"
        if result.success:
            _completed(data_dir, ordered, first, last, digests, current)
            continue
        if surveyed:
            outcome.failures.extend(_survey_failures(result))
            if _failed_steps(result).keys() <= SURVEY_STEPS:
                if _held_back(result):  # a tenant step waited on a failed observation
                    queue.insert(0, (first, last))  # rerun as ingest_job, without the survey
                else:
                    _completed(data_dir, ordered, first, last, digests, current)
                continue
        halves = split_range(ordered, first, last)
        if halves:
            say(f"  a tenant of [{label}] failed; rerunning the range in halves")
            queue[:0] = halves
            continue
        step, reason = _first_failure(result)
        outcome.failures.append(PartitionFailure(step, first, reason, result.run_id))
    outcome.problems = _problems(data_dir)
    outcome.seconds = time.perf_counter() - started
    return outcome


def terminal_progress() -> Callable[[str], None] | None:
    """Progress lines on stderr, on a terminal and in a log or a pipe alike (flushed per
    line), each stage of each run with its run id and tenant block (`pipelines.progress`)."""
    from pipelines.shown import shown

    return lambda msg: print(shown(msg), file=sys.stderr, flush=True)
