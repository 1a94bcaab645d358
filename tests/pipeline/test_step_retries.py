"""One retry layer per kind of failure, through the code location's own jobs: a client's I/O
is retried by the client, its final error fails the step at once, and any other failure is
retried by the jobs' step retry policy."""

from __future__ import annotations

import ast
import errno
from pathlib import Path

import polars as pl
import pytest
from dagster import (
    AssetsDefinition,
    AssetSelection,
    DagsterInstance,
    Definitions,
    RetryPolicy,
    define_asset_job,
)
from deltalake.exceptions import CommitFailedError, DeltaError, SchemaMismatchError

from assets.partitions import scope_partitions
from assets.retries import STEP_RETRY, is_transient
from pipelines import jobs as code_location_jobs
from pipelines.batches import range_tags
from pipelines.definitions import ALL_ASSETS, defs
from resources.configurable import ExtractionModelResource, GraphStoreResource
from resources.fs import StorageError
from resources.graph.base import GraphStoreError
from resources.models.base import ModelError
from resources.tables import TableStore
from resources.vector.base import VectorStoreError
from schemas.scope import Scope
from tests.pipeline.conftest import FACTS, INGEST, make_resources, run_assets
from tests.support.openai_chat_server import OpenAIChatServer, Scripted

ACME = Scope("acme", "api")
ROOT = Path(__file__).resolve().parents[2]


def execute(instance: DagsterInstance, resources: dict, job_name: str, job=None):
    """Runs one of the code location's jobs (or `job`) for ACME, as the sensor launches it."""
    known = set(instance.get_dynamic_partitions("tenants"))
    if ACME.key not in known:
        instance.add_dynamic_partitions("tenants", [ACME.key])
    jobs = [job if job is not None else getattr(code_location_jobs, job_name)]
    local = Definitions(assets=ALL_ASSETS, jobs=jobs, resources=resources)
    return local.resolve_job_def(job_name).execute_in_process(
        instance=instance,
        tags=range_tags(ACME.key, ACME.key),
        raise_on_error=False,
    )


def retries(result) -> int:
    return sum(e.event_type_value == "STEP_UP_FOR_RETRY" for e in result.all_events)


def test_the_jobs_hold_the_only_step_retry_policy() -> None:
    for name in ("ingest_job", "tenant_job", "survey_job", "run_job"):
        assert defs.resolve_job_def(name).op_retry_policy == STEP_RETRY, name
    for asset_def in ALL_ASSETS:
        if isinstance(asset_def, AssetsDefinition) and asset_def.is_executable:
            assert asset_def.op.retry_policy is None, asset_def.key


def test_a_model_server_failing_is_retried_by_the_client_only(
    instance, landing: Path, data_dir: Path
) -> None:
    with OpenAIChatServer(model="m") as server:
        for _ in range(6):
            server.enqueue(Scripted.error(503))
        extraction = ExtractionModelResource(
            provider="openai", base_url=server.url, model="m", max_retries=2, timeout_s=2
        )
        res = make_resources(landing, data_dir, extraction=extraction)
        result = execute(instance, res, "ingest_job")
        assert len(server.chat_requests) == 3  # the first try and the client's two retries
    assert not result.success
    assert retries(result) == 0  # not the client's three, three times over
    (failure,) = [e for e in result.all_events if e.is_step_failure]
    assert failure.step_key == "extracted_triples"
    error = str(failure.step_failure_data.error)
    assert server.url in error and "after 3 attempts" in error


def test_a_graph_store_that_is_down_fails_the_sink_after_the_clients_attempts(
    instance, landing: Path, data_dir: Path
) -> None:
    assert run_assets(instance, make_resources(landing, data_dir), INGEST, [ACME.key]).success
    url = "ws://127.0.0.1:9/gremlin"
    res = make_resources(
        landing, data_dir, graph=GraphStoreResource(backend="gremlin", gremlin_url=url)
    )
    assert run_assets(instance, res, FACTS, [ACME.key]).success
    result = execute(instance, res, "tenant_job")
    assert not result.success
    assert retries(result) == 0
    (failure,) = [e for e in result.all_events if e.is_step_failure]
    assert failure.step_key == "graph_sink"
    error = str(failure.step_failure_data.error)
    assert url in error and "after 5 attempts" in error


