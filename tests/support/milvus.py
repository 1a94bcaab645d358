"""Vector store backends for the contract suite, as pytest fixtures.

Import the fixtures into a test module (`from tests.support.milvus import ...`). Backends:

- `lite-file`: Milvus Lite on a `.db` path in this process (scope layout, no cache).
- `lite-server`: the embedded default, `open_vector_store(None, data_dir)`: Milvus Lite's gRPC
  server started by memflow's supervisor, scope layout, in-process search cache.
- `lite-server-partition-key`: the same server reached by URI with the layout a Milvus server
  uses (one collection per model, tenant as partition key, server-side search).
- `milvus-server`: a real Milvus standalone server (the `milvus` wheel, 2.3.x: the oldest
  server memflow supports), by URI, with its layout (`auto` picks the partition key there).
  Shared by every test process like the Gremlin servers (tests/support/services.py); data
  under .milvus-server/data-<MEMFLOW_MILVUS_PORT>, emptied when the tests start the server;
  `MEMFLOW_TEST_MILVUS_URI` names a server someone else runs instead.

The Lite server is started once per session and stopped at the end. Tests sharing a server
stay apart by using fresh tenants (`fresh_scope`).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from resources.vector.factory import open_vector_store
from resources.vector.lite_server import ensure_lite_server, stop_lite_server
from resources.vector.milvus import Layout, MilvusVectorStore
from schemas.scope import Scope
from tests.support.milvus_server import STATE_DIR, MilvusServer, MilvusServerError
from tests.support.services import ServiceUnavailable, SharedService

BACKENDS = ("lite-file", "lite-server", "lite-server-partition-key", "milvus-server")


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


@pytest.fixture(scope="session")
def lite_server_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("milvus-lite-server")
    ensure_lite_server(root)
    yield root
    stop_lite_server(root)


def open_backend(name: str, tmp_path: Path, server_dir: Path | None) -> MilvusVectorStore:
    if name == "milvus-server":
        raise AssertionError("open the milvus-server backend by its URI")
    if name == "lite-file":
        return MilvusVectorStore(str(tmp_path / "vectors.db"))
    assert server_dir is not None
    if name == "lite-server":
        store = open_vector_store(None, server_dir)
        assert isinstance(store, MilvusVectorStore)
        return store
    return MilvusVectorStore(ensure_lite_server(server_dir), layout=Layout.PARTITION_KEY)


@pytest.fixture(
    params=[
        pytest.param(name, marks=[pytest.mark.server] if name == "milvus-server" else [])
        for name in BACKENDS
    ]
)
def vector_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MilvusVectorStore]:
    if request.param == "milvus-server":
        store = MilvusVectorStore(request.getfixturevalue("milvus_server_uri"))
        assert not store.is_lite and store.layout is Layout.PARTITION_KEY
        yield store
        store.close()
        return
    server_dir = (
        None if request.param == "lite-file" else request.getfixturevalue("lite_server_dir")
    )
    store = open_backend(request.param, tmp_path, server_dir)
    yield store
    store.close()


@pytest.fixture
def fresh_scope() -> Callable[..., Scope]:
    """Scopes no other test uses: `fresh_scope()`, `fresh_scope("other-repo")`,
    `fresh_scope(tenant="b")` (another tenant)."""
    run = uuid.uuid4().hex[:10]
    return lambda ns="repo", tenant="a": Scope(f"org-{run}-{tenant}", ns)
