"""One regression test per bug the fuzz suite found, each built from the smallest input that
showed it (the fuzz's own shrunk example), named after what the fix guarantees."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pytest
from fastapi.testclient import TestClient

from memflow import landing
from memflow.extract import ExtractionTables, extract_tenant
from memflow.turns import TurnTables, ingest_turns
from recall.api import create_app
from recall.auth import KeyRing, add_key
from recall.service import RecallService
from resources.graph.sqlite import SqliteGraphStore
from schemas.scope import Scope, ScopeError
from schemas.triples import TurnContext, items_to_triples

GHP = "ghp_" + "Rt7Kq9zX2mLw8VbN4cYs1HfJ0aPdE6uG3iKo"
AKIA = "AKIAQ7RT4EXMPL2XYZ12"
NOW = datetime(2026, 11, 22, tzinfo=UTC)
TS = "2026-11-20T10:00:00Z"
SCOPE = Scope("acme", "r")


def line(**fields: object) -> dict[str, object]:
    return {
        "org": "acme",
        "repo": "r",
        "session_id": "s",
        "turn_id": "t1",
        "ts": TS,
        "role": "user",
        "content": "hi",
        "client": "c",
        **fields,
    }


def land(root: Path, org: str, repo: str, name: str, lines: list[dict[str, object]]) -> Path:
    folder = root / org / repo
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def pieces(secret: str, size: int = 16) -> list[str]:
    return [secret[i : i + size] for i in range(len(secret) - size + 1)]


def leaked(text: str, secret: str) -> bool:
    return any(p in text for p in pieces(secret))


def test_a_secret_in_tool_name_is_redacted_like_every_id(tmp_path: Path) -> None:
    root = tmp_path / "landing"
    land(root, "acme", "r", "a.jsonl", [line(role="tool", tool_name=f"tool-{GHP}")])
    read = landing.read_tenant_files(root, SCOPE, now=NOW)
    assert read.turns.height == 1
    assert GHP not in read.turns["tool_name"][0]
    update = ingest_turns(root, SCOPE, [root / "acme/r/a.jsonl"], TurnTables.empty(), NOW)
    assert not leaked(json.dumps(update.tables.turns.to_dicts(), default=str), GHP)


def test_a_scope_name_holding_a_secret_is_no_tenant_and_is_listed_with_its_lines(
    tmp_path: Path,
) -> None:
    root = tmp_path / "landing"
    land(root, GHP, "r", "a.jsonl", [line(org=GHP)])
    found = landing.discover(root)
    assert list(found) == []
    problems = landing.landing_problems(root, found)
    assert problems["reason"].to_list() == ["invalid_scope"]
    assert problems["lines"].to_list() == [1]
    assert not leaked(json.dumps(problems.to_dicts()), GHP)
    with pytest.raises(ScopeError) as err:
        Scope(GHP, "r")
    assert GHP not in str(err.value)
    with pytest.raises(ScopeError):
        Scope("acme", AKIA)


def test_a_triple_naming_its_own_turn_id_keeps_its_turn_and_survives_the_next_run(
    tmp_path: Path,
) -> None:
    root = tmp_path / "landing"
    triples = [{"subject": "svc", "predicate": "USES", "object": "redis", "turn_id": "other"}]
    upsert = line(
        role="tool",
        content="",
        tool_name="upsert_graph_triples",
        tool_input={"triples": triples},
    )
    land(root, "acme", "r", "a.jsonl", [upsert])
    first = ingest_turns(root, SCOPE, [root / "acme/r/a.jsonl"], TurnTables.empty(), NOW)
    done = extract_tenant(
        SCOPE, first.tables.turns, ExtractionTables.of(None, None, None), None, "none", now=NOW
    )
    assert done.tables.triples["turn_id"].to_list() == ["t1"]
    land(root, "acme", "r", "b.jsonl", [line(turn_id="t2")])
    files = [root / "acme/r/a.jsonl", root / "acme/r/b.jsonl"]
    second = ingest_turns(root, SCOPE, files, first.tables, NOW)
    again = extract_tenant(SCOPE, second.tables.turns, done.tables, None, "none", now=NOW)
    assert again.tables.triples.height == 1  # was 0: the triple was dropped as orphaned


def _upsert(*triples: tuple[str, str, str]) -> dict[str, object]:
    items = [{"subject": s, "predicate": p, "object": o} for s, p, o in triples]
    return line(
        role="tool", content="", tool_name="upsert_graph_triples", tool_input={"triples": items}
    )


@pytest.mark.parametrize(
    "restated",
    [line(content="never mind"), _upsert(("svc", "USES", "kafka"))],
    ids=["as_text", "other_triples"],
)
def test_a_turn_restated_under_the_same_ids_is_extracted_again(
    tmp_path: Path, restated: dict[str, object]
) -> None:
    """The fuzz's zone: a changed file restated a saved turn's session and turn ids with other
    content; the first version's triple stayed, backed by a turn that no longer said it."""
    root = tmp_path / "landing"
    path = land(root, "acme", "r", "a.jsonl", [_upsert(("svc", "USES", "redis"))])
    first = ingest_turns(root, SCOPE, [path], TurnTables.empty(), NOW)
    done = extract_tenant(
        SCOPE, first.tables.turns, ExtractionTables.of(None, None, None), None, "none", now=NOW
    )
    assert done.tables.triples["object"].to_list() == ["redis"]
    land(root, "acme", "r", "a.jsonl", [restated, line(turn_id="t2")])
    second = ingest_turns(root, SCOPE, [path], first.tables, NOW)
    again = extract_tenant(SCOPE, second.tables.turns, done.tables, None, "none", now=NOW)
    assert again.reasons["turn_changed"] == 1
    expected = ["kafka"] if restated["role"] == "tool" else []
    assert again.tables.triples["object"].to_list() == expected
    assert again.tables.log["turn_sha256"].null_count() == 0


