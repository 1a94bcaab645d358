"""One run per tenant block, however the run started: every run takes its blocks' locks (a
`memflow run` in another process waits for them), and the local instance's queue admits one
run per block."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipelines.batches import BLOCK_TAG, RANGE_END_TAG, RANGE_START_TAG
from pipelines.block_lock import BlockLocks, blocks_of, lock_path
from pipelines.instance import (
    QUEUE_MARK,
    block_limit_problem,
    ensure_instance_config,
    instance_yaml,
)
from tests.pipeline.landing_fixtures import small_landing

ROOT = Path(__file__).resolve().parents[2]
ORDERED = [f"org/t{i:03d}" for i in range(450)]


def test_a_run_covers_the_blocks_of_its_partition_or_range() -> None:
    assert blocks_of({"dagster/partition": "org/t005"}, ORDERED) == [0]
    assert blocks_of({RANGE_START_TAG: "org/t199", RANGE_END_TAG: "org/t200"}, ORDERED) == [0, 1]
    assert blocks_of({RANGE_START_TAG: "org/t010", RANGE_END_TAG: "org/t420"}, ORDERED) == [0, 1, 2]
    assert blocks_of({}, ORDERED) == []  # the survey: no tenant, no lock
    assert blocks_of({"dagster/partition": "not/there"}, ORDERED) == []


def test_block_locks_exclude_each_other_across_processes(tmp_path: Path) -> None:
    held = BlockLocks(tmp_path, [1, 0]).acquire()
    try:
        assert [p.name for p in held.paths] == ["block-0.lock", "block-1.lock"]  # in order
        code = (
            "import sys; from filelock import FileLock, Timeout\n"
            f"lock = FileLock({str(lock_path(tmp_path, 1))!r})\n"
            "try:\n    lock.acquire(timeout=0.5)\nexcept Timeout:\n    sys.exit(3)\nsys.exit(0)\n"
        )
        assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 3
    finally:
        held.release()
    code = code.replace("timeout=0.5", "timeout=30")
    assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 0


def test_the_instance_file_holds_the_block_limit_and_old_ones_are_brought_up_to_date(
    tmp_path: Path,
) -> None:
    fresh = tmp_path / "fresh"
    ensure_instance_config(fresh)
    assert block_limit_problem(fresh) is None
    assert (fresh / "dagster.yaml").read_text() == instance_yaml(fresh)
    old = tmp_path / "old"  # what memflow wrote before: the event log only
    old.mkdir()
    text = instance_yaml(old).split(QUEUE_MARK)[0]
    (old / "dagster.yaml").write_text(text)
    assert block_limit_problem(old) is not None
    ensure_instance_config(old)
    assert block_limit_problem(old) is None
    ensure_instance_config(old)  # idempotent
    assert (old / "dagster.yaml").read_text().count(QUEUE_MARK) == 1
    mine = tmp_path / "mine"  # written by hand: left alone, and the missing rule is said
    mine.mkdir()
    (mine / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    ensure_instance_config(mine)
    assert (mine / "dagster.yaml").read_text() == "telemetry:\n  enabled: false\n"
    assert BLOCK_TAG in (block_limit_problem(mine) or "")


@pytest.mark.slow
def test_a_cli_run_waits_for_a_run_of_its_block_held_elsewhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another run holds block 0 (here: this test, as a sensor or UI run would): `memflow run`
    in another process starts, waits, and writes its first materialization only after the
    lock is released."""
    from dagster import DagsterEventType, DagsterInstance, EventRecordsFilter

    landing, data = small_landing(tmp_path / "landing"), tmp_path / "data"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMFLOW_", "DAGSTER_"))}
    env.update(MEMFLOW_HOME=str(tmp_path / "home"), MEMFLOW_EMBEDDER="none", CI="true")
    from pipelines.runner import instance_for

    # Two processes must not create one instance at once: this test's instance is made first,
    # in the run's own home (an earlier test of this worker may have left DAGSTER_HOME set,
    # and instance_for prefers it; the poll below then raced the run creating its storages).
    monkeypatch.setenv("DAGSTER_HOME", str(data / "dagster"))
    instance_for(str(data)).dispose()
    held = BlockLocks(data, [0]).acquire()
    run = subprocess.Popen(
        [sys.executable, "-m", "pipelines.cli", "run", "--landing", str(landing), "--data",
         str(data)],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        home = data / "dagster"
        deadline = time.monotonic() + 600
        started = False
        while time.monotonic() < deadline and run.poll() is None and not started:
            if (home / "dagster.yaml").exists():
                with DagsterInstance.get() as instance:
                    started = any(r.status.value == "STARTED" for r in instance.get_runs())
            time.sleep(1.0)
        assert started, run.stdout.read().decode() if run.poll() is not None else "not started"
        time.sleep(3.0)  # the run would write its first table now, were it not waiting
        released = time.time()
        held.release()
        out, _ = run.communicate(timeout=900)
        assert run.returncode == 0, out.decode()[-3000:]
        # progress per stage, with the run id and block, although the output is a pipe
        lines = out.decode().splitlines()
        assert any(re.match(r"run [0-9a-f]{8} run_job \[.*\] block 0 .*: raw_turns done", x)
                   for x in lines), out.decode()[-3000:]  # fmt: skip
        with DagsterInstance.get() as instance:
            events = instance.get_event_records(
                EventRecordsFilter(event_type=DagsterEventType.ASSET_MATERIALIZATION)
            )
        assert events
        assert min(e.event_log_entry.timestamp for e in events) >= released
    finally:
        held.release()
        if run.poll() is None:
            run.kill()
            run.wait()
