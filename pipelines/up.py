"""`memflow up` and `memflow dev`: the whole system on one data directory and landing zone.

`memflow up` starts, each in a process group of its own and with the settings resolved once
(absolute paths, exported to every child):

- the recall API (`memflow serve`, with its warm ingest worker: a write is ingested at once);
- `dagster-daemon run` (the landing sensor, the run queue with one run per tenant block, run
  monitoring) and `dagster-webserver` (the UI), on the instance `<data>/dagster`.

It records the paths and URLs in the state home (`resources.home`), so `memflow import`, the
hooks and the MCP server started anywhere use the same ones, registers itself, prints where
everything is and how many text turns wait for an extractor, then reports each ingest run as it
ends. Ctrl-C or SIGTERM stops everything it started: the API first (no new writes), then the
daemon and the UI; a process that does not stop within `STOP_TIMEOUT_S` is killed, with every
process it started (psutil), so nothing is left behind. A child that exits by itself stops the
rest, and `memflow up` exits non-zero with the tail of that child's log.

`memflow dev` runs `dagster dev` (UI and daemon in one command) the same way, without the API
and without recording the paths (it may run on another data directory, e.g. `make dev` on
the sample's). The Dagster processes start in `<home>/run`, a directory with no `.env` of its
own: Dagster's CLI loads a `.env` of its working directory over the environment.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from pipelines.shown import shown
from resources import home as state
from resources.settings import Settings

STOP_TIMEOUT_S = 20.0
READY_TIMEOUT_S = 600.0  # the first start imports the whole pipeline; a busy machine is slow
POLL_S = 1.0
LOG_TAIL_BYTES = 4000
BIN = Path(sys.executable).parent


@dataclass(frozen=True)
class UpOptions:
    host: str = "127.0.0.1"
    api_port: int = 8080
    ui_port: int = 3000
    public_metrics: bool = False
    settings_file: str = ""  # MEMFLOW_SETTINGS_FILE for the code location ("" = none)
    ingest: str = "warm"  # what a write does (memflow serve --ingest)


@dataclass
class Child:
    """A process `memflow up` started, in its own process group, logging to `log`."""

    name: str
    process: subprocess.Popen[bytes]
    log: Path
    known: set[int] = field(default_factory=set)  # pids of its descendants seen so far

    def remember_descendants(self) -> None:
        import psutil

        with contextlib.suppress(psutil.Error):
            for p in psutil.Process(self.process.pid).children(recursive=True):
                self.known.add(p.pid)

    def tail(self) -> str:
        try:
            with open(self.log, "rb") as fh:
                fh.seek(0, os.SEEK_END)
                fh.seek(max(0, fh.tell() - LOG_TAIL_BYTES))
                return fh.read().decode("utf-8", "replace")
        except OSError:
            return ""


def start_child(
    name: str, argv: Sequence[str], env: dict[str, str], cwd: Path, logs: Path
) -> Child:
    logs.mkdir(parents=True, exist_ok=True)
    log = logs / f"{name}.log"
    with open(log, "ab") as fh:
        fh.write(f"\n--- {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(argv)}\n".encode())
        process = subprocess.Popen(
            list(argv),
            env=env,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: stopped as a whole
            preexec_fn=_death_signal(),
        )
    return Child(name, process, log)


def _death_signal() -> Callable[[], None] | None:
    """What the child runs before it starts: SIGTERM to it when `memflow up` dies, even by
    SIGKILL (Linux's PR_SET_PDEATHSIG; the Dagster processes' own children follow their parents
    through Dagster's heartbeats, the warm worker through its pipe). None elsewhere. libc is
    found here, in the parent: nothing but the system call runs between fork and exec."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c") if sys.platform.startswith("linux") else None
    if not name:
        return None
    prctl = ctypes.CDLL(name, use_errno=True).prctl
    term = int(signal.SIGTERM)

    def set_death_signal() -> None:
        prctl(1, term, 0, 0, 0)  # 1 = PR_SET_PDEATHSIG

    return set_death_signal


