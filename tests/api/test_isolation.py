"""Adversarial tenant isolation: over a thousand generated requests, zero foreign facts, no 5xx.

Cases combine a caller (every tenant key, forged and malformed keys), a target (own, foreign
and missing tenants, injection strings, unicode edge cases, both tenant spellings), a payload
(other tenants' entity names and ids, Gremlin/Milvus/SQL injection strings, RTL and zero-width
characters, NUL, lone surrogates, 100 KB strings) and an endpoint (every one that takes a tenant:
recall, entities, subgraph, facts, triples, turns, retractions, erase). Every answer is
checked against the tenants' own id sets: a 200 may only hold ids of a scope the caller was
granted, and never a name that only another tenant has; a 202 may only land in a granted
scope's landing folder.
"""

from __future__ import annotations

import json
import random
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from recall.api import create_app
from recall.auth import KeyRing
from recall.ports import EraseReport
from recall.service import RecallService
from schemas.scope import Scope, ScopeError
from tests.api.conftest import PRIVATE, SHARED, World

SEED = 20260101
NOT_FOUND = {"error": {"code": "tenant_not_found", "message": "tenant not found"}}
CHUNKS = 8

GREMLIN = [
    "g.V().drop().iterate()",
    "'); g.V().has('tenant_id','globex').values('name'); //",
    "__.V().hasLabel('entity').valueMap(true)",
    "x').or().has('ns', within('payments','secret-lab",
    "${jndi:ldap://127.0.0.1/a}",
    "g.V().has('name', TextP.containing('Nightjar'))",
]
MILVUS = [
    'tenant_id == "globex" or 1 == 1',
    '" or tenant_id != "',
    '\\" || ns in ["secret-lab"] || \\"',
    'ns like "%"',
    "array_contains(tenant_id, 'globex')",
    '"; delete from mf_ where id > 0; "',
]
SQL = ["'; DROP TABLE facts; --", "1' OR '1'='1", '" OR 1=1 --', "json_each('[\"a\"]')"]
UNICODE = [
    "\u202eerocregdeL",  # RTL override
    "Ledger\u200bCore",  # zero-width space
    "Ledger\u200d\u200cCore\ufeff",
    "Ledger\x00Core",  # NUL
    "\ud800 lone high surrogate",
    "lone low \udfff",
    "\U0001f600 emoji LedgerCore",
    "\uff2c\uff45\uff44\uff47\uff45\uff52Core",  # full-width
    "LedgerCore\u0301\u0301\u0301",
    "\u0130stanbul DOTTED",
    "\u05e9\u05dc\u05d5\u05dd \u0645\u0631\u062d\u0628\u0627 mixed bidi",
    "\x1b[31mred\x1b[0m",
    "\r\nHeader-Injection: yes",
    "",
    "   ",
]
HUGE = ["L" * 100_000, ("Project Nightjar " * 6000)[:100_000], "\u200b" * 50_000]

TENANT_ATTACKS = [
    "acme/payments' or 1==1",
    'acme/payments" or tenant_id != "',
    "acme/payments\x00globex",
    "acme/*",
    "*/*",
    "acme/payments/../globex/secret-lab",
    "../globex/payments",
    "acme/ payments",
    "ACME/payments",
    "acme/PAYMENTS",
    "acme/pay\u200bments",
    "acme/payments\u202e",
    "acme\\payments",
    "acme/payments\n",
    "acme",
    "/",
    "globex/secret-lab?tenant=acme/payments",
    "acme/" + "p" * 100_000,
    "acme/\ud800",
]


@dataclass(frozen=True)
class Case:
    n: int
    role: str  # a key role in the world, or "forged"
    header: str | None
    endpoint: str
    tenant: str | None
    org_repo: tuple[str, str] | None
    payload: dict[str, Any]

    def target(self) -> str | None:
        if self.org_repo is not None:
            return f"{self.org_repo[0]}/{self.org_repo[1]}"
        return self.tenant


def _private_of_others(world: World, keys: set[str]) -> list[str]:
    return [n for k, names in PRIVATE.items() if k not in keys for n in names]


