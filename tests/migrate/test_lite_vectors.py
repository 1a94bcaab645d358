"""A data directory whose vectors an earlier memflow kept in Milvus Lite (commit bc5929a: a
detached `milvus_lite server` per data directory, left running after the run), then this
code: `memflow status` names what it finds, `memflow vectors rebuild --drop-legacy` writes the
embedded store from the embedding ledger, stops that server and removes its files, and the
store then equals the tables for every tenant, with no model called again.

The old data directory is made at test time, as tests/migrate/test_migrate.py makes its own:
`git archive` of the old commit and its own `memflow run` on its sample landing zone, with a
real OpenAI-compatible embeddings server (`tests.support.embeddings_server`). Milvus Lite is
a dev dependency only for this: memflow itself no longer uses it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from resources.vector.legacy import PATHS, legacy_server_pid, stop_legacy_server
from tests.support.embeddings_server import EmbeddingsServer
from tests.support.leftovers import assert_no_process_left

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
OLD_COMMIT = "bc5929a"
MEMFLOW = str(Path(sys.executable).parent / "memflow")


def _run(cmd: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def lite_world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    base = tmp_path_factory.mktemp("lite-design")
    tree, data = base / "tree", base / "data"
    tree.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", OLD_COMMIT], capture_output=True, timeout=120
    )
    assert archive.returncode == 0, archive.stderr.decode(errors="replace")
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
    with EmbeddingsServer(dim=16) as server:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMFLOW_", "DAGSTER_"))}
        env.update(
            MEMFLOW_EMBEDDER="openai",
            MEMFLOW_EMBEDDING_URL=server.url,
            MEMFLOW_EMBEDDING_MODEL="hash-model",
            MEMFLOW_EXTRACTOR="none",
            MEMFLOW_GRAPH_BACKEND="sqlite",
        )
        script = "import sys; from pipelines.cli import main; sys.exit(main(sys.argv[1:]))"
        old = _run(
            [sys.executable, "-c", script, "run", "--landing", str(tree / "landing-sample"),
             "--data", str(data)],
            {**env, "PYTHONPATH": str(tree)},
            tree,
        )  # fmt: skip
        assert old.returncode == 0, old.stdout[-3000:] + old.stderr[-3000:]
        embedded = len(server.requests)
        try:
            yield {"data": data, "env": env, "server": server, "embedded": embedded}
        finally:
            stop_legacy_server(data)


def test_the_old_run_left_its_lite_server_running(lite_world: dict) -> None:
    data = lite_world["data"]
    assert (data / "milvus").is_dir() and (data / "embedding-ledger").is_dir()
    assert legacy_server_pid(data) is not None  # what issue 18 found on shared machines


def test_status_names_the_lite_store_then_rebuild_retires_it(
    lite_world: dict, tmp_path: Path
) -> None:
    data, env = lite_world["data"], lite_world["env"]
    pid = legacy_server_pid(data)
    migrated = _run([MEMFLOW, "migrate", "--data", str(data)], env, tmp_path)  # its Parquet tables
    assert migrated.returncode == 0, migrated.stdout[-3000:] + migrated.stderr[-3000:]
    status = _run([MEMFLOW, "status", "--data", str(data)], env, tmp_path)
    assert status.returncode == 0, status.stderr[-3000:]
    assert "Milvus Lite store of an earlier memflow" in status.stdout
    assert f"pid {pid}" in status.stdout and "memflow vectors rebuild" in status.stdout

    rebuilt = _run(
        [MEMFLOW, "vectors", "rebuild", "--data", str(data), "--drop-legacy"], env, tmp_path
    )
    assert rebuilt.returncode == 0, rebuilt.stdout[-3000:] + rebuilt.stderr[-3000:]
    assert f"stopped the Milvus Lite server of an earlier memflow (pid {pid})" in rebuilt.stdout
    assert "NOT equal" not in rebuilt.stdout
    assert legacy_server_pid(data) is None
    assert not any((data / name).exists() for name in PATHS)
    assert lite_world["server"].requests[lite_world["embedded"] :] == []  # no model call
    assert_no_process_left(data)

    report = _run([MEMFLOW, "status", "--data", str(data), "--json", "--verify"], env, tmp_path)
    assert report.returncode == 0, report.stderr[-3000:]
    found = json.loads(report.stdout)
    assert found["notes"] == [] and len(found["tenants"]) == 4 and found["verified"]
    for tenant in found["tenants"]:
        if tenant["tables"]["entities"]:
            assert tenant["vectors_equal_table"], tenant["vectors_diff"]
            assert tenant["coverage"] == 1.0 and tenant["vectors"]["hash-model"]["vectors"] > 0

    again = _run([MEMFLOW, "vectors", "rebuild", "--data", str(data)], env, tmp_path)
    assert again.returncode == 0 and ": 0 vectors written, 0 deleted" in again.stdout
