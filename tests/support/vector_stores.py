"""Vector store backends for the contract suites, as pytest fixtures.

Import the fixtures into a test module (`from tests.support.vector_stores import ...`).
Backends:

- `local`: the embedded default, `open_vector_store(None, data_dir)`: Arrow files under
  `<data>/vectors`, numpy search, no server (`resources.vector.local`).
- `milvus-server`: a real Milvus standalone server (the `milvus` wheel, 2.3.x: the oldest
  server memflow supports), by URI. Shared by every test process like the Gremlin servers
  (tests/support/services.py); data under .milvus-server/data-<MEMFLOW_MILVUS_PORT>, emptied
  when the tests start the server; `MEMFLOW_TEST_MILVUS_URI` names a server someone else runs
  instead.

Tests sharing a server stay apart by using fresh tenants (`fresh_scope`).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from resources.vector.base import VectorStore
from resources.vector.factory import open_vector_store
from resources.vector.local import LocalVectorStore
from resources.vector.milvus import MilvusVectorStore
from schemas.scope import Scope
from tests.support.milvus_server import STATE_DIR, MilvusServer, MilvusServerError
from tests.support.services import ServiceUnavailable, SharedService

BACKENDS = ("local", "milvus-server")


def _start_or_raise(server: MilvusServer) -> None:
    try:
        server.start(fresh=True)
    except MilvusServerError as exc:
        raise ServiceUnavailable(str(exc)) from exc


def milvus_service(server: MilvusServer | None = None) -> SharedService:
    server = server or MilvusServer.default()
    return SharedService(
        name=f"milvus-{server.port}",
        state_dir=STATE_DIR,
        start=lambda: _start_or_raise(server),
        # Short grace: the next test session empties the data directory anyway.
        stop=lambda: server.stop(timeout_s=3) and None,
        answers=server.answers,
    )


@pytest.fixture(scope="session")
def milvus_server_uri() -> Iterator[str]:
    """The URI of the shared Milvus standalone server, started if none answers."""
    external = os.environ.get("MEMFLOW_TEST_MILVUS_URI")
    if external:
        yield external
        return
    service = milvus_service()
    try:
        service.acquire()
    except ServiceUnavailable as exc:
        pytest.fail(f"the Milvus server could not be started: {exc}", pytrace=False)
    yield MilvusServer.default().uri
    service.release()


def open_local(data_dir: Path) -> LocalVectorStore:
    store = open_vector_store(None, data_dir)
    assert isinstance(store, LocalVectorStore)
    return store


@pytest.fixture(
    params=[
        pytest.param(name, marks=[pytest.mark.server] if name == "milvus-server" else [])
        for name in BACKENDS
    ]
)
def vector_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[VectorStore]:
    store: VectorStore
    if request.param == "milvus-server":
        store = MilvusVectorStore(request.getfixturevalue("milvus_server_uri"))
    else:
        store = open_local(tmp_path / "data")
    yield store
    store.close()


@pytest.fixture
def fresh_scope() -> Callable[..., Scope]:
    """Scopes no other test uses: `fresh_scope()`, `fresh_scope("other-repo")`,
    `fresh_scope(tenant="b")` (another tenant)."""
    run = uuid.uuid4().hex[:10]
    return lambda ns="repo", tenant="a": Scope(f"org-{run}-{tenant}", ns)
