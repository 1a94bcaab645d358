from __future__ import annotations

import json
import os
from pathlib import Path

from dagster import SensorResult, SkipReason, build_sensor_context

from assets.partitions import TENANTS
from pipelines.sensors import landing_sensor, scan_landing
from resources.configurable import Storage
from tests.pipeline.landing_fixtures import save, write_jsonl


def test_scan_finds_new_tenants_and_days_then_nothing(landing: Path) -> None:
    tenants, runs, cursor = scan_landing(landing, {}, set())
    assert sorted(tenants) == ["acme/api", "globex/ml"]
    assert sorted((t, d) for t, d, _ in runs) == [
        ("acme/api", "2026-11-02"),
        ("acme/api", "2026-11-03"),
        ("globex/ml", "2026-11-02"),
    ]
    again = scan_landing(landing, cursor, set(tenants))
    assert again[0] == [] and again[1] == []


def test_a_changed_file_requests_only_its_days_with_a_new_run_key(landing: Path) -> None:
    tenants, runs, cursor = scan_landing(landing, {}, set())
    path = write_jsonl(
        landing,
        "globex",
        "ml",
        "session-9.jsonl",
        [
            save("globex", "ml", "s9", "1", "2026-11-02T12:00:00-05:00", []),
            save(
                "globex",
                "ml",
                "s9",
                "2",
                "2026-11-05T08:00:00Z",
                [{"subject": "a", "predicate": "USES", "object": "b"}],
            ),
        ],
    )
    os.utime(path, ns=(1, 1))
    _, runs2, _ = scan_landing(landing, cursor, set(tenants))
    assert sorted((t, d) for t, d, _ in runs2) == [
        ("globex/ml", "2026-11-02"),
        ("globex/ml", "2026-11-05"),
    ]
    old_keys = {k for _, _, k in runs}
    assert not old_keys & {k for _, _, k in runs2}


def test_sensor_adds_partitions_and_requests_runs(instance, landing: Path, data_dir: Path) -> None:
    paths = Storage(landing_dir=str(landing), data_dir=str(data_dir))
    ctx = build_sensor_context(instance=instance, resources={"storage": paths})
    result = landing_sensor(ctx)
    assert isinstance(result, SensorResult)
    assert len(result.run_requests) == 3
    (add,) = result.dynamic_partitions_requests
    assert sorted(add.partition_keys) == ["acme/api", "globex/ml"]
    assert {r.partition_key.keys_by_dimension["tenant"] for r in result.run_requests} == {
        "acme/api",
        "globex/ml",
    }
    instance.add_dynamic_partitions(TENANTS, list(add.partition_keys))
    ctx2 = build_sensor_context(
        instance=instance, resources={"storage": paths}, cursor=result.cursor
    )
    assert isinstance(landing_sensor(ctx2), SkipReason)
    assert set(json.loads(result.cursor)) == {
        "acme/api/session-1.jsonl",
        "globex/ml/session-9.jsonl",
    }


def test_sensor_skips_a_missing_landing_zone(instance, tmp_path: Path) -> None:
    paths = Storage(landing_dir=str(tmp_path / "nope"), data_dir=str(tmp_path))
    result = landing_sensor(build_sensor_context(instance=instance, resources={"storage": paths}))
    assert isinstance(result, SkipReason)
