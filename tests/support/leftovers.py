"""No process left behind: after a test ran memflow on a data directory, nothing still runs on
it (issue 18: `memflow run` leaves no process behind; memflow no longer supervises a vector
server per data directory)."""

from __future__ import annotations

import os
from pathlib import Path

import psutil


def processes_using(path: str | os.PathLike[str]) -> list[tuple[int, str]]:
    """(pid, command line) of every other process whose command line names `path` (or a path
    under it) or whose working directory is under it."""
    target = str(Path(path).resolve())
    found: list[tuple[int, str]] = []
    for proc in psutil.process_iter(["pid", "cmdline", "cwd"]):
        if proc.pid == os.getpid():
            continue
        args = proc.info.get("cmdline") or []
        cwd = proc.info.get("cwd") or ""
        named = any(
            a == target or a.startswith(target + os.sep) or a.endswith("=" + target) for a in args
        )
        if named or cwd == target or cwd.startswith(target + os.sep):
            found.append((proc.pid, " ".join(args)[:300]))
    return found


def assert_no_process_left(path: str | os.PathLike[str]) -> None:
    left = processes_using(path)
    assert not left, f"processes still running on {path}: {left}"
