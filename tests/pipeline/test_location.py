"""Runs of `memflow run` are runs of the code location `dagster dev` loads: the UI re-executes
them through the same GraphQL mutation its "Re-execute all" button sends, and shows them as the
same version of the job (no "may be a different version" warning)."""

from __future__ import annotations

from pathlib import Path

import pytest
from dagster import DagsterInstance, DagsterRunStatus, RunsFilter
from dagster._core.test_utils import poll_for_finished_run
from dagster._core.workspace.load import location_origins_from_yaml_paths
from dagster_graphql.client.query import LAUNCH_PIPELINE_REEXECUTION_MUTATION
from dagster_graphql.test.utils import define_out_of_process_context, execute_dagster_graphql

from pipelines import location
from pipelines.batches import RANGE_END_TAG, RANGE_START_TAG, SOURCE_TAG
from pipelines.runner import run_all
from pipelines.settings import resolve
from resources.settings import DEFAULTS
from resources.tables import TableStore
from schemas.scope import Scope
from tests.pipeline.landing_fixtures import small_landing
from tests.support.leftovers import assert_no_process_left

ROOT = Path(__file__).resolve().parents[2]
WORKSPACE = ROOT / "workspace.yaml"


def test_the_cli_names_the_location_as_workspace_yaml_does() -> None:
    (origin,) = location_origins_from_yaml_paths([str(WORKSPACE)])
    assert origin.location_name == location.LOCATION_NAME
    assert origin.loadable_target_origin.module_name == location.MODULE


@pytest.fixture
def cli_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The CLI's settings, and a working directory without the repository's `.env`: Dagster's
    code server reads `.env` from its working directory over the environment."""
    landing, data, home = small_landing(tmp_path / "landing"), tmp_path / "data", tmp_path / "home"
    home.mkdir()
    # Launch at once (no daemon to dequeue) with the default launcher: the code server.
    (home / "dagster.yaml").write_text(
        "telemetry:\n  enabled: false\n"
        "run_coordinator:\n  module: dagster.core.run_coordinator\n"
        "  class: DefaultRunCoordinator\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    for name in DEFAULTS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MEMFLOW_EMBEDDER", "none")
    resolve({"MEMFLOW_LANDING_DIR": str(landing), "MEMFLOW_DATA_DIR": str(data)}, tmp_path / "x")
    yield landing, data
    assert_no_process_left(data)


@pytest.mark.slow
def test_the_ui_reexecutes_a_cli_run(cli_env) -> None:
    landing, data = cli_env
    assert not run_all(str(landing), str(data)).failures
    instance = DagsterInstance.get()
    (parent,) = instance.get_runs(RunsFilter(job_name="run_job", tags={SOURCE_TAG: "cli"}))
    assert parent.remote_job_origin is not None
    assert parent.remote_job_origin.location_name == location.LOCATION_NAME

    with define_out_of_process_context(str(WORKSPACE), None, instance) as context:
        remote = (
            context.get_code_location(location.LOCATION_NAME)
            .get_repository("__repository__")
            .get_full_job("run_job")
        )
        # The same snapshot: the UI offers "Re-execute all" without a version warning.
        assert parent.job_snapshot_id == remote.identifying_job_snapshot_id
        answer = execute_dagster_graphql(
            context,
            LAUNCH_PIPELINE_REEXECUTION_MUTATION,
            {"reexecutionParams": {"parentRunId": parent.run_id, "strategy": "ALL_STEPS"}},
        ).data["launchPipelineReexecution"]
        assert answer["__typename"] == "LaunchRunSuccess", answer
        child = poll_for_finished_run(instance, answer["run"]["runId"], timeout=300)

    assert child.status == DagsterRunStatus.SUCCESS
    assert child.job_name == "run_job" and child.parent_run_id == parent.run_id
    # The same tenants (the range tags are inherited) ...
    assert child.tags[RANGE_START_TAG] == parent.tags[RANGE_START_TAG] == "acme/api"
    assert child.tags[RANGE_END_TAG] == parent.tags[RANGE_END_TAG] == "globex/ml"
    # ... and the same data: the rerun finds nothing new.
    assert TableStore(data).read("validated_facts", Scope("acme", "api")).height == 3
