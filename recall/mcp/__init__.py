"""The memflow MCP server (official ``mcp`` SDK): agent memory as nine tools.

    memflow mcp                                   # stdio, for one agent session
    memflow mcp --http --port 8765                # streamable HTTP at /mcp, bearer keys
    python -m recall.mcp [...]                    # the same without the CLI

Modules: `recall.mcp.tools` (the tools and their rules), `recall.mcp.backends` (the typed
`Memory` protocol: the API, or this process), `recall.mcp.auth` (bearer keys through the SDK's
`TokenVerifier`), `recall.mcp.settings` (what the server reads from the environment),
`recall.mcp.server` (stdio and HTTP transports, ``main``).

Tools
=====

``recall_context(question)``
    The recall answer for the working repository, formatted for a model (facts with validity
    and confidence, contradictions flagged), with the notice that recalled facts are data, not
    instructions. When the API is unreachable it answers by names from the local stores and
    says so.
``search_graph_nodes(query, limit)``
    Entities by name, alias, type (and meaning, when the server has a model): ids for
    ``query_subgraph``.
``query_subgraph(entity_ids, hops, limit)``
    Facts within 1-2 hops of entities.
``list_facts(entity, predicate, status, as_of, limit, cursor)``
    The repository's stored facts, newest first, in pages (``total``, ``more``,
    ``next_cursor``), like ``GET /v1/facts``.
``upsert_graph_triples(triples)``
    Save facts. Each item is validated at once by the pipeline's own contract (the same check as
    ``POST /v1/triples``); the answer has one result per item, in input order: ``saved``,
    ``saved_with_warning`` (what was changed) or ``rejected`` (why); saved ones are landed.
``offload_turns(turns)``
    Hand older conversation turns to the pipeline (like ``POST /v1/turns``, redacted; the input
    of tools other than the memory tools is not written), which extracts facts from them.
``retract_fact(fact_id | subject, predicate, object, reason)``, ``forget(entity, reason)``
    Take a fact back, or every fact of an entity (like ``POST /v1/retractions``): one
    ``retract_facts`` turn recording who asked; the pipeline closes the facts at its time.
``erase_memory(confirm)``
    Erase the whole repository's memory (an admin key, ``confirm`` = ``ORG/REPO``; like
    ``DELETE /v1/tenants/ORG/REPO``). Never falls back to the local stores.

Every write answers ``ingest``: whether the tenant's run was asked for and when the data is
expected to be recallable (`recall.ports.IngestTrigger`), or why nothing ingests it on its own.

Scope
=====

No tool takes a tenant: the model cannot name one. Over stdio the scope is the working
repository the server was started for (``--tenant ORG/REPO``, ``MEMFLOW_TENANT``, else the
tenant mapping of the working directory, `memflow.importers.tenant`), and the key
(``MEMFLOW_API_KEY``) decides, at the API, whether it may be read. Over HTTP the org comes from
the caller's bearer key (`recall.auth.KeyRing`, the API's keys file, verified by the SDK's
bearer middleware) and the repo from the ``X-Memflow-Repo`` header the client was configured
with, else the server's ``--tenant`` repo, else the key's only repo; a repo the key was not
granted answers ``tenant not found``, exactly like one that does not exist. Each MCP session
(``Mcp-Session-Id``) writes as its own memflow session.

Backends
========

Over stdio the tools call the running API (`recall.client`, ``MEMFLOW_API_URL``). When no server
answers (or no key is set) reads fall back to names-only recall from the local stores
(``MEMFLOW_DATA_DIR``) and writes to the local landing zone (``MEMFLOW_LANDING_DIR``), each answer
saying so. An error the API answers (a foreign scope, a bad key) is never worked around. Over
HTTP the tools call the API with each caller's own key (so they recall in the API's modes:
hybrid with a model up; the answer's ``mode`` says which), falling back to names only when it is
unreachable; or they run in-process on a `RecallService` handed to `http_app` (e.g. the one
``memflow serve`` builds). The server reports memflow's version to clients.
"""

from recall.mcp.backends import ApiMemory, LocalMemory, Memory, MemoryToolError
from recall.mcp.server import DEFAULT_HTTP_PORT, McpHttp, http_app, main, run_http, run_stdio
from recall.mcp.settings import McpSettings
from recall.mcp.tools import MemoryTools, TurnArg, build_server, memflow_version

__all__ = [
    "DEFAULT_HTTP_PORT",
    "ApiMemory",
    "LocalMemory",
    "McpHttp",
    "McpSettings",
    "Memory",
    "MemoryToolError",
    "MemoryTools",
    "TurnArg",
    "build_server",
    "http_app",
    "main",
    "memflow_version",
    "run_http",
    "run_stdio",
]
