"""List, retract, forget and erase through the API, the ingest answer of every write, and the
redaction of what writes land (issue 17 items 3 and 5, issue 16 item 2, red team M2).

The stores are the session's real SQLite graph and embedded vector store (tests/api/conftest.py);
writes land in a fresh landing folder per test and are read back with the landing reader."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import orjson
import pytest
from fastapi.testclient import TestClient

from memflow.landing import RETRACT_TOOL, UPSERT_TOOL, read_landing_file
from recall.api import create_app
from recall.auth import KeyRing
from recall.ports import EraseReport, IngestRequest
from recall.service import RecallService
from recall.writes import NO_TRIGGER
from schemas import ids
from schemas.redaction import contains_secret
from schemas.scope import Scope
from tests.api.conftest import PRIVATE, T0, World, bearer

ACME = "acme/payments"
# Realistic secrets of families the redactor claims (shapes from their vendors' docs).
GITHUB = "ghp_" + "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3z5A"
STRIPE = "sk_live_" + "51H8xYzAbCdEfGhIjKlMnOpQrStUvWxYz0123456789AbCd"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY"


def _files(landing: Path) -> list[Path]:
    return sorted(p for p in landing.rglob("*.jsonl"))


def _lines(path: Path) -> list[dict]:
    return [orjson.loads(x) for x in path.read_bytes().splitlines()]


# -- list ---------------------------------------------------------------------------------


def test_facts_are_listed_newest_first_in_pages_that_say_how_many_more(
    client: TestClient, world: World
):
    h = bearer(world.keys["acme_payments"])
    stored = world.tenants[ACME].fact_ids
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        params = {"tenant": ACME, "status": "all", "limit": 7}
        if cursor:
            params["cursor"] = cursor
        r = client.get("/v1/facts", params=params, headers=h)
        assert r.status_code == 200, r.text
        page = r.json()
        pages += 1
        assert page["total"] == len(stored)
        seen += [f["fact_id"] for f in page["facts"]]
        assert page["more"] == len(stored) - len(seen)
        cursor = page["next_cursor"]
        if not cursor:
            break
    assert pages == -(-len(stored) // 7)
    assert len(seen) == len(set(seen)) and set(seen) == stored  # every fact once
    r = client.get("/v1/facts", params={"tenant": ACME, "status": "all", "limit": 100}, headers=h)
    starts = [f["valid_from"] for f in r.json()["facts"]]
    assert starts == sorted(starts, reverse=True)


def test_facts_filters_validity_entity_and_predicate(client: TestClient, world: World):
    h = bearer(world.keys["acme_payments"])

    def get(**params: object) -> dict:
        r = client.get("/v1/facts", params={"tenant": ACME, "limit": 100, **params}, headers=h)
        assert r.status_code == 200, r.text
        return r.json()

    valid, closed, every = get(), get(status="closed"), get(status="all")
    assert closed["total"] == 1  # the fixture supersedes one fact a day after T0
    assert valid["total"] + closed["total"] == every["total"] == len(world.tenants[ACME].fact_ids)
    assert all(f["valid_to"] is None for f in valid["facts"])
    # Before anything was stated, nothing is valid; a day later the closed one still was.
    assert get(as_of=(T0 - timedelta(days=1)).isoformat())["total"] == 0
    early = get(as_of=(T0 + timedelta(hours=2)).isoformat(), status="all")["total"]
    assert early == every["total"]
    by_name = get(entity="ledgercore", status="all")  # a name, spelled in another case
    eid = ids.entity_id("acme", "payments", ids.norm_key("LedgerCore"))
    by_id = get(entity=eid, status="all")
    assert by_name["total"] == by_id["total"] > 0
    assert all(eid in (f["subject_id"], f["object_id"]) for f in by_id["facts"])
    uses = get(predicate="uses", status="all")
    assert uses["total"] > 0 and {f["predicate"] for f in uses["facts"]} == {"USES"}
    assert get(predicate="NO_SUCH_PREDICATE")["total"] == 0


def test_facts_refuse_bad_input_and_foreign_tenants_alike(client: TestClient, world: World):
    h = bearer(world.keys["acme_payments"])
    r = client.get("/v1/facts", params={"tenant": ACME, "cursor": "not-ours"}, headers=h)
    assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_cursor"
    r = client.get("/v1/facts", params={"tenant": ACME, "predicate": "not one!"}, headers=h)
    assert r.status_code == 422
    assert (
        client.get("/v1/facts", params={"tenant": ACME, "limit": 101}, headers=h).status_code == 422
    )
    foreign = client.get("/v1/facts", params={"tenant": "globex/secret-lab"}, headers=h)
    missing = client.get("/v1/facts", params={"tenant": "acme/nothing-here"}, headers=h)
    assert foreign.status_code == missing.status_code == 404
    assert foreign.json() == missing.json()
    assert not any(n in foreign.text for n in PRIVATE["globex/secret-lab"])


# -- retract, forget ---------------------------------------------------------------------------


def test_a_retraction_lands_one_turn_with_the_callers_key_as_by(
    client: TestClient, world: World, landing: Path
):
    fact = sorted(world.tenants[ACME].fact_ids)[0]
    body = {
        "tenant": ACME,
        "retract": [
            {"fact_id": fact},
            {"subject": "LedgerCore", "predicate": "depends on", "object": "Kafka"},
            {"entity": "alice"},
        ],
        "reason": f"leaked with the token {GITHUB}",
        "client": "claude-code",
    }
    r = client.post("/v1/retractions", json=body, headers=bearer(world.keys["acme_payments"]))
    assert r.status_code == 202, r.text
    out = r.json()
    assert out["accepted"] == 3 and out["by"].startswith("key:k_")
    triple = out["items"][1]
    assert triple["predicate"] == "DEPENDS_ON"  # normalised as the contract does
    s_id = ids.entity_id("acme", "payments", ids.norm_key("LedgerCore"))
    o_id = ids.entity_id("acme", "payments", ids.norm_key("Kafka"))
    assert triple["fact_id"] == ids.fact_id("acme", "payments", s_id, "DEPENDS_ON", o_id)
    assert out["ingest"] == {
        "requested": False,
        "run_id": None,
        "expected_by": None,
        "reason": NO_TRIGGER,
    }
    (path,) = _files(landing)
    assert path.name == out["landing_file"]
    (turn,) = _lines(path)
    assert turn["tool_name"] == RETRACT_TOOL and turn["role"] == "tool"
    assert turn["tool_input"]["retract"] == [
        {"fact_id": fact},
        {"subject": "LedgerCore", "predicate": "DEPENDS_ON", "object": "Kafka"},
        {"entity": "alice"},
    ]
    assert turn["tool_input"]["by"] == out["by"]
    assert GITHUB not in path.read_text() and "[REDACTED" in turn["tool_input"]["reason"]
    assert datetime.fromisoformat(turn["ts"].replace("Z", "+00:00")) == datetime.fromisoformat(
        out["at"].replace("Z", "+00:00")
    )
    read = read_landing_file(path, landing)
    assert read.rejects.height == 0 and read.turns.height == 1


@pytest.mark.parametrize(
    ("item", "status"),
    [
        ({}, 422),
        ({"fact_id": "f_1", "entity": "x"}, 422),  # two forms
        ({"subject": "a", "predicate": "USES"}, 422),  # half a triple
        ({"subject": "a", "predicate": "not a predicate!", "object": "b"}, 422),
        ({"entity": "AKIAIOSFODNN7EXAMPLE"}, 422),  # nothing left once redacted
        ({"fact_id": GITHUB}, 422),
    ],
)
def test_a_retraction_that_names_nothing_is_refused_and_lands_nothing(
    client: TestClient, world: World, landing: Path, item: dict, status: int
):
    r = client.post(
        "/v1/retractions",
        json={"tenant": ACME, "retract": [item]},
        headers=bearer(world.keys["acme_payments"]),
    )
    assert r.status_code == status, r.text
    assert GITHUB not in r.text and "AKIA" not in r.text
    assert _files(landing) == []


def test_retractions_follow_the_key_rules(client: TestClient, world: World, landing: Path):
    body = {"retract": [{"entity": "Project Nightjar"}]}
    h = bearer(world.keys["acme_payments"])
    foreign = client.post(
        "/v1/retractions", json={**body, "tenant": "globex/secret-lab"}, headers=h
    )
    other_repo = client.post("/v1/retractions", json={**body, "tenant": "acme/web"}, headers=h)
    assert foreign.status_code == other_repo.status_code == 404
    assert foreign.json() == other_repo.json()
    assert client.post("/v1/retractions", json={**body, "tenant": ACME}).status_code == 401
    assert _files(landing) == []


def test_a_retraction_is_no_ordinary_turn(client: TestClient, world: World, landing: Path):
    """`by` is the caller's key; a retract_facts turn handed to /v1/turns would name anyone."""
    turn = {
        "session_id": "s",
        "turn_id": "t",
        "ts": "2026-01-05T10:00:00Z",
        "role": "tool",
        "client": "c",
        "tool_name": "mcp__memflow__RETRACT_FACTS",
        "tool_input": {"retract": [{"entity": "alice"}], "by": "somebody else"},
    }
    r = client.post(
        "/v1/turns",
        json={"tenant": ACME, "turns": [turn]},
        headers=bearer(world.keys["acme_payments"]),
    )
    assert r.status_code == 422
    assert r.json()["error"]["details"] == [{"index": 0, "reason": "retraction_not_a_turn"}]
    assert _files(landing) == []


