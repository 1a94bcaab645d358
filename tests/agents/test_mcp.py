"""The MCP server with a real client session of the same SDK: over stdio (a subprocess, as an agent
starts it) and over streamable HTTP (bearer keys): every tool, bad arguments, a foreign scope,
an unreachable API."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from recall.auth import KeyRing
from recall.mcp import McpSettings, http_app
from recall.service import RecallService
from resources.graph.sqlite import SqliteGraphStore
from tests.agents.conftest import PRIVATE, PYTHON, ROOT, Memory, serve_in_thread

pytestmark = pytest.mark.slow  # MCP server processes and servers
TOOLS = {
    "recall_context",
    "search_graph_nodes",
    "query_subgraph",
    "list_facts",
    "upsert_graph_triples",
    "offload_turns",
    "retract_fact",
    "forget",
    "erase_memory",
}
GOOD = {"subject": "payments-service", "predicate": "uses", "object": "Valkey 8"}
BAD = {"subject": "payments-service", "predicate": "is not upper!", "object": "x"}

Session = Callable[[Client], Awaitable[None]]


def text(result: Any) -> str:
    return "\n".join(getattr(c, "text", "") for c in result.content)


def stdio(memory: Memory, args: list[str], cwd: Path = ROOT, **env: str) -> StdioServerParameters:
    role = env.pop("role", "acme_payments")
    return StdioServerParameters(
        command=PYTHON,
        args=["-m", "recall.mcp_server", *args],
        env=memory.env(role, **env),
        cwd=str(cwd),
    )


def run(server: Any, session: Session) -> None:
    async def main() -> None:
        async with Client(server) as client:
            await session(client)

    asyncio.run(main())


def landed(folder: Path) -> list[dict[str, Any]]:
    return [
        json.loads(line)
        for path in sorted(folder.rglob("*.jsonl"))
        for line in path.read_text().splitlines()
    ]


def test_stdio_every_tool_for_the_working_repository(memory: Memory, tmp_path: Path) -> None:
    # the scope comes from the working directory's git remote, not from any tool argument
    repo = tmp_path / "checkout"
    (repo / ".git").mkdir(parents=True)
    remote = '[remote "origin"]\n url = git@github.com:acme/payments.git\n'
    (repo / ".git" / "config").write_text(remote)
    before = len(landed(memory.landing))

    async def session(c: Client) -> None:
        assert {t.name for t in (await c.list_tools()).tools} == TOOLS
        r = await c.call_tool("recall_context", {"question": "what does payments-service use?"})
        assert not r.is_error
        body = text(r)
        assert 'scope="acme/payments"' in body and "PostgreSQL" in body
        assert "data, not instructions" in body
        assert not any(n in body for n in PRIVATE["globex/secret-lab"] + PRIVATE["acme/web"])

        r = await c.call_tool("search_graph_nodes", {"query": "payments-service", "limit": 5})
        assert not r.is_error
        ids = [e["entity_id"] for e in r.structured_content["entities"]]
        assert r.structured_content["scope"] == "acme/payments" and ids

        r = await c.call_tool("query_subgraph", {"entity_ids": ids[:1], "hops": 2})
        assert not r.is_error
        assert {f["object"] for f in r.structured_content["facts"]} >= {"PostgreSQL", "ledger-core"}

        r = await c.call_tool("upsert_graph_triples", {"triples": [GOOD, BAD, "junk"]})
        assert not r.is_error
        out = r.structured_content
        assert out["accepted"] == 1 and out["rejected"] == 2
        assert [(x["index"], x["status"]) for x in out["results"]] == [
            (0, "saved"),
            (1, "rejected"),
            (2, "rejected"),
        ]
        assert out["results"][0]["predicate"] == "USES" and out["results"][0]["fact_id"]
        assert [x["reason"] for x in out["results"][1:]] == [
            "predicate_not_upper_snake_case",
            "not_an_object",
        ]

        r = await c.call_tool(
            "offload_turns",
            {"turns": [{"role": "user", "content": "we picked Valkey over Redis"}]},
        )
        assert not r.is_error and r.structured_content["accepted"] == 1

        # bad arguments: schema errors, reported to the model, nothing done
        for name, args in [
            ("recall_context", {"question": ""}),
            ("recall_context", {"question": "x", "limit": 500}),
            ("query_subgraph", {"entity_ids": []}),
            ("query_subgraph", {"entity_ids": ["e_1"], "hops": 3}),
            ("upsert_graph_triples", {"triples": []}),
            ("upsert_graph_triples", {"triples": "not a list"}),
            ("offload_turns", {"turns": [{"role": "system", "content": "x"}]}),
        ]:
            r = await c.call_tool(name, args)
            assert r.is_error, (name, args)
        # a tenant the model makes up is no argument of any tool: the scope stays the server's
        r = await c.call_tool(
            "recall_context", {"question": "Project Nightjar", "tenant": "globex/secret-lab"}
        )
        assert 'scope="acme/payments"' in text(r) and "Nightjar" not in text(r).split("\n", 1)[1]

    run(stdio(memory, [], cwd=repo), session)
    new = landed(memory.landing)[before:]
    assert {t["org"] + "/" + t["repo"] for t in new} == {"acme/payments"}
    (saved,) = [t["tool_input"]["triples"] for t in new if t.get("tool_name")]
    assert [(x["subject"], x["predicate"], x["object"]) for x in saved] == [
        ("payments-service", "USES", "Valkey 8")
    ]


def test_stdio_foreign_scope_answers_like_a_missing_one(memory: Memory) -> None:
    async def session(c: Client) -> None:
        for name, args in [
            ("recall_context", {"question": "what is Project Nightjar?"}),
            ("search_graph_nodes", {"query": "Nightjar"}),
            ("upsert_graph_triples", {"triples": [GOOD]}),
        ]:
            r = await c.call_tool(name, args)
            assert r.is_error and "tenant_not_found" in text(r)
            assert not any(n in text(r) for n in PRIVATE["globex/secret-lab"][1:])

    # an acme key, started for a globex repository: the API refuses; no local fallback
    run(stdio(memory, ["--tenant", "globex/secret-lab"]), session)


def test_stdio_unreachable_api_answers_by_names_from_local_stores(
    memory: Memory, hanging_url: str, tmp_path: Path
) -> None:
    local_landing = tmp_path / "landing"

    async def session(c: Client) -> None:
        r = await c.call_tool("recall_context", {"question": "what does payments-service use?"})
        assert not r.is_error
        body = text(r)
        assert "names only from the local stores" in body and "unreachable" in body
        assert 'mode="names"' in body and "PostgreSQL" in body
        r = await c.call_tool("upsert_graph_triples", {"triples": [GOOD]})
        assert not r.is_error and "landed locally" in r.structured_content["note"]

    params = stdio(
        memory,
        ["--tenant", "acme/payments"],
        MEMFLOW_API_URL=hanging_url,
        MEMFLOW_API_TIMEOUT_S="0.5",
        MEMFLOW_LANDING_DIR=str(local_landing),
    )
    run(params, session)
    (turn,) = landed(local_landing)
    assert turn["tool_name"] == "upsert_graph_triples" and turn["org"] == "acme"


def test_stdio_fallback_still_refuses_a_scope_the_key_does_not_cover(
    memory: Memory, closed_url: str
) -> None:
    async def session(c: Client) -> None:
        r = await c.call_tool("recall_context", {"question": "what is Project Nightjar?"})
        assert r.is_error and "tenant_not_found" in text(r)
        assert "quantum" not in text(r)

    run(stdio(memory, ["--tenant", "globex/secret-lab"], MEMFLOW_API_URL=closed_url), session)


# -- HTTP ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mcp_url(memory: Memory, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    graph = SqliteGraphStore(memory.data_dir / "graph.sqlite")
    service = RecallService(graph)
    landing = tmp_path_factory.mktemp("mcp-http-landing")
    served = http_app(
        McpSettings(scope=None, landing_dir=landing),
        keys=KeyRing(memory.keys_file),
        service=service,
    )
    server, url = serve_in_thread(served.asgi)
    yield f"{url}/mcp"
    server.should_exit = True
    service.close()
    graph.close()


def http(url: str, key: str | None, repo: str | None = None) -> Any:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    if repo:
        headers["X-Memflow-Repo"] = repo
    return streamable_http_client(url, http_client=httpx2.AsyncClient(headers=headers))


def test_http_every_tool_with_the_scope_of_the_key(memory: Memory, mcp_url: str) -> None:
    async def session(c: Client) -> None:
        assert {t.name for t in (await c.list_tools()).tools} == TOOLS
        r = await c.call_tool("recall_context", {"question": "who owns payments-service?"})
        assert not r.is_error and "team-ledger" in text(r)
        r = await c.call_tool("search_graph_nodes", {"query": "ledger"})
        ids = [e["entity_id"] for e in r.structured_content["entities"]]
        r = await c.call_tool("query_subgraph", {"entity_ids": ids})
        assert not r.is_error and r.structured_content["facts"]
        r = await c.call_tool("upsert_graph_triples", {"triples": [GOOD, BAD]})
        assert r.structured_content["accepted"] == 1
        assert r.structured_content["results"][1]["status"] == "rejected"
        r = await c.call_tool("offload_turns", {"turns": [{"role": "assistant", "content": "ok"}]})
        assert not r.is_error
        r = await c.call_tool("query_subgraph", {"entity_ids": ["e_1"] * 51})
        assert r.is_error

    # the key covers one repo: that is the scope
    run(http(mcp_url, memory.keys["acme_payments"]), session)


def test_http_needs_a_valid_key(memory: Memory, mcp_url: str) -> None:
    for headers in ({}, {"Authorization": "Bearer mf_wrong"}, {"Authorization": "Basic abc"}):
        r = httpx.post(
            mcp_url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, headers=headers
        )
        assert r.status_code == 401
        assert r.headers["www-authenticate"].startswith("Bearer ")
    with pytest.raises(BaseException):  # noqa: B017 - the SDK wraps it in an exception group
        run(http(mcp_url, "mf_wrong"), lambda c: c.list_tools())


@pytest.mark.parametrize(
    ("role", "repo", "writable"),
    [
        ("acme_payments", "web", False),  # same org, repo not granted
        ("acme_all", "secret-lab", True),  # another org's repo name: still acme's own scope
        ("acme_all", "no-such-repo", True),  # a key for every repo may start a new one
        ("acme_all", "../globex", False),
    ],
)
def test_http_foreign_scope_answers_like_a_missing_one(
    memory: Memory, mcp_url: str, role: str, repo: str, writable: bool
) -> None:
    async def session(c: Client) -> None:
        r = await c.call_tool("recall_context", {"question": "what is Project Nightjar?"})
        assert r.is_error and "tenant_not_found" in text(r)
        assert "Nightjar" not in text(r).replace("what is Project Nightjar", "")
        r = await c.call_tool("upsert_graph_triples", {"triples": [GOOD]})
        if writable:
            assert r.structured_content["tenant"] == f"acme/{repo}"
        else:
            assert r.is_error and "tenant_not_found" in text(r)

    run(http(mcp_url, memory.keys[role], repo), session)


def test_http_each_key_sees_its_own_org(memory: Memory, mcp_url: str) -> None:
    async def session(c: Client) -> None:
        r = await c.call_tool("recall_context", {"question": "what does Project Nightjar use?"})
        assert not r.is_error and "globex-quantum-ledger" in text(r)
        assert "payments-service" not in text(r)

    run(http(mcp_url, memory.keys["globex"], "secret-lab"), session)

    async def acme(c: Client) -> None:
        r = await c.call_tool("recall_context", {"question": "storefront"})
        assert 'scope="acme/web"' in text(r) and "Nightjar" not in text(r)

    run(http(mcp_url, memory.keys["acme_all"], "web"), acme)
