"""Ingest a tenant at once after a write: the implementations of `recall.ports.IngestTrigger`
that `memflow serve`, `memflow up` and `memflow mcp` hand to the API and the MCP server.

`WarmIngestWorker` (`memflow serve --ingest warm`, the default; `memflow up`): a worker
process of the API, spawned at start, imports the code location once and then runs each
requested tenant's `ingest_job` itself, as `memflow run` does (a run of the code location's own
job, recorded in the instance, tagged `memflow/source=api` and with its block). A Dagster run
launched by the daemon starts a new Python process that imports the whole pipeline first
(8 s of CPU here, BENCHMARKS.md "Freshness"), more than the 10 s a saved fact may take to
become recallable; the warm worker spends that once. Requests for a tenant whose run has not
started yet join that run (its run id is the answer); the worker runs one run at a time, oldest
request first.

`QueueTrigger` (`--ingest queue`; the stdio MCP server's local fallback): submits the tenant's
`ingest_job` run to the instance's run queue, which the daemon launches (one run per block,
`pipelines.instance`), or joins a run of the tenant still in the queue. Without a live daemon
it asks for nothing and says so (the landing sensor, once a daemon runs, finds the file).

Either way the one-run-per-block rule holds: a run memflow executes itself is STARTED with its
block tag in the instance (so the queue starts no other run of the block meanwhile), and every
run takes its block's lock (`pipelines.block_lock`). `expected_by` is the write's time plus the
median of how long recent runs took from creation to the end (their queueing included), plus
the runs ahead of it; 10 s before any run finished.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import multiprocessing
import os
import statistics
import threading
import time
import uuid
from collections import deque
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pipelines.batches import (
    BLOCK_TAG,
    RANGE_END_TAG,
    RANGE_START_TAG,
)
from pipelines.ingest_worker import JOB, recent_run_seconds, tenant_tags, worker_main
from recall.ports import IngestRequest, IngestTrigger
from resources.settings import Settings
from schemas.scope import Scope

log = logging.getLogger("memflow.trigger")

DEFAULT_RUN_S = 10.0
RECENT_RUNS = 20
DAEMON_STALE_S = 60.0
REPLY_TIMEOUT_S = 2.0
STOP_TIMEOUT_S = 30.0
RESTART_AFTER_S = 30.0  # a worker that died is not restarted more often


def ingest_trigger(
    cfg: Settings, mode: str = "warm", *, start_now: bool = False
) -> IngestTrigger | None:
    """The trigger `memflow serve --ingest MODE` hands the API (None for `off`). The warm
    worker starts (the queue trigger loads the pipeline) at the first write, or at once with
    `start_now` (`memflow up`)."""
    if mode == "off":
        return None
    if mode == "queue":
        trigger = QueueTrigger(cfg.data_dir)
        if start_now:
            trigger.prepare()
        return trigger
    if mode == "warm":
        return WarmIngestWorker(cfg.data_dir, start=start_now)
    raise ValueError(f"unknown ingest mode {mode!r} (warm | queue | off)")


class _Durations:
    """Seconds recent runs took from their creation to their end."""

    def __init__(self) -> None:
        self._seconds: deque[float] = deque(maxlen=RECENT_RUNS)
        self._lock = threading.Lock()

    def add(self, seconds: float) -> None:
        with self._lock:
            self._seconds.append(seconds)

    def extend(self, seconds: list[float]) -> None:
        with self._lock:
            self._seconds.extend(seconds)

    def typical(self) -> float:
        with self._lock:
            return statistics.median(self._seconds) if self._seconds else DEFAULT_RUN_S

    def __len__(self) -> int:
        return len(self._seconds)


def _covers(tags: Mapping[str, str], key: str, ordered: list[str]) -> bool:
    first = tags.get(RANGE_START_TAG) or tags.get("dagster/partition")
    last = tags.get(RANGE_END_TAG) or first
    if first not in ordered or last not in ordered or key not in ordered:
        return False
    return ordered.index(first) <= ordered.index(key) <= ordered.index(last)


# ------------------------------------------------------------------------------ the queue


class QueueTrigger:
    """Submits the tenant's run to the daemon's run queue (or joins a queued one)."""

    def __init__(
        self, data_dir: str | os.PathLike[str], *, reply_timeout_s: float = REPLY_TIMEOUT_S
    ) -> None:
        self.data_dir = str(data_dir)
        self.reply_timeout_s = reply_timeout_s
        self._dagster_instance: Any = None
        self._lock = threading.Lock()
        self._durations = _Durations()

    def _open(self) -> Any:
        if self._dagster_instance is None:
            from pipelines.runner import instance_for, quiet_dagster

            quiet_dagster()
            self._dagster_instance = instance_for(self.data_dir)
            self._durations.extend(recent_run_seconds(self._dagster_instance))
        return self._dagster_instance

    def prepare(self) -> None:
        """Load the code location and open the instance in the background now, so the first
        write does not wait for them."""
        threading.Thread(target=self._load, name="memflow-queue-load", daemon=True).start()

    def _load(self) -> None:
        from pipelines import location

        try:
            with self._lock:
                self._open()
            location.reconstructable_job(JOB).get_definition()
        except Exception:  # the first write will say what fails
            log.exception("the queue trigger could not load the pipeline")

    def __call__(self, scope: Scope, landed: Path) -> IngestRequest:
        """The answer within `reply_timeout_s`: a submission still under way then (the
        pipeline loading) goes on in the background, and the answer says so."""
        box: dict[str, IngestRequest] = {}

        def submit() -> None:
            try:
                box["answer"] = self._submit(scope)
            except Exception:
                log.exception("submitting the run of %s failed", scope.key)
                box["answer"] = IngestRequest(
                    requested=False, reason="the run could not be submitted: the sensor reads it"
                )

        worker = threading.Thread(target=submit, name="memflow-queue-submit", daemon=True)
        worker.start()
        worker.join(self.reply_timeout_s)
        if "answer" in box:
            return box["answer"]
        return IngestRequest(
            requested=True,
            reason="the tenant's run is being submitted (the pipeline is loading)",
        )

    def _submit(self, scope: Scope) -> IngestRequest:
        from dagster import DagsterRunStatus, RunsFilter

        from assets.partitions import TENANTS
        from pipelines import location
        from pipelines.runner import QUIET

        now = datetime.now(UTC)
        with self._lock:
            instance = self._open()
            if not daemon_alive(instance):
                return IngestRequest(
                    requested=False,
                    reason="no Dagster daemon is running: the landing sensor reads the file "
                    "once one runs (memflow up)",
                )
            tags = tenant_tags(instance, scope.key)
            ordered = list(instance.get_dynamic_partitions(TENANTS))
            waiting = instance.get_runs(
                RunsFilter(
                    job_name=JOB,
                    statuses=[DagsterRunStatus.QUEUED, DagsterRunStatus.NOT_STARTED],
                    tags={BLOCK_TAG: tags[BLOCK_TAG]},
                )
            )
            ahead = len(waiting)
            for run in waiting:
                if _covers(run.tags, scope.key, ordered):
                    return IngestRequest(
                        requested=True,
                        run_id=run.run_id,
                        expected_by=now + timedelta(seconds=self._durations.typical() * ahead),
                        reason="joined a queued run of the tenant",
                    )
            _, run = location.create(JOB, instance, run_config=QUIET, tags=tags)
            instance.submit_run(run.run_id, workspace=None)
        wait = self._durations.typical() * (ahead + 1)
        return IngestRequest(
            requested=True, run_id=run.run_id, expected_by=now + timedelta(seconds=wait)
        )

    def close(self) -> None:
        with self._lock:
            if self._dagster_instance is not None:
                self._dagster_instance.dispose()
                self._dagster_instance = None


def daemon_alive(instance: Any, stale_s: float = DAEMON_STALE_S) -> bool:
    """Whether a daemon's run queue has beaten recently (it launches queued runs)."""
    beats = instance.get_daemon_heartbeats()
    beat = beats.get("QUEUED_RUN_COORDINATOR")
    return beat is not None and time.time() - beat.timestamp < stale_s


