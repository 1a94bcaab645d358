"""The landing-zone sensor: new or changed files -> tenant partitions + ingest runs."""

import json
from pathlib import Path

from dagster import (
    DefaultSensorStatus,
    RunRequest,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    sensor,
)

from assets.partitions import TENANTS, scope_day_key, scope_partitions
from memflow import landing
from memflow.turns import file_days
from pipelines.jobs import ingest_job
from resources.configurable import Storage
from schemas.scope import Scope


def scan_landing(
    root: Path, cursor: dict[str, dict], known_tenants: set[str]
) -> tuple[list[str], list[tuple[str, str, str]], dict[str, dict]]:
    """(new tenant keys, [(tenant, day, run_key)], new cursor) for files new or changed since
    `cursor` (path -> fingerprint dict). Pure, so tests call it without a Dagster instance."""
    found = landing.discover(root)
    new_cursor: dict[str, dict] = {}
    new_tenants: list[str] = []
    requests: dict[tuple[str, str], str] = {}
    for scope, files in found.items():
        for path in files:
            rel = landing.relative_name(path, root)
            previous = cursor.get(rel)
            fp = landing.fingerprint(
                path, root, landing.FileFingerprint.from_dict(previous) if previous else None
            )
            new_cursor[rel] = fp.as_dict()
            if previous and previous.get("sha256") == fp.sha256:
                continue
            if scope.key not in known_tenants and scope.key not in new_tenants:
                new_tenants.append(scope.key)
            for day in file_days(path, root):
                key = (scope.key, day)
                requests[key] = requests.get(key, "") + fp.sha256[:12]
    runs = [
        (tenant, day, f"{tenant}|{day}|{digest}")
        for (tenant, day), digest in sorted(requests.items())
    ]
    return new_tenants, runs, new_cursor


@sensor(
    job=ingest_job,
    minimum_interval_seconds=5,
    default_status=DefaultSensorStatus.RUNNING,
    description="Watches the landing zone: adds tenant partitions and requests an ingest run "
    "for every (tenant, day) a new or changed file touches.",
)
def landing_sensor(context: SensorEvaluationContext, storage: Storage):
    root = storage.landing
    if not root.is_dir():
        return SkipReason(f"landing zone {root} does not exist")
    cursor = json.loads(context.cursor) if context.cursor else {}
    known = set(context.instance.get_dynamic_partitions(TENANTS))
    new_tenants, runs, new_cursor = scan_landing(root, cursor, known)
    if not runs and not new_tenants:
        context.update_cursor(json.dumps(new_cursor, sort_keys=True))
        return SkipReason("no new or changed landing files")
    return SensorResult(
        run_requests=[
            RunRequest(run_key=run_key, partition_key=scope_day_key(Scope.parse(t), d))
            for t, d, run_key in runs
        ],
        dynamic_partitions_requests=[scope_partitions.build_add_request(new_tenants)]
        if new_tenants
        else [],
        cursor=json.dumps(new_cursor, sort_keys=True),
    )
