"""The MCP tools that list, retract, forget and erase, and answers that tell the truth: one result
per upserted item, the API's recall modes over HTTP, one memflow session per MCP session (red team
M3), redacted offloads (M2), memflow's version. Real clients of the official SDK, over stdio
(subprocesses, as agents start them) and streamable HTTP, against real API servers."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from memflow.landing import RETRACT_TOOL, read_tenant_files
from recall.api import create_app
from recall.auth import KeyRing, add_key
from recall.client import ClientSettings, LocalStores
from recall.mcp import McpSettings, http_app, memflow_version
from recall.ports import EraseReport, IngestRequest
from recall.service import RecallService
from resources.graph.sqlite import SqliteGraphStore
from resources.vector.local import LocalVectorStore
from schemas.redaction import contains_secret
from schemas.scope import Scope
from tests.agents.conftest import PATIENT_TIMEOUT_S, PYTHON, ROOT, Memory, serve_in_thread
from tests.api.conftest import TrigramEmbedder, load_tenant

pytestmark = pytest.mark.slow  # MCP server processes and servers
GOOD = {"subject": "payments-service", "predicate": "uses", "object": "Valkey 8"}
GOOD2 = {"subject": "payments-service", "predicate": "DEPLOYS_TO", "object": "eu-west-1"}
BAD = {"subject": "payments-service", "predicate": "is not upper!", "object": "x"}
WARN = {"subject": "ledger-core", "predicate": "USES", "object": "CockroachDB", "valid_from": "?"}
GITHUB = "ghp_" + "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3z5A"


def text(result: Any) -> str:
    return "\n".join(getattr(c, "text", "") for c in result.content)


def run(server: Any, session: Any) -> Any:
    async def main() -> Any:
        async with Client(server) as client:
            return await session(client)

    return asyncio.run(main())


def stdio(memory: Memory, args: list[str], role: str | None = "acme_payments", **env: str) -> Any:
    return StdioServerParameters(
        command=PYTHON,
        args=["-m", "recall.mcp", *args],
        env=memory.env(role, **env),
        cwd=str(ROOT),
    )


def landed(folder: Path) -> list[dict[str, Any]]:
    return [
        json.loads(line)
        for path in sorted(folder.rglob("*.jsonl"))
        for line in path.read_text().splitlines()
    ]


# -- stdio ------------------------------------------------------------------------------------


def test_upsert_results_map_one_to_one_to_the_items(memory: Memory) -> None:
    """A saved item with a warning is saved (not also rejected) and no index shifts: every
    result names its own item, the last one included."""
    before = len(landed(memory.landing))
    items = [GOOD, BAD, WARN, GOOD2, "junk"]

    async def session(c: Client) -> dict[str, Any]:
        r = await c.call_tool("upsert_graph_triples", {"triples": items})
        assert not r.is_error, text(r)
        return r.structured_content

    out = run(stdio(memory, ["--tenant", "acme/payments"]), session)
    assert [(x["index"], x["status"]) for x in out["results"]] == [
        (0, "saved"),
        (1, "rejected"),
        (2, "saved_with_warning"),
        (3, "saved"),
        (4, "rejected"),
    ]
    assert out["accepted"] == 3 and out["rejected"] == 2
    assert out["results"][2]["warning"] == "valid_from_unparsed"
    assert [out["results"][i]["object"] for i in (0, 2, 3)] == [
        "Valkey 8",
        "CockroachDB",
        "eu-west-1",
    ]
    assert all(isinstance(x["index"], int) for x in out["results"])
    (turn,) = landed(memory.landing)[before:]
    assert [t["object"] for t in turn["tool_input"]["triples"]] == [
        "Valkey 8",
        "CockroachDB",
        "eu-west-1",
    ]
    # the item whose valid_from could not be read keeps the turn's time
    assert turn["tool_input"]["triples"][1]["valid_from"][:16] == turn["ts"][:16]
    assert out["ingest"]["requested"] is False and out["ingest"]["reason"]


def test_list_retract_and_forget_over_the_api(memory: Memory) -> None:
    before = len(landed(memory.landing))

    async def session(c: Client) -> None:
        r = await c.call_tool("list_facts", {"limit": 2})
        assert not r.is_error, text(r)
        page = r.structured_content
        assert page["scope"] == "acme/payments" and page["total"] == 5 and page["more"] == 3
        r = await c.call_tool("list_facts", {"limit": 2, "cursor": page["next_cursor"]})
        assert r.structured_content["more"] == 1
        assert not {f["fact_id"] for f in r.structured_content["facts"]} & {
            f["fact_id"] for f in page["facts"]
        }
        r = await c.call_tool("list_facts", {"entity": "team-ledger", "status": "all"})
        assert r.structured_content["total"] == 2
        fact = page["facts"][0]["fact_id"]
        r = await c.call_tool("retract_fact", {"fact_id": fact, "reason": "it moved"})
        assert not r.is_error, text(r)
        assert r.structured_content["items"] == [
            {"fact_id": fact, "subject": None, "predicate": None, "object": None, "entity": None}
        ]
        r = await c.call_tool(
            "retract_fact",
            {"subject": "payments-service", "predicate": "uses", "object": "PostgreSQL"},
        )
        assert r.structured_content["items"][0]["predicate"] == "USES"
        r = await c.call_tool("forget", {"entity": "team-ledger", "reason": f"token {GITHUB}"})
        assert not r.is_error
        for bad in ({}, {"fact_id": "f_1", "subject": "a", "predicate": "USES", "object": "b"}):
            r = await c.call_tool("retract_fact", bad)
            assert r.is_error and "invalid_request" in text(r)

    run(stdio(memory, ["--tenant", "acme/payments"]), session)
    new = landed(memory.landing)[before:]
    assert [t["tool_name"] for t in new] == [RETRACT_TOOL] * 3
    key_id = next(
        k["id"] for k in json.loads(memory.keys_file.read_text())["keys"] if k["org"] == "acme"
    )
    assert {t["tool_input"]["by"] for t in new} == {f"key:{key_id}"}  # the API's caller
    assert new[2]["tool_input"]["retract"] == [{"entity": "team-ledger"}]
    assert GITHUB not in json.dumps(new) and "[REDACTED" in new[2]["tool_input"]["reason"]


class Eraser:
    def __init__(self) -> None:
        self.asked: list[Scope] = []

    def __call__(self, scope: Scope) -> EraseReport:
        self.asked.append(scope)
        return EraseReport(scope, {"facts": 5})


@pytest.fixture
def erasing_api(memory: Memory) -> Iterator[tuple[str, Eraser, str]]:
    eraser = Eraser()
    graph = SqliteGraphStore(memory.data_dir / "graph.sqlite")
    service = RecallService(graph)
    admin = add_key(memory.keys_file, "acme", "*", admin=True)
    server, url = serve_in_thread(
        create_app(
            service=service, keys=KeyRing(memory.keys_file), landing_dir=memory.landing,
            eraser=eraser,
        )
    )  # fmt: skip
    yield url, eraser, admin
    server.should_exit = True
    service.close()
    graph.close()


def test_erase_memory_needs_the_confirmation_and_an_admin_key(
    memory: Memory, erasing_api: tuple[str, Eraser, str]
) -> None:
    url, eraser, admin = erasing_api

    async def as_admin(c: Client) -> None:
        r = await c.call_tool("erase_memory", {"confirm": "acme/web"})
        assert r.is_error and "confirmation_mismatch" in text(r) and "acme/payments" in text(r)
        assert eraser.asked == []
        r = await c.call_tool("erase_memory", {"confirm": "acme/payments"})
        assert not r.is_error, text(r)
        assert r.structured_content == {
            "tenant": "acme/payments",
            "erased": True,
            "removed": {"facts": 5},
            "problems": [],
            "notes": [],
        }

    params = stdio(memory, ["--tenant", "acme/payments"], MEMFLOW_API_URL=url)
    params.env["MEMFLOW_API_KEY"] = admin
    run(params, as_admin)
    assert eraser.asked == [Scope("acme", "payments")]

    async def ordinary(c: Client) -> None:
        r = await c.call_tool("erase_memory", {"confirm": "acme/payments"})
        assert r.is_error and "forbidden" in text(r)

    run(stdio(memory, ["--tenant", "acme/payments"], MEMFLOW_API_URL=url), ordinary)

    async def unreachable(c: Client) -> None:  # an erase never falls back to local stores
        r = await c.call_tool("erase_memory", {"confirm": "acme/payments"})
        assert r.is_error and "unreachable" in text(r) and "nothing was done" in text(r)

    params = stdio(memory, ["--tenant", "acme/payments"], MEMFLOW_API_URL="http://127.0.0.1:9")
    params.env["MEMFLOW_API_KEY"] = admin
    run(params, unreachable)
    assert eraser.asked == [Scope("acme", "payments")]


def test_offloaded_turns_land_redacted_without_other_tools_inputs(
    memory: Memory, tmp_path: Path
) -> None:
    local = tmp_path / "landing"  # no API key: the local landing zone

    async def session(c: Client) -> None:
        r = await c.call_tool(
            "offload_turns",
            {
                "turns": [
                    {"role": "user", "content": f"the CI token is {GITHUB}"},
                    {
                        "role": "tool",
                        "content": "",
                        "tool_name": "Bash",
                        "tool_input": {"command": f"gh auth login --with-token {GITHUB}"},
                    },
                ]
            },
        )
        assert not r.is_error, text(r)
        assert r.structured_content["tool_inputs_left_out"] == 1
        assert "no memflow API key" in r.structured_content["note"]

    run(stdio(memory, ["--tenant", "acme/payments"], None, MEMFLOW_LANDING_DIR=str(local)), session)
    user, bash = landed(local)
    assert "[REDACTED" in user["content"]
    assert "tool_input" not in bash and bash["tool_name"] == "Bash"
    raw = "".join(p.read_text() for p in local.rglob("*.jsonl"))
    assert GITHUB not in raw and not contains_secret(raw)


def test_the_server_reports_memflows_version(memory: Memory) -> None:
    async def session(c: Client) -> str:
        assert c.server_info is not None
        return c.server_info.version

    assert memflow_version() not in ("", "0+unknown")
    assert run(stdio(memory, ["--tenant", "acme/payments"]), session) == memflow_version()


# -- HTTP -------------------------------------------------------------------------------------


def http(url: str, key: str, repo: str | None = None) -> Any:
    headers = {"Authorization": f"Bearer {key}"}
    if repo:
        headers["X-Memflow-Repo"] = repo
    return streamable_http_client(url, http_client=httpx2.AsyncClient(headers=headers))


def test_each_mcp_session_writes_as_its_own_session(memory: Memory, tmp_path: Path) -> None:
    """M3: two conversations that each offload turns "1" and "2" must not collide. A client
    with an MCP session (``Mcp-Session-Id``) writes as one memflow session per MCP session; the
    2026-07-28 protocol has no sessions, so each call is a session of its own."""
    graph = SqliteGraphStore(memory.data_dir / "graph.sqlite")
    service = RecallService(graph)
    landing = tmp_path / "landing"
    settings = McpSettings(scope=None, landing_dir=landing)
    served = http_app(settings, keys=KeyRing(memory.keys_file), service=service)
    server, url = serve_in_thread(served.asgi)
    try:

        async def conversation(c: Client) -> None:
            turns = [
                {"role": "user", "content": "we use Valkey", "turn_id": "1"},
                {"role": "assistant", "content": "noted", "turn_id": "2"},
            ]
            r = await c.call_tool("offload_turns", {"turns": turns})
            assert not r.is_error, text(r)

        for _ in range(2):
            run(http(f"{url}/mcp", memory.keys["acme_payments"]), conversation)
    finally:
        server.should_exit = True
        service.close()
        graph.close()
    turns = landed(landing)
    sessions = [t["session_id"] for t in sorted(turns, key=lambda t: t["ts"])]
    assert len(turns) == 4
    assert sessions[0] == sessions[1] and sessions[2] == sessions[3] != sessions[0]
    read = read_tenant_files(landing, Scope("acme", "payments"))
    assert read.rejects.height == 0 and read.turns.height == 4  # no duplicate_turn


@pytest.fixture(scope="module")
def semantic_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, str]]:
    """An API that answers in hybrid mode: a graph, a vector store and an embedder."""
    root = tmp_path_factory.mktemp("semantic-api")
    graph = SqliteGraphStore(root / "graph.sqlite")
    vectors = LocalVectorStore(root / "vectors")
    embedder = TrigramEmbedder()
    load_tenant(graph, vectors, embedder, "acme/payments")
    keys_file = root / "api-keys.json"
    key = add_key(keys_file, "acme", ["payments"])
    service = RecallService(graph, vectors, embedder)
    server, url = serve_in_thread(create_app(service=service, keys=KeyRing(keys_file)))
    yield url, keys_file, key
    server.should_exit = True  # the graph file stays: the MCP server's local fallback reads it
    service.close()
    vectors.close()
    graph.close()


def test_mcp_over_http_recalls_in_the_apis_modes(
    semantic_api: tuple[str, Path, str], tmp_path: Path
) -> None:
    """`memflow mcp --http` asks the API with the caller's own key: hybrid when the API has a
    model, and the answer says so; by names, saying why, when the API is gone."""
    api_url, keys_file, key = semantic_api

    def recall(api: str) -> str:
        settings = McpSettings(
            scope=None,
            api=ClientSettings(url=api, timeout_s=PATIENT_TIMEOUT_S),
            stores=LocalStores(str(keys_file.parent)),
        )
        served = http_app(settings, keys=KeyRing(keys_file))
        server, base = serve_in_thread(served.asgi)
        try:

            async def session(c: Client) -> str:
                r = await c.call_tool("recall_context", {"question": "what does LedgerCore use?"})
                assert not r.is_error, text(r)
                return text(r)

            return run(http(f"{base}/mcp", key), session)
        finally:
            server.should_exit = True
            served.tools.close()

    answer = recall(api_url)
    assert 'scope="acme/payments" mode="hybrid"' in answer and "LedgerCore" in answer
    gone = recall("http://127.0.0.1:9")
    assert 'mode="names"' in gone and "LedgerCore" in gone
    assert "names only from the local stores" in gone and "unreachable" in gone


class Trigger:
    def __init__(self) -> None:
        self.calls: list[tuple[Scope, Path]] = []

    def __call__(self, scope: Scope, landed: Path) -> IngestRequest:
        self.calls.append((scope, landed))
        return IngestRequest(requested=True, run_id=f"run-{len(self.calls)}")


def test_in_process_mcp_asks_for_the_run_and_erases_with_an_admin_key(
    memory: Memory, tmp_path: Path
) -> None:
    """MCP over HTTP mounted on an in-process service (as `memflow serve` does): its writes ask
    the injected trigger for the tenant's run and say so; `erase_memory` reaches the injected
    eraser for an admin key only (the in-process backend is the primary one, not a fallback)."""
    graph = SqliteGraphStore(memory.data_dir / "graph.sqlite")
    service = RecallService(graph)
    landing, trigger, eraser = tmp_path / "landing", Trigger(), Eraser()
    admin = add_key(memory.keys_file, "acme", ["payments"], admin=True)
    served = http_app(
        McpSettings(scope=None, landing_dir=landing),
        keys=KeyRing(memory.keys_file),
        service=service,
        trigger=trigger,
        eraser=eraser,
    )
    server, url = serve_in_thread(served.asgi)
    try:

        async def ordinary(c: Client) -> None:
            r = await c.call_tool("upsert_graph_triples", {"triples": [GOOD]})
            assert not r.is_error, text(r)
            assert r.structured_content["ingest"]["requested"] is True
            assert r.structured_content["ingest"]["run_id"] == "run-1"
            r = await c.call_tool("forget", {"entity": "payments-service"})
            assert not r.is_error and r.structured_content["ingest"]["run_id"] == "run-2"
            r = await c.call_tool("erase_memory", {"confirm": "acme/payments"})
            assert r.is_error and "forbidden" in text(r)

        async def as_admin(c: Client) -> None:
            r = await c.call_tool("erase_memory", {"confirm": "acme/payments"})
            assert not r.is_error, text(r)
            assert r.structured_content["removed"] == {"facts": 5}

        run(http(f"{url}/mcp", memory.keys["acme_payments"]), ordinary)
        assert eraser.asked == []
        run(http(f"{url}/mcp", admin), as_admin)
    finally:
        server.should_exit = True
        served.tools.close()
        service.close()
        graph.close()
    assert eraser.asked == [Scope("acme", "payments")]
    assert [s for s, _ in trigger.calls] == [Scope("acme", "payments")] * 2
    files = sorted(landing.rglob("*.jsonl"))
    assert sorted(p for _, p in trigger.calls) == files  # the final files, never a hidden one
    tools = [t["tool_name"] for t in landed(landing)]
    assert sorted(tools) == sorted(["upsert_graph_triples", RETRACT_TOOL])


def test_memflow_mcp_hands_its_trigger_to_local_writes_and_never_erases_locally(
    memory: Memory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`memflow mcp` (the pipelines layer passes the run queue's trigger): a write the stdio
    server lands itself asks the trigger; an erase without an API is refused, nothing done."""
    import recall.mcp.server as mcp_server
    from recall.mcp.tools import build_server

    built: list[Any] = []

    def served(settings: McpSettings, *, trigger: Any = None) -> None:
        tools = mcp_server.stdio_tools(settings, trigger=trigger)
        built.append(tools)

        async def session(c: Client) -> None:
            r = await c.call_tool("upsert_graph_triples", {"triples": [GOOD]})
            assert not r.is_error, text(r)
            assert r.structured_content["ingest"]["run_id"] == "run-1"
            assert "no memflow API key" in r.structured_content["note"]
            r = await c.call_tool("erase_memory", {"confirm": "acme/payments"})
            assert r.is_error and "nothing was done" in text(r)

        run(build_server(tools), session)
        tools.close()

    monkeypatch.setattr(mcp_server, "run_stdio", served)  # the stdio transport itself: above
    landing, trigger = tmp_path / "landing", Trigger()
    monkeypatch.setenv("MEMFLOW_LANDING_DIR", str(landing))
    monkeypatch.delenv("MEMFLOW_API_KEY", raising=False)
    assert mcp_server.main(["--tenant", "acme/payments"], ingest_trigger=trigger) == 0
    assert len(built) == 1 and [s for s, _ in trigger.calls] == [Scope("acme", "payments")]
    assert [p for _, p in trigger.calls] == sorted(landing.rglob("*.jsonl"))