def stop_child(child: Child, timeout_s: float = STOP_TIMEOUT_S) -> None:
    """SIGTERM to the child's process group, SIGKILL after `timeout_s`, then every
    descendant still alive (one that left the group included)."""
    import psutil

    child.remember_descendants()
    if child.process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.process.pid, signal.SIGTERM)
        try:
            child.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.process.pid, signal.SIGKILL)
            child.process.wait(10)
    with contextlib.suppress(ProcessLookupError):  # the group's stragglers
        os.killpg(child.process.pid, signal.SIGKILL)
    left = []
    for pid in child.known:
        with contextlib.suppress(psutil.Error):
            p = psutil.Process(pid)
            p.terminate()
            left.append(p)
    _, alive = psutil.wait_procs(left, timeout=5)
    for p in alive:
        with contextlib.suppress(psutil.Error):
            p.kill()


def _stop_timeout(child: Child) -> float:
    """The API stops after its warm worker's run under way (`WarmIngestWorker.close`)."""
    if child.name == "api":
        from pipelines.trigger import STOP_TIMEOUT_S as WORKER_STOP_S

        return WORKER_STOP_S + STOP_TIMEOUT_S
    return STOP_TIMEOUT_S


def stop_all(children: list[Child]) -> None:
    """Stop every child at once (each in a thread); the API gets its signal first, so no
    write is accepted while the rest stops."""
    for child in children:
        child.remember_descendants()
    threads = [threading.Thread(target=stop_child, args=(c, _stop_timeout(c))) for c in children]
    for thread in threads:
        thread.start()
        time.sleep(0.05)
    for thread in threads:
        thread.join()


def port_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def workspace_file(home: Path) -> Path:
    """The workspace the Dagster processes load: the code location `pipelines.definitions`
    (its location name is the module's, as `workspace.yaml` gives it)."""
    import pipelines

    root = Path(pipelines.__file__).resolve().parents[1]
    path = home / "run" / "workspace.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "# Written by memflow up / memflow dev (pipelines/up.py).\n"
        "load_from:\n"
        "  - python_module:\n"
        "      module_name: pipelines.definitions\n"
        f"      working_directory: {root}\n"
    )
    return path


def child_environment(cfg: Settings, settings_file: str) -> dict[str, str]:
    from pipelines.instance import ensure_instance_config

    env = dict(os.environ)
    env.update(cfg.environ())
    env[state.HOME_SETTING] = str(cfg.home)
    dagster_home = os.environ.get("DAGSTER_HOME") or str(Path(cfg.data_dir, "dagster"))
    ensure_instance_config(Path(dagster_home))
    _create_storage(dagster_home)
    env["DAGSTER_HOME"] = dagster_home
    env["MEMFLOW_SETTINGS_FILE"] = settings_file
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TRANSFORMERS_OFFLINE", "1")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    return env


def _create_storage(dagster_home: str) -> None:
    """Create the instance's databases here, before the children start: Dagster's SQLite
    storage is not safe to create from several processes at once (two of them stamp the
    schema twice: "more than one head")."""
    from dagster import DagsterInstance

    os.environ["DAGSTER_HOME"] = dagster_home
    with DagsterInstance.get() as instance:
        instance.get_runs(limit=1)
        instance.get_daemon_heartbeats()


