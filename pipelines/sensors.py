"""Sensors: the landing zone -> batched ingest runs, and a failed batch -> its halves.

`landing_sensor` adds a tenant partition for every new `org/repo` and asks for `ingest_job`
runs over ranges of the tenants whose files are new or changed (`pipelines.batches`): a tick
with 1,000 changed tenants launches a handful of runs, not 1,000. `split_failed_batches` reruns
the two halves of a failed range, down to single tenants, so one tenant's bad day never holds
back the others.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from dagster import (
    DagsterInstance,
    DagsterRun,
    DagsterRunNotFoundError,
    DagsterRunStatus,
    DefaultSensorStatus,
    RunFailureSensorContext,
    RunRequest,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    run_failure_sensor,
    sensor,
)

from assets.partitions import TENANTS, scope_partitions
from memflow import landing
from pipelines.batches import (
    RANGE_END_TAG,
    RANGE_START_TAG,
    SOURCE_TAG,
    batch_ranges,
    run_tags,
    split_range,
)
from pipelines.jobs import ingest_job, survey_job
from resources.configurable import Storage

# Dagster sets it on a failed run that the instance's run_retries will re-execute.
WILL_RETRY_TAG = "dagster/will_retry"
FAILURE_REASON_TAG = "dagster/failure_reason"
MAX_RETRIES_TAG = "dagster/max_retries"
RETRY_ON_STEP_FAILURE_TAG = "dagster/retry_on_asset_or_op_failure"
PROBLEMS_KEY = "\x00problems"  # cursor entry: a digest of the landing zone's problems


def scan_landing(
    root: Path, cursor: dict[str, dict], known_tenants: set[str]
) -> tuple[list[str], dict[str, str], dict[str, dict]]:
    """(new tenant keys, {changed tenant: digest of its changed files}, new cursor) for files
    new or changed since `cursor` (path -> fingerprint dict; `PROBLEMS_KEY` holds a digest of
    the problems `discover` met). Pure, so tests call it without a Dagster instance."""
    found = landing.discover(root)
    digest = hashlib.sha256(
        "\n".join(sorted(f"{p.path}|{p.reason}" for p in found.problems)).encode()
    ).hexdigest()
    new_cursor: dict[str, dict] = {PROBLEMS_KEY: {"sha256": digest}}
    new_tenants: list[str] = []
    changed: dict[str, str] = {}
    for scope, files in found.items():
        for path in files:
            rel = landing.relative_name(path, root)
            previous = cursor.get(rel)
            try:
                fp = landing.fingerprint(
                    path, root, landing.FileFingerprint.from_dict(previous) if previous else None
                )
            except landing.LandingFileError:
                continue  # replaced by something that is not a regular file: the reader says so
            new_cursor[rel] = fp.as_dict()
            if previous and previous.get("sha256") == fp.sha256:
                continue
            if scope.key not in known_tenants and scope.key not in new_tenants:
                new_tenants.append(scope.key)
            changed[scope.key] = changed.get(scope.key, "") + fp.sha256[:12]
    return new_tenants, changed, new_cursor


def _run_key(first: str, last: str, changed: dict[str, str], ordered: list[str]) -> str:
    keys = ordered[ordered.index(first) : ordered.index(last) + 1]
    digest = hashlib.sha256("".join(changed.get(k, "") for k in keys).encode()).hexdigest()
    return f"{first}..{last}|{digest[:16]}"


def problems_changed(cursor: dict[str, dict], new_cursor: dict[str, dict]) -> bool:
    return cursor.get(PROBLEMS_KEY) != new_cursor.get(PROBLEMS_KEY)


@sensor(
    jobs=[ingest_job, survey_job],
    minimum_interval_seconds=5,
    default_status=DefaultSensorStatus.RUNNING,
    description="Watches the landing zone: adds tenant partitions and requests ingest_job runs "
    "over ranges of the tenants whose files are new or changed (many tenants per run), and a "
    "survey_job run when what the zone holds that no tenant reads changes.",
)
def landing_sensor(context: SensorEvaluationContext, storage: Storage):
    root = storage.landing
    if not root.is_dir():
        return SkipReason(f"landing zone {root} does not exist")
    cursor = json.loads(context.cursor) if context.cursor else {}
    known = context.instance.get_dynamic_partitions(TENANTS)
    new_tenants, changed, new_cursor = scan_landing(root, cursor, set(known))
    survey = problems_changed(cursor, new_cursor)
    if not changed and not survey:
        context.update_cursor(json.dumps(new_cursor, sort_keys=True))
        return SkipReason("no new or changed landing files")
    ordered = [*known, *new_tenants]
    requests = [
        RunRequest(
            run_key=_run_key(first, last, changed, ordered),
            job_name=ingest_job.name,
            tags={**run_tags(ordered, first, last), SOURCE_TAG: "landing_sensor"},
        )
        for first, last in batch_ranges(ordered, changed)
    ]
    if survey:
        requests.append(
            RunRequest(
                run_key=f"survey|{new_cursor[PROBLEMS_KEY]['sha256'][:16]}",
                job_name=survey_job.name,
                tags={SOURCE_TAG: "landing_sensor"},
            )
        )
    return SensorResult(
        run_requests=requests,
        dynamic_partitions_requests=[scope_partitions.build_add_request(new_tenants)]
        if new_tenants
        else [],
        cursor=json.dumps(new_cursor, sort_keys=True),
    )


@run_failure_sensor(
    monitored_jobs=[ingest_job],
    request_job=ingest_job,
    default_status=DefaultSensorStatus.RUNNING,
    description="A failed ingest_job run over several tenants is rerun as two halves, down to "
    "single tenants: one tenant's failure never holds back the rest of its batch.",
)
def split_failed_batches(context: RunFailureSensorContext):
    run = context.dagster_run
    first, last = run.tags.get(RANGE_START_TAG), run.tags.get(RANGE_END_TAG)
    if run.status != DagsterRunStatus.FAILURE or not first or not last or first == last:
        return
    # A run that failed for a reason other than a step (its worker crashed, it timed out) is
    # retried whole by the instance's run_retries: no halves then.
    if _run_retries_will_rerun(context.instance, run):
        return
    ordered = context.instance.get_dynamic_partitions(TENANTS)
    if first not in ordered or last not in ordered:
        return
    for a, b in split_range(ordered, first, last):
        yield RunRequest(
            run_key=f"split:{run.run_id}:{a}..{b}",
            tags={
                **run_tags(ordered, a, b),
                SOURCE_TAG: "split_failed_batches",
                "memflow/parent": run.run_id,
            },
        )


def _run_retries_will_rerun(instance: DagsterInstance, run: DagsterRun) -> bool:
    """Whether the instance's run_retries will re-execute the failed `run`. Dagster stores the
    run's FAILURE status and its `dagster/will_retry` tag in two writes, so a sensor tick in
    between sees no tag: then the run is read again, and if the tag is still missing the retry
    daemon's documented rule decides (and the decision is stored as the daemon stores it)."""
    if not instance.run_retries_enabled:
        return False
    tag = run.tags.get(WILL_RETRY_TAG)
    if tag is None:
        fresh = instance.get_run_by_id(run.run_id)
        if fresh is None:
            return False
        run, tag = fresh, fresh.tags.get(WILL_RETRY_TAG)
    if tag is not None:
        return _true(tag)  # read as the retry daemon reads it ("True" and "1" retry too)
    decision = _retry_rule(instance, run)
    try:
        instance.add_run_tags(run.run_id, {WILL_RETRY_TAG: str(decision).lower()})
    except DagsterRunNotFoundError:  # deleted meanwhile: nothing left to retry
        return False
    return decision


def _true(value: str) -> bool:
    return value.strip().lower() in ("true", "1", "yes", "y", "on")


def _retry_rule(instance: DagsterInstance, run: DagsterRun) -> bool:
    """Dagster's run_retries rule (docs: "Run retries"), from public fields only: a step
    failure retries only with `retry_on_asset_or_op_failure`; at most `max_retries` (the
    `dagster/max_retries` tag wins, an unreadable one means none) re-executions of the run's
    group."""
    on_step_failure = run.tags.get(RETRY_ON_STEP_FAILURE_TAG)
    retry_steps = (
        _true(on_step_failure)
        if on_step_failure is not None
        else instance.run_retries_retry_on_asset_or_op_failure
    )
    if run.tags.get(FAILURE_REASON_TAG) == "STEP_FAILURE" and not retry_steps:
        return False
    raw = run.tags.get(MAX_RETRIES_TAG)
    try:
        max_retries = instance.run_retries_max_retries if raw is None else int(raw)
    except ValueError:
        return False
    if max_retries <= 0:
        return False
    try:
        group = instance.get_run_group(run.run_id)
    except DagsterRunNotFoundError:  # deleted since it was read: as when it is gone already
        return False
    return group is not None and len(list(group[1])) <= max_retries