# -- erase -----------------------------------------------------------------------------------


class Eraser:
    """The pipelines layer implements `recall.ports.TenantEraser` (and tests it erases
    everything); here only what the API does with one is under test."""

    def __init__(self, problems: tuple[str, ...] = ()) -> None:
        self.asked: list[Scope] = []
        self.problems = problems

    def __call__(self, scope: Scope) -> EraseReport:
        self.asked.append(scope)
        return EraseReport(scope, {"facts": 3, "landing_files": 2}, self.problems)


def _erase_client(world: World, service: RecallService, landing: Path, eraser: Eraser | None):
    app = create_app(
        service=service, keys=KeyRing(world.keys_file), landing_dir=landing, eraser=eraser
    )
    return TestClient(app, raise_server_exceptions=False)


def test_erase_needs_an_admin_key_that_covers_the_tenant(
    world: World, service: RecallService, landing: Path
):
    eraser = Eraser()
    with _erase_client(world, service, landing, eraser) as c:
        admin = bearer(world.keys["acme_admin"])
        r = c.delete("/v1/tenants/acme/payments", headers=admin)
        assert r.status_code == 200, r.text
        assert r.json() == {
            "tenant": ACME,
            "erased": True,
            "removed": {"facts": 3, "landing_files": 2},
            "problems": [],
            "notes": [],
        }
        assert eraser.asked == [Scope("acme", "payments")]
        # an ordinary key of the same tenant: refused, said so
        r = c.delete("/v1/tenants/acme/payments", headers=bearer(world.keys["acme_all"]))
        assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden"
        # a foreign tenant answers like a missing one, even to an admin key
        foreign = c.delete("/v1/tenants/globex/secret-lab", headers=admin)
        missing = c.delete("/v1/tenants/nobody/none", headers=admin)
        bad = c.delete("/v1/tenants/acme/..", headers=admin)
        assert foreign.status_code == missing.status_code == 404
        assert foreign.json() == missing.json()
        assert bad.status_code == 404
        assert c.delete("/v1/tenants/acme/payments").status_code == 401
    assert eraser.asked == [Scope("acme", "payments")]


