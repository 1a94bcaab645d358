"""`memflow serve`: the recall API over the stores the pipeline writes, with uvicorn.

The service only reads the stores, so it runs beside a Dagster run: the SQLite graph is in WAL
mode (readers keep their snapshot while a run commits) and the embedded vector store's files
are replaced whole by each write, which the next search sees (`resources.vector.local`).
Writes (``POST /v1/turns``, ``/v1/triples``) go to the landing zone the pipeline's sensor
watches, never to the stores.

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
import re
import select
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

from fastapi import FastAPI

from recall.api import Api, create_app
from recall.auth import KeyRing
from recall.build import QUERY_THREADS, Built, build_service, embedder  # noqa: F401
from recall.ports import IngestTrigger, TenantEraser
from recall.requests import SystemHealth
from recall.service import RecallService
from resources import home
from resources.settings import EMBEDDING_SETTINGS, Settings, read_settings_file
from schemas.redaction.logs import install_log_redaction
from schemas.rules import TimeWindow

log = logging.getLogger("recall.server")

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8080


# What SIGHUP re-reads: the embedding model's settings and the previous model.
RELOADED_SETTINGS = (
    *dict.fromkeys(EMBEDDING_SETTINGS.values()),
    "MEMFLOW_PREVIOUS_EMBEDDING_MODEL",
)
# A replaced service stays open at least this long, and then until the last request that holds
# it is done (`Api.hold`), at most `RELOAD_MAX_HOLD_S` (the client's default timeout is 5 s).
RELOAD_GRACE_S = 30.0
RELOAD_MAX_HOLD_S = 600.0
MAX_SETTINGS_FILE_BYTES = 1024 * 1024
_URL_SECRETS = re.compile(
    r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)[^/\s'\"@]*@|\?[^\s'\"#]*=[^\s'\"#]*"
)


def scrubbed(message: str) -> str:
    """An error message as a log may show it: URLs lose their user info and query strings."""
    return _URL_SECRETS.sub(lambda m: m.group("scheme") or "?...", message)


class ServiceSwitch:
    """The server's service, rebuilt from the settings file on request (SIGHUP).

    `reload` reads the embedding settings the file names (they win over the settings the server
    started with, as in the code location, `resources.configurable`), and when they differ from
    the running ones builds a whole new service (stores, models, warm-up) beside the running
    one, then switches to it; the old one is closed once `grace_s` has passed and no request
    holds it. A service that fails to build, or whose embedding model does not answer the
    warm-up, leaves the running one in place. Reloads run one at a time; a build never holds up
    requests, startup or shutdown (a service built after shutdown is closed at once)."""

    def __init__(
        self,
        cfg: Settings,
        settings_file: str | os.PathLike[str] | None = None,
        *,
        grace_s: float = RELOAD_GRACE_S,
        max_hold_s: float = RELOAD_MAX_HOLD_S,
        warm_up: bool = True,
    ) -> None:
        self.cfg = cfg
        self.settings_file = Path(settings_file) if settings_file else None
        self.grace_s = grace_s
        self.max_hold_s = max_hold_s
        self.warm_up = warm_up
        self.api: Api | None = None  # bound by create_server_app
        self._lock = threading.Lock()  # the state below; never held while building
        self._building = threading.Lock()  # one start or reload at a time
        self._running: Built | None = None
        self._retired: list[Built] = []
        self._closed = False

    def start(self) -> RecallService:
        with self._building:
            built = build_service(self.cfg, warm_up=self.warm_up)
            with self._lock:
                closed = self._closed
                if not closed:
                    self._running = built
            if closed:
                built.close()
                raise RuntimeError("the server shut down while its service was being built")
            return built.service

    def settings_now(self) -> Settings:
        if self.settings_file is None:
            return self.cfg
        if self.settings_file.is_file() and (
            self.settings_file.stat().st_size > MAX_SETTINGS_FILE_BYTES
        ):
            raise ValueError(f"larger than {MAX_SETTINGS_FILE_BYTES} bytes")
        found = read_settings_file(self.settings_file)
        return self.cfg.with_values(**{k: found[k] for k in RELOADED_SETTINGS if k in found})

    def reload(self) -> str:
        """Apply the settings file's embedding settings; says what happened (and logs it)."""
        with self._building:
            with self._lock:
                running = not self._closed and self._running is not None and self.api is not None
                current = self.cfg
            if not running:
                log.warning("reload: the service is not running (starting or stopped): ignored")
                return "not running"
            try:
                cfg = self.settings_now()
            except (OSError, ValueError) as exc:
                log.error(
                    "reload: the settings file %s cannot be read: %s: %s",
                    self.settings_file,
                    type(exc).__name__,
                    scrubbed(str(exc)),
                )
                return "failed"
            if all(cfg.get(k) == current.get(k) for k in RELOADED_SETTINGS):
                where = self.settings_file if self.settings_file else "no settings file"
                log.info("reload: the embedding settings are unchanged (%s)", where)
                return "unchanged"
            try:
                fresh = build_service(cfg, warm_up=self.warm_up, require_model=self.warm_up)
            except Exception as exc:  # the running service stays; the log says why
                log.error(
                    "reload failed, still serving %s: %s: %s",
                    self.model,
                    type(exc).__name__,
                    scrubbed(str(exc)),
                )
                return "failed"
            with self._lock:
                closed = self._closed
                if not closed:
                    assert self.api is not None and self._running is not None
                    old, self._running, self.cfg = self._running, fresh, cfg
                    self.api.switch_service(fresh.service)
                    self._retired.append(old)
            if closed:  # shut down while building
                fresh.close()
                return "not running"
            timer = threading.Timer(self.grace_s, self._retire, args=(old,))
            timer.daemon = True
            timer.start()
            log.info("reloaded: embedding model %s", self.model)
            return "reloaded"

    @property
    def model(self) -> str | None:
        running = self._running
        return running.service.current_model if running is not None else None

    def _retire(self, built: Built) -> None:
        """Close a replaced service once no request holds it (at most `max_hold_s` more)."""
        deadline = time.monotonic() + self.max_hold_s
        while self.api is not None and self.api.in_use(built.service):
            with self._lock:
                if built not in self._retired:
                    return  # closed at shutdown already
            if time.monotonic() >= deadline:
                log.warning("closing a replaced service that requests still hold")
                break
            time.sleep(0.1)
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