class Stop:
    """SIGINT / SIGTERM set it (the handler only sets a flag)."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.signal: int | None = None

    def __call__(self, signum: int, _frame: Any) -> None:
        self.signal = signum
        self.event.set()

    def install(self) -> None:
        signal.signal(signal.SIGINT, self)
        signal.signal(signal.SIGTERM, self)


def _url_ok(url: str) -> bool:
    """Whether the server answers at all (a 503 of `/healthz` is an API that is up)."""
    import httpx

    try:
        httpx.get(url, timeout=2.0)
    except httpx.HTTPError:
        return False
    return True


def wait_ready(
    checks: dict[str, Callable[[], bool]],
    children: list[Child],
    stop: Stop,
    say: Callable[[str], None],
    timeout_s: float = READY_TIMEOUT_S,
) -> Child | None:
    """Wait until every check passes; the child that exited meanwhile, if one did."""
    pending = dict(checks)
    started = time.monotonic()
    reported = started
    while pending and not stop.event.is_set():
        for child in children:
            if child.process.poll() is not None:
                return child
        for name in list(pending):
            if pending[name]():
                del pending[name]
        if time.monotonic() - started > timeout_s:
            raise TimeoutError(f"not ready after {timeout_s:.0f} s: {', '.join(pending)}")
        if pending and time.monotonic() - reported > 15:
            say(f"  still starting: {', '.join(pending)} ({time.monotonic() - started:.0f} s)")
            reported = time.monotonic()
        stop.event.wait(POLL_S)
    return None


def _daemon_ready(dagster_home: str) -> Callable[[], bool]:
    def check() -> bool:
        from dagster import DagsterInstance

        os.environ["DAGSTER_HOME"] = dagster_home
        with DagsterInstance.get() as instance:
            beats = instance.get_daemon_heartbeats()
        return "SENSOR" in beats and "QUEUED_RUN_COORDINATOR" in beats

    return check


def _refuse(problem: str, out: IO[str]) -> int:
    print(f"memflow: {shown(problem)}", file=out)
    return 2


def up(cfg: Settings, options: UpOptions, out: IO[str] | None = None) -> int:
    """Bring the system up and keep it up until a signal; the exit status."""
    out = out or sys.stdout
    err = sys.stderr

    def say(line: str) -> None:
        print(line, file=out, flush=True)

    refusal = _refusal(cfg, options)
    if refusal is not None:
        return _refuse(refusal, err)
    home = cfg.home
    env = child_environment(cfg, options.settings_file)
    workspace = workspace_file(home)
    cwd, logs = workspace.parent, home / "logs"
    api_url = f"http://{state.url_host(options.host)}:{options.api_port}"
    ui_url = f"http://{state.url_host(options.host)}:{options.ui_port}"
    env["MEMFLOW_API_URL"] = api_url
    stop = Stop()
    stop.install()
    children: list[Child] = []
    entry = None
    status = 0
    try:
        children.append(start_child("api", _serve_argv(options), env, cwd, logs))
        children.append(
            start_child("daemon", [str(BIN / "dagster-daemon"), "run", "-w", str(workspace)],
                        env, cwd, logs)
        )  # fmt: skip
        children.append(
            start_child(
                "ui",
                [str(BIN / "dagster-webserver"), "-w", str(workspace), "-h", options.host,
                 "-p", str(options.ui_port)],
                env, cwd, logs,
            )
        )  # fmt: skip
        entry = _register(cfg, api_url, ui_url)
        _announce(say, cfg, api_url, ui_url, logs)
        exited = wait_ready(
            {
                "API": lambda: _url_ok(f"{api_url}/healthz"),
                "UI": lambda: _url_ok(f"{ui_url}/server_info"),
                "daemon": _daemon_ready(env["DAGSTER_HOME"]),
            },
            children,
            stop,
            say,
        )
        if exited is None and not stop.event.is_set():
            say("ready; Ctrl-C stops everything")
            exited = watch(children, stop, say, env["DAGSTER_HOME"])
        if exited is not None:
            print(
                f"memflow up: the {exited.name} process exited ({exited.process.returncode}); "
                f"stopping the rest. The end of {shown(exited.log)}:\n{exited.tail()}",
                file=err,
            )
            status = 1
    except TimeoutError as exc:
        print(f"memflow up: {exc}; stopping", file=err)
        status = 1
    finally:
        stop_all(children)
        if entry is not None:
            state.unregister(home, entry)
        say("memflow up: stopped")
    return status


def _refusal(cfg: Settings, options: UpOptions) -> str | None:
    """Why memflow up must not start here, or None."""
    from pipelines.settings import repository_of

    repo = repository_of(cfg.landing_dir)
    if repo is not None:
        return (
            f"the landing zone {cfg.landing_dir} holds files tracked by the git work tree "
            f"{repo}: agents' turns would land where they can be committed; name a landing zone "
            "outside it (the default is the state home's)"
        )
    for entry in state.running(cfg.home):
        if entry.role == "up":
            return (
                f"memflow up is already running ({entry.describe()}, API {entry.api_url}, UI "
                f"{entry.ui_url}); `memflow status` lists what runs"
            )
    if options.api_port == options.ui_port:
        return f"the API and the UI cannot share port {options.api_port} (--port / --ui-port)"
    for what, port in (("API", options.api_port), ("UI", options.ui_port)):
        if not port_free(options.host, port):
            return (
                f"the {what} port {options.host}:{port} is in use (--port / --ui-port choose "
                "others; `memflow status` lists memflow's processes)"
            )
    return None


def _serve_argv(options: UpOptions) -> list[str]:
    """The recall API's command line (`memflow serve`)."""
    serve = [sys.executable, "-m", "pipelines.cli", "serve", "--host", options.host]
    serve += ["--port", str(options.api_port), "--ingest", options.ingest]
    if options.ingest != "off":
        serve.append("--warm-now")
    if options.public_metrics:
        serve.append("--public-metrics")
    return serve


