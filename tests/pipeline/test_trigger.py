"""The ingest triggers a write calls: the API's warm worker runs the tenant's ingest at once
(a run of the code location's job, with its block and `memflow/source=api`); a write while a
run is pending joins it; the queue trigger submits to the daemon's queue, joins a queued run,
and without a daemon asks for nothing and says so."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from pipelines.batches import BLOCK_TAG, SOURCE_TAG
from pipelines.block_lock import BlockLocks
from pipelines.settings import resolve
from resources.settings import DEFAULTS
from schemas.scope import Scope
from tests.pipeline.landing_fixtures import save, write_jsonl

pytestmark = pytest.mark.slow
API = Scope("acme", "api")
WAIT_S = 600.0  # the queue trigger's answer waits for the pipeline to load (a busy machine)


@pytest.fixture
def cfg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    for name in DEFAULTS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    monkeypatch.setenv("MEMFLOW_EMBEDDER", "none")
    yield resolve(
        {"MEMFLOW_DATA_DIR": str(tmp_path / "data"), "MEMFLOW_LANDING_DIR": str(tmp_path / "l")},
        tmp_path / "none",
        create=("MEMFLOW_DATA_DIR", "MEMFLOW_LANDING_DIR"),
    )
    os.environ.pop("DAGSTER_HOME", None)


def land(cfg, name: str, obj: str) -> Path:
    triple = {"subject": "api", "predicate": "USES", "object": obj}
    return write_jsonl(
        cfg.landing_dir, "acme", "api", name,
        [save("acme", "api", "s1", name, "2026-11-01T10:00:00Z", [triple])],
    )  # fmt: skip


def objects(cfg) -> set[str]:
    from resources.tables import TableStore
    from schemas.tables import Asset

    df = TableStore(cfg.data_dir).read(Asset.VALIDATED_FACTS, API)
    return set() if df is None else set(df["object"].to_list())


def wait_until(check, timeout: float = 600.0) -> bool:
    """A wait for the work to arrive, not a speed check."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.5)
    return False


def test_the_warm_worker_ingests_a_write_and_a_write_joins_the_pending_run(cfg) -> None:
    from pipelines.runner import instance_for
    from pipelines.trigger import WarmIngestWorker

    worker = WarmIngestWorker(cfg.data_dir, start=True)
    try:
        first = worker(API, land(cfg, "a.jsonl", "PostgreSQL"))
        assert first.requested
        assert wait_until(lambda: "PostgreSQL" in objects(cfg))
        # out of the server's process group: a signal to that group does not interrupt a run
        assert os.getpgid(worker.pid) == worker.pid != os.getpgid(0)
        # a run of the block under way elsewhere: the worker's next run waits for its lock,
        # and writes meanwhile join the run after it
        held = BlockLocks(cfg.data_dir, [0]).acquire()
        try:
            running = worker(API, land(cfg, "b.jsonl", "Redis"))
            assert running.requested and running.run_id and not running.reason
            instance = instance_for(str(cfg.data_dir))
            assert wait_until(lambda: _status(instance, running.run_id) == "STARTED")
            pending = worker(API, land(cfg, "c.jsonl", "Kafka"))
            joined = worker(API, land(cfg, "d.jsonl", "NATS"))
            assert pending.run_id not in (None, running.run_id)
            assert joined.run_id == pending.run_id and "joined" in (joined.reason or "")
            assert joined.expected_by is not None and pending.expected_by is not None
            assert "Redis" not in objects(cfg)  # nothing ran past the lock
        finally:
            held.release()
        assert wait_until(lambda: {"Redis", "Kafka", "NATS"} <= objects(cfg))
        assert wait_until(lambda: _status(instance, pending.run_id) == "SUCCESS")
        run = instance.get_run_by_id(pending.run_id)
        assert run.job_name == "ingest_job" and run.tags[SOURCE_TAG] == "api"
        assert (
            run.tags[BLOCK_TAG] == "0"
            and run.tags["dagster/asset_partition_range_start"] == "acme/api"
        )
        instance.dispose()
    finally:
        worker.close()
    assert worker.pid is None


def _status(instance, run_id: str | None) -> str | None:
    run = instance.get_run_by_id(run_id) if run_id else None
    return run.status.value if run is not None else None


def test_the_queue_trigger_asks_for_nothing_without_a_daemon(cfg) -> None:
    from pipelines.trigger import QueueTrigger

    trigger = QueueTrigger(cfg.data_dir, reply_timeout_s=WAIT_S)
    try:
        answer = trigger(API, land(cfg, "a.jsonl", "PostgreSQL"))
    finally:
        trigger.close()
    assert not answer.requested and "daemon" in (answer.reason or "")


def test_the_queue_trigger_queues_a_run_of_the_block_and_joins_it(
    cfg, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pipelines.trigger as trigger_module
    from pipelines.trigger import QueueTrigger

    monkeypatch.setattr(trigger_module, "daemon_alive", lambda instance: True)
    trigger = QueueTrigger(cfg.data_dir, reply_timeout_s=WAIT_S)
    try:
        first = trigger(API, land(cfg, "a.jsonl", "PostgreSQL"))
        again = trigger(API, land(cfg, "b.jsonl", "Redis"))
        other = trigger(Scope("acme", "web"), land(cfg, "c.jsonl", "Kafka"))
        instance = trigger._open()
        queued = instance.get_run_by_id(first.run_id)
    finally:
        trigger.close()
    assert first.requested and first.run_id and again.run_id == first.run_id
    assert other.run_id != first.run_id
    assert queued.status.value == "QUEUED"
    assert queued.tags[BLOCK_TAG] == "0" and queued.tags[SOURCE_TAG] == "api"
    assert queued.remote_job_origin.location_name == "pipelines.definitions"


def test_a_slow_submission_answers_at_once_and_goes_on_in_the_background(
    cfg, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    from pipelines.trigger import QueueTrigger

    trigger = QueueTrigger(cfg.data_dir, reply_timeout_s=0.1)
    release, submitted = threading.Event(), threading.Event()

    def slow_submit(scope: Scope):
        release.wait(60)
        submitted.set()
        return trigger_answer

    trigger_answer = object()
    monkeypatch.setattr(trigger, "_submit", slow_submit)
    answer = trigger(API, land(cfg, "a.jsonl", "PostgreSQL"))
    assert answer.requested and answer.run_id is None and "being submitted" in answer.reason
    assert not submitted.is_set()
    release.set()
    assert submitted.wait(60)  # the submission was not abandoned


def test_a_failed_submission_says_the_sensor_reads_the_file(
    cfg, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pipelines.trigger import QueueTrigger

    trigger = QueueTrigger(cfg.data_dir, reply_timeout_s=WAIT_S)

    def broken(scope: Scope):
        raise OSError("disk full")

    monkeypatch.setattr(trigger, "_submit", broken)
    answer = trigger(API, land(cfg, "a.jsonl", "PostgreSQL"))
    assert not answer.requested and "sensor" in (answer.reason or "")
