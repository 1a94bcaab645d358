"""`memflow run`'s orchestration: runs of the code location's job, many tenants per run, a subset
touches only those tenants, and one failing tenant never stops the others."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from dagster import DagsterInstance, DagsterRunStatus, RunsFilter

from pipelines.batches import SOURCE_TAG
from pipelines.runner import run_all
from pipelines.settings import resolve
from resources.settings import DEFAULTS
from resources.tables import TableStore
from schemas.scope import Scope
from tests.pipeline.landing_fixtures import save, small_landing, write_jsonl
from tests.support.leftovers import assert_no_process_left


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    landing, data = small_landing(tmp_path / "landing"), tmp_path / "data"
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    for name in DEFAULTS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MEMFLOW_EMBEDDER", "none")
    resolve({"MEMFLOW_LANDING_DIR": str(landing), "MEMFLOW_DATA_DIR": str(data)}, tmp_path / "x")
    yield landing, data
    assert_no_process_left(data)


def test_run_all_for_a_subset_of_tenants_then_all_in_one_run(env) -> None:
    landing, data = env
    first = run_all(str(landing), str(data), tenants=["globex/ml"])
    # one run: the survey and the tenant's assets (run_job)
    assert [s.key for s in first.tenants] == ["globex/ml"] and first.runs == 1
    tables = TableStore(data)
    assert tables.read("validated_facts", Scope("globex", "ml")).height == 1
    assert tables.read("validated_facts", Scope("acme", "api")) is None
    both = run_all(str(landing), str(data))
    assert both.runs == 1 and not both.failures
    assert tables.read("validated_facts", Scope("acme", "api")).height == 3

    instance = DagsterInstance.get()
    runs = instance.get_runs(RunsFilter(tags={SOURCE_TAG: "cli"}))
    # The code location's own jobs, so the UI can re-execute them.
    assert {r.job_name for r in runs} == {"run_job"}
    assert all(r.status == DagsterRunStatus.SUCCESS for r in runs)


def test_a_run_in_a_process_that_ignores_sigint_leaves_sigterm_as_it_was(env) -> None:
    """A process started in the background ignores SIGINT; Dagster's in-process execution
    maps SIGTERM to SIGINT's handler and leaves it there, which made SIGTERM ignored after a
    run (and in every program started after it). The run puts SIGTERM back."""
    landing, data = env
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        outcome = run_all(str(landing), str(data), tenants=["globex/ml"])
        assert outcome.runs == 1 and not outcome.failures
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    finally:
        signal.signal(signal.SIGINT, before)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


# A `memflow run` of two runs (one tenant each) that signals itself during the first run's
# first table write, as `kill` or Ctrl-C would during a step.
_SIGNALLED_RUN = """
import os, signal, sys
# a shell's background job ignores SIGINT; a foreground one has Python's own handler
signal.signal(
    signal.SIGINT,
    signal.SIG_IGN if sys.argv[1] == "background" else signal.default_int_handler,
)
from resources.tables import TableStore
from pipelines.runner import run_all
write = TableStore.write_tenants
def signalled(self, *args, **kwargs):
    TableStore.write_tenants = write
    os.kill(os.getpid(), signal.SIGTERM if sys.argv[1] == "background" else signal.SIGINT)
    return write(self, *args, **kwargs)
TableStore.write_tenants = signalled
run_all(sys.argv[2], sys.argv[3], max_tenants_per_run=1)
print("carried on")
"""


@pytest.mark.parametrize(
    ("started", "signum"), [("background", signal.SIGTERM), ("foreground", signal.SIGINT)]
)
def test_kill_or_ctrl_c_during_a_step_stops_the_run_without_retrying_the_step(
    env, started: str, signum: signal.Signals
) -> None:
    """Dagster's handlers keep a signal to themselves and its retry policy reran the
    interrupted step, so `memflow run` carried on through every tenant: now the step fails
    without a retry and the signal is delivered again once the run is over."""
    landing, data = env
    done = subprocess.run(
        [sys.executable, "-c", _SIGNALLED_RUN, started, str(landing), str(data)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert done.returncode == -signum, done.stdout + done.stderr[-3000:]
    assert "carried on" not in done.stdout
    instance = DagsterInstance.get()
    runs = instance.get_runs()
    assert len(runs) == 1 and runs[0].status == DagsterRunStatus.FAILURE
    kinds = [
        record.dagster_event.event_type_value
        for record in instance.all_logs(runs[0].run_id)
        if record.dagster_event is not None
    ]
    assert "STEP_FAILURE" in kinds
    assert "STEP_UP_FOR_RETRY" not in kinds and "STEP_RESTARTED" not in kinds


_INTERRUPTED_CLI = """
import os, signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)  # a foreground process, as in a shell
from resources.tables import TableStore
from pipelines.cli import main
write = TableStore.write_tenants
def interrupted(self, *args, **kwargs):
    TableStore.write_tenants = write
    os.kill(os.getpid(), signal.SIGINT)
    return write(self, *args, **kwargs)
