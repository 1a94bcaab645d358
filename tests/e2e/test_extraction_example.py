"""docs/agents.md's extraction example, followed as written (its Ollama settings, the URL
pointed at a real HTTP server speaking the OpenAI chat API): `memflow status` counts the text
turns that wait, `memflow run` extracts them with the answer's JSON schema asked for, and then
nothing waits."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.pipeline.landing_fixtures import turn, write_jsonl
from tests.support.openai_chat_server import OpenAIChatServer, Scripted, triples_answer

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def documented_settings() -> dict[str, str]:
    """The first block of MEMFLOW_* lines of docs/agents.md's extraction section (Ollama)."""
    doc = (ROOT / "docs" / "agents.md").read_text()
    section = doc.split("### Extraction: text turns wait for a model", 1)[1]
    block = section.split("```bash", 1)[1].split("\n\n", 1)[0]
    found = dict(re.findall(r"^(MEMFLOW_[A-Z_]+)=(\S*)$", block, re.M))
    assert set(found) == {"MEMFLOW_EXTRACTOR", "MEMFLOW_EXTRACTION_URL", "MEMFLOW_EXTRACTION_MODEL"}
    return found


def memflow(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pipelines.cli", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip


@pytest.fixture
def data(tmp_path: Path):
    yield tmp_path / "data"


def test_the_documented_extractor_turns_waiting_text_into_facts(tmp_path: Path, data: Path) -> None:
    landing = tmp_path / "landing"
    write_jsonl(landing, "acme", "billing", "s1.jsonl", [
        turn("acme", "billing", "s1", "t1", "2026-11-02T09:00:00Z", "user",
             "billing-service is deployed to eu-west-1."),
        turn("acme", "billing", "s1", "t2", "2026-11-02T09:01:00Z", "assistant",
             "Right, and billing-service keeps its ledger in PostgreSQL."),
    ])  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMFLOW_", "DAGSTER_"))}
    env.update(MEMFLOW_HOME=str(tmp_path / "home"), MEMFLOW_EMBEDDER="none", CI="true")
    paths = ("--landing", str(landing), "--data", str(data))

    first = memflow("run", *paths, env=env, cwd=tmp_path)  # no extractor yet
    assert first.returncode == 0, first.stderr[-2000:]
    before = memflow("status", "--data", str(data), env=env, cwd=tmp_path)
    assert "extraction: none; 2 text turns wait for an extractor" in before.stdout
    assert "MEMFLOW_EXTRACTION_URL" in before.stdout  # and how to point one at a server

    settings = documented_settings()
    assert settings["MEMFLOW_EXTRACTION_URL"].endswith("/v1")
    with OpenAIChatServer(model=settings["MEMFLOW_EXTRACTION_MODEL"]) as server:
        server.default = Scripted.answer(triples_answer())
        env.update(settings, MEMFLOW_EXTRACTION_URL=f"{server.url}/v1")
        run = memflow("run", *paths, env=env, cwd=tmp_path)
        assert run.returncode == 0, run.stderr[-2000:]
        requests = server.chat_requests
    assert requests, "the extractor was never asked"
    for request in requests:
        assert request.json["model"] == settings["MEMFLOW_EXTRACTION_MODEL"]
        assert request.json["response_format"]["type"] == "json_schema"
    after = memflow("status", "--data", str(data), env=env, cwd=tmp_path)
    assert "extraction: openai; 0 text turns wait" in after.stdout
    facts = memflow("facts", "--data", str(data), "--tenant", "acme/billing", "--json",
                    env=env, cwd=tmp_path)  # fmt: skip
    triples = {(f["subject"], f["predicate"], f["object"]) for f in json.loads(facts.stdout)}
    assert ("billing-service", "USES", "PostgreSQL") in triples
    assert ("billing-service", "DEPLOYED_TO", "eu-west-1") in triples
