"""Open the vector store a deployment is configured for."""

from __future__ import annotations

import os
from pathlib import Path

from resources.vector.base import VectorStore

VECTORS_SUBDIR = "vectors"


def vectors_dir(data_dir: str | os.PathLike[str]) -> Path:
    """Where the embedded store keeps its files: `<data>/vectors`."""
    return Path(data_dir) / VECTORS_SUBDIR


def open_vector_store(
    uri_or_none: str | None,
    data_dir: str | os.PathLike[str],
    token: str | None = None,
    *,
    cache_mib: int | None = None,
) -> VectorStore:
    """None or empty: the embedded store in `<data_dir>/vectors` (no server; any process on the
    host may read and write it), keeping at most `cache_mib` of vectors in this process (its
    default: `DEFAULT_CACHE_BYTES`). A URI: a Milvus server or cluster."""
    if uri_or_none is None or not uri_or_none.strip():
        from resources.vector.local import DEFAULT_CACHE_BYTES, LocalVectorStore

        budget = DEFAULT_CACHE_BYTES if cache_mib is None else cache_mib * 1024 * 1024
        return LocalVectorStore(vectors_dir(data_dir), cache_max_bytes=budget)
    # Imported only here: pymilvus takes about a second to import.
    from resources.vector.milvus import MilvusVectorStore

    return MilvusVectorStore(uri_or_none.strip(), token=token)