class ReloadSignal:
    """Runs `reload` in its own thread when a signal arrives. The handler only writes a byte to
    a pipe: a handler runs in the main thread, between any two bytecodes, so one that took a
    lock (starting a thread does) could wait forever on a lock the interrupted code holds.
    Signals that arrive while a reload runs make one more reload, not one each."""

    def __init__(self, reload: Callable[[], object]) -> None:
        self._reload = reload
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        os.set_blocking(self._write, False)
        threading.Thread(target=self._run, name="memflow-reload", daemon=True).start()

    def handler(self, *_: object) -> None:
        with contextlib.suppress(OSError):  # the pipe is full: a reload is due anyway
            os.write(self._write, b"\0")

    def _run(self) -> None:
        while True:
            select.select([self._read], [], [])
            try:  # every signal so far: one reload
                while os.read(self._read, 65536):
                    pass
                return  # end of file: the write end is gone
            except BlockingIOError:
                pass
            try:
                self._reload()
            except Exception as exc:  # the next signal must still be served
                log.error("reload failed: %s", type(exc).__name__)


def create_server_app(
    cfg: Settings,
    *,
    public_metrics: bool = False,
    settings_file: str | os.PathLike[str] | None = None,
    reload_grace_s: float = RELOAD_GRACE_S,
    ingest_trigger: IngestTrigger | None = None,
    system_health: Callable[[], SystemHealth] | None = None,
    eraser: TenantEraser | None = None,
) -> FastAPI:
    """The API app for these settings; stores are opened at startup, closed at shutdown. Writes
    are checked with the time window ingestion uses (``MEMFLOW_HISTORY_START``, ...).
    `app.state.reload()` applies `settings_file`'s embedding settings (`ServiceSwitch`).
    `ingest_trigger` is asked for the tenant's run after every write (closed at shutdown when it
    has a `close`); `system_health` feeds `/healthz`'s `system`; `eraser` erases a tenant
    (`DELETE /v1/memory`; without one that answers 501)."""
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

    def close() -> None:
        switch.close()
        closing = getattr(ingest_trigger, "close", None)
        if closing is not None:
            closing()

    app = create_app(
        keys=keys,
        service_factory=switch.start,
        landing_dir=str(cfg.landing_dir),
        public_metrics=public_metrics,
        on_close=close,
        window=window,
        ingest_trigger=ingest_trigger,
        system_health=system_health,
        eraser=eraser,
    )
    switch.api = app.state.api
    app.state.reload = switch.reload
    return app


def system_health_of(cfg: Settings) -> Callable[[], SystemHealth]:
    """`/healthz`'s view of the state home: how many memflow processes run, and which of them
    work on another data directory or landing zone than this server."""

    def health() -> SystemHealth:
        found = home.running(cfg.home)
        lines = home.conflicts(found, str(cfg.data_dir), str(cfg.landing_dir), paths=False)
        return SystemHealth(processes=len(found), conflicts=lines)

    return health


def serve(
    cfg: Settings,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    *,
    public_metrics: bool = False,
    log_level: str = "info",
    settings_file: str | os.PathLike[str] | None = None,
    ingest_trigger: IngestTrigger | None = None,
    eraser: TenantEraser | None = None,
    role: str = "serve",
) -> None:
    """Run the API on these settings until interrupted; SIGHUP re-reads `settings_file`'s
    embedding settings. The process registers in the state home (`resources.home`) while it
    runs, as `role`."""
    import uvicorn

    logging.basicConfig(level=log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    install_log_redaction()
    app = create_server_app(
        cfg,
        public_metrics=public_metrics,
        settings_file=settings_file,
        ingest_trigger=ingest_trigger,
        system_health=system_health_of(cfg),
        eraser=eraser,
    )
    log.info("keys file: %s", cfg.keys_file)
    if hasattr(signal, "SIGHUP") and threading.current_thread() is threading.main_thread():
        # uvicorn handles SIGINT and SIGTERM only. Installed without a settings file too:
        # SIGHUP's default action would kill the server without a shutdown.
        signal.signal(signal.SIGHUP, ReloadSignal(app.state.reload).handler)
        if settings_file:
            log.info("SIGHUP re-reads the embedding settings of %s", settings_file)
    entry = home.register(
        cfg.home,
        role,
        cfg.data_dir,
        cfg.landing_dir,
        api_url=f"http://{home.url_host(host)}:{port}",
    )
    try:
        uvicorn.run(app, host=host, port=port, log_level=log_level, access_log=False)
    finally:
        home.unregister(cfg.home, entry)
