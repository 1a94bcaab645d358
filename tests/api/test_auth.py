"""Bearer keys: the keys file, authentication failures, and foreign scopes that look missing."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from recall.api import create_app
from recall.auth import (
    KeyFileError,
    KeyRing,
    Principal,
    add_key,
    hash_key,
    list_keys,
    parse_bearer,
    read_keys_file,
    remove_key,
)
from recall.service import RecallService
from schemas.scope import Scope
from tests.api.conftest import World, bearer

RECALL = {"tenant": "acme/payments", "query": "which database does LedgerCore use?"}


def test_keys_file_stores_only_digests_and_is_private(tmp_path: Path):
    path = tmp_path / "keys" / "api-keys.json"
    key = add_key(path, "acme", ["web", "payments", "web"])
    assert key.startswith("mf_") and len(key) > 40
    raw = path.read_text()
    assert key not in raw and hash_key(key) in raw
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    (entry,) = read_keys_file(path)["keys"]
    assert entry["org"] == "acme" and entry["repos"] == ["payments", "web"]
    assert "sha256" not in list_keys(path)[0]
    ring = KeyRing(path)
    p = ring.authenticate(f"Bearer {key}")
    assert p is not None and p.allows(Scope("acme", "web")) and not p.allows(Scope("acme", "x"))
    assert not p.allows(Scope("acmex", "web"))


def test_star_grants_every_repo_of_the_org_only(tmp_path: Path):
    key = add_key(tmp_path / "k.json", "acme", "*")
    p = KeyRing(tmp_path / "k.json").authenticate(f"Bearer {key}")
    assert p is not None and p.repos is None
    assert p.allows(Scope("acme", "anything")) and not p.allows(Scope("globex", "anything"))


def test_add_key_refuses_invalid_names(tmp_path: Path):
    for org, repos in (("acme/x", ["a"]), ("acme", ["../etc"]), ("", ["a"]), ("acme", "a b")):
        with pytest.raises(KeyFileError):
            add_key(tmp_path / "k.json", org, repos)
    assert not (tmp_path / "k.json").exists()


def test_keys_are_reloaded_and_revocation_takes_effect(tmp_path: Path):
    path = tmp_path / "k.json"
    ring = KeyRing(path, reload_interval_s=0)
    assert ring.authenticate("Bearer mf_x") is None and len(ring) == 0
    key = add_key(path, "acme", ["web"])
    assert ring.authenticate(f"Bearer {key}") is not None
    key_id = list_keys(path)[0]["id"]
    assert remove_key(path, key_id) and not remove_key(path, key_id)
    assert ring.authenticate(f"Bearer {key}") is None


def test_a_broken_keys_file_keeps_the_last_good_keys(tmp_path: Path):
    path = tmp_path / "k.json"
    key = add_key(path, "acme", ["web"])
    ring = KeyRing(path, reload_interval_s=0)
    path.write_text('{"keys": [{"sha256": "nothex", "org": "acme", "repos": "*"}]}')
    assert ring.authenticate(f"Bearer {key}") is not None
    assert ring.error is not None and "sha256" in ring.error


@pytest.mark.parametrize(
    "header",
    [
        None,
        "",
        "Bearer",
        "Bearer ",
        "Basic YWxhZGRpbjpvcGVuc2VzYW1l",
        "Token mf_abc",
        "Bearer mf_abc def",
        "Bearer mf_\u00e9t\u00e9",
        "Bearer " + "a" * 300,
        "Bearer mf_' OR '1'='1",
    ],
)
def test_parse_bearer_refuses_malformed_headers(header: str | None):
    assert parse_bearer(header) is None


def test_scheme_is_case_insensitive():
    assert parse_bearer("bearer mf_abc") == "mf_abc" == parse_bearer("BEARER mf_abc")


def test_static_key_ring():
    ring = KeyRing.from_plaintext({"mf_k": Principal("k1", "acme", frozenset({"web"}))})
    assert ring.authenticate("Bearer mf_k") == Principal("k1", "acme", frozenset({"web"}))
    assert ring.authenticate("Bearer mf_k2") is None


# -- over HTTP ---------------------------------------------------------------------------------


def _post(client: TestClient, headers: dict[str, str] | None, body: dict | None = None):
    return client.post("/v1/recall", json=body or RECALL, headers=headers or {})


def test_no_key_wrong_key_and_malformed_headers_answer_401(client: TestClient, world: World):
    good = world.keys["acme_payments"]
    cases = [
        {},
        bearer("mf_" + "A" * 43),
        bearer(good[:-1] + ("A" if good[-1] != "A" else "B")),  # one character off
        bearer(good + "x"),
        {"Authorization": good},  # no scheme
        {"Authorization": f"Basic {good}"},
        {"Authorization": f"Bearer  {good}"},  # two spaces
        {"Authorization": f"Bearer {good} {good}"},
        {"Authorization": "Bearer " + "A" * 5000},
    ]
    for headers in cases:
        r = _post(client, headers)
        assert r.status_code == 401, headers
        assert r.json() == {
            "error": {"code": "unauthorized", "message": "a valid bearer key is required"}
        }
        assert r.headers["www-authenticate"] == "Bearer"
    # Auth is decided before the body is looked at.
    assert _post(client, {}, {"nonsense": True}).status_code == 401
    assert (
        client.get("/v1/entities", params={"tenant": "acme/payments", "q": "x"}).status_code == 401
    )


def test_non_ascii_authorization_header_is_401(client: TestClient):
    r = client.post(
        "/v1/recall",
        json=RECALL,
        headers={"Authorization": "Bearer mf_\u00e9t\u00e9".encode()},  # type: ignore[dict-item]
    )
    assert r.status_code == 401


def test_another_tenants_key_sees_a_missing_tenant(client: TestClient, world: World):
    """A foreign scope, an existing one with data, answers byte for byte like a scope that
    exists nowhere: on every read endpoint, and on writes too."""
    globex = bearer(world.keys["globex"])
    acme_entity = next(iter(world.tenants["acme/payments"].entity_ids))
    for tenant_existing, tenant_missing in (
        ("acme/payments", "acme/never-was"),
        ("acme/payments", "nobody/nothing"),
        ("globex/payments", "globex/never-was"),  # own org, repo not granted to acme keys
    ):
        for key in ("globex", "acme_payments", "initech"):
            h = bearer(world.keys[key])
            if tenant_existing in world.readable(key):
                continue
            pairs = [
                (
                    "post",
                    "/v1/recall",
                    {"json": {**RECALL, "tenant": tenant_existing}},
                    {"json": {**RECALL, "tenant": tenant_missing}},
                ),
                (
                    "get",
                    "/v1/entities",
                    {"params": {"tenant": tenant_existing, "q": "Kafka"}},
                    {"params": {"tenant": tenant_missing, "q": "Kafka"}},
                ),
                (
                    "post",
                    "/v1/subgraph",
                    {"json": {"tenant": tenant_existing, "entity_ids": [acme_entity]}},
                    {"json": {"tenant": tenant_missing, "entity_ids": [acme_entity]}},
                ),
            ]
            for method, url, existing, missing in pairs:
                a = getattr(client, method)(url, headers=h, **existing)
                b = getattr(client, method)(url, headers=h, **missing)
                assert a.status_code == b.status_code == 404, (key, url, tenant_existing)
                assert a.content == b.content
                assert a.headers["content-length"] == b.headers["content-length"]
    # Semantic ranking on a foreign scope must not reveal whether it has vectors either.
    a = _post(client, globex, {**RECALL, "ranking": "semantic"})
    b = _post(client, globex, {**RECALL, "tenant": "acme/zzz", "ranking": "semantic"})
    assert a.status_code == b.status_code == 404 and a.content == b.content


def test_own_but_empty_scope_answers_404_like_a_foreign_one(client: TestClient, world: World):
    acme_all = bearer(world.keys["acme_all"])
    own_empty = _post(client, acme_all, {**RECALL, "tenant": "acme/brand-new"})
    foreign = _post(client, acme_all, {**RECALL, "tenant": "globex/payments"})
    assert own_empty.status_code == foreign.status_code == 404
    assert own_empty.content == foreign.content


def test_foreign_writes_are_refused_and_land_nothing(
    client: TestClient, world: World, landing: Path
):
    h = bearer(world.keys["acme_payments"])
    triples = [{"subject": "a", "predicate": "USES", "object": "b"}]
    for tenant in ("acme/web", "globex/payments", "ACME/payments"):
        r = client.post("/v1/triples", json={"tenant": tenant, "triples": triples}, headers=h)
        assert r.status_code == 404 and r.json()["error"]["code"] == "tenant_not_found"
    assert list(landing.rglob("*")) == []


def test_key_with_repos_star_writes_to_a_new_repo(client: TestClient, world: World, landing: Path):
    r = client.post(
        "/v1/triples",
        json={
            "tenant": "acme/brand-new",
            "triples": [{"subject": "a", "predicate": "USES", "object": "b"}],
        },
        headers=bearer(world.keys["acme_all"]),
    )
    assert r.status_code == 202
    assert [p.parent.name for p in landing.rglob("*.jsonl")] == ["brand-new"]


def test_key_revoked_while_serving(world: World, service: RecallService, tmp_path: Path):
    path = tmp_path / "keys.json"
    path.write_text(world.keys_file.read_text())
    key = add_key(path, "acme", ["payments"])
    ring = KeyRing(path, reload_interval_s=0)
    with TestClient(create_app(service=service, keys=ring)) as c:
        assert c.post("/v1/recall", json=RECALL, headers=bearer(key)).status_code == 200
        data = json.loads(path.read_text())
        data["keys"] = [k for k in data["keys"] if k["sha256"] != hash_key(key)]
        path.write_text(json.dumps(data))
        assert c.post("/v1/recall", json=RECALL, headers=bearer(key)).status_code == 401