TableStore.write_tenants = interrupted
main(["run", "--landing", sys.argv[1], "--data", sys.argv[2]])
print("carried on")
"""


def test_ctrl_c_during_memflow_run_says_interrupted_without_a_traceback(env) -> None:
    """`memflow run` interrupted by Ctrl-C prints one line, not Python's traceback, and still
    ends by SIGINT, so a shell sees an interrupt (130), not a failure."""
    landing, data = env
    done = subprocess.run(
        [sys.executable, "-c", _INTERRUPTED_CLI, str(landing), str(data)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert done.returncode == -signal.SIGINT, done.stdout + done.stderr[-3000:]
    assert "memflow: interrupted" in done.stderr
    assert "Traceback" not in done.stderr and "KeyboardInterrupt" not in done.stderr
    assert "carried on" not in done.stdout


def test_ctrl_c_while_an_error_is_handled_still_shows_the_error() -> None:
    """A Ctrl-C that lands while a real error is being handled must not hide it behind the
    one line; a plain Ctrl-C gets the line; other hooks are chained, not replaced."""
    from pipelines.cli import _interrupted_hook

    seen: list[str] = []
    hook = _interrupted_hook(lambda kind, error, tb: seen.append(kind.__name__))
    try:
        try:
            raise OSError("No space left on device")
        except OSError:
            raise KeyboardInterrupt  # noqa: B904 (the Ctrl-C lands during the handling)
    except KeyboardInterrupt as interrupt:
        hook(KeyboardInterrupt, interrupt, interrupt.__traceback__)
    assert seen == ["KeyboardInterrupt"]  # the previous hook prints it, with the OSError
    plain = KeyboardInterrupt()
    hook(KeyboardInterrupt, plain, None)
    hook(ValueError, ValueError("x"), None)
    assert seen == ["KeyboardInterrupt", "ValueError"]


def test_one_failing_tenant_is_isolated_and_reported_and_the_rest_lands(
    env, monkeypatch: pytest.MonkeyPatch
) -> None:
    landing, data = env
    for org in ("hooli", "initech"):
        write_jsonl(
            landing,
            org,
            "core",
            "a.jsonl",
            [
                save(
                    org,
                    "core",
                    "s",
                    "1",
                    "2026-11-02T00:00:00Z",
                    [{"subject": "svc", "predicate": "USES", "object": "redis"}],
                )
            ],
        )
    import memflow.facts

    real = memflow.facts.build_facts

    def broken(scope, *args, **kwargs):
        if scope.key == "hooli/core":
            raise RuntimeError("simulated bug for hooli/core")
        return real(scope, *args, **kwargs)

    monkeypatch.setattr("assets.facts.build_facts", broken)
    outcome = run_all(str(landing), str(data))
    assert [f.tenant for f in outcome.failures] == ["hooli/core"]
    failure = outcome.failures[0]
    assert failure.asset == "validated_facts"
    assert "simulated bug for hooli/core" in failure.reason
    assert failure.run_id in failure.line(outcome.dagster_home)
    tables = TableStore(data)
    for key in ("acme/api", "globex/ml", "initech/core"):
        assert tables.read("validated_facts", Scope.parse(key)).height >= 1, key
    assert tables.read("validated_facts", Scope("hooli", "core")) is None
    # 4 tenants: the batch (with the survey), its two halves, and the failing half's halves
    assert outcome.runs == 5
    assert instance_jobs() == ["run_job"] + ["ingest_job"] * 4


def instance_jobs() -> list[str]:
    """The jobs of the instance's runs, oldest first."""
    return [r.job_name for r in reversed(DagsterInstance.get().get_runs())]


