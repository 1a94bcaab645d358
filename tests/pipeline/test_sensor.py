from __future__ import annotations

import os
from pathlib import Path

import pytest
from dagster import (
    DagsterEvent,
    DagsterEventType,
    DagsterInstance,
    DagsterRun,
    DagsterRunStatus,
    SensorResult,
    SkipReason,
    build_run_status_sensor_context,
    build_sensor_context,
)
from dagster import instance_for_test as dagster_instance_for_test
from dagster._core.utils import make_new_run_id
from hypothesis import given
from hypothesis import strategies as st

from assets.partitions import TENANTS
from pipelines.batches import (
    RANGE_END_TAG,
    RANGE_START_TAG,
    batch_ranges,
    range_keys,
    split_range,
)
from pipelines.sensors import (
    ZoneCursor,
    landing_sensor,
    scan_landing,
    split_failed_batches,
)
from resources.configurable import Storage
from tests.pipeline.landing_fixtures import save, write_jsonl


def test_scan_finds_new_tenants_then_nothing(landing: Path) -> None:
    first = scan_landing(landing, None, set())
    assert sorted(first.new_tenants) == ["acme/api", "globex/ml"]
    assert sorted(first.changed) == ["acme/api", "globex/ml"]
    again = scan_landing(landing, first.cursor, set(first.new_tenants))
    assert again.new_tenants == [] and again.changed == {}
    assert again.cursor == first.cursor


