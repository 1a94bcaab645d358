"""Sensors: the landing zone -> batched ingest runs, and a failed batch -> its halves.

`landing_sensor` adds a tenant partition for every new `org/repo` and asks for `ingest_job`
runs over ranges of the tenants whose files are new or changed (`pipelines.batches`): a tick
with 1,000 changed tenants launches a handful of runs, not 1,000. A tick lists the zone's
directories (one ``lstat`` per entry) and opens no landing file; its cursor holds a digest per
tenant directory (`ZoneCursor`), so it is as large as the zone is now, not its history.
`split_failed_batches` reruns the two halves of a failed range, down to single tenants, so one
tenant's bad day never holds back the others. `model_observations` observes the two model
sources when their automation condition says so (hourly, `assets.models`).
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import polars as pl
from dagster import (
    AssetSelection,
    AutomationConditionSensorDefinition,
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
from schemas.scope import Scope
from schemas.tables import Asset

# Dagster sets it on a failed run that the instance's run_retries will re-execute.
WILL_RETRY_TAG = "dagster/will_retry"
FAILURE_REASON_TAG = "dagster/failure_reason"
MAX_RETRIES_TAG = "dagster/max_retries"
RETRY_ON_STEP_FAILURE_TAG = "dagster/retry_on_asset_or_op_failure"
CURSOR_VERSION = 2
# Tenants missing from the cursor (its first tick, a cursor of an older version) are checked
# against the landing index the runs stored, at most this many a tick; the rest on the next.
SEED_PER_TICK = 500


@dataclass(frozen=True)
class ZoneCursor:
    """The landing sensor's cursor: a digest of each tenant directory's listing (names, sizes,
    mtimes of its landing files) and one of the zone's problems. Bounded by the tenants the
    zone holds now, whatever their history; serialized as compact JSON."""

    tenants: dict[str, str]
    problems: str

    @classmethod
    def parse(cls, text: str | None) -> ZoneCursor | None:
        """The cursor `text` holds; None when there is none or it is of an older version."""
        try:
            data = json.loads(text) if text else None
        except ValueError:
            return None
        if not isinstance(data, dict) or data.get("v") != CURSOR_VERSION:
            return None
        return cls(dict(data.get("t") or {}), str(data.get("p") or ""))

    def dumps(self) -> str:
        return json.dumps(
            {"v": CURSOR_VERSION, "p": self.problems, "t": self.tenants},
            sort_keys=True,
            separators=(",", ":"),
        )


@dataclass(frozen=True)
class ZoneScan:
    new_tenants: list[str]  # tenant keys that are not partitions yet
    changed: dict[str, str]  # tenant key -> digest of its listing, for tenants to ingest
    cursor: ZoneCursor


def listing_digest(listed: Iterable[landing.Listed]) -> str:
    """12 characters that change when a landing file of the directory is added, removed,
    renamed, resized or touched (what makes the turns stage read it)."""
    text = "\n".join(f"{name}\0{size}:{mtime_ns}" for name, size, mtime_ns in listed)
    digest = hashlib.blake2b(text.encode("utf-8", "surrogateescape"), digest_size=9).digest()
    return base64.urlsafe_b64encode(digest).decode()


def scan_landing(
    root: Path,
    cursor: ZoneCursor | None,
    known_tenants: set[str],
    stored_index: Callable[[Scope], pl.DataFrame | None] | None = None,
    seed_limit: int = SEED_PER_TICK,
) -> ZoneScan:
    """The tenants whose directory listing differs from the cursor's, from one listing of the
    zone (one ``lstat`` per entry; no landing file is opened). A tenant missing from the cursor
    is compared with `stored_index` (its `landing_files` as the runs stored it, when given):
    one whose every file is in the index at the same size and mtime was ingested already (by
    `memflow run`, say) and is not asked for again. Pure, so tests call it without Dagster."""
    listings, found_problems = landing.zone_listing(root)
    problems = hashlib.sha256(
        "\n".join(sorted(f"{p.path}|{p.reason}" for p in found_problems)).encode()
    ).hexdigest()[:16]
    before = cursor.tenants if cursor is not None else {}
    tenants: dict[str, str] = {}
    new_tenants: list[str] = []
    changed: dict[str, str] = {}
    seeded = 0
    for scope, listed in listings.items():
        key, digest = scope.key, listing_digest(listed)
        previous = before.get(key)
        if previous is None and stored_index is not None:
            if seeded >= seed_limit:
                continue  # not in the cursor: looked at on a later tick
            seeded += 1
            if _ingested(root, scope, listed, stored_index(scope)):
                previous = digest
        tenants[key] = digest
        if previous == digest:
            continue
        if key not in known_tenants:
            new_tenants.append(key)
        changed[key] = digest
    return ZoneScan(new_tenants, changed, ZoneCursor(tenants, problems))


def _ingested(
    root: Path, scope: Scope, listed: Iterable[landing.Listed], index: pl.DataFrame | None
) -> bool:
    """Whether every listed file is in the tenant's landing index at its size and mtime."""
    if index is None or index.is_empty():
        return False
    stored = {
        (source, size, mtime)
        for source, size, mtime in index.select("source_file", "size", "mtime_ns").iter_rows()
    }
    folder = root / scope.tenant_id / scope.ns
    return all(
        (landing.source_name(folder / f.name, root), f.size, f.mtime_ns) in stored for f in listed
    )


def _run_key(first: str, last: str, changed: dict[str, str], ordered: list[str]) -> str:
    keys = ordered[ordered.index(first) : ordered.index(last) + 1]
    digest = hashlib.sha256("".join(changed.get(k, "") for k in keys).encode()).hexdigest()
    return f"{first}..{last}|{digest[:16]}"


# Only the model sources carry an automation condition: the per-tenant assets run when their
# landing files change (landing_sensor) or when a data engineer launches a backfill.
model_observations = AutomationConditionSensorDefinition(
    "model_observations",
    target=AssetSelection.assets(Asset.EXTRACTION_MODEL, Asset.EMBEDDING_MODEL),
    default_status=DefaultSensorStatus.RUNNING,
    minimum_interval_seconds=60,
    description="Observes extraction_model and embedding_model at the top of every hour, so a "
    "model changed in the settings file marks what it made stale before anything lands.",
)


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
    cursor = ZoneCursor.parse(context.cursor)
    known = context.instance.get_dynamic_partitions(TENANTS)
    tables = storage.tables()
    scan = scan_landing(
        root, cursor, set(known), lambda scope: tables.read_table(Asset.LANDING_FILES, scope)
    )
    text = scan.cursor.dumps()
    survey = cursor is None or cursor.problems != scan.cursor.problems
    if not scan.changed and not survey:
        if text != context.cursor:
            context.update_cursor(text)
        return SkipReason("no new or changed landing files")
    ordered = [*known, *scan.new_tenants]
    requests = [
        RunRequest(
            run_key=_run_key(first, last, scan.changed, ordered),
            job_name=ingest_job.name,
            tags={**run_tags(ordered, first, last), SOURCE_TAG: "landing_sensor"},
        )
        for first, last in batch_ranges(ordered, scan.changed)
    ]
    if survey:
        requests.append(
            RunRequest(
                run_key=f"survey|{scan.cursor.problems}",
                job_name=survey_job.name,
                tags={SOURCE_TAG: "landing_sensor"},
            )
        )
    return SensorResult(
        run_requests=requests,
        dynamic_partitions_requests=[scope_partitions.build_add_request(scan.new_tenants)]
        if scan.new_tenants
        else [],
        cursor=text,
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
