"""The state home: one directory per user where memflow records which data directory and landing
zone every command uses, and where each running memflow process registers its paths.

    <home>/memflow.json           the recorded paths (data, landing, API and UI URLs), written by
                                  `memflow up` and `memflow dev`; read by every command as the
                                  fallback below flags, environment and `.env`
    <home>/processes/<pid>.json   one file per running `memflow up` / `serve` / `dev` / `mcp`
    <home>/data, <home>/landing   the default data directory and landing zone

The home is `MEMFLOW_HOME`, else `$XDG_STATE_HOME/memflow` (an absolute `XDG_STATE_HOME` only,
as the XDG spec says), else `~/.local/state/memflow`. A registration names its process by pid
and start time (`psutil`), so a file left by a process that was killed, or a pid reused by
another program, is never taken for a running memflow; such files are removed when read.

Two running processes on different data directories or landing zones (an API that lands where
no sensor looks, two pipelines writing different data directories) are what `conflicts` finds:
`memflow status` and `/healthz` report them. Standard library only at import (hooks read the
record on their fast path); liveness is `resources.fs`'s (psutil), loaded when registrations
are read or written.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterable, Mapping, MutableMapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from resources.settings import (
    API_URL_SETTING,
    DATA_SETTING,
    HOME_SETTING,
    LANDING_SETTING,
    env_path,
)

RECORD_FILE = "memflow.json"
PROCESSES_DIR = "processes"
DATA_NAME = "data"
LANDING_NAME = "landing"
MAX_RECORD_BYTES = 64 * 1024
_CREATE_SLACK_S = 1.0  # psutil's start times of one process agree to well under this


def state_home(env: Mapping[str, str] | None = None) -> Path:
    """The state home, absolute (not created here)."""
    env = os.environ if env is None else env
    explicit = env_path(HOME_SETTING, env)
    if explicit:
        return Path(explicit).expanduser().resolve()
    xdg = (env.get("XDG_STATE_HOME") or "").strip()
    if xdg and os.path.isabs(xdg):
        return Path(xdg, "memflow").resolve()
    return (Path.home() / ".local" / "state" / "memflow").resolve()


def default_path(home: Path, setting: str) -> Path:
    """Where `setting` (the data directory or the landing zone) lives when nothing names it."""
    return home / {DATA_SETTING: DATA_NAME, LANDING_SETTING: LANDING_NAME}[setting]


# ------------------------------------------------------------------------------ the record


@dataclass(frozen=True)
class Record:
    """What the state home records: absolute paths, and where the running system answers."""

    data_dir: str
    landing_dir: str
    api_url: str | None = None
    ui_url: str | None = None
    written_by: str = ""
    written_at: float = 0.0

    def path_of(self, setting: str) -> str:
        return {DATA_SETTING: self.data_dir, LANDING_SETTING: self.landing_dir}[setting]


class RecordError(ValueError):
    """The record exists but cannot be read (not JSON, not an object, relative paths...)."""


def read_record(home: Path) -> Record | None:
    """The recorded paths, None when nothing was recorded; `RecordError` when the file is
    damaged (a command must not silently fall back to other paths)."""
    path = home / RECORD_FILE
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_RECORD_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise RecordError(f"{path}: {exc.strerror or exc}") from None
    if len(raw) > MAX_RECORD_BYTES:
        raise RecordError(f"{path}: larger than {MAX_RECORD_BYTES} bytes")
    try:
        found = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise RecordError(f"{path}: not JSON") from None
    if not isinstance(found, dict):
        raise RecordError(f"{path}: not a JSON object")
    values: dict[str, Any] = {}
    for key in ("data_dir", "landing_dir"):
        value = found.get(key)
        if not isinstance(value, str) or not os.path.isabs(value) or "\x00" in value:
            raise RecordError(f"{path}: {key} is not an absolute path")
        values[key] = value
    for key in ("api_url", "ui_url", "written_by"):
        value = found.get(key)
        values[key] = value if isinstance(value, str) else None
    values["written_by"] = values["written_by"] or ""
    at = found.get("written_at")
    values["written_at"] = float(at) if isinstance(at, int | float) else 0.0
    return Record(**values)


def write_record(home: Path, record: Record) -> Path:
    """Record the paths (atomically: a reader sees the old record or the new one)."""
    home.mkdir(parents=True, exist_ok=True)
    return _write_json(home / RECORD_FILE, asdict(record))


def _write_json(target: Path, value: Mapping[str, Any]) -> Path:
    from resources.fs import atomic_write_text

    return atomic_write_text(target, json.dumps(value, indent=2, sort_keys=True) + "\n")


# ------------------------------------------------------------------------------ processes


@dataclass(frozen=True)
class Registration:
    """A running memflow process and the paths it works on."""

    pid: int
    create_time: float
    role: str  # up | serve | dev | mcp
    data_dir: str
    landing_dir: str
    api_url: str | None = None
    ui_url: str | None = None
    started_at: float = field(default_factory=time.time)

    def describe(self) -> str:
        return f"memflow {self.role} (pid {self.pid})"


def _processes(home: Path) -> Path:
    return home / PROCESSES_DIR


def register(
    home: Path,
    role: str,
    data_dir: str | os.PathLike[str],
    landing_dir: str | os.PathLike[str],
    *,
    api_url: str | None = None,
    ui_url: str | None = None,
    pid: int | None = None,
) -> Registration:
    """Register a running process (this one by default) in the state home."""
    from resources.fs import process_started_at

    pid = os.getpid() if pid is None else pid
    started = process_started_at(pid)
    if started is None:
        raise ProcessLookupError(f"no running process {pid} to register")
    entry = Registration(
        pid=pid,
        create_time=started,
        role=role,
        data_dir=str(data_dir),
        landing_dir=str(landing_dir),
        api_url=api_url,
        ui_url=ui_url,
    )
    folder = _processes(home)
    folder.mkdir(parents=True, exist_ok=True)
    _write_json(folder / f"{pid}-{role}.json", asdict(entry))
    return entry


def unregister(home: Path, entry: Registration) -> None:
    with contextlib.suppress(FileNotFoundError):
        (_processes(home) / f"{entry.pid}-{entry.role}.json").unlink()


def _alive(entry: Registration) -> bool:
    from resources.fs import process_alive

    return process_alive(entry.pid, entry.create_time, _CREATE_SLACK_S)


def running(home: Path) -> list[Registration]:
    """The registered processes that still run, oldest first; files of processes that ended
    (or that cannot be read) are removed."""
    folder = _processes(home)
    if not folder.is_dir():
        return []
    out: list[Registration] = []
    for path in sorted(folder.glob("*.json")):
        try:
            found = json.loads(path.read_text(encoding="utf-8"))
            entry = Registration(**found)
        except (OSError, ValueError, TypeError):
            entry = None
        if entry is None or not _alive(entry):
            with contextlib.suppress(OSError):
                path.unlink()
            continue
        out.append(entry)
    return sorted(out, key=lambda e: (e.started_at, e.pid))


def conflicts(
    entries: Iterable[Registration],
    data_dir: str | None = None,
    landing_dir: str | None = None,
    *,
    paths: bool = True,
) -> list[str]:
    """Lines naming every running process whose data directory or landing zone differs from
    `data_dir` / `landing_dir` (default: the first process's), one line per difference;
    `paths=False` leaves the paths out (for `/healthz`, which answers without a key)."""
    entries = list(entries)
    if not entries:
        return []
    data_dir = data_dir or entries[0].data_dir
    landing_dir = landing_dir or entries[0].landing_dir
    out = []
    for e in entries:
        if e.data_dir != data_dir:
            shown = f": {e.data_dir}" if paths else ""
            out.append(f"{e.describe()} uses another data directory{shown}")
        if e.landing_dir != landing_dir:
            shown = f": {e.landing_dir}" if paths else ""
            out.append(f"{e.describe()} uses another landing zone{shown}")
    return out


def resolved_dir(setting: str, value: str | None, env: Mapping[str, str] | None = None) -> str:
    """The absolute path a data directory or landing zone setting means: its value made
    absolute, or (empty) what the state home records, else the home's default. What a
    process that was not started by a memflow command (a bare `dagster dev`) uses, so nothing
    ever lands in a directory relative to wherever it happened to start."""
    text = (value or "").strip()
    if text:
        return str(Path(text).expanduser().resolve())
    home = state_home(env)
    record = read_record(home)
    return record.path_of(setting) if record is not None else str(default_path(home, setting))


def export_home(env: MutableMapping[str, str]) -> Record | None:
    """Fill in what a light command (a hook, the MCP server, `memflow recall`) needs and its
    environment does not name: the state home, the data directory and the landing zone (the
    recorded ones, else the home's defaults; nothing is created), and the API URL `memflow up`
    recorded. A damaged record leaves the environment as it is (the command then says what
    it lacks)."""
    home = state_home(env)
    env.setdefault(HOME_SETTING, str(home))
    try:
        record = read_record(home)
    except RecordError:
        return None
    for setting in (DATA_SETTING, LANDING_SETTING):
        if not env_path(setting, env):
            env[setting] = record.path_of(setting) if record else str(default_path(home, setting))
    if record is not None and record.api_url and not (env.get(API_URL_SETTING) or "").strip():
        env[API_URL_SETTING] = record.api_url
    return record


def url_host(host: str) -> str:
    """The host part of a URL that reaches a server listening on `host`."""
    if host in ("0.0.0.0", ""):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host else host
