"""From the bundled landing zone through every asset into both stores, by the CLI, in a real
subprocess: the summary, the stores, the recall answer, and no planted secret anywhere."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from tests.support.embeddings_server import EmbeddingsServer
from tests.support.leftovers import assert_no_process_left
from tests.support.sample_landing import OVER_CAP_TENANT, PLANTED_SECRETS, SAMPLE_TENANTS

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def memflow(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pipelines.cli", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


@pytest.fixture(scope="module")
def sample_run(tmp_path_factory: pytest.TempPathFactory):
    data = tmp_path_factory.mktemp("e2e") / "data"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMFLOW_", "DAGSTER_"))}
    try:
        with EmbeddingsServer(dim=32) as server:
            env.update(
                MEMFLOW_EMBEDDER="openai",
                MEMFLOW_EMBEDDING_URL=server.url,
                MEMFLOW_EMBEDDING_MODEL="hash-model",
                CI="true",
            )
            env["MEMFLOW_HOME"] = os.environ["MEMFLOW_HOME"]  # the session's, never the user's
            run = memflow(
                "run",
                "--landing",
                str(ROOT / "landing-sample"),  # as `make run` names it
                "--data",
                str(data),
                "--recall",
                "which database does the payments service use?",
                env=env,
            )
            outputs = {"run": run}
            assert run.returncode == 0, run.stderr[-3000:]
            for tenant in ("acme/payments-api", str(OVER_CAP_TENANT)):
                outputs[f"facts {tenant}"] = memflow(
                    "facts", "--data", str(data), "--tenant", tenant, "--json", "--limit", "0",
                    env=env,
                )  # fmt: skip
                outputs[f"rejects {tenant}"] = memflow(
                    "rejects", "--data", str(data), "--tenant", tenant, "--json", "--limit", "0",
                    env=env,
                )  # fmt: skip
            outputs["status"] = memflow("status", "--data", str(data), "--json", env=env)
            outputs["status --verify"] = memflow(
                "status", "--data", str(data), "--verify", "--json", env=env
            )
            outputs["recall"] = memflow(
                "recall",
                "--data",
                str(data),
                "--tenant",
                "acme/payments-api",
                "what cache do we use?",
                env=env,
            )
        yield data, outputs
    finally:
        assert_no_process_left(data)


def test_summary_and_every_asset(sample_run) -> None:
    _, out = sample_run
    text = out["run"].stdout
    for tenant in SAMPLE_TENANTS:
        assert str(tenant) in text
    assert "fact_cap_exceeded 1097" in text
    monorepo = json.loads(out[f"facts {OVER_CAP_TENANT!s}"].stdout)
    assert len(monorepo) == 10_000
    quick = json.loads(out["status"].stdout)  # counts only: the stores are not compared
    for t in quick["tenants"]:
        assert t["graph"]["counts_equal_tables"] and t["graph"]["equals_table"] is None, t
    status = json.loads(out["status --verify"].stdout)
    assert {t["tenant"] for t in status["tenants"]} == {str(t) for t in SAMPLE_TENANTS}
    for t in status["tenants"]:
        assert t["graph"]["equals_table"], t
        assert t["vectors_equal_table"] and t["coverage"] == t["fact_coverage"] == 1.0, t
        assert t["vectors"]["hash-model"]["dim"] == 32
        assert t["vectors"]["facts:hash-model"]["vectors"] == t["tables"]["validated_facts"]


def test_supersession_and_rejects_are_visible(sample_run) -> None:
    _, out = sample_run
    facts = json.loads(out["facts acme/payments-api"].stdout)
    redis = [f for f in facts if f["object"] == "Redis 6" and f["predicate"] == "USES"]
    assert redis and redis[0]["valid_to"] and redis[0]["superseded_by"]
    rejects = json.loads(out["rejects acme/payments-api"].stdout)
    assert {r["reason"] for r in rejects} >= {"name_too_long", "confidence_out_of_range"}
    assert "Valkey" in out["recall"].stdout or "valkey" in out["recall"].stdout.lower()
    assert "not instructions" in out["recall"].stdout


def test_no_planted_secret_in_any_table_store_log_or_output(sample_run) -> None:
    data, out = sample_run
    texts = [p.stdout + p.stderr for p in out.values()]
    for path in data.rglob("*"):
        if not path.is_file():
            continue
        if path.suffix == ".parquet":
            texts.append(json.dumps(pl.read_parquet(path).to_dicts(), default=str))
        elif path.suffix in (".sqlite", ".db") or path.name.endswith((".sqlite-wal",)):
            texts.append(path.read_bytes().decode("utf-8", "replace"))
            if path.suffix in (".sqlite", ".db"):
                con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
                for (table,) in con.execute("select name from sqlite_master where type='table'"):
                    texts.append(repr(con.execute(f'select * from "{table}"').fetchall()))
                con.close()
        else:
            texts.append(path.read_bytes().decode("utf-8", "replace"))
    blob = "\n".join(texts)
    leaked = [s[:12] + "..." for s in PLANTED_SECRETS if s in blob]
    assert not leaked, leaked
