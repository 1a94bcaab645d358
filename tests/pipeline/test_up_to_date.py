"""A plain `memflow run` runs only the tenants with something to do (`pipelines.up_to_date`):
new or changed landing directories, tenants a run did not complete, and every tenant when the
models, code or settings changed; `--all` runs every tenant."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from dagster import DagsterInstance, RunsFilter

from pipelines import up_to_date
from pipelines.batches import SOURCE_TAG
from pipelines.runner import run_all
from pipelines.settings import resolve
from resources.settings import DEFAULTS
from tests.pipeline.landing_fixtures import save, small_landing, write_jsonl
from tests.support.leftovers import assert_no_process_left

TRIPLE = [{"subject": "svc", "predicate": "USES", "object": "redis"}]


def add_file(landing: Path, org: str, repo: str, name: str) -> None:
    write_jsonl(
        landing, org, repo, name, [save(org, repo, name, "1", "2026-11-02T00:00:00Z", TRIPLE)]
    )


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    landing, data = small_landing(tmp_path / "landing"), tmp_path / "data"
    add_file(landing, "initech", "core", "a.jsonl")  # three tenants
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    for name in DEFAULTS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MEMFLOW_EMBEDDER", "none")
    resolve({"MEMFLOW_LANDING_DIR": str(landing), "MEMFLOW_DATA_DIR": str(data)}, tmp_path / "x")
    yield landing, data
    assert_no_process_left(data)


def ran(outcome) -> list[str]:
    return sorted(s.key for s in outcome.tenants)


def last_run_partitions() -> str:
    run = DagsterInstance.get().get_runs(RunsFilter(tags={SOURCE_TAG: "cli"}), limit=1)[0]
    tags = run.tags
    start, end = "dagster/asset_partition_range_start", "dagster/asset_partition_range_end"
    return f"{tags.get(start)}..{tags.get(end)}"


ALL = ["acme/api", "globex/ml", "initech/core"]


def test_only_what_changed_runs(env) -> None:
    landing, data = env
    first = run_all(str(landing), str(data))
    assert ran(first) == ALL and not first.up_to_date
    # nothing new: no tenant runs, the survey still does (one survey_job run)
    idle = run_all(str(landing), str(data))
    assert ran(idle) == [] and len(idle.up_to_date) == 3 and idle.runs == 1
    assert DagsterInstance.get().get_runs(limit=1)[0].job_name == "survey_job"
    # one new file among three tenants: that tenant only, in one run over one partition
    add_file(landing, "globex", "ml", "b.jsonl")
    one = run_all(str(landing), str(data))
    assert ran(one) == ["globex/ml"] and one.runs == 1 and not one.failures
    assert last_run_partitions() == "globex/ml..globex/ml"
    assert sorted(s.key for s in one.up_to_date) == ["acme/api", "initech/core"]
    # --all: every tenant
    assert ran(run_all(str(landing), str(data), all_tenants=True)) == ALL
    # bounded: one entry per tenant
    record = json.loads(up_to_date.record_path(data).read_text())
    assert sorted(record["tenants"]) == ALL


def test_a_changed_model_identity_runs_every_tenant(env, monkeypatch: pytest.MonkeyPatch) -> None:
    landing, data = env
    assert ran(run_all(str(landing), str(data))) == ALL
    monkeypatch.setattr(
        "resources.configurable.ExtractionModelResource.identity", lambda self: "other-extractor"
    )
    assert ran(run_all(str(landing), str(data))) == ALL
    assert ran(run_all(str(landing), str(data))) == []
    monkeypatch.setattr(
        "resources.configurable.EmbeddingModelResource.identity", lambda self: "other-embedder"
    )
    assert ran(run_all(str(landing), str(data))) == ALL
    # a setting that shapes outputs
    monkeypatch.setenv("MEMFLOW_RETENTION_DAYS", "30")
    assert ran(run_all(str(landing), str(data))) == ALL


def test_a_failed_tenant_is_retried_on_the_next_plain_run(
    env, monkeypatch: pytest.MonkeyPatch
) -> None:
    landing, data = env
    import memflow.facts

    real = memflow.facts.build_facts

    def broken(scope, *args, **kwargs):
        if scope.key == "initech/core":
            raise RuntimeError("simulated bug")
        return real(scope, *args, **kwargs)

    monkeypatch.setattr("assets.facts.build_facts", broken)
    failed = run_all(str(landing), str(data))
    assert [f.tenant for f in failed.failures] == ["initech/core"]
    monkeypatch.setattr("assets.facts.build_facts", real)
    again = run_all(str(landing), str(data))
    assert ran(again) == ["initech/core"] and not again.failures
    assert ran(run_all(str(landing), str(data))) == []


def test_a_file_landing_during_a_run_is_picked_up_next_time(
    env, monkeypatch: pytest.MonkeyPatch
) -> None:
    landing, data = env
    from pipelines import location

    real = location.execute
    calls = []

    def landing_meanwhile(*args, **kwargs):
        if not calls:
            add_file(landing, "acme", "api", "late.jsonl")
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(location, "execute", landing_meanwhile)
    assert ran(run_all(str(landing), str(data))) == ALL
    assert ran(run_all(str(landing), str(data))) == ["acme/api"]
    assert ran(run_all(str(landing), str(data))) == []


def test_a_data_dir_without_a_record_runs_every_tenant_once(env) -> None:
    landing, data = env
    assert ran(run_all(str(landing), str(data))) == ALL
    up_to_date.record_path(data).unlink()  # as the previous code left it
    assert ran(run_all(str(landing), str(data))) == ALL
    assert ran(run_all(str(landing), str(data))) == []


def test_a_tenant_run_records_it(env) -> None:
    landing, data = env
    assert ran(run_all(str(landing), str(data), tenants=["globex/ml"])) == ["globex/ml"]
    assert ran(run_all(str(landing), str(data))) == ["acme/api", "initech/core"]


def test_the_cli_says_what_it_runs_and_all_runs_every_tenant(env, capsys) -> None:
    from pipelines.cli import main

    landing, data = env
    args = ["run", "--landing", str(landing), "--data", str(data)]
    assert main(args) == 0
    out, err = capsys.readouterr()
    assert "3 tenant(s) with something to do, 0 up to date" in err and "--all" in err
    assert main(args) == 0
    out, err = capsys.readouterr()
    assert "0 tenant(s) with something to do, 3 up to date" in err
    assert "memflow run: 0 tenant(s), 1 run(s)" in out and "nothing to do" in out
    assert main([*args, "--all"]) == 0
    out, err = capsys.readouterr()
    assert "memflow run: 3 tenant(s), 1 run(s)" in out


def test_the_recall_time_rerank_settings_do_not_rerun_tenants(
    env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The listwise rerank runs at recall time only: its settings never change a tenant's
    outputs, so they leave the fingerprint alone (a setting that does changes it)."""
    before = up_to_date.fingerprint()
    monkeypatch.setenv("MEMFLOW_RERANKER", "openai")
    monkeypatch.setenv("MEMFLOW_RERANK_URL", "http://127.0.0.1:11434/v1")
    monkeypatch.setenv("MEMFLOW_RERANK_BUDGET_S", "5")
    assert up_to_date.fingerprint() == before
    monkeypatch.setenv("MEMFLOW_RETENTION_DAYS", "30")
    assert up_to_date.fingerprint() != before
