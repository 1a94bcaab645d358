"""`memflow serve`: the recall API over the stores the pipeline writes, with uvicorn.

The service only reads the stores, so it runs beside a Dagster run: the SQLite graph is in WAL
mode (readers keep their snapshot while a run commits) and the embedded vector store is the
Milvus Lite gRPC server memflow supervises for the data directory, reached by URI (started here
if no process has started it yet). Writes (``POST /v1/turns``, ``/v1/triples``) go to the
landing zone the pipeline's sensor watches, never to the stores.

Settings arrive resolved (`resources.settings.Settings`, from `pipelines.settings.resolve` in
the CLI); the keys file is ``MEMFLOW_API_KEYS_FILE`` (default ``<data_dir>/api-keys.json``).
On SIGHUP the server re-reads the embedding settings from its settings file (``.env``) and,
when they changed, builds a new service beside the running one and switches to it: a model
switch needs no restart (`ServiceSwitch`).
Uvicorn's access log is off: request lines carry queries (``GET /v1/entities?q=...``), and
queries may hold secrets.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from fastapi import FastAPI

from recall.api import Api, create_app
from recall.auth import KeyRing
from recall.service import RecallService
from resources.models.base import EmbeddingProvider, ModelError
from resources.settings import EMBEDDING_SETTINGS, Settings, read_settings_file
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


# What SIGHUP re-reads: the embedding model's settings and the previous model.
RELOADED_SETTINGS = (
    *dict.fromkeys(EMBEDDING_SETTINGS.values()),
    "MEMFLOW_PREVIOUS_EMBEDDING_MODEL",
)
# How long a replaced service stays open for the requests that still hold it (the client's
# default timeout is 5 s).
RELOAD_GRACE_S = 30.0


class ServiceSwitch:
    """The server's service, rebuilt from the settings file on request (SIGHUP).

    `reload` reads the embedding settings the file names (they win over the settings the server
    started with, as in the code location, `resources.configurable`), and when they differ from
    the running ones builds a whole new service (stores, models, warm-up) before switching to
    it; the old one is closed `grace_s` later, once the requests that hold it are done. A
    service that fails to build leaves the running one in place."""

    def __init__(
        self,
        cfg: Settings,
        settings_file: str | os.PathLike[str] | None = None,
        *,
        grace_s: float = RELOAD_GRACE_S,
        warm_up: bool = True,
    ) -> None:
        self.cfg = cfg
        self.settings_file = Path(settings_file) if settings_file else None
        self.grace_s = grace_s
        self.warm_up = warm_up
        self.api: Api | None = None  # bound by create_server_app
        self._lock = threading.Lock()
        self._running: Built | None = None
        self._retired: list[Built] = []
        self._closed = False

    def start(self) -> RecallService:
        with self._lock:
            self._running = build_service(self.cfg, warm_up=self.warm_up)
            return self._running.service

    def settings_now(self) -> Settings:
        if self.settings_file is None:
            return self.cfg
        found = read_settings_file(self.settings_file)
        return self.cfg.with_values(**{k: found[k] for k in RELOADED_SETTINGS if k in found})

    def reload(self) -> str:
        """Apply the settings file's embedding settings; says what happened."""
        with self._lock:
            if self._closed or self._running is None or self.api is None:
                return "not running"
            try:
                cfg = self.settings_now()
            except (OSError, ValueError) as exc:
                log.error("reload: the settings file cannot be read: %s", type(exc).__name__)
                return "failed"
            if all(cfg.get(k) == self.cfg.get(k) for k in RELOADED_SETTINGS):
                return "unchanged"
            try:
                fresh = build_service(cfg, warm_up=self.warm_up)
            except Exception as exc:  # the running service stays; the log says why
                log.error("reload failed, still serving %s: %s", self.model, exc)
                return "failed"
            old, self._running, self.cfg = self._running, fresh, cfg
            self.api.switch_service(fresh.service)
            self._retired.append(old)
            timer = threading.Timer(self.grace_s, self._retire, args=(old,))
            timer.daemon = True
            timer.start()
            log.info("reloaded: embedding model %s", self.model)
            return "reloaded"

    @property
    def model(self) -> str | None:
        return self._running.service.current_model if self._running is not None else None

    def _retire(self, built: Built) -> None:
        with self._lock:
            if built not in self._retired:
                return  # closed at shutdown already
            self._retired.remove(built)
        built.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            every = [*self._retired, *([self._running] if self._running else [])]
            self._retired.clear()
            self._running = None
        for built in every:
            built.close()


def create_server_app(
    cfg: Settings,
    *,
    public_metrics: bool = False,
    settings_file: str | os.PathLike[str] | None = None,
    reload_grace_s: float = RELOAD_GRACE_S,
) -> FastAPI:
    """The API app for these settings; stores are opened at startup, closed at shutdown. Writes
    are checked with the time window ingestion uses (``MEMFLOW_HISTORY_START``, ...).
    `app.state.reload()` applies `settings_file`'s embedding settings (`ServiceSwitch`)."""
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
    switch = ServiceSwitch(cfg, settings_file, grace_s=reload_grace_s)
    app = create_app(
        keys=keys,
        service_factory=switch.start,
        landing_dir=str(cfg.landing_dir),
        public_metrics=public_metrics,
        on_close=switch.close,
        window=window,
    )
    switch.api = app.state.api
    app.state.reload = switch.reload
    return app


def serve(
    cfg: Settings,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    *,
    public_metrics: bool = False,
    log_level: str = "info",
    settings_file: str | os.PathLike[str] | None = None,
) -> None:
    """Run the API on these settings until interrupted; SIGHUP re-reads `settings_file`'s
    embedding settings."""
    import uvicorn

    logging.basicConfig(level=log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    app = create_server_app(cfg, public_metrics=public_metrics, settings_file=settings_file)
    log.info("keys file: %s", cfg.keys_file)
    if settings_file and hasattr(signal, "SIGHUP"):
        # uvicorn handles SIGINT and SIGTERM only; a reload builds models and opens stores,
        # so it runs beside the server, not in the signal handler.
        def on_hup(*_: object) -> None:
            threading.Thread(target=app.state.reload, name="memflow-reload", daemon=True).start()

        signal.signal(signal.SIGHUP, on_hup)
        log.info("SIGHUP re-reads the embedding settings of %s", settings_file)
    uvicorn.run(app, host=host, port=port, log_level=log_level, access_log=False)
