"""What the importers land is what the pipeline's first assets accept: the raw_turns reader keeps
every turn, and the upsert_graph_triples calls become explicit triples through the contract."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from memflow import landing as landing_zone
from memflow.importers.claude_code import import_claude_code
from memflow.importers.codex import import_codex
from memflow.importers.common import ImportSettings
from memflow.importers.tenant import TenantMapper, parse_map
from memflow.turns import TurnTables, ingest_turns
from schemas.scope import Scope
from schemas.triples import TurnContext, items_to_triples

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "transcripts"


def ingest(landing: Path, scope: Scope):
    """The raw_turns stage on everything landed for the tenant."""
    files = landing_zone.discover(landing).get(scope, [])
    return ingest_turns(landing, scope, files, TurnTables.empty(), datetime.now(UTC))


def test_imported_sessions_pass_raw_turns_and_their_triples_the_contract(tmp_path: Path) -> None:
    src = tmp_path / "s.jsonl"
    triples = [
        {"subject": "payments-api", "predicate": "uses", "object": "Valkey 8"},
        {"subject": "payments-api", "predicate": "bad one!", "object": "x"},
    ]
    records = [
        {"type": "user", "sessionId": "s1", "uuid": "u1", "timestamp": "2026-03-01T10:00:00Z",
         "cwd": "/work/pay", "message": {"role": "user", "content": "password=hunter2 is ours"}},
        {"type": "assistant", "sessionId": "s1", "uuid": "u2", "timestamp": "2026-03-01T10:00:05Z",
         "cwd": "/work/pay", "message": {"role": "assistant", "content": [
             {"type": "tool_use", "id": "t", "name": "upsert_graph_triples",
              "input": {"triples": triples}}]}},
    ]  # fmt: skip
    src.write_text("".join(json.dumps(r) + "\n" for r in records))
    landing = tmp_path / "landing"
    settings = ImportSettings(landing, TenantMapper(parse_map("/work/pay=acme/payments")))
    assert import_claude_code([src], settings).turns_written == 2
    scope = Scope("acme", "payments")
    update = ingest(landing, scope)
    turns, rejects = update.tables.turns, update.tables.rejects
    assert rejects.height == 0 and turns.height == 2
    assert update.redactions == 0  # already redacted before it landed
    call = turns.filter(turns["tool_name"] == "upsert_graph_triples").row(0, named=True)
    ctx = TurnContext(
        tenant_id="acme", ns="payments", day="2026-03-01", session_id="s1", turn_id=call["turn_id"],
        ts=datetime(2026, 3, 1, 10, 0, 5, tzinfo=UTC), client="claude-code", model="explicit",
        source="explicit",
    )  # fmt: skip
    rows, bad = items_to_triples(json.loads(call["tool_triples"]), ctx)
    assert [(r["subject"], r["predicate"], r["object"]) for r in rows] == [
        ("payments-api", "USES", "Valkey 8")
    ]
    assert [b["reason"] for b in bad] == ["predicate_not_upper_snake_case"]


def test_every_public_sample_passes_raw_turns(tmp_path: Path) -> None:
    landing = tmp_path / "landing"
    settings = ImportSettings(landing, TenantMapper(default_org="local"))
    written = import_claude_code([FIXTURES / "claude-code"], settings).turns_written
    written += import_codex([FIXTURES / "codex"], settings).turns_written
    seen = 0
    for scope in landing_zone.discover(landing):
        tables = ingest(landing, scope).tables
        assert tables.rejects.height == 0, tables.rejects.to_dicts()
        seen += tables.turns.height
    assert seen == written > 50