def _register(cfg: Settings, api_url: str, ui_url: str) -> state.Registration:
    """Write the state home's record of this memflow up (what `memflow status` and the
    agents' clients read) and register it among the running processes."""
    state.write_record(
        cfg.home,
        state.Record(
            data_dir=str(cfg.data_dir),
            landing_dir=str(cfg.landing_dir),
            api_url=api_url,
            ui_url=ui_url,
            written_by="memflow up",
            written_at=time.time(),
        ),
    )
    return state.register(
        cfg.home, "up", cfg.data_dir, cfg.landing_dir, api_url=api_url, ui_url=ui_url
    )


def _announce(
    say: Callable[[str], None], cfg: Settings, api_url: str, ui_url: str, logs: Path
) -> None:
    """What runs where, the extraction model, and any other memflow sharing these folders."""
    home = cfg.home
    say(f"memflow up (state home {shown(home)})")
    say(f"  landing zone  {shown(cfg.landing_dir)}")
    say(f"  data          {shown(cfg.data_dir)}")
    say(f"  API           {api_url}   (keys: {shown(cfg.keys_file)})")
    say(f"  Dagster UI    {ui_url}")
    say(f"  logs          {shown(logs)}")
    for line in extraction_lines(cfg):
        say(f"  {line}")
    for line in state.conflicts(state.running(home), str(cfg.data_dir), str(cfg.landing_dir)):
        say(f"  WARNING: {shown(line)}")


def watch(
    children: list[Child], stop: Stop, say: Callable[[str], None], dagster_home: str
) -> Child | None:
    """Until a signal: report each run as it ends; the child that exited, if one did."""
    from dagster import DagsterInstance, DagsterRunStatus, RunsFilter

    os.environ["DAGSTER_HOME"] = dagster_home
    done = [DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED]
    since = time.time()
    seen: set[str] = set()
    with DagsterInstance.get() as instance:
        while not stop.event.is_set():
            for child in children:
                if child.process.poll() is not None:
                    return child
                child.remember_descendants()
            for record in instance.get_run_records(
                RunsFilter(statuses=done, updated_after=_utc(since - 5)), limit=50
            ):
                run = record.dagster_run
                if run.run_id in seen or not record.end_time or record.end_time < since:
                    continue
                seen.add(run.run_id)
                say(f"  {run_line(record)}")
            stop.event.wait(2.0)
    return None