def _cases(world: World) -> list[Case]:
    rng = random.Random(SEED)
    roles = ["acme_payments", "acme_all", "globex", "initech", "acme_admin"]
    all_ids = sorted(i for t in world.tenants.values() for i in t.entity_ids)
    names = [n for v in PRIVATE.values() for n in v] + SHARED
    texts = names + GREMLIN + MILVUS + SQL + UNICODE
    forged = [
        None,
        "Bearer mf_forged000000000000000000000000000000000000",
        f"Bearer {world.keys['acme_payments'][:-2]}",
        f"Bearer {world.keys['globex']}x",
        "Basic " + world.keys["initech"],
        "Bearer " + world.keys["acme_all"].upper(),
        "Bearer mf_' OR '1'='1",
        "Bearer",
    ]
    endpoints = [
        "recall", "recall", "recall", "entities", "subgraph", "facts", "triples", "turns",
        "retractions", "erase",
    ]  # fmt: skip
    tenants = [*list(PRIVATE), "acme/never", "nobody/none", "globex/missing", *TENANT_ATTACKS]

    def text() -> str:
        pick = rng.random()
        if pick < 0.05:
            return rng.choice(HUGE)
        if pick < 0.5:
            return rng.choice(texts)
        return " ".join(rng.choice(texts) for _ in range(rng.randint(2, 4)))

    out: list[Case] = []
    n = 0
    while len(out) < 1200:
        n += 1
        if rng.random() < 0.15:
            role, header = "forged", rng.choice(forged)
        else:
            role = rng.choice(roles)
            header = f"Bearer {world.keys[role]}"
        endpoint = rng.choice(endpoints)
        roll = rng.random()
        granted = sorted(world.readable(role)) if role != "forged" else []
        if roll < 0.35 and granted:
            tenant: str | None = rng.choice(granted)
        elif roll < 0.75:
            tenant = rng.choice(tenants)
        else:
            tenant = rng.choice(list(PRIVATE))
        org_repo = None
        if tenant is not None and rng.random() < 0.2 and "/" in tenant:
            org, _, repo = tenant.partition("/")
            org_repo, tenant = (org, repo), None
        payload = _payload(rng, endpoint, text, all_ids)
        out.append(Case(n, role, header, endpoint, tenant, org_repo, payload))
    return out


def _payload(rng: random.Random, endpoint: str, text: Any, all_ids: list[str]) -> dict[str, Any]:
    if endpoint == "recall":
        p: dict[str, Any] = {"query": text()}
        if rng.random() < 0.5:
            p["ranking"] = rng.choice(["auto", "lexical", "semantic", "hybrid"])
        if rng.random() < 0.3:
            p["hops"] = rng.choice([1, 2])
        if rng.random() < 0.2:
            p["as_of"] = rng.choice(["2025-06-01T12:00:00Z", "2099-01-01T00:00:00+14:00"])
        return p
    if endpoint == "entities":
        return {"q": text()[:1024], "limit": rng.randint(1, 40)}
    if endpoint == "facts":
        p = {"limit": rng.randint(1, 100), "status": rng.choice(["valid", "closed", "all"])}
        if rng.random() < 0.5:
            p["entity"] = rng.choice([text()[:200], rng.choice(all_ids)])
        if rng.random() < 0.3:
            p["predicate"] = rng.choice(["USES", "uses", text()[:40]])
        return p
    if endpoint == "retractions":
        forms = [
            {"entity": text()[:200] or "x"},
            {"fact_id": rng.choice(all_ids)},
            {"subject": text()[:150], "predicate": "USES", "object": text()[:150]},
        ]
        return {"retract": [rng.choice(forms)], "reason": text()[:500]}
    if endpoint == "erase":
        return {}
    if endpoint == "subgraph":
        ids = rng.sample(all_ids, rng.randint(1, 6))
        if rng.random() < 0.3:
            ids.append(text()[:200])
        return {"entity_ids": ids, "hops": rng.choice([1, 2]), "limit": rng.randint(1, 40)}
    if endpoint == "triples":
        triples = [
            {"subject": text()[:150], "predicate": rng.choice(["USES", "uses", text()[:40]]),
             "object": text()[:150]}
            for _ in range(rng.randint(1, 3))
        ]  # fmt: skip
        return {"triples": triples}
    turn = {
        "session_id": text()[:200] or "s",
        "turn_id": f"t{rng.randint(0, 9)}",
        "ts": "2026-01-01T00:00:00Z",
        "role": rng.choice(["user", "assistant", "tool"]),
        "content": text(),
        "client": "fuzz",
    }
    return {"turns": [turn]}


