"""`memflow run`'s orchestration: runs of the code location's job, many tenants per run, a subset
touches only those tenants, and one failing tenant never stops the others."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from dagster import DagsterInstance, DagsterRunStatus, RunsFilter

from pipelines.batches import SOURCE_TAG
from pipelines.runner import run_all
from pipelines.settings import resolve
from resources.settings import DEFAULTS
from resources.tables import TableStore
from resources.vector.lite_server import stop_lite_server
from schemas.scope import Scope
from tests.pipeline.landing_fixtures import save, small_landing, write_jsonl


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    landing, data = small_landing(tmp_path / "landing"), tmp_path / "data"
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    for name in DEFAULTS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MEMFLOW_EMBEDDER", "none")
    resolve({"MEMFLOW_LANDING_DIR": str(landing), "MEMFLOW_DATA_DIR": str(data)}, tmp_path / "x")
    yield landing, data
    stop_lite_server(data)


def test_run_all_for_a_subset_of_tenants_then_all_in_one_run(env) -> None:
    landing, data = env
    first = run_all(str(landing), str(data), tenants=["globex/ml"])
    assert [s.key for s in first.tenants] == ["globex/ml"] and first.runs == 2  # survey, ingest
    tables = TableStore(data)
    assert tables.read("validated_facts", Scope("globex", "ml")).height == 1
    assert tables.read("validated_facts", Scope("acme", "api")) is None
    both = run_all(str(landing), str(data))
    assert both.runs == 2 and not both.failures
    assert tables.read("validated_facts", Scope("acme", "api")).height == 3

    instance = DagsterInstance.get()
    runs = instance.get_runs(RunsFilter(tags={SOURCE_TAG: "cli"}))
    # The code location's own jobs, so the UI can re-execute them.
    assert {r.job_name for r in runs} == {"ingest_job", "survey_job"}
    assert all(r.status == DagsterRunStatus.SUCCESS for r in runs)


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
    # the survey; 4 tenants: the batch, its two halves, and the failing half's halves
    assert outcome.runs == 6


def test_status_reads_a_data_dir_a_killed_run_left_behind(env) -> None:
    """F13: tables written empty (no columns) or half-way must not crash `memflow status`."""
    from pipelines.status import format_status, status
    from resources.settings import Settings

    landing, data = env
    assert not run_all(str(landing), str(data), tenants=["globex/ml"]).failures
    tables = TableStore(data)
    scope = Scope("globex", "ml")
    tables.write(pl.DataFrame(), "validated_facts", scope)
    tables.write(pl.DataFrame(), "quarantine", scope)
    tables.write(pl.DataFrame({"x": [1]}), "landing_files", scope)
    report = status(Settings.from_env())
    (entry,) = report["tenants"]
    assert entry["tables"]["validated_facts"] == 0
    assert "globex/ml" in format_status(report)
