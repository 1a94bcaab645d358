"""`memflow serve`: the recall API over the stores the pipeline writes, with uvicorn.

The service only reads the stores, so it runs beside a Dagster run: the SQLite graph is in WAL
mode (readers keep their snapshot while a run commits) and the embedded vector store is the
Milvus Lite gRPC server memflow supervises for the data directory, reached by URI (started here
if no process has started it yet). Writes (``POST /v1/turns``, ``/v1/triples``) go to the
landing zone the pipeline's sensor watches, never to the stores.

Settings arrive resolved (`resources.settings.Settings`, from `pipelines.settings.resolve` in
the CLI); the keys file is ``MEMFLOW_API_KEYS_FILE`` (default ``<data_dir>/api-keys.json``).
Uvicorn's access log is off: request lines carry queries (``GET /v1/entities?q=...``), and
queries may hold secrets.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from fastapi import FastAPI

from recall.api import create_app
from recall.auth import KeyRing
from recall.service import RecallService
from resources.models.base import EmbeddingProvider, ModelError
from resources.settings import Settings
from resources.vector.base import VectorStore
from schemas.rules import TimeWindow

log = logging.getLogger("recall.server")

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8080


QUERY_THREADS = 1


def embedder(cfg: Settings, model: str | None = None) -> EmbeddingProvider | None:
    """The configured embedding provider (None for `none`), built exactly as the pipeline
    builds it, so query vectors and entity vectors come from the same model. `model` builds
    the same kind of provider for another model name (the previous one, during a re-embed).

    An in-process model embeds one query per request here: it runs on `QUERY_THREADS` torch
    threads (steadier and, on a shared host, faster than a team per query; concurrent requests
    use the other cores), where the pipeline's sweep keeps torch's default for its batches."""
    provider = cfg.embedder(model)
    if provider is not None and hasattr(provider, "threads") and provider.threads is None:
        provider.threads = QUERY_THREADS
    return provider


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


def build_service(cfg: Settings, *, warm_up: bool = True) -> Built:
    """A `RecallService` over the configured graph store, vector store and embedding model.
    With no embedder configured the service answers by names (and `auto` says so)."""
    closers: list[Callable[[], None]] = []
    graph = cfg.open_graph()
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
            vectors = cfg.open_vectors()
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


def create_server_app(cfg: Settings, *, public_metrics: bool = False) -> FastAPI:
    """The API app for these settings; stores are opened at startup, closed at shutdown. Writes
    are checked with the time window ingestion uses (``MEMFLOW_HISTORY_START``, ...)."""
    try:
        window = TimeWindow.from_settings(cfg)
    except ValueError as exc:
        raise SystemExit(f"memflow serve: {exc}") from None
    path = cfg.keys_file
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
        landing_dir=str(cfg.landing_dir),
        public_metrics=public_metrics,
        on_close=close,
        window=window,
    )


def serve(
    cfg: Settings,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    *,
    public_metrics: bool = False,
    log_level: str = "info",
) -> None:
    """Run the API on these settings until interrupted."""
    import uvicorn

    logging.basicConfig(level=log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    app = create_server_app(cfg, public_metrics=public_metrics)
    log.info("keys file: %s", cfg.keys_file)
    uvicorn.run(app, host=host, port=port, log_level=log_level, access_log=False)
