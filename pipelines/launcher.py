"""A run launcher whose run workers the daemon's run monitoring can see die.

Dagster's `DefaultRunLauncher` starts each run in a process of the code server and cannot
tell whether that process still lives: when a machine, a container or the daemon's whole
process group is killed, its runs stay STARTED in the run storage until `max_runtime_seconds`,
and with memflow's one-run-per-block queue (deploy/dagster.yaml) every later run of that block
waits behind them. `LocalRunLauncher` is the default launcher plus a health check by process
id: the run worker's pid is the one its RUN_START event recorded; a worker that is gone (or
whose pid now belongs to a process started after the run) is reported FAILED, so run
monitoring fails the run and `run_retries` re-executes it.

It holds for deployments where the daemon and the code servers share one host (one machine,
one container, or one pod running both): a pid means nothing across hosts. On Kubernetes use
dagster-k8s's `K8sRunLauncher`, which checks its pods itself.
"""

from __future__ import annotations

from dagster import DagsterEventType, DefaultRunLauncher

# Fenced (tests/test_layers.py allows this module this import and `self._instance`, the
# launcher base class's handle on the instance, only): a run launcher's health
# check must answer with these two types, and Dagster exports them nowhere public; its own
# launchers (dagster-docker, dagster-k8s) import them from here too.
from dagster._core.launcher.base import CheckRunHealthResult, WorkerStatus

from resources.fs import process_started_at

# A process that started this long after the run's RUN_START event is not its worker.
_REUSE_SLACK_S = 5.0


class LocalRunLauncher(DefaultRunLauncher):
    """`DefaultRunLauncher` with `check_run_worker_health` by the run worker's pid (one host)."""

    @property
    def supports_check_run_worker_health(self) -> bool:
        return True

    def check_run_worker_health(self, run) -> CheckRunHealthResult:
        records = self._instance.all_logs(run.run_id, of_type=DagsterEventType.RUN_START)
        if not records:
            # STARTED without a RUN_START event: nothing to check yet.
            return CheckRunHealthResult(WorkerStatus.RUNNING, "no RUN_START event yet")
        record = records[-1]
        pid = record.dagster_event.pid if record.dagster_event else None
        if not pid:
            return CheckRunHealthResult(WorkerStatus.RUNNING, "the worker's pid is unknown")
        started = process_started_at(pid)
        if started is None:
            return CheckRunHealthResult(WorkerStatus.FAILED, f"run worker (pid {pid}) is gone")
        if started > record.timestamp + _REUSE_SLACK_S:
            return CheckRunHealthResult(
                WorkerStatus.FAILED, f"run worker (pid {pid}) is gone; the pid was reused"
            )
        return CheckRunHealthResult(WorkerStatus.RUNNING)


__all__ = ["LocalRunLauncher"]
