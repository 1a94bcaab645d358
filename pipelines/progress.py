"""Progress of a run memflow executes itself (`memflow run`): one line per finished stage, with
the run id, its tenant block and range, as the stage ends, on a terminal and in a log alike.

    with watch_run(instance, say, "run_job [acme/api .. globex/ml] block 0") as run_id:
        location.execute("run_job", instance, run_id=run_id, ...)

`watch_run` names the run before it is created and reads its step events from the instance in
a thread (`DagsterInstance.all_logs`), so the lines come while the run works, not after it.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

POLL_S = 1.0


@contextlib.contextmanager
def watch_run(
    instance: Any, say: Callable[[str], None] | None, label: str, *, poll_s: float = POLL_S
) -> Iterator[str]:
    """A new run id, whose finished steps are reported through `say` until the block ends."""
    run_id = str(uuid.uuid4())
    if say is None:
        yield run_id
        return
    stop = threading.Event()
    started, epoch = time.monotonic(), time.time()
    short = run_id[:8]
    say(f"run {short} {label}: started")

    def report() -> None:
        from dagster import DagsterEventType

        kinds = {DagsterEventType.STEP_SUCCESS, DagsterEventType.STEP_FAILURE}
        seen: set[str] = set()
        while True:
            last = stop.wait(poll_s)
            try:
                records = instance.all_logs(run_id, of_type=kinds)
            except Exception:  # the run's log is being created; try again
                records = []
            for record in records:
                event = record.dagster_event
                step = (event.step_key if event else None) or "?"
                if step in seen:
                    continue
                seen.add(step)
                what = "done" if event and event.is_step_success else "FAILED"
                at = max(record.timestamp - epoch, 0.0)
                say(f"run {short} {label}: {step} {what} at {at:.1f} s")
            if last:
                return

    thread = threading.Thread(target=report, name="memflow-progress", daemon=True)
    thread.start()
    try:
        yield run_id
    finally:
        stop.set()
        thread.join(30)
        say(f"run {short} {label}: ended after {time.monotonic() - started:.1f} s")
