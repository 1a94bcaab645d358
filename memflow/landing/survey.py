"""The landing zone's problems with the lines they hold (`landing_problems`, `count_records`)."""

from __future__ import annotations

import os
import stat
from dataclasses import replace
from pathlib import Path

import polars as pl

from memflow.landing.discover import (
    Discovery,
    is_landing_name,
    zone_problems,
)
from memflow.landing.files import (
    _DIR_FLAGS,
    _FILE_FLAGS,
    _entries,
    _open_dir,
    _Source,
)
from memflow.landing.format import (
    JSONL_SUFFIX,
    MAX_LINE_BYTES,
    PARQUET_SUFFIX,
)
from memflow.landing.jsonl import count_lines
from memflow.landing.problems import (
    LandingProblem,
    problems_frame,
)

# Problems whose lines can be counted: what they hold is regular files and directories.
_COUNTABLE = frozenset(
    {
        "invalid_scope",
        "nested_directory",
        "misplaced_file",
        "changed_during_read",
        "hidden_directory",
    }
)
_MAX_DEPTH = 16


def _with_lines(root: Path, problem: LandingProblem) -> LandingProblem:
    if problem.reason not in _COUNTABLE or problem.fs_path is None:
        return problem
    return replace(problem, lines=count_records(root, problem.fs_path))


def count_records(landing_root: str | os.PathLike[str], rel_path: str) -> int | None:
    """How many records (non-blank JSONL lines, Parquet rows; 1 for an unreadable Parquet
    file) the landing files at `rel_path` hold: a file, or every landing file below a
    directory. Symlinks are not followed (at any level), special files never opened, hidden
    files skipped (temporary names), hidden directories counted. None when the path itself
    cannot be counted (a symlink, a special file, gone)."""
    root = Path(landing_root)
    parts = [p for p in Path(rel_path).parts if p not in ("", ".")]
    if any(p == ".." for p in parts):
        return None
    try:
        parent_fd = _open_dir(root, parts[:-1]) if parts else None
    except OSError:
        return None
    try:
        if parent_fd is None:
            fd = _open_dir(root, ())
            return _count_dir(fd, 0)
        name = parts[-1]
        st = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
        if stat.S_ISDIR(st.st_mode):
            return _count_dir(os.open(name, _DIR_FLAGS, dir_fd=parent_fd), 0)
        if stat.S_ISREG(st.st_mode):
            return _count_file(parent_fd, name) or 0
        return None
    except OSError:
        return None
    finally:
        if parent_fd is not None:
            os.close(parent_fd)


def _count_dir(fd: int, depth: int) -> int:
    """Records of the landing files below an open directory (the fd is closed), hidden
    directories included (nothing in them is read either); hidden files are temporary."""
    total = 0
    try:
        if depth > _MAX_DEPTH:
            return 0
        hidden: list[str] = []
        entries = _entries(fd, hidden)
        subdirs = [e.name for e in entries if stat.S_ISDIR(e.mode)] + hidden
        for name in subdirs:
            try:
                sub = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except OSError:
                continue
            total += _count_dir(sub, depth + 1)
        for name, mode, *_ in entries:
            if stat.S_ISREG(mode) and is_landing_name(name):
                total += _count_file(fd, name) or 0
    finally:
        os.close(fd)
    return total


def _count_file(dir_fd: int, name: str) -> int | None:
    try:
        fd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        size = os.fstat(fd).st_size
        src = _Source(fd)
        if name.lower().endswith(PARQUET_SUFFIX):
            from memflow.landing import parquet  # pyarrow only where Parquet is read

            return parquet.count_rows(src, size)
        if not name.lower().endswith(JSONL_SUFFIX):
            return None
        return count_lines(src, MAX_LINE_BYTES)
    except OSError:
        return None
    finally:
        os.close(fd)


def landing_problems(
    landing_root: str | os.PathLike[str],
    found: Discovery | None = None,
    *,
    count_lines: bool = True,
) -> pl.DataFrame:
    """The landing zone's problems as a `LANDING_PROBLEMS` table: `discover`'s (its walk run
    again, for the problems only, when `found` is not given), each with the lines it holds
    where they can be counted (directories with invalid scope names, nested directories,
    misplaced files)."""
    problems = zone_problems(landing_root) if found is None else found.problems
    root = Path(landing_root)
    if count_lines:
        problems = [_with_lines(root, p) if p.lines is None else p for p in problems]
    return problems_frame(problems)