def test_a_changed_file_marks_only_its_tenant_with_a_new_digest(landing: Path) -> None:
    first = scan_landing(landing, None, set())
    path = write_jsonl(
        landing,
        "globex",
        "ml",
        "session-9.jsonl",
        [
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
    second = scan_landing(landing, first.cursor, set(first.new_tenants))
    assert list(second.changed) == ["globex/ml"]
    assert second.changed["globex/ml"] != first.changed["globex/ml"]


def test_sensor_adds_partitions_and_requests_one_run_for_both_tenants(
    instance, landing: Path, data_dir: Path
) -> None:
    storage = Storage(landing_dir=str(landing), data_dir=str(data_dir))
    ctx = build_sensor_context(instance=instance, resources={"storage": storage})
    result = landing_sensor(ctx)
    assert isinstance(result, SensorResult)
    request, survey = result.run_requests
    assert (request.job_name, survey.job_name) == ("ingest_job", "survey_job")
    (add,) = result.dynamic_partitions_requests
    assert list(add.partition_keys) == ["acme/api", "globex/ml"]
    assert (request.tags[RANGE_START_TAG], request.tags[RANGE_END_TAG]) == (
        "acme/api",
        "globex/ml",
    )
    instance.add_dynamic_partitions(TENANTS, list(add.partition_keys))
    ctx2 = build_sensor_context(
        instance=instance, resources={"storage": storage}, cursor=result.cursor
    )
    assert isinstance(landing_sensor(ctx2), SkipReason)
    cursor = ZoneCursor.parse(result.cursor)
    assert cursor is not None and set(cursor.tenants) == {"acme/api", "globex/ml"}


def test_a_new_problem_in_the_landing_zone_requests_a_survey_only(
    instance, landing: Path, data_dir: Path
) -> None:
    storage = Storage(landing_dir=str(landing), data_dir=str(data_dir))
    first = landing_sensor(build_sensor_context(instance=instance, resources={"storage": storage}))
    instance.add_dynamic_partitions(TENANTS, ["acme/api", "globex/ml"])
    (landing / "my org" / "r").mkdir(parents=True)
    (landing / "my org" / "r" / "a.jsonl").write_text('{"org": "my org"}\n')
    result = landing_sensor(
        build_sensor_context(instance=instance, resources={"storage": storage}, cursor=first.cursor)
    )
    assert [r.job_name for r in result.run_requests] == ["survey_job"]


def test_sensor_skips_a_missing_landing_zone(instance, tmp_path: Path) -> None:
    storage = Storage(landing_dir=str(tmp_path / "nope"), data_dir=str(tmp_path))
    result = landing_sensor(build_sensor_context(instance=instance, resources={"storage": storage}))
    assert isinstance(result, SkipReason)


def test_ranges_cut_at_long_gaps_and_at_the_size_cap() -> None:
    ordered = [f"o/t{i:03d}" for i in range(100)]
    assert batch_ranges(ordered, ["o/t001", "o/t003", "o/t050"], max_gap=5) == [
        ("o/t001", "o/t003"),
        ("o/t050", "o/t050"),
    ]
    assert batch_ranges(ordered, ordered[:10], max_tenants=4) == [
        ("o/t000", "o/t003"),
        ("o/t004", "o/t007"),
        ("o/t008", "o/t009"),
    ]
    assert split_range(ordered, "o/t000", "o/t004") == [("o/t000", "o/t001"), ("o/t002", "o/t004")]
    assert split_range(ordered, "o/t007", "o/t007") == []


@given(
    n=st.integers(1, 60),
    picks=st.sets(st.integers(0, 59), min_size=1),
    cap=st.integers(1, 20),
    gap=st.integers(0, 10),
)
def test_ranges_cover_every_wanted_tenant_once_within_the_limits(
    n: int, picks: set[int], cap: int, gap: int
) -> None:
    ordered = [f"o/t{i:03d}" for i in range(n)]
    wanted = {ordered[i] for i in picks if i < n} or {ordered[0]}
    ranges = batch_ranges(ordered, wanted, max_tenants=cap, max_gap=gap)
    covered = [k for first, last in ranges for k in range_keys(ordered, first, last)]
    assert len(covered) == len(set(covered))  # no tenant in two runs
    assert wanted <= set(covered)
    for first, last in ranges:
        keys = range_keys(ordered, first, last)
        assert len(keys) <= cap and first in wanted and last in wanted


def _failed_batch(instance: DagsterInstance, tags: dict[str, str]) -> DagsterRun:
    instance.add_dynamic_partitions(TENANTS, [f"o/t{i}" for i in range(4)])
    run = DagsterRun(
        job_name="ingest_job",
        run_id=make_new_run_id(),
        status=DagsterRunStatus.FAILURE,
        tags={RANGE_START_TAG: "o/t0", RANGE_END_TAG: "o/t3", **tags},
    )
    instance.add_run(run)
    return run


def _split(instance: DagsterInstance, run: DagsterRun) -> list[str]:
    context = build_run_status_sensor_context(
        sensor_name="split_failed_batches",
        dagster_instance=instance,
        dagster_run=run,
        dagster_event=DagsterEvent(DagsterEventType.RUN_FAILURE.value, job_name=run.job_name),
    ).for_run_failure()
    requests = split_failed_batches(context) or []
    return [f"{r.tags[RANGE_START_TAG]}..{r.tags[RANGE_END_TAG]}" for r in requests]


@pytest.mark.parametrize(
    ("retries", "tags", "halves"),
    [
        # no run_retries: a failed batch is rerun as its halves
        (False, {}, True),
        # run_retries re-executes a crashed run whole, and said so
        (True, {"dagster/will_retry": "true"}, False),
        # a step failed and run_retries declined it: halves
        (True, {"dagster/will_retry": "false"}, True),
        # the sensor ran between Dagster's FAILURE write and its will_retry write: the retry
        # daemon's own decision answers, so the run is not retried whole *and* split
        (True, {}, False),
        (True, {"dagster/failure_reason": "STEP_FAILURE"}, True),
        # the tag read as the retry daemon reads it: not retried whole *and* split
        (True, {"dagster/will_retry": "True"}, False),
        # the run allows no retry (or says so unreadably): halves
        (True, {"dagster/max_retries": "0"}, True),
        (True, {"dagster/max_retries": "not a number"}, True),
        # a step failure the instance retries as well: the retry, not halves
        (
            True,
            {
                "dagster/failure_reason": "STEP_FAILURE",
                "dagster/retry_on_asset_or_op_failure": "true",
            },
            False,
        ),
    ],
)
def test_a_failed_batch_is_split_only_when_run_retries_will_not_rerun_it(
    retries: bool, tags: dict[str, str], halves: bool
) -> None:
    overrides = {
        "run_retries": {"enabled": retries, "max_retries": 2, "retry_on_asset_or_op_failure": False}
    }  # as deploy/dagster.yaml
    with dagster_instance_for_test(overrides=overrides) as instance:
        run = _failed_batch(instance, tags)
        assert _split(instance, run) == (["o/t0..o/t1", "o/t2..o/t3"] if halves else [])
        if retries and "dagster/will_retry" not in tags:  # stored, as the retry daemon does
            assert (
                instance.get_run_by_id(run.run_id).tags["dagster/will_retry"]
                == str(not halves).lower()
            )


def test_the_last_retry_of_a_batch_is_split() -> None:
    overrides = {"run_retries": {"enabled": True, "max_retries": 2}}
    with dagster_instance_for_test(overrides=overrides) as instance:
        root = _failed_batch(instance, {"dagster/will_retry": "true"})
        parent, tries = root, []
        for number in (1, 2):  # the retry daemon's two retries, the last one failed too
            tags = {
                **root.tags,
                "dagster/retry_number": str(number),
                "dagster/root_run_id": root.run_id,  # what Dagster's re-execution writes
                "dagster/parent_run_id": parent.run_id,
            }
            tags.pop("dagster/will_retry")
            parent = DagsterRun(
                job_name="ingest_job",
                run_id=make_new_run_id(),
                status=DagsterRunStatus.FAILURE,
                tags=tags,
                root_run_id=root.run_id,
                parent_run_id=parent.run_id,
            )
            instance.add_run(parent)
            tries.append(parent)
        assert _split(instance, root) == []  # being retried
        assert _split(instance, tries[-1]) == ["o/t0..o/t1", "o/t2..o/t3"]


def test_a_run_deleted_while_the_sensor_decides_is_split_not_an_error() -> None:
    overrides = {"run_retries": {"enabled": True, "max_retries": 2}}
    with dagster_instance_for_test(overrides=overrides) as instance:
        run = _failed_batch(instance, {})
        read = instance.get_run_by_id

        def read_then_delete(run_id: str):
            found = read(run_id)
            instance.delete_run(run_id)  # between the sensor's read and the daemon's rule
            return found

        instance.get_run_by_id = read_then_delete  # type: ignore[method-assign]
        assert _split(instance, run) == ["o/t0..o/t1", "o/t2..o/t3"]
