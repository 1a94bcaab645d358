"""Vector store backends for the contract suite, as pytest fixtures.

Import the fixtures into a test module (`from tests.support.milvus import ...`). Backends:

- `lite-file`: Milvus Lite on a `.db` path in this process (scope layout, no cache).
- `lite-server`: the embedded default, `open_vector_store(None, data_dir)`: Milvus Lite's gRPC
  server started by memflow's supervisor, scope layout, in-process search cache.
- `lite-server-partition-key`: the same server reached by URI with the layout a Milvus server
  uses (one collection per model, tenant as partition key, server-side search).

The server is started once per session and stopped at the end. Tests sharing it stay apart by
using fresh tenants (`fresh_scope`).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from resources.vector.factory import open_vector_store
from resources.vector.lite_server import ensure_lite_server, stop_lite_server
from resources.vector.milvus import Layout, MilvusVectorStore
from schemas.scope import Scope

BACKENDS = ("lite-file", "lite-server", "lite-server-partition-key")


@pytest.fixture(scope="session")
def lite_server_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("milvus-lite-server")
    ensure_lite_server(root)
    yield root
    stop_lite_server(root)


def open_backend(name: str, tmp_path: Path, server_dir: Path | None) -> MilvusVectorStore:
    if name == "lite-file":
        return MilvusVectorStore(str(tmp_path / "vectors.db"))
    assert server_dir is not None
    if name == "lite-server":
        store = open_vector_store(None, server_dir)
        assert isinstance(store, MilvusVectorStore)
        return store
    return MilvusVectorStore(ensure_lite_server(server_dir), layout=Layout.PARTITION_KEY)


@pytest.fixture(params=BACKENDS)
def vector_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MilvusVectorStore]:
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
