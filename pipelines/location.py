"""Runs that `memflow run` executes itself, recorded as runs of the code location `dagster dev`
loads from `workspace.yaml`.

Dagster's `execute_in_process` records a run without the origin of a code location. The UI then
shows the run but cannot re-execute it: the re-execution looks the job up by the parent run's
location and repository (`launch_reexecution_from_parent_run` fails with "Expected non-None
value"), and warns that the job "may be a different version" because the in-process snapshot
carries another executor. Here the run is created with the origin `dagster dev` gives the
location and the snapshot of the job as the location defines it, then executed in this process
(the job's own `in_process_executor`), so the UI treats it like a run it launched.

The fenced exception to "Dagster's public API only" (tests/test_layers.py allows it, and beside
it the local event log `pipelines/event_log.py` and the two health-check types of
`pipelines/launcher.py`); no public API records a run with a code location's origin. dagster
is pinned to 1.13.x.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
from collections.abc import Iterator, Mapping
from typing import Any

from dagster import DagsterInstance, DagsterRun
from dagster._core.definitions.reconstruct import ReconstructableJob, ReconstructableRepository
from dagster._core.definitions.repository_definition import SINGLETON_REPOSITORY_NAME
from dagster._core.execution.api import execute_run
from dagster._core.execution.job_execution_result import JobExecutionResult
from dagster._core.remote_origin import (
    ManagedGrpcPythonEnvCodeLocationOrigin,
    RemoteJobOrigin,
    RemoteRepositoryOrigin,
)
from dagster._core.types.loadable_target_origin import LoadableTargetOrigin

# workspace.yaml loads this module without a `location_name`, so Dagster names the location
# after the module (tests/pipeline/test_location.py keeps the two equal).
MODULE = "pipelines.definitions"
LOCATION_NAME = MODULE
DEFS_ATTRIBUTE = "defs"


def job_origin(job_name: str, working_directory: str | None = None) -> RemoteJobOrigin:
    """The origin a run of `job_name` launched from `dagster dev` carries."""
    location = ManagedGrpcPythonEnvCodeLocationOrigin(
        LoadableTargetOrigin(
            module_name=MODULE, working_directory=working_directory or os.getcwd()
        ),
        location_name=LOCATION_NAME,
    )
    return RemoteJobOrigin(RemoteRepositoryOrigin(location, SINGLETON_REPOSITORY_NAME), job_name)


def reconstructable_job(job_name: str, working_directory: str | None = None) -> ReconstructableJob:
    repository = ReconstructableRepository.for_module(
        MODULE, DEFS_ATTRIBUTE, working_directory=working_directory or os.getcwd()
    )
    return repository.get_reconstructable_job(job_name)


def create(
    job_name: str,
    instance: DagsterInstance,
    *,
    run_config: Mapping[str, Any] | None = None,
    tags: Mapping[str, str] | None = None,
    run_id: str | None = None,
) -> tuple[ReconstructableJob, DagsterRun]:
    """A run of the code location's job `job_name`, recorded (NOT_STARTED) with the origin
    `dagster dev` gives the location: `execute` runs it here, or the run queue launches it
    (`DagsterInstance.submit_run`)."""
    recon = reconstructable_job(job_name)
    run = instance.create_run_for_job(
        job_def=recon.get_definition(),
        run_id=run_id,
        run_config=dict(run_config or {}),
        tags=dict(tags or {}),
        remote_job_origin=job_origin(job_name),
        job_code_origin=recon.get_python_origin(),
    )
    return recon, run


def execute(
    job_name: str,
    instance: DagsterInstance,
    *,
    run_config: Mapping[str, Any] | None = None,
    tags: Mapping[str, str] | None = None,
    run_id: str | None = None,
) -> JobExecutionResult:
    """Run the code location's job `job_name` in this process, recorded as a run of the
    location (re-executable from the UI); never raises for a failed step."""
    recon, run = create(job_name, instance, run_config=run_config, tags=tags, run_id=run_id)
    with signals_after_the_run():
        return execute_run(recon, run, instance, raise_on_error=False)


@contextlib.contextmanager
def signals_after_the_run() -> Iterator[None]:
    """SIGTERM's handler as it was before the block, and a SIGTERM or SIGINT that arrived
    during it delivered again after it.

    Dagster's in-process execution hands SIGTERM to SIGINT's handler and leaves it there; in a
    process started in the background SIGINT is ignored, so SIGTERM would stay ignored after
    the run: `kill` would no longer stop `memflow run`, and every program it started afterwards
    (an extraction command) would inherit the ignored signal. And Dagster's handlers keep a
    signal that arrives during the run to themselves: the run fails (an interrupted step is
    not retried: `assets.retries`), but `memflow run` would go on to its next run. The wakeup
    fd records every signal a Python handler caught, so it is raised again once the handlers
    are back: the default SIGTERM ends the process, Ctrl-C raises KeyboardInterrupt, an
    ignored signal stays ignored."""
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread's handlers can change
        return
    before = signal.getsignal(signal.SIGTERM)
    reader, writer = socket.socketpair()
    with reader, writer:
        reader.setblocking(False)
        writer.setblocking(False)
        previous_fd = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
        try:
            yield
        finally:
            signal.set_wakeup_fd(previous_fd)
            if before is not None:  # None: a handler not set from Python, nothing to put back
                signal.signal(signal.SIGTERM, before)
            caught = b""
            with contextlib.suppress(BlockingIOError):  # nothing was caught
                caught = reader.recv(4096)
            for sig in (signal.SIGTERM, signal.SIGINT):
                if sig in caught:
                    signal.raise_signal(sig)
