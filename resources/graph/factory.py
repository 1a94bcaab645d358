"""Open the configured graph store backend. Each backend module is imported only when chosen."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from resources.graph.base import GraphStore

BACKENDS = ("sqlite", "gremlin")


def open_graph_store(
    backend: str,
    *,
    sqlite_path: str | os.PathLike[str] | None = None,
    gremlin_url: str | None = None,
    traversal_source: str = "g",
    gremlin_options: Mapping[str, Any] | None = None,
) -> GraphStore:
    """`backend` is "sqlite" (needs `sqlite_path`) or "gremlin" (needs `gremlin_url`).

    `gremlin_options` go to GremlinGraphStore (e.g. `{"new_rows": "inject"}`).
    """
    name = (backend or "").strip().lower()
    if name == "sqlite":
        if not sqlite_path:
            raise ValueError("the sqlite graph store needs sqlite_path (e.g. <data>/graph.sqlite)")
        from resources.graph.sqlite import SqliteGraphStore

        return SqliteGraphStore(Path(sqlite_path))
    if name == "gremlin":
        if not gremlin_url:
            raise ValueError(
                "the gremlin graph store needs gremlin_url (e.g. ws://127.0.0.1:18182/gremlin)"
            )
        from resources.graph.gremlin import GremlinGraphStore

        return GremlinGraphStore(gremlin_url, traversal_source, **(gremlin_options or {}))
    raise ValueError(
        f"unknown graph store backend {backend!r}; choose one of {', '.join(BACKENDS)}"
    )