def test_erase_without_an_eraser_says_why_and_a_partial_erase_says_what_is_left(
    world: World, service: RecallService, landing: Path
):
    admin = bearer(world.keys["acme_admin"])
    with _erase_client(world, service, landing, None) as c:
        r = c.delete("/v1/tenants/acme/web", headers=admin)
    assert r.status_code == 501 and r.json()["error"]["code"] == "erase_unavailable"
    assert "memflow erase" in r.json()["error"]["message"]
    with _erase_client(world, service, landing, Eraser(("vectors: store unreachable",))) as c:
        r = c.delete("/v1/tenants/acme/web", headers=admin)
    assert r.status_code == 503
    assert r.json()["erased"] is False and r.json()["problems"] == ["vectors: store unreachable"]


# -- ingest ---------------------------------------------------------------------------------


class Trigger:
    def __init__(self, fail: bool = False) -> None:
        self.calls: list[tuple[Scope, Path]] = []
        self.fail = fail

    def __call__(self, scope: Scope, landed: Path) -> IngestRequest:
        self.calls.append((scope, landed))
        if self.fail:
            raise ConnectionError("the daemon is down")
        return IngestRequest(
            requested=True, run_id="run-1", expected_by=datetime(2026, 1, 1, 0, 0, 8, tzinfo=UTC)
        )