def test_a_failed_survey_step_is_reported_and_the_tenants_still_land(
    env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The landing-zone survey fails in the first run: reported as a failure of the survey,
    nothing rerun (no tenant step waited on it), every tenant lands."""
    landing, data = env

    def unreadable(_root):
        raise PermissionError("landing zone not readable")

    monkeypatch.setattr("assets.landing.landing.landing_problems", unreadable)
    outcome = run_all(str(landing), str(data))
    assert [(f.asset, f.tenant) for f in outcome.failures] == [("landing_problems", "(survey)")]
    assert "landing zone not readable" in outcome.failures[0].reason
    assert outcome.runs == 1 and instance_jobs() == ["run_job"]
    tables = TableStore(data)
    assert all(tables.read("validated_facts", s) is not None for s in outcome.tenants)


def test_a_failed_model_observation_reruns_what_waited_on_it_without_the_survey(
    env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """extracted_triples depends on the extraction model's observation: when the observation
    fails, the range is rerun as an ingest_job run (no observation in it) and lands."""
    from resources.configurable import ExtractionModelResource

    landing, data = env

    def broken(self) -> str:
        raise RuntimeError("settings file vanished")

    monkeypatch.setattr(ExtractionModelResource, "source", broken)
    outcome = run_all(str(landing), str(data))
    assert [(f.asset, f.tenant) for f in outcome.failures] == [("extraction_model", "(survey)")]
    assert outcome.runs == 2 and instance_jobs() == ["run_job", "ingest_job"]
    tables = TableStore(data)
    assert all(tables.read("validated_facts", s) is not None for s in outcome.tenants)


def test_an_empty_landing_zone_is_still_surveyed(env, tmp_path: Path) -> None:
    _, data = env
    empty = tmp_path / "empty"
    (empty / "not a scope").mkdir(parents=True)
    (empty / "not a scope" / "x.jsonl").write_text("{}\n")
    resolve({"MEMFLOW_LANDING_DIR": str(empty), "MEMFLOW_DATA_DIR": str(data)}, tmp_path / "y")
    outcome = run_all(str(empty), str(data))
    assert not outcome.tenants and outcome.runs == 1 and instance_jobs() == ["survey_job"]
    assert outcome.problems and "not a scope" in outcome.problems[0]


def test_status_reads_a_data_dir_a_killed_run_left_behind(env) -> None:
    """F13: tables written empty (no columns) must not crash `memflow status`; a half-way
    write cannot happen on Delta tables (a commit is whole or absent), and rows of no scope
    are refused before anything is written."""
    from pipelines.status import status
    from pipelines.status_text import format_status
    from resources.settings import Settings

    landing, data = env
    assert not run_all(str(landing), str(data), tenants=["globex/ml"]).failures
    tables = TableStore(data)
    scope = Scope("globex", "ml")
    tables.write(pl.DataFrame(), "validated_facts", scope)
    tables.write(pl.DataFrame(), "quarantine", scope)
    before = tables.version("landing_files")
    with pytest.raises(ValueError, match="another scope"):
        tables.write(pl.DataFrame({"x": [1]}), "landing_files", scope)
    assert tables.version("landing_files") == before
    report = status(Settings.from_env())
    (entry,) = report["tenants"]
    assert entry["tables"]["validated_facts"] == 0
    assert "globex/ml" in format_status(report)
    # the graph still holds the facts the emptied table lost: flagged from the counts alone
    assert entry["graph"]["facts"] > 0 and entry["graph"]["equals_table"] is False
    assert entry["attention"] == ["graph differs from its tables"]
    (verified,) = status(Settings.from_env(), verify=True)["tenants"]
    assert verified["graph"]["equals_table"] is False
    assert verified["graph"]["diff"]["extra_facts"] == entry["graph"]["facts"]


def _break_survey(monkeypatch: pytest.MonkeyPatch) -> None:
    def unreadable(_root):
        raise PermissionError("landing zone not readable")

    monkeypatch.setattr("assets.landing.landing.landing_problems", unreadable)


@pytest.mark.parametrize("where", ["empty zone", "unknown tenant", "tenants"])
def test_the_cli_prints_a_failed_survey_as_the_surveys_failure(
    env, where: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """Red team F1/F2: printed on every path (no tenant to run included), never counted as a
    tenant, exit 1; the collector setting of `memflow run` does not outlive the command."""
    import gc

    from pipelines import runner
    from pipelines.cli import RUN_GC_THRESHOLD, main

    landing, data = env
    args = ["run", "--landing", str(landing), "--data", str(data)]
    if where == "empty zone":
        (tmp_path / "empty").mkdir()
        resolve({"MEMFLOW_LANDING_DIR": str(tmp_path / "empty")}, tmp_path / "y")
        args[2] = str(tmp_path / "empty")
    elif where == "unknown tenant":
        args += ["--tenant", "acme/typo"]
    _break_survey(monkeypatch)
    before, frozen = gc.get_threshold(), gc.get_freeze_count()
    assert before != RUN_GC_THRESHOLD
    seen: list[tuple[tuple[int, int, int], int]] = []
    real_run_all = runner.run_all

    def spy(*a, **kw):  # what the collector looks like while the command runs
        seen.append((gc.get_threshold(), gc.get_freeze_count()))
        return real_run_all(*a, **kw)

    monkeypatch.setattr(runner, "run_all", spy)
    assert main(args) == 1
    assert seen and seen[0][0] == RUN_GC_THRESHOLD and seen[0][1] > frozen  # definitions frozen
    out, err = capsys.readouterr()
    assert "FAILED landing_problems [(survey)]: PermissionError: landing zone not readable" in out
    assert "tenant(s) failed" not in err
    if where == "tenants":
        assert "a survey step failed" in err and "acme/api" in out  # the summary: tenants landed
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == frozen  # and unfrozen after it