def run_line(record: Any) -> str:
    """One ended run as `memflow up` prints it: job, tenants, block, source, status, time."""
    from pipelines.batches import BLOCK_TAG, RANGE_END_TAG, RANGE_START_TAG, SOURCE_TAG

    run = record.dagster_run
    first = run.tags.get(RANGE_START_TAG) or run.tags.get("dagster/partition")
    last = run.tags.get(RANGE_END_TAG) or first
    tenants = "" if first is None else f" [{first}]" if first == last else f" [{first} .. {last}]"
    block = f" block {run.tags[BLOCK_TAG]}" if BLOCK_TAG in run.tags else ""
    source = run.tags.get(SOURCE_TAG) or ("ui" if "dagster/from_ui" in run.tags else "dagster")
    seconds = ""
    if record.end_time and record.create_timestamp:
        seconds = f" in {record.end_time - record.create_timestamp.timestamp():.1f} s"
    return shown(
        f"run {run.run_id[:8]} {run.job_name}{tenants}{block} ({source}): "
        f"{run.status.value.lower()}{seconds}"
    )


def _utc(ts: float) -> Any:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(ts, UTC)


def extraction_lines(cfg: Settings) -> list[str]:
    """What `memflow up` and `memflow status` say about extraction: the extractor, and how
    many text turns wait for one (with how to point one at a local server)."""
    from pipelines.status import awaiting_extraction

    waiting = awaiting_extraction(cfg)
    extractor = cfg["MEMFLOW_EXTRACTOR"].strip().lower() or "none"
    if extractor != "none":
        model = cfg["MEMFLOW_EXTRACTION_MODEL"] or cfg["MEMFLOW_EXTRACTION_COMMAND"]
        return [f"extraction    {extractor} ({shown(model)}); {waiting} text turns wait"]
    lines = [f"extraction    none: {waiting} text turns wait for an extractor"]
    lines.append(
        "                set MEMFLOW_EXTRACTOR=openai, MEMFLOW_EXTRACTION_URL=<a local "
        "OpenAI-compatible server, e.g. http://127.0.0.1:11434/v1 for Ollama> and "
        "MEMFLOW_EXTRACTION_MODEL (docs/agents.md, Extraction)"
    )
    return lines


def dev(cfg: Settings, options: UpOptions, *, settings_file: str = "") -> int:
    """`dagster dev` on the resolved paths until a signal; the exit status."""
    err = sys.stderr
    for what, port in (("UI", options.ui_port),):
        if not port_free(options.host, port):
            return _refuse(f"the {what} port {options.host}:{port} is in use (--ui-port)", err)
    home = cfg.home
    env = child_environment(cfg, settings_file)
    workspace = workspace_file(home)
    ui_url = f"http://{state.url_host(options.host)}:{options.ui_port}"
    argv = [str(BIN / "dagster"), "dev", "-w", str(workspace), "-h", options.host]
    argv += ["-p", str(options.ui_port)]
    stop = Stop()
    stop.install()
    entry = state.register(home, "dev", cfg.data_dir, cfg.landing_dir, ui_url=ui_url)
    print(f"memflow dev: landing zone {shown(cfg.landing_dir)}, data {shown(cfg.data_dir)}")
    print(f"  Dagster UI {ui_url} (logs: {shown(home / 'logs' / 'dev.log')}); Ctrl-C stops it")
    if settings_file:
        print(f"  model settings re-read at every run from {shown(settings_file)}")
    for line in state.conflicts(state.running(home), str(cfg.data_dir), str(cfg.landing_dir)):
        print(f"  WARNING: {shown(line)}")
    child = start_child("dev", argv, env, workspace.parent, home / "logs")
    status = 0
    try:
        while not stop.event.is_set():
            if child.process.poll() is not None:
                print(f"memflow dev: dagster dev exited:\n{child.tail()}", file=err)
                status = 1
                break
            child.remember_descendants()
            stop.event.wait(POLL_S)
    finally:
        stop_child(child)
        state.unregister(home, entry)
    return status