def _scope_or_none(target: str | None) -> Scope | None:
    if target is None:
        return None
    try:
        return Scope.parse(target)
    except ScopeError:
        return None


def _request(client: TestClient, case: Case):
    headers: dict[str, Any] = {}
    if case.header is not None:
        headers["Authorization"] = case.header.encode("utf-8", "surrogatepass")
    if case.endpoint == "erase":
        org, _, repo = (case.target() or "").partition("/")
        path = "/".join(urllib.parse.quote(p[:20_000].encode("utf-8", "surrogatepass"), safe="")
                        for p in (org, repo))  # fmt: skip
        return client.delete(f"/v1/tenants/{path}", headers=headers)
    if case.endpoint in ("entities", "facts"):
        query = {"tenant": case.target() or "", **case.payload}
        # Clients refuse URLs over 64 KB; 20,000 characters still pass the server's 16 KB cap.
        qs = "&".join(
            f"{k}={urllib.parse.quote(str(v)[:20_000].encode('utf-8', 'surrogatepass'))}"
            for k, v in query.items()
        )
        qs = qs if len(qs) < 60_000 else qs[:60_000]
        return client.get(f"/v1/{case.endpoint}?{qs}", headers=headers)
    body = dict(case.payload)
    if case.org_repo is not None:
        body["org"], body["repo"] = case.org_repo
    else:
        body["tenant"] = case.tenant
    # ensure_ascii escapes lone surrogates as \udXXX: JSON allows them, Unicode does not.
    raw = json.dumps(body).encode("ascii")
    headers["content-type"] = "application/json"
    return client.post(f"/v1/{case.endpoint}", content=raw, headers=headers)