@pytest.mark.parametrize("pad", [60, 70, 80])
def test_a_scope_mismatch_detail_never_keeps_part_of_a_clipped_secret(
    tmp_path: Path, pad: int
) -> None:
    root = tmp_path / "landing"
    land(root, "acme", "r", "a.jsonl", [line(org="x" * pad + "-" + GHP)])
    read = landing.read_tenant_files(root, SCOPE, now=NOW)
    assert read.rejects["reason"].to_list() == ["scope_mismatch"]
    assert not leaked(json.dumps(read.rejects.to_dicts()), GHP)


@pytest.mark.parametrize("pad", [1960, 1970, 1975])
def test_a_long_rejected_session_id_is_redacted_before_it_is_clipped(
    tmp_path: Path, pad: int
) -> None:
    root = tmp_path / "landing"
    land(root, "acme", "r", "a.jsonl", [line(session_id="s" * pad + "-" + GHP, role="bad")])
    read = landing.read_tenant_files(root, SCOPE, now=NOW)
    assert read.rejects["reason"].to_list() == ["bad_role"]
    session = read.rejects["session_id"][0]
    assert len(session) <= 2000 and not leaked(session, GHP)


def _ctx() -> TurnContext:
    return TurnContext("acme", "r", "2026-11-20", "s", "t", NOW, "c", "explicit", "explicit")


def test_a_token_as_predicate_is_redacted_before_it_is_normalised() -> None:
    rows, rejects = items_to_triples([{"subject": "a", "predicate": AKIA, "object": "b"}], _ctx())
    assert rows == [] and [r["reason"] for r in rejects] == ["predicate_not_upper_snake_case"]
    assert AKIA not in json.dumps(rejects)


@pytest.mark.parametrize(
    "item",
    [
        {"subject": "a", "predicate": "x" * 60 + " " + GHP, "object": "b"},
        {"subject": "a", "predicate": "USES", "object": "b", "confidence": "x" * 20 + " " + GHP},
        {"subject": "a", "predicate": "USES", "object": "b", "valid_from": "x" * 20 + " " + GHP},
    ],
)
def test_triple_details_redact_a_value_before_clipping_it(item: dict[str, str]) -> None:
    _, rejects = items_to_triples([item], _ctx())
    assert rejects and not leaked(json.dumps(rejects), GHP)


def test_the_triples_answer_names_the_ids_ingestion_stores_and_echoes_no_secret(
    tmp_path: Path,
) -> None:
    keys = tmp_path / "keys.json"
    key = add_key(keys, "acme", "*")
    root = tmp_path / "landing"
    with RecallService(SqliteGraphStore(tmp_path / "g.sqlite")) as service:
        app = create_app(service=service, keys=KeyRing(keys), landing_dir=root)
        with TestClient(app) as client:
            answer = client.post(
                "/v1/triples",
                headers={"Authorization": f"Bearer {key}"},
                json={
                    "tenant": "acme/r",
                    "session_id": f"sess-{GHP}",
                    "client": f"client/{AKIA}",
                    "triples": [{"subject": "svc", "predicate": "USES", "object": "redis"}],
                },
            )
    assert answer.status_code == 202, answer.text
    assert not leaked(answer.text, GHP) and AKIA not in answer.text
    body = answer.json()
    files = landing.discover(root)[SCOPE]
    turns = ingest_turns(root, SCOPE, files, TurnTables.empty(), datetime.now(UTC)).tables.turns
    done = extract_tenant(SCOPE, turns, ExtractionTables.of(None, None, None), None, "none")
    triples = done.tables.triples
    assert triples["triple_id"].to_list() == [body["triples"][0]["triple_id"]]
    assert triples["session_id"].to_list() == [body["session_id"]]
    assert triples.filter(pl.col("client").str.contains(AKIA)).is_empty()


@pytest.mark.parametrize(
    "body",
    [
        {"tenant": "acme/r", "turns": [{"session_id": "s", "turn_id": "t", GHP: 1}]},
        {"tenant": "acme/r", GHP: 1, "turns": []},
    ],
)
def test_a_validation_error_never_echoes_a_field_name_holding_a_secret(
    tmp_path: Path, body: dict[str, object]
) -> None:
    keys = tmp_path / "keys.json"
    key = add_key(keys, "acme", "*")
    with RecallService(SqliteGraphStore(tmp_path / "g.sqlite")) as service:
        app = create_app(service=service, keys=KeyRing(keys), landing_dir=tmp_path / "landing")
        with TestClient(app) as client:
            answer = client.post("/v1/turns", headers={"Authorization": f"Bearer {key}"}, json=body)
    assert answer.status_code == 422
    assert "extra_forbidden" in answer.text and not leaked(answer.text, GHP)
