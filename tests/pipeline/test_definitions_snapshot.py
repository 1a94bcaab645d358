"""The resolved code location, snapshotted: asset keys, lineage, partitions, checks, groups,
descriptions, automation, jobs, sensors and resources.

Moving files must leave this unchanged; a change that means to alter the Dagster graph updates
the snapshot on purpose (`pytest tests/pipeline/test_definitions_snapshot.py --snapshot-update`)
and the diff shows exactly what moved. The idea is dagster-open-platform's `test_defs.py`.
"""

from __future__ import annotations

from typing import Any

from dagster import (
    DailyPartitionsDefinition,
    DynamicPartitionsDefinition,
    MultiPartitionsDefinition,
    PartitionsDefinition,
)
from syrupy.assertion import SnapshotAssertion
from syrupy.extensions.json import JSONSnapshotExtension

from pipelines.definitions import defs


def _partitions(pd: PartitionsDefinition | None) -> Any:
    if pd is None:
        return None
    if isinstance(pd, MultiPartitionsDefinition):
        return {"multi": {d.name: _partitions(d.partitions_def) for d in pd.partitions_defs}}
    if isinstance(pd, DynamicPartitionsDefinition):
        return {"dynamic": pd.name}
    if isinstance(pd, DailyPartitionsDefinition):
        return {"daily": {"start": pd.start.isoformat(), "end_offset": pd.end_offset}}
    return {type(pd).__name__: str(pd)}


def _condition(cond: Any) -> Any:
    if cond is None:
        return None
    children = [_condition(c) for c in getattr(cond, "children", [])]
    node: dict[str, Any] = {"type": type(cond).__name__}
    if cond.get_label():
        node["label"] = cond.get_label()
    if children:
        node["children"] = children
    return node


def resolved() -> dict[str, Any]:
    repo = defs.get_repository_def()
    assets: dict[str, Any] = {}
    checks: dict[str, Any] = {}
    for ad in repo.asset_graph.assets_defs:
        for spec in ad.specs:
            assets[spec.key.to_user_string()] = {
                "group": spec.group_name,
                "description": spec.description,
                "deps": sorted(d.asset_key.to_user_string() for d in spec.deps),
                "partitions": _partitions(spec.partitions_def),
                "automation": _condition(spec.automation_condition),
                "kinds": sorted(spec.kinds),
                "backfill_policy": str(ad.backfill_policy) if ad.backfill_policy else None,
                "observable": ad.is_observable,
            }
        for cs in ad.check_specs:
            checks[f"{cs.asset_key.to_user_string()}:{cs.name}"] = {
                "blocking": cs.blocking,
                "description": cs.description,
            }
    jobs = {
        job.name: {
            "description": job.description,
            "assets": sorted(k.to_user_string() for k in job.asset_layer.executable_asset_keys),
            "partitions": _partitions(job.partitions_def),
        }
        for job in repo.get_all_jobs()
        if not job.name.startswith("__")
    }
    sensors = {
        s.name: {
            "type": type(s).__name__,
            "description": s.description,
            "minimum_interval_seconds": s.minimum_interval_seconds,
            "default_status": s.default_status.value,
            "jobs": sorted(t.job_name for t in s.targets) if s.has_jobs else [],
        }
        for s in repo.sensor_defs
    }
    return {
        "assets": dict(sorted(assets.items())),
        "checks": dict(sorted(checks.items())),
        "jobs": jobs,
        "sensors": sensors,
        "schedules": sorted(s.name for s in repo.schedule_defs),
        "resources": sorted(defs.resources or {}),
    }


def test_definitions_match_the_snapshot(snapshot: SnapshotAssertion) -> None:
    assert resolved() == snapshot(extension_class=JSONSnapshotExtension)


def test_every_check_has_a_description() -> None:
    """The UI shows it under the check's About (issue 7)."""
    checks = resolved()["checks"]
    assert checks and not [name for name, c in checks.items() if not (c["description"] or "")]
