"""Generated landing zones through the real pipeline: `run_all` in-process and `memflow run` in
a subprocess (over a zone that also holds what the write endpoints landed for generated
requests), into a fresh data directory with no embedding model. The run finishes with no
failed tenant; every tenant's lines and triples balance (`pipelines.status.tenant_summary`) and
the zone's lines are all accounted for; no asset check of severity error fails (the blocking
contract checks never fire); no planted secret is in any table, graph.sqlite, Dagster's event
log and run storage, a stored file name, the run's output or its log records
(`tests.fuzz.invariants.check_data_dir`)."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given

from pipelines.runner import run_all
from pipelines.settings import resolve
from resources.settings import DEFAULTS
from tests.fuzz.invariants import Counts, check_data_dir
from tests.fuzz.profile import COMBINATORIAL_SEEDS, FUZZ, PIPELINE, TALLY
from tests.fuzz.writes import Api, land_generated
from tests.fuzz.zones import Zone, combinatorial_zone, zones
from tests.support.leftovers import assert_no_process_left

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
EVERY_VARIANT = 1_000_000  # per_zone: one zone holds every variant of a seed
API_REQUESTS = 400 if FUZZ else 60  # generated writes landed next to it


@pytest.fixture
def clean_env() -> Iterator[None]:
    """No memflow or Dagster setting from outside, no embedding model; the environment as it
    was afterwards (`resolve` and `run_all` export settings and DAGSTER_HOME)."""
    saved = dict(os.environ)
    for name in (*DEFAULTS, "DAGSTER_HOME"):
        os.environ.pop(name, None)
    os.environ["MEMFLOW_EMBEDDER"] = "none"
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _run_in_process(zone: Zone, capfd: pytest.CaptureFixture[str], caplog) -> None:
    base = Path(tempfile.mkdtemp(prefix="memflow-fuzz-run-"))
    landing, data = base / "landing", base / "data"
    try:
        zone.write(landing, base / "outside")
        os.environ.pop("DAGSTER_HOME", None)  # each example its own Dagster instance
        resolve({"MEMFLOW_LANDING_DIR": str(landing), "MEMFLOW_DATA_DIR": str(data)}, base / "-")
        caplog.clear()
        with caplog.at_level(logging.DEBUG):
            outcome = run_all(str(landing), str(data))
        out = capfd.readouterr()
        said = [out.out, out.err, caplog.text, *outcome.problems]
        said += [f.line(outcome.dagster_home) for f in outcome.failures]
        counts = check_data_dir(zone, landing, data, said, outcome.failures)
        TALLY.add("pipeline", counts)
        counts.assert_clean()
    finally:
        assert_no_process_left(data)
        shutil.rmtree(base, ignore_errors=True)


@PIPELINE
@given(zone=zones(tenants=4, files=3, lines=10))
def test_a_generated_zone_runs_with_no_failed_tenant_and_no_secret(
    zone: Zone, clean_env: None, capfd: pytest.CaptureFixture[str], caplog
) -> None:
    _run_in_process(zone, capfd, caplog)


def memflow(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pipelines.cli", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


@pytest.mark.parametrize("seed", COMBINATORIAL_SEEDS[: 4 if FUZZ else 1])
def test_every_variant_and_every_accepted_write_in_one_memflow_run(
    seed: int, tmp_path: Path, api: Api
) -> None:
    """One landing zone holding every variant of every family and the files the write
    endpoints landed for generated requests, through the real CLI: exit 0, no FAILED or NOT
    ACCOUNTED line, and neither the data directory, nor the run's output, nor `memflow status`
    shows a planted secret."""
    zone = combinatorial_zone(seed, 0, per_zone=EVERY_VARIANT)
    landing, data = tmp_path / "landing", tmp_path / "data"
    zone.write(landing, tmp_path / "outside")
    answers = Counts()
    accepted, secrets = land_generated(api, landing, API_REQUESTS, seed, answers)
    assert accepted, "no generated write was accepted"
    zone.secrets += secrets
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMFLOW_", "DAGSTER_"))}
    env.update(MEMFLOW_EMBEDDER="none", CI="true")
    try:
        run = memflow("run", "--landing", str(landing), "--data", str(data), env=env)
        status = memflow("status", "--data", str(data), "--json", env=env)
    finally:
        assert_no_process_left(data)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "FAILED" not in run.stdout and "NOT ACCOUNTED" not in run.stdout
    assert status.returncode == 0, status.stderr[-3000:]
    for tenant in json.loads(status.stdout)["tenants"]:
        acc = tenant["accounting"]
        assert acc["lines_accounted"] and acc["triples_accounted"], tenant["tenant"]
    said = [run.stdout, run.stderr, status.stdout, status.stderr]
    counts = check_data_dir(zone, landing, data, said, [])
    TALLY.add("cli", counts)
    answers.inputs = API_REQUESTS
    TALLY.add("api_answers", answers)
    answers.assert_clean()
    counts.assert_clean()
