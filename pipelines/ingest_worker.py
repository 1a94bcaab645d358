"""The API's warm ingest worker process (`pipelines.trigger.WarmIngestWorker`): it answers
each request at once from a reader thread (joining the tenant's next run, or queueing one), and
runs the requests one at a time, oldest first, in this process, where the code location is
loaded once.

Light at import: the process is spawned, and until this module is imported no request is
answered; Dagster and the pipeline load after the reader thread runs.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections import OrderedDict
from typing import Any

JOB = "ingest_job"
SOURCE = "api"
RECENT_RUNS = 20


def recent_run_seconds(instance: Any, limit: int = RECENT_RUNS) -> list[float]:
    """How long recent successful `ingest_job` runs took, creation to end (queue included)."""
    from dagster import DagsterRunStatus, RunsFilter

    records = instance.get_run_records(
        RunsFilter(job_name=JOB, statuses=[DagsterRunStatus.SUCCESS]), limit=limit
    )
    out = []
    for record in records:
        if record.end_time and record.create_timestamp:
            out.append(max(0.0, record.end_time - record.create_timestamp.timestamp()))
    return out


def tenant_tags(instance: Any, key: str) -> dict[str, str]:
    """The tags of a one-tenant run (adding the tenant's partition if it is new)."""
    from assets.partitions import TENANTS
    from pipelines.batches import SOURCE_TAG, run_tags

    if not instance.has_dynamic_partition(TENANTS, key):
        instance.add_dynamic_partitions(TENANTS, [key])
    ordered = list(instance.get_dynamic_partitions(TENANTS))
    return {**run_tags(ordered, key, key), SOURCE_TAG: SOURCE}


def worker_main(conn: Any, data_dir: str) -> None:
    """The worker process: answer requests at once (a reader thread), run them in order.

    It leaves the server's process group first: a SIGTERM or Ctrl-C to that group (`memflow
    up` stopping `memflow serve`) would interrupt the run under way (Dagster marks it failed);
    the server's `close()` asks the worker to stop after that run instead, and a server that
    died closes the pipe, which stops it the same way."""
    with contextlib.suppress(OSError):
        os.setpgid(0, 0)
    pending: OrderedDict[str, str] = OrderedDict()  # tenant -> run id of its next run
    state = {"running": None, "since": 0.0, "stop": False}
    lock = threading.Condition()
    send_lock = threading.Lock()

    def send(message: dict[str, Any]) -> None:
        with send_lock, contextlib.suppress(OSError, ValueError):
            conn.send(message)

    def read() -> None:
        while True:
            try:
                message = conn.recv()
            except (EOFError, OSError):
                message = {"stop": True}  # the API is gone
            with lock:
                if message.get("stop"):
                    state["stop"] = True
                    lock.notify_all()
                    return
                tenant = message["tenant"]
                joined = tenant in pending
                if not joined:
                    pending[tenant] = message["run_id"]
                run_id = pending[tenant]
                ahead = list(pending).index(tenant)
                busy = state["running"] is not None
                elapsed = time.monotonic() - state["since"] if busy else 0.0
                lock.notify_all()
            send(
                {
                    "request": message["request"],
                    "run_id": run_id,
                    "joined": joined,
                    "ahead": ahead,
                    "busy": busy,
                    "elapsed": elapsed,
                }
            )

    threading.Thread(target=read, name="memflow-ingest-requests", daemon=True).start()

    from pipelines.runner import (
        EVENT_BATCH_ENV,
        EVENT_BATCH_SIZE,
        PLANNED_EVENTS_ENV,
        QUIET,
        instance_for,
        quiet_dagster,
    )

    quiet_dagster()
    os.environ.setdefault(PLANNED_EVENTS_ENV, "1")
    os.environ.setdefault(EVENT_BATCH_ENV, EVENT_BATCH_SIZE)
    from pipelines import location

    instance = instance_for(data_dir)
    location.reconstructable_job(JOB).get_definition()  # load the code location now
    send({"event": "history", "seconds": recent_run_seconds(instance)})
    while True:
        with lock:
            while not pending and not state["stop"]:
                lock.wait()
            if state["stop"]:
                break
            tenant, run_id = pending.popitem(last=False)
            state["running"], state["since"] = run_id, time.monotonic()
        started = time.monotonic()
        success = False
        try:
            tags = tenant_tags(instance, tenant)
            result = location.execute(JOB, instance, run_config=QUIET, tags=tags, run_id=run_id)
            success = result.success
        except Exception:  # one tenant's failure never stops the worker
            logging.getLogger("memflow.trigger").exception("ingest run %s failed", run_id)
        with lock:
            state["running"] = None
        send({"event": "done", "run_id": run_id, "success": success,
              "seconds": time.monotonic() - started})  # fmt: skip
    instance.dispose()