# ------------------------------------------------------------------------------ warm worker


class WarmIngestWorker:
    """The API's ingest worker process: the code location loaded once, one run at a time."""

    def __init__(self, data_dir: str | os.PathLike[str], *, start: bool = True) -> None:
        self.data_dir = str(data_dir)
        self._context = multiprocessing.get_context("spawn")  # deltalake, torch: never fork
        self._process: Any = None
        self._conn: Any = None
        self._lock = threading.Lock()  # the process and the pipe's sending end
        self._replies: dict[int, tuple[threading.Event, dict[str, Any]]] = {}
        self._ids = itertools.count(1)
        self._durations = _Durations()
        self._closed = False
        self._started_at = 0.0
        self.failed: str | None = None  # why the worker stopped, when it did
        if start:
            self.start()

    def start(self) -> None:
        with self._lock:
            if self._process is not None and self._process.is_alive():
                return
            parent, child = self._context.Pipe()
            process = self._context.Process(
                target=worker_main,
                args=(child, self.data_dir),
                name="memflow-ingest",
                daemon=True,
            )
            process.start()
            self._started_at = time.monotonic()
            child.close()
            self._process, self._conn, self.failed = process, parent, None
            threading.Thread(
                target=self._read, args=(parent,), name="memflow-ingest-replies", daemon=True
            ).start()

    def _read(self, conn: Any) -> None:
        while True:
            try:
                message = conn.recv()
            except (EOFError, OSError):
                break
            if message.get("event") == "done":
                self._durations.add(message["seconds"])
                continue
            if message.get("event") == "history":
                self._durations.extend(message["seconds"])
                continue
            waiting = self._replies.get(message.get("request", -1))
            if waiting is not None:
                waiting[1].update(message)
                waiting[0].set()
        if not self._closed:
            self.failed = "the ingest worker stopped"
            log.warning("the ingest worker stopped; the landing sensor still reads new files")

    def __call__(self, scope: Scope, landed: Path) -> IngestRequest:
        now = datetime.now(UTC)
        if self._closed:
            return IngestRequest(requested=False, reason="the server is shutting down")
        with self._lock:
            alive = self._process is not None and self._process.is_alive()
            recently = time.monotonic() - self._started_at < RESTART_AFTER_S
        if not alive and self._process is not None and recently:
            return IngestRequest(
                requested=False,
                reason=f"{self.failed or 'the ingest worker stopped'}; the landing sensor reads "
                "the file",
            )
        if not alive:
            self.start()  # a worker that died is replaced (its pending runs: the sensor)
        request = next(self._ids)
        done = threading.Event()
        reply: dict[str, Any] = {}
        self._replies[request] = (done, reply)
        try:
            with self._lock:
                self._conn.send(
                    {"request": request, "tenant": scope.key, "run_id": str(uuid.uuid4())}
                )
            answered = done.wait(REPLY_TIMEOUT_S)
        except (OSError, ValueError):
            answered = False
        finally:
            self._replies.pop(request, None)
        if not answered:  # the request waits in the pipe: the worker takes it when it is ready
            return IngestRequest(
                requested=True,
                reason="the ingest worker is starting (loading the pipeline): the tenant's run "
                "starts when it is ready",
            )
        typical = self._durations.typical()
        wait = max(0.0, typical - reply.get("elapsed", 0.0)) if reply.get("busy") else 0.0
        wait += typical * (reply.get("ahead", 0) + 1)
        return IngestRequest(
            requested=True,
            run_id=reply["run_id"],
            expected_by=now + timedelta(seconds=wait),
            reason="joined the tenant's next run" if reply.get("joined") else None,
        )

    def close(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """Stop after the run under way (at most `timeout_s`, then the worker is killed)."""
        self._closed = True
        with self._lock:
            process, conn = self._process, self._conn
            self._process = None
        if process is None:
            return
        with contextlib.suppress(OSError, ValueError):
            conn.send({"stop": True})
        process.join(timeout_s)
        if process.is_alive():
            process.kill()
            process.join(5)
        with contextlib.suppress(OSError):
            conn.close()

    @property
    def pid(self) -> int | None:
        process = self._process
        return process.pid if process is not None else None
