"""Graph store backends for the contract suite (tests/contract/test_graph_store.py).

`graph_backend` is parametrized over every backend; each test gets a fresh store handle and
fresh tenants (`new_scope`), so tests stay apart on a shared Gremlin server and under xdist.
The Gremlin servers are started only when a test of theirs runs (tests/support/gremlin.py):
TinkerPop's Gremlin Server on TinkerGraph for `gremlin*`, JanusGraph's Gremlin Server on
BerkeleyDB JE (on disk) for `janusgraph*`. A server that cannot be started fails the tests.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from resources.graph.base import GraphStore
from resources.graph.factory import open_graph_store
from schemas.scope import Scope
from tests.support.gremlin import acquire_server, release_server
from tests.support.services import ServiceUnavailable

# gremlin: the portable fold/coalesce upserts (the default); gremlin-inject: new rows inserted
# by data-driven inject(...).addV/addE traversals; both on TinkerGraph. janusgraph: the same
# store (default options) against JanusGraph, a real graph database with persistence on disk.
GRAPH_BACKENDS = ("sqlite", "gremlin", "gremlin-inject", "janusgraph")
MARKS = {
    "gremlin": [pytest.mark.gremlin],
    "gremlin-inject": [pytest.mark.gremlin],
    "janusgraph": [pytest.mark.gremlin, pytest.mark.server],
}
SERVER_FIXTURE = {
    "gremlin": "gremlin_server_url",
    "gremlin-inject": "gremlin_server_url",
    "janusgraph": "janusgraph_server_url",
}


@dataclass(frozen=True)
class GraphBackend:
    name: str
    sqlite_path: Path | None = None
    gremlin_url: str | None = None
    gremlin_options: dict[str, Any] = field(default_factory=dict)

    def open(self) -> GraphStore:
        """A new handle on this backend's store (same file, same server)."""
        return open_graph_store(
            self.name,
            sqlite_path=self.sqlite_path,
            gremlin_url=self.gremlin_url,
            gremlin_options=self.gremlin_options,
        )


def _shared_server(flavour: str) -> Iterator[str]:
    try:
        url = acquire_server(flavour)
    except ServiceUnavailable as exc:
        pytest.fail(f"the {flavour} Gremlin server could not be started: {exc}", pytrace=False)
    yield url
    release_server(flavour)


@pytest.fixture(scope="session")
def gremlin_server_url() -> Iterator[str]:
    yield from _shared_server("tinkergraph")


@pytest.fixture(scope="session")
def janusgraph_server_url() -> Iterator[str]:
    yield from _shared_server("janusgraph")


@pytest.fixture(params=[pytest.param(name, marks=MARKS.get(name, [])) for name in GRAPH_BACKENDS])
def graph_backend(request: pytest.FixtureRequest, tmp_path: Path) -> GraphBackend:
    if request.param == "sqlite":
        return GraphBackend("sqlite", sqlite_path=tmp_path / "graph.sqlite")
    url = request.getfixturevalue(SERVER_FIXTURE[request.param])
    options = {"new_rows": "inject"} if request.param == "gremlin-inject" else {}
    return GraphBackend("gremlin", gremlin_url=url, gremlin_options=options)


@pytest.fixture
def graph_store(graph_backend: GraphBackend) -> Iterator[GraphStore]:
    store = graph_backend.open()
    yield store
    store.close()


@pytest.fixture
def new_scope(graph_store: GraphStore) -> Iterator[Callable[..., Scope]]:
    """Makes scopes of a tenant no other test uses; their data is deleted afterwards."""
    made: list[Scope] = []
    tenant = f"t{uuid.uuid4().hex[:12]}"

    def make(ns: str = "repo", tenant_id: str | None = None) -> Scope:
        scope = Scope(tenant_id or tenant, ns)
        made.append(scope)
        return scope

    yield make
    for scope in made:
        graph_store.delete_scope(scope)
