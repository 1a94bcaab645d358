"""`memflow serve`: the recall API over the stores the pipeline writes, with uvicorn.

The service only reads the stores, so it runs beside a Dagster run: the SQLite graph is in WAL
mode (readers keep their snapshot while a run commits) and the embedded vector store is the
Milvus Lite gRPC server memflow supervises for the data directory, reached by URI (started here
if no process has started it yet). Writes (``POST /v1/turns``, ``/v1/triples``) go to the
landing zone the pipeline's sensor watches, never to the stores.

Settings are the environment variables of `pipelines.resources.SETTINGS` (resolved by
`memflow.settings.apply` in the CLI) plus ``MEMFLOW_API_KEYS_FILE`` (default
``<data_dir>/api-keys.json``). Uvicorn's access log is off: request lines carry queries
(``GET /v1/entities?q=...``), and queries may hold secrets.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from fastapi import FastAPI

from recall.api import create_app
from recall.auth import KeyRing
from recall.service import RecallService
from resources.graph.base import GraphStore
from resources.models.base import EmbeddingProvider, ModelError
from resources.vector.base import VectorStore

log = logging.getLogger("memflow.serve")

KEYS_FILE_SETTING = "MEMFLOW_API_KEYS_FILE"
KEYS_FILE_NAME = "api-keys.json"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8080


def current_settings() -> dict[str, str]:
    """Every setting as the process sees it now (after `memflow.settings.apply`), defaults
    filled in. Read at call time, never at import."""
    from pipelines.resources import SETTINGS

    cfg = {name: os.environ.get(name, default) for name, default in SETTINGS.items()}
    cfg.setdefault(KEYS_FILE_SETTING, os.environ.get(KEYS_FILE_SETTING, ""))
    return cfg


def keys_file(cfg: Mapping[str, str]) -> Path:
    explicit = (cfg.get(KEYS_FILE_SETTING) or "").strip()
    return Path(explicit) if explicit else Path(cfg["MEMFLOW_DATA_DIR"]) / KEYS_FILE_NAME


def open_graph(cfg: Mapping[str, str]) -> GraphStore:
    from resources.graph.factory import open_graph_store

    return open_graph_store(
        cfg["MEMFLOW_GRAPH_BACKEND"],
        sqlite_path=str(Path(cfg["MEMFLOW_DATA_DIR"]) / "graph.sqlite"),
        gremlin_url=cfg["MEMFLOW_GREMLIN_URL"],
    )


def open_vectors(cfg: Mapping[str, str]) -> VectorStore:
    from resources.vector.factory import open_vector_store

    return open_vector_store(
        cfg["MEMFLOW_MILVUS_URI"] or None,
        cfg["MEMFLOW_DATA_DIR"],
        token=cfg["MEMFLOW_MILVUS_TOKEN"] or None,
    )


def embedder(cfg: Mapping[str, str], model: str | None = None) -> EmbeddingProvider | None:
    """The configured embedding provider (None for `none`), built exactly as the pipeline
    builds it, so query vectors and entity vectors come from the same model. `model` builds
    the same kind of provider for another model name (the previous one, during a re-embed)."""
    from resources.configurable import EmbeddingModelResource

    return EmbeddingModelResource(
        provider=cfg["MEMFLOW_EMBEDDER"],
        base_url=cfg["MEMFLOW_EMBEDDING_URL"],
        model=model or cfg["MEMFLOW_EMBEDDING_MODEL"],
        api_key=cfg["MEMFLOW_EMBEDDING_API_KEY"],
        command=cfg["MEMFLOW_EMBEDDING_COMMAND"],
        allow_hosts=cfg["MEMFLOW_ALLOW_MODEL_HOSTS"],
    ).build()


@dataclass
class Built:
    """A service and what must be closed with it."""

    service: RecallService
    closers: list[Callable[[], None]] = field(default_factory=list)

    def close(self) -> None:
        self.service.close()
        for close in reversed(self.closers):
            try:
                close()
            except Exception as exc:  # closing must go on for the rest
                log.warning("closing failed: %s", type(exc).__name__)


def build_service(cfg: Mapping[str, str] | None = None, *, warm_up: bool = True) -> Built:
    """A `RecallService` over the configured graph store, vector store and embedding model.
    With no embedder configured the service answers by names (and `auto` says so)."""
    cfg = cfg or current_settings()
    closers: list[Callable[[], None]] = []
    graph = open_graph(cfg)
    closers.append(graph.close)
    try:
        provider = embedder(cfg)
        vectors: VectorStore | None = None
        providers: dict[str, EmbeddingProvider] = {}
        if provider is not None:
            providers[provider.model] = provider
            closers.append(provider.close)
            previous = (cfg.get("MEMFLOW_PREVIOUS_EMBEDDING_MODEL") or "").strip()
            if previous and previous != provider.model:
                # Serves the scopes the new model does not cover yet (see recall/vector_leg.py).
                old = embedder(cfg, previous)
                if old is not None:
                    providers[old.model] = old
                    closers.append(old.close)
            vectors = open_vectors(cfg)
            closers.append(vectors.close)
            if warm_up:
                _warm_up(provider)
        service = RecallService(
            graph,
            vectors,
            providers or None,
            current_model=provider.model if provider is not None else None,
        )
    except BaseException:
        for close in reversed(closers):
            with contextlib.suppress(Exception):
                close()
        raise
    return Built(service, closers)


def _warm_up(provider: EmbeddingProvider) -> None:
    """Load the model now: a first query would otherwise wait for it (and time out)."""
    try:
        provider.embed(["warm up"])
    except (ModelError, OSError, ValueError) as exc:
        log.warning("embedding model %s not ready: %s", provider.model, type(exc).__name__)


def create_server_app(
    cfg: Mapping[str, str] | None = None, *, public_metrics: bool = False
) -> FastAPI:
    """The API app for these settings; stores are opened at startup, closed at shutdown."""
    cfg = dict(cfg or current_settings())
    path = keys_file(cfg)
    keys = KeyRing(path)
    if keys.error:
        raise SystemExit(f"memflow serve: {keys.error}")
    if not len(keys):
        log.warning("no API keys in %s yet: every request answers 401 until one is added", path)
    built: list[Built] = []

    def factory() -> RecallService:
        built.append(build_service(cfg))
        return built[-1].service

    def close() -> None:
        for b in built:
            b.close()

    return create_app(
        keys=keys,
        service_factory=factory,
        landing_dir=cfg["MEMFLOW_LANDING_DIR"],
        public_metrics=public_metrics,
        on_close=close,
    )


def serve(
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    *,
    data_dir: str | None = None,
    landing_dir: str | None = None,
    keys_file_path: str | None = None,
    public_metrics: bool = False,
    log_level: str = "info",
) -> None:
    """Run the API until interrupted. Flags override settings (env, then `.env`)."""
    import uvicorn

    from memflow import settings

    cfg = settings.apply({"MEMFLOW_DATA_DIR": data_dir, "MEMFLOW_LANDING_DIR": landing_dir})
    cfg[KEYS_FILE_SETTING] = keys_file_path or os.environ.get(KEYS_FILE_SETTING, "")
    logging.basicConfig(level=log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    app = create_server_app(cfg, public_metrics=public_metrics)
    log.info("keys file: %s", keys_file(cfg))
    uvicorn.run(app, host=host, port=port, log_level=log_level, access_log=False)
