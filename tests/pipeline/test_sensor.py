from __future__ import annotations

import builtins
import json
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
from tests.pipeline.conftest import INGEST, make_resources, run_assets
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


class _Opens:
    """Every os.open, builtins.open and os.scandir of a path under `root` (or relative to a
    directory fd: then the name), while installed."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, root: Path) -> None:
        self.root = str(root.resolve())
        self.files: list[str] = []
        self.listed: list[str] = []
        real_open, real_builtin, real_scandir = os.open, builtins.open, os.scandir

        def record(path: object) -> None:
            text = os.fsdecode(path) if isinstance(path, str | bytes | os.PathLike) else ""
            if text and (not os.path.isabs(text) or text.startswith(self.root)):
                self.files.append(text)

        def os_open(path, flags, mode=0o777, *, dir_fd=None):  # type: ignore[no-untyped-def]
            record(path)
            return real_open(path, flags, mode, dir_fd=dir_fd)

        def builtin_open(file, *args, **kwargs):  # type: ignore[no-untyped-def]
            record(file)
            return real_builtin(file, *args, **kwargs)

        def scandir(path="."):  # type: ignore[no-untyped-def]
            self.listed.append(os.fsdecode(path) if not isinstance(path, int) else f"fd:{path}")
            return real_scandir(path)

        monkeypatch.setattr(os, "open", os_open)
        monkeypatch.setattr(builtins, "open", builtin_open)
        monkeypatch.setattr(os, "scandir", scandir)

    def landing_files(self) -> list[str]:
        """What was opened that is a landing file (not a directory)."""
        return [p for p in self.files if p.lower().endswith((".jsonl", ".parquet"))]


def test_a_tick_that_finds_nothing_new_opens_no_file(
    instance, landing: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage = Storage(landing_dir=str(landing), data_dir=str(data_dir))
    first = landing_sensor(build_sensor_context(instance=instance, resources={"storage": storage}))
    instance.add_dynamic_partitions(TENANTS, ["acme/api", "globex/ml"])
    opens = _Opens(monkeypatch, landing)
    again = landing_sensor(
        build_sensor_context(instance=instance, resources={"storage": storage}, cursor=first.cursor)
    )
    assert isinstance(again, SkipReason)
    assert opens.files == []  # no landing file, no table, not even a directory by os.open
    assert opens.listed  # the zone was listed


def test_the_cursor_holds_a_digest_per_tenant_however_many_files(landing: Path) -> None:
    first = scan_landing(landing, None, set())
    for day in range(40):
        write_jsonl(
            landing,
            "acme",
            "api",
            f"day-{day:02d}.jsonl",
            [save("acme", "api", f"s{day}", "1", "2026-11-05T08:00:00Z", [])],
        )
    later = scan_landing(landing, first.cursor, {"acme/api", "globex/ml"})
    assert list(later.changed) == ["acme/api"]
    assert set(later.cursor.tenants) == {"acme/api", "globex/ml"}
    assert len(later.cursor.dumps()) == len(first.cursor.dumps())


def test_the_sensor_starts_from_what_a_run_already_ingested(
    instance, landing: Path, data_dir: Path
) -> None:
    """`memflow run` loaded both tenants; the sensor's first tick (no cursor, or a cursor of
    the old per-file format) asks for no ingest run, only the survey; then a new file of one
    tenant asks for that tenant alone."""
    resources = make_resources(landing, data_dir)
    assert run_assets(instance, resources, INGEST, ["acme/api", "globex/ml"]).success
    storage = resources["storage"]
    for cursor in (None, json.dumps({"acme/api/session-1.jsonl": {"sha256": "0"}})):
        ctx = build_sensor_context(instance=instance, resources={"storage": storage}, cursor=cursor)
        result = landing_sensor(ctx)
        assert isinstance(result, SensorResult)
        assert [r.job_name for r in result.run_requests] == ["survey_job"]
        assert set(ZoneCursor.parse(result.cursor).tenants) == {"acme/api", "globex/ml"}
    write_jsonl(
        landing,
        "globex",
        "ml",
        "session-10.jsonl",
        [save("globex", "ml", "s10", "1", "2026-11-05T08:00:00Z", [])],
    )
    ctx = build_sensor_context(
        instance=instance, resources={"storage": storage}, cursor=result.cursor
    )
    (request,) = landing_sensor(ctx).run_requests
    assert (request.tags[RANGE_START_TAG], request.tags[RANGE_END_TAG]) == ("globex/ml",) * 2


def test_a_tenant_the_runs_never_read_is_asked_for_on_the_first_tick(
    instance, landing: Path, data_dir: Path
) -> None:
    resources = make_resources(landing, data_dir)
    assert run_assets(instance, resources, INGEST, ["acme/api"]).success
    result = landing_sensor(
        build_sensor_context(instance=instance, resources={"storage": resources["storage"]})
    )
    ingest = [r for r in result.run_requests if r.job_name == "ingest_job"]
    assert [(r.tags[RANGE_START_TAG], r.tags[RANGE_END_TAG]) for r in ingest] == [
        ("globex/ml", "globex/ml")
    ]


def test_seeding_is_spread_over_ticks(landing: Path) -> None:
    """At most `seed_limit` tenants missing from the cursor are compared with the index a
    tick; the others wait for the next one (and are not in the cursor meanwhile)."""
    reads: list[str] = []

    def index(scope):  # type: ignore[no-untyped-def]
        reads.append(scope.key)
        return None

    first = scan_landing(landing, None, set(), index, seed_limit=1)
    assert reads == ["acme/api"] and set(first.cursor.tenants) == {"acme/api"}
    second = scan_landing(landing, first.cursor, {"acme/api"}, index, seed_limit=1)
    assert reads == ["acme/api", "globex/ml"] and list(second.changed) == ["globex/ml"]


def test_raw_turns_lists_only_its_own_tenants(
    instance, landing: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    resources = make_resources(landing, data_dir)
    opens = _Opens(monkeypatch, landing)
    assert run_assets(
        instance, resources, ["raw_turns", "turn_rejects", "landing_files"], ["acme/api"]
    ).success
    assert not [p for p in opens.files if "globex" in p]
    assert str(landing) not in opens.listed and str(landing.resolve()) not in opens.listed


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