def test_any_other_failure_is_retried_by_the_step_policy(
    instance, landing: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    res = make_resources(landing, data_dir)
    assert run_assets(instance, res, [*INGEST, *FACTS], [ACME.key]).success
    opened = GraphStoreResource.open
    calls: list[int] = []

    def flaky(self: GraphStoreResource):
        calls.append(1)
        if len(calls) == 1:
            raise OSError("the data directory's disk went away for a moment")
        return opened(self)

    monkeypatch.setattr(GraphStoreResource, "open", flaky)
    # The jobs' policy with a short delay, so the test does not sleep through real backoff.
    fast = define_asset_job(
        "graph_job",
        selection=AssetSelection.assets("graph_sink"),
        partitions_def=scope_partitions,
        op_retry_policy=RetryPolicy(max_retries=STEP_RETRY.max_retries, delay=0.01),
    )
    result = execute(instance, res, "graph_job", job=fast)
    assert result.success
    assert retries(result) == 1 and len(calls) == 2


def test_a_bug_fails_the_step_at_once_naming_its_error(
    instance, landing: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*_args, **_kwargs):
        raise RuntimeError("simulated bug in the facts stage")

    monkeypatch.setattr("assets.facts.build_facts", broken)
    result = execute(instance, make_resources(landing, data_dir), "ingest_job")
    assert not result.success
    assert retries(result) == 0
    (failure,) = [e for e in result.all_events if e.is_step_failure]
    assert failure.step_key == "validated_facts"
    assert "RuntimeError: simulated bug in the facts stage" in str(failure.step_failure_data.error)


@pytest.mark.parametrize(
    ("error", "transient"),
    [
        # the table store retried the commit itself (CONFLICT_RETRIES)
        (CommitFailedError("a concurrent transaction won"), False),
        (OSError(errno.EIO, "input/output error"), True),
        (OSError("Generic S3 error: connection closed"), True),
        (StorageError("s3://bucket/tables", None, "Generic S3 error: sending request"), True),
        # polars and delta-rs name the OS error in the message
        (pl.exceptions.ComputeError("failed to write (os error 5)"), True),
        (DeltaError("Failed to write: No space left on device (os error 28)"), False),
        (OSError("Read-only file system (os error 30)"), False),
        (SchemaMismatchError("Cannot cast schema, number of fields does not match"), False),
        (ConnectionResetError(errno.ECONNRESET, "reset by peer"), True),
        (TimeoutError("timed out"), True),
        (StorageError("/data/x", errno.EIO, "I/O error"), True),
        (StorageError("/data/x", errno.ENOSPC, "no space left on device"), False),
        (PermissionError(errno.EACCES, "permission denied"), False),
        (PermissionError("landing zone not readable"), False),  # no errno
        (FileNotFoundError(errno.ENOENT, "no such file"), False),
        (ModelError("model endpoint http://127.0.0.1:9 failed after 4 attempts"), False),
        (GraphStoreError("cannot reach gremlin server (after 5 attempts)"), False),
        (VectorStoreError("milvus at 127.0.0.1: upsert failed"), False),
        (ValueError("bad data"), False),
        (RuntimeError("a bug"), False),
    ],
)
def test_only_failures_that_may_pass_are_transient(error: Exception, transient: bool) -> None:
    assert is_transient(error) is transient


ASSET_DECORATORS = {"asset", "multi_asset", "observable_source_asset"}


def _name(node: ast.expr) -> str:
    target = node.func if isinstance(node, ast.Call) else node
    return target.id if isinstance(target, ast.Name) else getattr(target, "attr", "")


def test_every_asset_function_retries_transient_failures_only() -> None:
    """The rule is applied where the assets and their IO manager are defined, so a new asset
    cannot miss it."""
    missing, found = [], 0
    for path in [*sorted((ROOT / "assets").glob("*.py")), ROOT / "pipelines" / "io.py"]:
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.FunctionDef):
                continue
            names = [_name(d) for d in node.decorator_list]
            io = path.name == "io.py" and node.name in ("handle_output", "load_input")
            if io or ASSET_DECORATORS & set(names):
                found += 1
                # Innermost, so it wraps the function itself.
                if names[-1] != "retry_transient_only":
                    missing.append(f"{path.name}:{node.name}")
    # 8 asset functions (the two model sources are one factory's, assets/models.py, and so
    # are entity_embeddings and fact_embeddings, assets/embeddings.py) and the IO manager's two
    assert found >= 10 and not missing, missing


def test_a_table_write_that_cannot_succeed_fails_at_once(
    instance, landing: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rule covers the IO manager too: the step policy applies to the whole step."""

    def mismatched(self, asset, frames, **_kwargs):
        raise SchemaMismatchError("Cannot cast schema, number of fields does not match")

    monkeypatch.setattr(TableStore, "write_tenants", mismatched)
    result = execute(instance, make_resources(landing, data_dir), "ingest_job")
    assert not result.success
    assert retries(result) == 0
    (failure,) = [e for e in result.all_events if e.is_step_failure]
    assert "SchemaMismatchError" in str(failure.step_failure_data.error)


def test_a_table_write_hit_by_an_io_error_is_retried(
    instance, landing: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write = TableStore.write_tenants
    calls: list[str] = []

    def flaky(self, asset, frames, **kwargs):
        calls.append(asset)
        if len(calls) == 1:
            raise pl.exceptions.ComputeError("failed to write a data file (os error 5)")
        return write(self, asset, frames, **kwargs)

    monkeypatch.setattr(TableStore, "write_tenants", flaky)
    fast = define_asset_job(
        "turns_job",
        selection=AssetSelection.assets("raw_turns", "turn_rejects", "landing_files"),
        partitions_def=scope_partitions,
        op_retry_policy=RetryPolicy(max_retries=STEP_RETRY.max_retries, delay=0.01),
    )
    result = execute(instance, make_resources(landing, data_dir), "turns_job", job=fast)
    assert result.success
    assert retries(result) == 1