def _walk_ids(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        for k, v in value.items():
            if k in ("entity_id", "fact_id", "subject_id", "object_id") and isinstance(v, str):
                yield v
            elif k == "contradicts" and isinstance(v, list):
                yield from v
            else:
                yield from _walk_ids(v)
    elif isinstance(value, list):
        for v in value:
            yield from _walk_ids(v)


def check(world: World, case: Case, status: int, body: bytes, landing: Path) -> list[str]:
    """Everything wrong with one answer (empty when it is right)."""
    problems: list[str] = []
    if status >= 500:
        return [f"server error {status}"]
    granted = world.readable(case.role) if case.role != "forged" else set()
    scope = _scope_or_none(case.target())
    # The guard may refuse a request before authentication looks at it (size, bad Unicode).
    guarded = status in (413, 414) or (status == 422 and b"lone surrogate" in body)
    # A tenant that cannot be a path (a "/" or "?" in it, an empty part) matches no route (the
    # router's own 404 or 405, before any key is looked at), or names no scope (the ordinary
    # missing-tenant 404, after the key): neither tells anything about a tenant.
    codes = {"not_found", "method_not_allowed", "tenant_not_found"}
    if case.endpoint == "erase" and scope is None and status in (404, 405):
        code = json.loads(body)["error"]["code"]
        if case.role == "forged" and code == "tenant_not_found":
            return ["a forged key got past authentication"]
        return [] if code in codes else [f"erase of an invalid tenant answered {body[:80]!r}"]
    if case.role == "forged" and status != 401 and not guarded:
        problems.append(f"forged key got {status}")
    if status in (200, 202):
        data = json.loads(body)
        if scope is None:
            return [f"{status} for an invalid tenant"]
        if case.role == "forged":
            return [f"{status} for a forged key"]
        principal_ok = any(scope.tenant_id == g.split("/")[0] for g in granted) and (
            scope.key in granted or case.role in ("acme_all", "acme_admin")
        )
        if not principal_ok:
            problems.append(f"{status} for {scope.key}, not granted to {case.role}")
        if case.endpoint == "erase":
            if case.role != "acme_admin":
                problems.append(f"erase answered {status} for a key that is not an admin key")
            if data.get("tenant") != scope.key:
                problems.append(f"erase report names {data.get('tenant')!r}")
        elif status == 200:
            if data.get("scope") != scope.key:
                problems.append(f"answer names scope {data.get('scope')!r}")
            own = world.tenants.get(scope.key)
            own_ids = (own.entity_ids | own.fact_ids) if own else set()
            leaked = [i for i in _walk_ids(data) if i not in own_ids]
            if leaked:
                problems.append(f"foreign ids {leaked[:3]}")
            text = body.decode("utf-8")
            for name in _private_of_others(world, {scope.key}):
                if json.dumps(name)[1:-1] in text:
                    problems.append(f"foreign name {name!r}")
    if status == 404 and scope is not None and scope.key in granted:
        problems.append("404 for a granted tenant that has data")
    covers = scope is not None and (
        scope.key in granted or (case.role == "acme_all" and scope.tenant_id == "acme")
    )
    if status == 403 and not covers:
        problems.append("403 tells a foreign tenant apart from a missing one")
    if status == 404 and json.loads(body) != NOT_FOUND:
        problems.append("404 body differs from the missing-tenant body")
    return problems


@pytest.fixture(scope="module")
def shared_landing(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("isolation-landing")


class RecordingEraser:
    """Stands in for the pipelines' eraser (`recall.ports.TenantEraser`, tested where it is
    implemented): records what it was asked to erase, erases nothing of the shared stores."""

    def __init__(self) -> None:
        self.asked: list[Scope] = []

    def __call__(self, scope: Scope) -> EraseReport:
        self.asked.append(scope)
        return EraseReport(scope, {"facts": 0})


ERASER = RecordingEraser()


@pytest.fixture(scope="module")
def iso_client(world: World, service: RecallService, shared_landing: Path) -> Iterator[TestClient]:
    app = create_app(
        service=service, keys=KeyRing(world.keys_file), landing_dir=shared_landing, eraser=ERASER
    )
    with TestClient(app, raise_server_exceptions=False) as c:
        yield c


def test_the_suite_has_at_least_a_thousand_cases(world: World):
    cases = _cases(world)
    assert len(cases) >= 1000
    assert {c.endpoint for c in cases} == {
        "recall", "entities", "subgraph", "facts", "triples", "turns", "retractions", "erase",
    }  # fmt: skip
    assert sum(c.role == "forged" for c in cases) > 100
    # Plenty of requests aim at another tenant with a valid key.
    foreign = [
        c
        for c in cases
        if c.role != "forged"
        and (s := _scope_or_none(c.target())) is not None
        and s.key in world.tenants
        and s.key not in world.readable(c.role)
    ]
    assert len(foreign) > 200


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_adversarial_cases_never_leak_and_never_fail(
    chunk: int, world: World, iso_client: TestClient, shared_landing: Path
):
    failures: list[str] = []
    statuses: dict[int, int] = {}
    for case in _cases(world)[chunk::CHUNKS]:
        r = _request(iso_client, case)
        statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
        for problem in check(world, case, r.status_code, r.content, shared_landing):
            failures.append(
                f"case {case.n} {case.role} {case.endpoint} {case.target()!r:.60}: {problem}"
            )
    assert not failures, "\n".join(failures[:20])
    # The suite exercised both sides: answers and refusals.
    assert statuses.get(200, 0) and statuses.get(404, 0) and statuses.get(401, 0)


def test_landing_zone_holds_only_granted_tenants(world: World, shared_landing: Path):
    """Runs after the chunks (same module fixture): writes only ever went to scopes the
    writing key was granted; acme_all may create new acme repos."""
    writers = {"acme/payments", "acme/web", "globex/payments", "globex/secret-lab", "initech/core"}
    for path in shared_landing.rglob("*.jsonl"):
        key = f"{path.parent.parent.name}/{path.parent.name}"
        assert key in writers or key.startswith("acme/"), key
        assert not path.name.startswith(".")
        for line in path.read_bytes().splitlines():
            record = json.loads(line)
            assert f"{record['org']}/{record['repo']}" == key
    assert not (shared_landing / "umbrella").exists()
    # The eraser was only ever asked for a scope the admin key covers.
    assert ERASER.asked and {s.tenant_id for s in ERASER.asked} == {"acme"}