def test_every_write_asks_for_the_tenants_run_and_says_when(
    world: World, service: RecallService, landing: Path
):
    trigger = Trigger()
    app = create_app(
        service=service, keys=KeyRing(world.keys_file), landing_dir=landing, ingest_trigger=trigger
    )
    h = bearer(world.keys["acme_payments"])
    triple = {"subject": "LedgerCore", "predicate": "USES", "object": "Valkey"}
    turn = {
        "session_id": "s",
        "turn_id": "t",
        "ts": "2026-01-05T10:00:00Z",
        "role": "user",
        "content": "we moved to Valkey",
        "client": "c",
    }
    with TestClient(app) as c:
        answers = [
            c.post("/v1/triples", json={"tenant": ACME, "triples": [triple]}, headers=h),
            c.post("/v1/turns", json={"tenant": ACME, "turns": [turn]}, headers=h),
            c.post(
                "/v1/retractions",
                json={"tenant": ACME, "retract": [{"entity": "Valkey"}]},
                headers=h,
            ),
        ]
    for r in answers:
        assert r.status_code == 202, r.text
        assert r.json()["ingest"] == {
            "requested": True,
            "run_id": "run-1",
            "expected_by": "2026-01-01T00:00:08Z",
            "reason": None,
        }
    assert [s for s, _ in trigger.calls] == [Scope("acme", "payments")] * 3
    assert sorted(p.name for _, p in trigger.calls) == sorted(p.name for p in _files(landing))
    # the trigger sees the final file, never the hidden one
    assert all(p.is_file() and not p.name.startswith(".") for _, p in trigger.calls)


def test_a_failing_trigger_never_fails_the_write(
    world: World, service: RecallService, landing: Path
):
    app = create_app(
        service=service,
        keys=KeyRing(world.keys_file),
        landing_dir=landing,
        ingest_trigger=Trigger(fail=True),
    )
    with TestClient(app) as c:
        r = c.post(
            "/v1/triples",
            json={
                "tenant": ACME,
                "triples": [{"subject": "a", "predicate": "USES", "object": "b"}],
            },
            headers=bearer(world.keys["acme_payments"]),
        )
    assert r.status_code == 202
    ingest = r.json()["ingest"]
    assert ingest["requested"] is False and "ConnectionError" in ingest["reason"]
    assert len(_files(landing)) == 1


# -- every door redacts (M2) ----------------------------------------------------------------


def test_turns_land_redacted_and_other_tools_inputs_are_never_written(
    client: TestClient, world: World, landing: Path
):
    base = {"ts": "2026-01-05T10:00:00Z", "client": "claude-code"}
    turns = [
        {
            **base,
            "session_id": f"sess-{GITHUB}",
            "turn_id": "t1",
            "role": "user",
            "content": f"deploy with {STRIPE} and AWS_SECRET_ACCESS_KEY={AWS_SECRET}",
        },
        {
            **base,
            "session_id": "s2",
            "turn_id": "t2",
            "role": "tool",
            "tool_name": "Bash",
            "tool_input": {"command": f"curl -H 'Authorization: token {GITHUB}' api"},
        },
        {
            **base,
            "session_id": "s2",
            "turn_id": "t3",
            "role": "tool",
            "tool_name": "mcp__memflow__upsert_graph_triples",
            "tool_input": {
                "triples": [{"subject": "ci", "predicate": "USES", "object": f"token {GITHUB}"}]
            },
        },
    ]
    r = client.post(
        "/v1/turns", json={"tenant": ACME, "turns": turns}, headers=bearer(world.keys["acme_all"])
    )
    assert r.status_code == 202, r.text
    assert r.json()["tool_inputs_left_out"] == 1
    (path,) = _files(landing)
    text = path.read_text()
    for secret in (GITHUB, STRIPE, AWS_SECRET):
        assert secret not in text
    assert not contains_secret(text)
    user, bash, upsert = _lines(path)
    assert "[REDACTED" in user["content"] and "[REDACTED" in user["session_id"]
    assert bash["tool_name"] == "Bash" and "tool_input" not in bash
    assert upsert["tool_input"]["triples"][0]["subject"] == "ci"
    read = read_landing_file(path, landing)
    assert read.rejects.height == 0 and read.turns.height == 3
    assert upsert["tool_name"] == "mcp__memflow__upsert_graph_triples"
    assert UPSERT_TOOL in upsert["tool_name"]
