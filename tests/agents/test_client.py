"""recall.client against a real API server, a closed port and a server that hangs."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest

from recall.client import (
    ApiError,
    ApiUnreachable,
    ClientSettings,
    LocalStores,
    MemflowClient,
    recall,
)
from schemas.scope import Scope
from tests.agents.conftest import PATIENT_TIMEOUT_S, PRIVATE, Memory

PAYMENTS = Scope("acme", "payments")
LAB = Scope("globex", "secret-lab")


def client(memory: Memory, role: str = "acme_payments") -> MemflowClient:
    return MemflowClient(ClientSettings(memory.url, memory.keys[role], timeout_s=PATIENT_TIMEOUT_S))


def test_every_endpoint(memory: Memory) -> None:
    with client(memory) as api:
        assert api.health()["status"] == "ok"
        answer = api.recall(PAYMENTS, "what does payments-service use?")
        assert answer["scope"] == "acme/payments"
        assert any(f["object"] == "PostgreSQL" for f in answer["facts"])
        assert answer["rerank"] is None  # not asked for
        # Asked for from a server with no reranker configured: the answer says so.
        asked = api.recall(PAYMENTS, "what does payments-service use?", rerank=True)
        assert asked["rerank"]["reranked"] is False
        assert asked["rerank"]["reason"] == "no_reranker"
        assert [f["fact_id"] for f in asked["facts"]] == [f["fact_id"] for f in answer["facts"]]
        found = api.entities(PAYMENTS, "payments-service")
        ids = [e["entity_id"] for e in found["entities"]]
        assert ids
        sub = api.subgraph(PAYMENTS, ids[:1], hops=1)
        assert {f["predicate"] for f in sub["facts"]} >= {"USES", "OWNED_BY"}
        saved = api.triples(
            PAYMENTS, [{"subject": "a", "predicate": "USES", "object": "b"}], client="test"
        )
        assert saved["accepted"] == 1
        turns = api.turns(
            PAYMENTS,
            [
                {
                    "session_id": "s",
                    "turn_id": "t",
                    "ts": "2026-01-01T00:00:00Z",
                    "role": "user",
                    "content": "hello",
                    "client": "test",
                }
            ],
        )
        assert turns["accepted"] == 1


def test_server_errors_come_back_with_their_code(memory: Memory) -> None:
    with client(memory) as api:
        with pytest.raises(ApiError) as foreign:
            api.recall(LAB, "what is Project Nightjar")
        assert (foreign.value.status, foreign.value.code) == (404, "tenant_not_found")
        with pytest.raises(ApiError) as bad:
            api.triples(PAYMENTS, [{"subject": "a", "predicate": "not ok!", "object": "b"}])
        assert bad.value.code == "triples_rejected"
        assert bad.value.details[0]["reason"] == "predicate_not_upper_snake_case"
    with MemflowClient(
        ClientSettings(memory.url, "mf_not-a-key", timeout_s=PATIENT_TIMEOUT_S)
    ) as api:
        with pytest.raises(ApiError) as unauthorized:
            api.recall(PAYMENTS, "anything")
        assert unauthorized.value.code == "unauthorized"


def test_a_closed_port_is_unreachable_at_once(closed_url: str) -> None:
    started = time.monotonic()
    with MemflowClient(ClientSettings(closed_url, "k")) as api, pytest.raises(ApiUnreachable) as e:
        api.recall(PAYMENTS, "anything")
    assert e.value.kind == "connect"
    assert time.monotonic() - started < 1.0


def test_a_hanging_server_times_out_within_the_budget(hanging_url: str) -> None:
    started = time.monotonic()
    settings = ClientSettings(hanging_url, "k", timeout_s=PATIENT_TIMEOUT_S)
    with MemflowClient(settings) as api, pytest.raises(ApiUnreachable):
        api.recall(PAYMENTS, "anything", timeout=0.5)
    assert time.monotonic() - started < 5.0  # the call's 0.5 s, not the client's 60 s


class Canned(BaseHTTPRequestHandler):
    """Answers every request with `reply` (status, headers, body); records what it saw."""

    reply: ClassVar[tuple[int, dict[str, str], bytes]] = (200, {}, b"{}")
    seen: ClassVar[list[tuple[str, str | None]]] = []

    def do_GET(self) -> None:
        Canned.seen.append((self.path, self.headers.get("Authorization")))
        status, headers, body = Canned.reply
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_POST = do_GET

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def canned() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Canned)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    Canned.seen = []
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_no_json_is_a_broken_server(canned: str) -> None:
    Canned.reply = (200, {"Content-Type": "text/html"}, b"<html>")
    with MemflowClient(ClientSettings(canned, "k")) as api, pytest.raises(ApiUnreachable) as e:
        api.health()
    assert e.value.kind == "protocol"


def test_an_error_without_the_error_body(canned: str) -> None:
    Canned.reply = (502, {}, b"bad gateway")
    with MemflowClient(ClientSettings(canned, "k")) as api, pytest.raises(ApiError) as e:
        api.recall(PAYMENTS, "x")
    assert (e.value.status, e.value.code) == (502, "http_error")


def test_redirects_are_not_followed_so_the_key_stays_home(canned: str) -> None:
    Canned.reply = (307, {"Location": "http://evil.example/steal"}, b"")
    with MemflowClient(ClientSettings(canned, "k")) as api, pytest.raises(ApiError):
        api.health()
    assert Canned.seen == [("/healthz", "Bearer k")]


def test_keep_alive_and_a_base_path(canned: str) -> None:
    Canned.reply = (200, {"Content-Type": "application/json"}, b'{"ok": true}')
    with MemflowClient(ClientSettings(canned + "/memflow/", "k")) as api:
        for _ in range(3):
            assert api.entities(PAYMENTS, "a b", limit=3) == {"ok": True}
    assert (
        Canned.seen[0][0]
        == "/memflow/v1/entities?tenant=acme%2Fpayments&q=a+b&limit=3&ranking=auto"
    )
    assert len(Canned.seen) == 3


def test_urls_that_are_not_http_are_refused() -> None:
    for url in ("ftp://x", "x", "file:///etc/passwd"):
        with pytest.raises(ValueError):
            MemflowClient(ClientSettings(url, "k"))


def test_settings_come_from_the_environment_when_asked() -> None:
    s = ClientSettings.from_env(
        {"MEMFLOW_API_URL": "http://h:1", "MEMFLOW_API_KEY": "mf_x", "MEMFLOW_API_TIMEOUT_S": "-3"}
    )
    assert (s.url, s.key, s.timeout_s) == ("http://h:1", "mf_x", 5.0)
    assert "mf_x" not in repr(s)
    assert ClientSettings.from_env({}).url == "http://127.0.0.1:8080"


def test_recall_falls_back_only_when_no_server_answers(memory: Memory, closed_url: str) -> None:
    stores = LocalStores(str(memory.data_dir))
    up = recall(
        PAYMENTS,
        "payments-service",
        settings=ClientSettings(
            memory.url, memory.keys["acme_payments"], timeout_s=PATIENT_TIMEOUT_S
        ),
        stores=stores,
    )
    assert up.source == "server" and up.note is None
    down = recall(
        PAYMENTS,
        "payments-service",
        settings=ClientSettings(closed_url, memory.keys["acme_payments"]),
        stores=stores,
    )
    assert down.source == "local" and "unreachable" in (down.note or "")
    assert down.answer["mode"] == "names"
    assert any(f["object"] == "PostgreSQL" for f in down.answer["facts"])
    # a server that says no is never worked around by reading the stores
    with pytest.raises(ApiError):
        recall(
            LAB,
            "Project Nightjar",
            settings=ClientSettings(
                memory.url, memory.keys["acme_payments"], timeout_s=PATIENT_TIMEOUT_S
            ),
            stores=stores,
        )


def test_the_fallback_honours_the_key_when_the_keys_file_is_readable(
    memory: Memory, closed_url: str
) -> None:
    stores = LocalStores(str(memory.data_dir))  # holds api-keys.json
    acme = ClientSettings(closed_url, memory.keys["acme_payments"])
    with pytest.raises(ApiError) as e:
        recall(LAB, "Project Nightjar", settings=acme, stores=stores)
    assert e.value.code == "tenant_not_found"
    with pytest.raises(ApiError):
        recall(PAYMENTS, "x", settings=ClientSettings(closed_url, "mf_unknown"), stores=stores)
    # no key: the local user reads what the data directory holds
    assert recall(
        LAB, "Project Nightjar", settings=ClientSettings(closed_url), stores=stores
    ).answer


def test_local_recall_reads_only_the_asked_scope(memory: Memory, closed_url: str) -> None:
    stores = LocalStores(str(memory.data_dir))
    result = recall(
        PAYMENTS,
        "Project Nightjar ledger",
        settings=ClientSettings(closed_url, memory.keys["acme_payments"]),
        stores=stores,
    )
    text = str(result.answer)
    assert not any(name in text for name in PRIVATE["globex/secret-lab"])


def test_local_stores_from_env_wants_absolute_paths_for_hooks() -> None:
    assert LocalStores.from_env({"MEMFLOW_DATA_DIR": ".memflow"}, require_absolute=True) is None
    assert LocalStores.from_env({}) is None
    assert LocalStores.from_env({"MEMFLOW_DATA_DIR": "/d"}, require_absolute=True).data_dir == "/d"
