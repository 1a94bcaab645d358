"""Open the configured graph store backend. Each backend module is imported only when chosen."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit, urlunsplit

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

    `gremlin_options` go to GremlinGraphStore (e.g. `{"new_rows": "inject"}`). The URL's query
    string may carry the same options, so a deployment configured by one URL (e.g.
    MEMFLOW_GREMLIN_URL) can choose them: `ws://host:8182/gremlin?new_rows=inject` (4x faster
    inserts on JanusGraph, docs/graph-backends.md), `?traversal_source=hugegraph`. Explicit
    arguments win over the URL.
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

        url, from_url = _url_options(gremlin_url)
        options = {"traversal_source": traversal_source, **from_url, **(gremlin_options or {})}
        if traversal_source != "g":
            options["traversal_source"] = traversal_source
        return GremlinGraphStore(url, **options)
    raise ValueError(
        f"unknown graph store backend {backend!r}; choose one of {', '.join(BACKENDS)}"
    )


_INT_OPTIONS = ("entity_batch", "fact_batch", "insert_batch", "pool_size")
_URL_OPTIONS = ("traversal_source", "new_rows", *_INT_OPTIONS)


def _url_options(url: str) -> tuple[str, dict[str, Any]]:
    """(the URL without its query, the GremlinGraphStore options its query names)."""
    parts = urlsplit(url)
    if not parts.query:
        return url, {}
    options: dict[str, Any] = {}
    for key, value in parse_qsl(parts.query, keep_blank_values=True, strict_parsing=True):
        if key not in _URL_OPTIONS:
            raise ValueError(
                f"unknown gremlin URL option {key!r}; choose among {', '.join(_URL_OPTIONS)}"
            )
        options[key] = int(value) if key in _INT_OPTIONS else value
    return urlunsplit(parts._replace(query="")), options
