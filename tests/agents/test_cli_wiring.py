"""`memflow import`, `memflow hook`, `memflow mcp` and `memflow recall`'s fast path, through the
real console entry point in subprocesses."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.agents.conftest import ROOT, Memory

FIXTURES = ROOT / "tests" / "fixtures" / "transcripts"


def memflow(*args: str, env: dict[str, str], stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pipelines.cli", *args],
        cwd=ROOT,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_import_lands_public_transcripts_once(memory: Memory, tmp_path: Path) -> None:
    env = memory.env(None, MEMFLOW_DEFAULT_ORG="local")
    landing = tmp_path / "landing"
    landing.mkdir()  # a named landing zone must exist (a typo'd path is refused)
    first = memflow(
        "import",
        "claude-code",
        str(FIXTURES / "claude-code" / "codemie-code"),
        "--landing",
        str(landing),
        env=env,
    )
    assert first.returncode == 0, first.stderr[-2000:]
    assert "turns written" in first.stdout
    written = sorted(p.name for p in landing.rglob("*.jsonl"))
    assert written
    again = memflow(
        "import",
        "claude-code",
        str(FIXTURES / "claude-code" / "codemie-code"),
        "--landing",
        str(landing),
        "--json",
        env=env,
    )
    report = json.loads(again.stdout)
    assert report["turns_written"] == 0 and report["turns_already_landed"] > 0
    assert sorted(p.name for p in landing.rglob("*.jsonl")) == written


def test_hook_with_bad_stdin_prints_nothing_and_exits_zero(memory: Memory) -> None:
    done = memflow("hook", "session-start", env=memory.env(), stdin="not json")
    assert done.returncode == 0 and done.stdout == ""


def test_hook_session_start_recalls_for_the_working_repository(memory: Memory) -> None:
    payload = {"hook_event_name": "SessionStart", "cwd": "/tmp", "session_id": "s"}
    done = memflow(
        "hook",
        "session-start",
        "--tenant",
        "acme/payments",
        env=memory.env(),
        stdin=json.dumps(payload),
    )
    assert done.returncode == 0
    assert "payments-service" in done.stdout and "globex" not in done.stdout


def test_mcp_help_starts_without_settings(memory: Memory) -> None:
    done = memflow("mcp", "--help", env=memory.env())
    assert done.returncode == 0 and "--http" in done.stdout


def test_recall_asks_the_running_server_first(memory: Memory) -> None:
    done = memflow(
        "recall", "--tenant", "acme/payments", "what does payments-service use?", "--json",
        env=memory.env(),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    answer = json.loads(done.stdout)
    assert any(f["object"] == "PostgreSQL" for f in answer["facts"])
    foreign = memflow(
        "recall", "--tenant", "globex/secret-lab", "what does Project Nightjar use?",
        env=memory.env(),
    )  # fmt: skip
    assert foreign.returncode == 1 and "Nightjar" not in foreign.stdout


def test_the_cli_entry_point_loads_nothing_heavy_before_a_hook() -> None:
    code = (
        "import sys, pipelines.cli, recall.hooks, recall.client, memflow.importers.tenant;"
        "print(sorted(m for m in ('polars','numpy','dagster','torch','pymilvus','fastapi','mcp')"
        " if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "[]"
