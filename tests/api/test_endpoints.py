"""The API's endpoints over real stores: answers, caps, write paths, health and metrics."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import orjson
from fastapi.testclient import TestClient

from memflow.extract import extract_day
from memflow.landing import UPSERT_TOOL, read_landing_file
from recall.api import create_app
from recall.auth import KeyRing
from recall.service import RecallService
from schemas.scope import Scope
from tests.api.conftest import T0, World, bearer

ACME = "acme/payments"


def _files(landing: Path) -> list[Path]:
    return sorted(p for p in landing.rglob("*") if p.is_file())


# -- recall ------------------------------------------------------------------------------------


def test_recall_answers_facts_of_the_scope_with_provenance(client: TestClient, world: World):
    r = client.post(
        "/v1/recall",
        json={"tenant": ACME, "query": "which database does LedgerCore use?"},
        headers=bearer(world.keys["acme_payments"]),
    )
    assert r.status_code == 200
    body = r.json()
    assert body["scope"] == ACME and body["mode"] == "hybrid"
    assert body["entities"][0]["name"] == "LedgerCore" and body["entities"][0]["via"] == "both"
    mine = world.tenants[ACME]
    assert body["facts"] and {f["fact_id"] for f in body["facts"]} <= mine.fact_ids
    first = body["facts"][0]
    assert first["provenance"] == {
        "session_id": "s-acme",
        "turn_id": first["provenance"]["turn_id"],
        "client": "claude-code",
        "model": "explicit",
        # every turn that stated the fact, first statement first
        "sources": [{"session_id": "s-acme", "turn_id": first["provenance"]["turn_id"]}],
    }
    assert "not instructions" in body["notice"]
    # The contradiction in the fixture comes back side by side.
    primary = [f for f in body["facts"] if f["predicate"] == "PRIMARY_DATABASE"]
    assert len(primary) == 2 and primary[0]["contradicts"] == [primary[1]["fact_id"]]


def test_org_and_repo_spelling_equals_tenant_spelling(client: TestClient, world: World):
    h = bearer(world.keys["acme_payments"])
    a = client.post("/v1/recall", json={"tenant": ACME, "query": "Kafka"}, headers=h).json()
    b = client.post(
        "/v1/recall", json={"org": "acme", "repo": "payments", "query": "Kafka"}, headers=h
    ).json()
    assert [f["fact_id"] for f in a["facts"]] == [f["fact_id"] for f in b["facts"]]
    bad = client.post(
        "/v1/recall",
        json={"tenant": ACME, "org": "acme", "repo": "web", "query": "Kafka"},
        headers=h,
    )
    assert bad.status_code == 422 and bad.json()["error"]["code"] == "invalid_request"


def test_recall_as_of_hides_facts_not_yet_valid_and_shows_superseded_ones(
    client: TestClient, world: World
):
    h = bearer(world.keys["acme_payments"])
    early = T0 + timedelta(hours=1, minutes=30)  # only facts 0 and 1 were valid then
    body = client.post(
        "/v1/recall",
        json={"tenant": ACME, "query": "LedgerCore", "as_of": early.isoformat()},
        headers=h,
    ).json()
    assert len(body["facts"]) == 2
    now = client.post("/v1/recall", json={"tenant": ACME, "query": "LedgerCore"}, headers=h)
    superseded = {f["fact_id"] for f in body["facts"]} - {f["fact_id"] for f in now.json()["facts"]}
    assert len(superseded) == 1  # fact 0 was closed by fact 1 a day later


def test_recall_caps_are_enforced_not_clamped(client: TestClient, world: World):
    h = bearer(world.keys["acme_payments"])
    for extra in ({"hops": 3}, {"limit": 41}, {"limit": 0}, {"ranking": "fuzzy"}):
        r = client.post("/v1/recall", json={"tenant": ACME, "query": "Kafka", **extra}, headers=h)
        assert r.status_code == 422, extra
        assert "input" not in json.dumps(r.json()["error"]["details"])
    r = client.post(
        "/v1/recall", json={"tenant": ACME, "query": "Kafka", "limit": 3, "hops": 1}, headers=h
    )
    assert r.status_code == 200 and 0 < len(r.json()["facts"]) <= 3
    assert {f["hop"] for f in r.json()["facts"]} == {1}
    long = client.post("/v1/recall", json={"tenant": ACME, "query": "x" * 4097}, headers=h)
    assert long.status_code == 422


def test_greeting_is_skipped_with_a_reason(client: TestClient, world: World):
    r = client.post(
        "/v1/recall",
        json={"tenant": ACME, "query": "hi there"},
        headers=bearer(world.keys["acme_payments"]),
    )
    assert r.status_code == 200
    assert r.json()["skipped"] is True and r.json()["skip_reason"] == "greeting"


def test_semantic_ranking_without_a_model_is_a_clear_409(world: World, landing: Path):
    names_only = RecallService(world.graph)  # no vector store, no embedder
    app = create_app(service=names_only, keys=KeyRing(world.keys_file), landing_dir=landing)
    h = bearer(world.keys["acme_payments"])
    with TestClient(app) as c:
        for ranking in ("semantic", "hybrid"):
            r = c.post(
                "/v1/recall", json={"tenant": ACME, "query": "Kafka", "ranking": ranking}, headers=h
            )
            assert r.status_code == 409
            assert r.json()["error"]["code"] == "semantic_unavailable"
            assert r.json()["error"]["details"] == [{"reason": "no_vector_store"}]
        auto = c.post("/v1/recall", json={"tenant": ACME, "query": "Kafka"}, headers=h).json()
        assert auto["mode"] == "names" and auto["warnings"][0]["code"] == "names_only"
        assert auto["facts"]


# -- entities and subgraph ---------------------------------------------------------------------


def test_entity_search(client: TestClient, world: World):
    r = client.get(
        "/v1/entities",
        params={"tenant": ACME, "q": "ledger core", "limit": 3},
        headers=bearer(world.keys["acme_payments"]),
    )
    assert r.status_code == 200
    found = r.json()["entities"]
    assert found[0]["name"] == "LedgerCore" and len(found) <= 3
    assert {e["entity_id"] for e in found} <= world.tenants[ACME].entity_ids
    assert (
        client.get(
            "/v1/entities",
            params={"tenant": ACME, "q": "x", "limit": 41},
            headers=bearer(world.keys["acme_payments"]),
        ).status_code
        == 422
    )


def test_subgraph_hops_and_limit(client: TestClient, world: World):
    h = bearer(world.keys["acme_payments"])
    seed = next(
        e.entity_id for e in world.graph.entities(Scope.parse(ACME)) if e.name == "LedgerCore"
    )
    one = client.post("/v1/subgraph", json={"tenant": ACME, "entity_ids": [seed]}, headers=h)
    two = client.post(
        "/v1/subgraph", json={"tenant": ACME, "entity_ids": [seed], "hops": 2}, headers=h
    )
    assert one.status_code == two.status_code == 200
    assert {f["hop"] for f in one.json()["facts"]} == {1}
    assert len(two.json()["facts"]) > len(one.json()["facts"])
    capped = client.post(
        "/v1/subgraph",
        json={"tenant": ACME, "entity_ids": [seed], "hops": 2, "limit": 5},
        headers=h,
    )
    assert len(capped.json()["facts"]) == 5
    for bad in ({"hops": 3}, {"limit": 41}, {"entity_ids": []}, {"entity_ids": ["e"] * 51}):
        r = client.post(
            "/v1/subgraph", json={"tenant": ACME, "entity_ids": [seed], **bad}, headers=h
        )
        assert r.status_code == 422, bad


# -- writes ------------------------------------------------------------------------------------


def test_triples_are_landed_as_one_tool_turn_that_the_pipeline_reads_with_the_same_ids(
    client: TestClient, world: World, landing: Path, tmp_path: Path
):
    triples = [
        {"subject": "LedgerCore", "predicate": "migrates to", "object": "CockroachDB"},
        {
            "subject": "CockroachDB",
            "predicate": "DEPLOYS_TO",
            "object": "Kubernetes",
            "confidence": 0.8,
            "subject_type": "database",
            "valid_from": "2025-07-01T00:00:00+02:00",
        },
    ]
    r = client.post(
        "/v1/triples",
        json={"tenant": ACME, "triples": triples, "client": "codex", "session_id": "sess-9"},
        headers=bearer(world.keys["acme_payments"]),
    )
    assert r.status_code == 202, r.text
    body = r.json()
    assert body["accepted"] == 2 and body["session_id"] == "sess-9"
    assert body["triples"][0]["predicate"] == "MIGRATES_TO"  # the contract's normalisation
    (path,) = _files(landing)
    assert path.parent == landing / "acme" / "payments"
    assert path.name == body["landing_file"] and path.name.startswith("api-")
    (line,) = path.read_bytes().splitlines()
    record = orjson.loads(line)
    assert record["org"] == "acme" and record["repo"] == "payments"
    assert record["tool_name"] == UPSERT_TOOL and record["role"] == "tool"
    assert record["client"] == "codex" and record["turn_id"] == body["turn_id"]
    assert record["tool_input"]["triples"][1]["valid_from"] == "2025-06-30T22:00:00Z"
    read = read_landing_file(path, landing)
    assert read.rejects.height == 0 and read.turns.height == 1

    # The pipeline's own path (raw_turns read + extraction) computes the ids the API returned.
    from datetime import UTC, datetime

    from memflow.turns import TurnTables, ingest_turns

    scope = Scope.parse(ACME)
    turns = ingest_turns(landing, scope, [path], TurnTables.empty(), datetime.now(UTC)).tables.turns
    report = extract_day(scope, turns, None)
    assert report.rejects.height == 0
    assert report.triples["triple_id"].to_list() == [t["triple_id"] for t in body["triples"]]
    assert report.triples["model"].to_list() == ["explicit", "explicit"]
    assert report.triples["client"].to_list() == ["codex", "codex"]


def test_any_bad_triple_rejects_the_request_with_every_reason(
    client: TestClient, world: World, landing: Path
):
    triples = [
        {"subject": "ok", "predicate": "USES", "object": "fine"},
        {"subject": "", "predicate": "USES", "object": "x"},
        {"subject": "a", "predicate": "not a predicate!", "object": "b"},
        {"subject": "a", "predicate": "USES", "object": "b", "confidence": 0.2},
        {"subject": "n" * 121, "predicate": "USES", "object": "b"},
        {"subject": "a", "predicate": "USES", "object": "b", "valid_from": "yesterday"},
        "not an object",
        {"subject": "AKIAIOSFODNN7EXAMPLE", "predicate": "USES", "object": "b"},
    ]
    r = client.post(
        "/v1/triples",
        json={"tenant": ACME, "triples": triples},
        headers=bearer(world.keys["acme_payments"]),
    )
    assert r.status_code == 422
    err = r.json()["error"]
    assert err["code"] == "triples_rejected"
    reasons = {d["index"]: d["reason"] for d in err["details"]}
    assert reasons == {
        1: "name_empty",
        2: "predicate_not_upper_snake_case",
        3: "confidence_below_0.6",
        4: "name_too_long",
        5: "valid_from_unparsed",
        6: "not_an_object",
        7: "name_redacted_entirely",
    }
    assert "AKIA" not in r.text  # rejects never echo a secret
    assert _files(landing) == []


def test_turns_are_landed_after_the_landing_readers_checks(
    client: TestClient, world: World, landing: Path
):
    h = bearer(world.keys["acme_all"])
    turn = {
        "session_id": "s1",
        "turn_id": "t1",
        "ts": "2026-01-05T10:00:00+01:00",
        "role": "user",
        "content": "we moved the ledger to CockroachDB",
        "client": "claude-code",
    }
    tool = {
        **turn,
        "turn_id": "t2",
        "role": "tool",
        "content": None,
        "tool_name": UPSERT_TOOL,
        "tool_input": {"triples": [{"subject": "a", "predicate": "USES", "object": "b"}]},
    }
    r = client.post("/v1/turns", json={"tenant": "acme/web", "turns": [turn, tool]}, headers=h)
    assert r.status_code == 202, r.text
    (path,) = _files(landing)
    read = read_landing_file(path, landing)
    assert read.turns.height == 2 and read.rejects.height == 0
    assert read.turns["ts"][0] == datetime(2026, 1, 5, 9, tzinfo=UTC)

    duplicate = client.post(
        "/v1/turns", json={"tenant": "acme/web", "turns": [turn, turn]}, headers=h
    )
    assert duplicate.status_code == 422
    assert duplicate.json()["error"]["details"] == [
        {
            "index": 1,
            "reason": "duplicate_turn",
            "detail": duplicate.json()["error"]["details"][0]["detail"],
        }
    ]
    broken_tool = {**tool, "tool_input": {"triples": "nope"}}
    r = client.post("/v1/turns", json={"tenant": "acme/web", "turns": [broken_tool]}, headers=h)
    assert r.status_code == 422 and r.json()["error"]["details"][0]["reason"] == "bad_tool_input"
    naive = {**turn, "ts": "2026-01-05T10:00:00"}
    r = client.post("/v1/turns", json={"tenant": "acme/web", "turns": [naive]}, headers=h)
    assert r.status_code == 422
    huge = {**tool, "tool_input": {"triples": [], "n": 10**30}}
    r = client.post("/v1/turns", json={"tenant": "acme/web", "turns": [huge]}, headers=h)
    assert r.status_code == 422
    assert len(_files(landing)) == 1  # rejected requests leave nothing behind


def test_writes_bounds(client: TestClient, world: World, landing: Path):
    h = bearer(world.keys["acme_payments"])
    many = [{"subject": "a", "predicate": "USES", "object": f"b{i}"} for i in range(501)]
    assert (
        client.post("/v1/triples", json={"tenant": ACME, "triples": many}, headers=h).status_code
        == 422
    )
    big = client.post(
        "/v1/turns",
        content=b'{"tenant": "acme/payments", "turns": [], "pad": "' + b"x" * (1 << 20) + b'"}',
        headers={**h, "content-type": "application/json"},
    )
    assert big.status_code == 413 and big.json()["error"]["code"] == "payload_too_large"
    long_url = client.get("/v1/entities?tenant=acme/payments&q=" + "a" * 20_000, headers=h)
    assert long_url.status_code == 414
    assert _files(landing) == []


def test_server_without_a_landing_zone_refuses_writes(world: World, service: RecallService):
    app = create_app(service=service, keys=KeyRing(world.keys_file))
    with TestClient(app) as c:
        r = c.post(
            "/v1/triples",
            json={
                "tenant": ACME,
                "triples": [{"subject": "a", "predicate": "USES", "object": "b"}],
            },
            headers=bearer(world.keys["acme_payments"]),
        )
    assert r.status_code == 503 and r.json()["error"]["code"] == "landing_unconfigured"


# -- health, metrics, schema -------------------------------------------------------------------


def test_healthz_reports_both_stores(client: TestClient):
    r = client.get("/healthz")
    assert r.status_code == 200
    assert r.json() == {
        "status": "ok",
        "graph": {"ok": True, "backend": "sqlite"},
        "vectors": {"ok": True, "backend": "milvus-lite"},
        "embedding_model": "test-trigram-64",
    }


def test_healthz_fails_when_the_graph_store_is_gone(world: World, tmp_path: Path):
    from resources.graph.sqlite import SqliteGraphStore

    graph = SqliteGraphStore(tmp_path / "g.sqlite")
    graph.close()
    app = create_app(service=RecallService(graph), keys=KeyRing(world.keys_file))
    with TestClient(app) as c:
        r = c.get("/healthz")
    assert r.status_code == 503 and r.json()["graph"]["ok"] is False


def test_metrics_count_by_tenant_and_mode_and_never_carry_queries(client: TestClient, world: World):
    h = bearer(world.keys["acme_payments"])
    client.post("/v1/recall", json={"tenant": ACME, "query": "Zanzibar LedgerCore"}, headers=h)
    client.post("/v1/recall", json={"tenant": ACME, "query": "hello"}, headers=h)
    client.post("/v1/recall", json={"tenant": "globex/payments", "query": "Nightjar"}, headers=h)
    client.post("/v1/recall", json={"tenant": ACME, "query": "x"}, headers=bearer("mf_nope"))
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", headers=h).status_code == 403
    r = client.get("/metrics", headers=bearer(world.keys["ops"]))
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    text = r.text
    assert 'memflow_recalls_total{mode="hybrid",tenant="acme/payments"} 1.0' in text
    assert 'memflow_recalls_total{mode="skipped",tenant="acme/payments"} 1.0' in text
    assert 'memflow_api_errors_total{code="tenant_not_found"} 1.0' in text
    assert 'memflow_api_errors_total{code="unauthorized"}' in text
    assert 'memflow_recall_latency_seconds_bucket{le="0.005",mode="hybrid"}' in text
    assert 'route="/v1/recall",status="2xx"' in text
    for secret in ("Zanzibar", "LedgerCore", "Nightjar", "globex"):
        assert secret not in text


def test_openapi_is_published_with_bounds_and_bearer_auth(client: TestClient):
    spec = client.get("/openapi.json").json()
    assert set(spec["paths"]) == {
        "/v1/recall",
        "/v1/entities",
        "/v1/subgraph",
        "/v1/triples",
        "/v1/turns",
        "/v1/facts",
        "/v1/retractions",
        "/v1/tenants/{org}/{repo}",
        "/healthz",
        "/metrics",
    }
    recall = spec["components"]["schemas"]["RecallRequest"]["properties"]
    assert recall["limit"]["maximum"] == 40 and recall["hops"]["maximum"] == 2
    assert spec["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    assert "409" in spec["paths"]["/v1/recall"]["post"]["responses"]
    facts = {p["name"]: p for p in spec["paths"]["/v1/facts"]["get"]["parameters"]}
    assert facts["limit"]["schema"]["maximum"] == 100
    assert set(facts) == {"tenant", "entity", "predicate", "status", "as_of", "limit", "cursor"}
    erase = spec["paths"]["/v1/tenants/{org}/{repo}"]["delete"]["responses"]
    assert {"200", "401", "403", "404", "501", "503"} <= set(erase)
    accepted = spec["components"]["schemas"]["TriplesAccepted"]["properties"]
    assert {"ingest", "rejected", "triples"} <= set(accepted)
