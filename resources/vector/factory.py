"""Open the vector store a deployment is configured for."""

from __future__ import annotations

import os
from pathlib import Path

from resources.vector.base import VectorStore
from resources.vector.lite_server import ensure_lite_server
from resources.vector.milvus import Layout, MilvusVectorStore

CACHE_SUBDIR = "milvus-gen"


def open_vector_store(
    uri_or_none: str | None,
    data_dir: str | os.PathLike[str],
    token: str | None = None,
) -> VectorStore:
    """None: the embedded default, Milvus Lite served by memflow for `data_dir` (started if
    needed, restarted if it dies), a collection per scope and the in-process search cache.
    A `.db` path: Milvus Lite in this process only. A URI: a Milvus server or cluster
    (partition-key layout, or the scope layout if it turns out to be a Lite server)."""
    if uri_or_none is None or not uri_or_none.strip():
        root = Path(data_dir)
        return MilvusVectorStore(
            ensure_lite_server(root),
            layout=Layout.SCOPE,
            cache_dir=root / CACHE_SUBDIR,
            reconnect=lambda: ensure_lite_server(root),  # restarts a server that died
        )
    return MilvusVectorStore(uri_or_none.strip(), token=token)
