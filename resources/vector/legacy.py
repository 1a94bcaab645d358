"""What an earlier memflow left in a data directory for Milvus Lite, and how to retire it.

Up to this version the embedded vector store was Milvus Lite served by a detached
`milvus_lite server` process per data directory. Such a directory holds `milvus/` (Lite's
database), `milvus-server.json` (the server's pid and port), `milvus-identity.json`,
`milvus-server.lock`, `milvus-server.log` and `milvus-gen/` (the search cache's generation files),
and the server may still run. None of it is needed now: every vector it held came from the
embedding ledger, and `memflow vectors rebuild` writes the embedded store
(`resources.vector.local`) from the ledger, stops that server and, when asked, removes the files.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
from dataclasses import dataclass
from pathlib import Path

import psutil

PATHS = (
    "milvus",
    "milvus-gen",
    "milvus-server.json",
    "milvus-identity.json",
    "milvus-server.lock",
    "milvus-server.log",
)
STATE_FILE = "milvus-server.json"
STOP_TIMEOUT_S = 15.0


@dataclass(frozen=True, slots=True)
class LegacyLite:
    data_dir: Path
    paths: tuple[Path, ...]  # the legacy files and folders that exist
    server_pid: int | None  # a Milvus Lite server of this directory that still runs

    def note(self) -> str:
        names = ", ".join(p.name for p in self.paths)
        running = (
            f"; its Milvus Lite server still runs (pid {self.server_pid})"
            if self.server_pid
            else ""
        )
        return (
            f"{self.data_dir} holds the Milvus Lite store of an earlier memflow ({names})"
            f"{running}. memflow no longer uses it: `memflow vectors rebuild` writes the "
            "embedded store from the embedding ledger and stops that server; with --drop-legacy "
            "it removes those files too."
        )


def find_legacy(data_dir: str | os.PathLike[str]) -> LegacyLite | None:
    """What an earlier memflow left for Milvus Lite in `data_dir`; None when nothing."""
    root = Path(data_dir)
    paths = tuple(root / name for name in PATHS if (root / name).exists())
    if not paths:
        return None
    return LegacyLite(root, paths, legacy_server_pid(root))


def legacy_server_pid(data_dir: str | os.PathLike[str]) -> int | None:
    """The pid of the Milvus Lite server recorded for `data_dir`, when that process still runs
    and is a Lite server of this directory's `milvus/` (a reused pid is someone else's)."""
    root = Path(data_dir).resolve()
    try:
        state = json.loads((root / STATE_FILE).read_text("utf-8"))
        pid = int(state["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    milvus_dir = str(root / "milvus")
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
        args = proc.cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None
    serves = any("milvus_lite" in a for a in args) and milvus_dir in args
    return pid if serves else None


def stop_legacy_server(data_dir: str | os.PathLike[str]) -> int | None:
    """Stop the data directory's Milvus Lite server (SIGINT, which closes its database cleanly,
    then SIGKILL); returns its pid, or None when none ran."""
    pid = legacy_server_pid(data_dir)
    if pid is None:
        return None
    proc = psutil.Process(pid)
    for sig in (signal.SIGINT, signal.SIGKILL):
        try:
            proc.send_signal(sig)
            proc.wait(STOP_TIMEOUT_S)
            return pid
        except psutil.NoSuchProcess:
            return pid
        except psutil.TimeoutExpired:
            continue
    return pid


def drop_legacy(data_dir: str | os.PathLike[str]) -> list[Path]:
    """Remove the legacy files and folders (the server must be stopped); returns them."""
    found = find_legacy(data_dir)
    if found is None:
        return []
    if found.server_pid is not None:
        raise RuntimeError(
            f"the Milvus Lite server of {data_dir} still runs (pid {found.server_pid})"
        )
    for path in found.paths:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
    return list(found.paths)
