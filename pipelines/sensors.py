"""Sensors: the landing zone -> batched ingest runs, and a failed batch -> its halves.

`landing_sensor` adds a tenant partition for every new `org/repo` and asks for `ingest_job`
runs over ranges of the tenants whose files are new or changed (`pipelines.batches`): a tick
with 1,000 changed tenants launches a handful of runs, not 1,000. A tick lists the zone's
directories (one ``lstat`` per entry) and opens no landing file; its cursor holds a digest per
tenant directory (`ZoneCursor`), so it is as large as the zone is now, not its history.
`split_failed_batches` reruns the two halves of a failed range, down to single tenants, so one
tenant's bad day never holds back the others.
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
    DagsterInstance,
    DagsterRun,
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
    daemon's own decision (which also stores the tag) answers."""
    if not instance.run_retries_enabled:
        return False
    tag = run.tags.get(WILL_RETRY_TAG)
    if tag is None:
        fresh = instance.get_run_by_id(run.run_id)
        if fresh is None:
            return False
        run, tag = fresh, fresh.tags.get(WILL_RETRY_TAG)
    if tag is not None:
        # read as the retry daemon reads it ("True" and "1" retry too)
        from dagster._utils.tags import get_boolean_tag_value

        return get_boolean_tag_value(tag)
    # imported here: dagster._daemon costs ~0.5 s of imports that `memflow run` never needs
    from dagster._core.errors import DagsterRunNotFoundError
    from dagster._daemon.auto_run_reexecution.auto_run_reexecution import should_retry

    try:
        return should_retry(run, instance)
    except DagsterRunNotFoundError:  # deleted since it was read: as when it is gone already
        return False
