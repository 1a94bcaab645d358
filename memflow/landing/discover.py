"""Discovery: the tenants of the landing zone and their files, and what is skipped on the way.

Listing takes one ``lstat`` per entry and opens directories only, never a file, so the sensor
can list the zone on every tick (`zone_listing` is what it digests). `tenant_files`
lists one tenant's directory, for a run that reads only its own tenants, and
`tenant_listings` the named tenants' directories only (what `memflow run --tenant` digests:
its cost does not grow with the other tenants of the zone).
"""

from __future__ import annotations

import errno
import functools
import os
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import NamedTuple

from memflow.landing.files import _DIR_FLAGS, _entries, _Entry, _open_dir
from memflow.landing.format import LANDING_SUFFIXES
from memflow.landing.problems import (
    _HIDDEN,
    _MISPLACED,
    _NESTED,
    _SYMLINK,
    LandingProblem,
    _os_detail,
    _problem,
    _scope_detail,
    _special,
)
from schemas.scope import Scope, ScopeError

# A hidden directory is looked into this deep and this far for landing files, at most.
_HIDDEN_DEPTH = 8
_HIDDEN_ENTRIES = 10_000


class Listed(NamedTuple):
    """A landing file as its directory lists it (lstat, no file opened)."""

    name: str
    size: int
    mtime_ns: int


class Discovery(dict[Scope, list[Path]]):
    """Tenants (in scope order) mapped to their landing files (sorted by name), plus the problems
    met on the way. It is a plain dict of ``Scope -> files`` with a ``problems`` attribute."""

    def __init__(
        self,
        tenants: Iterable[tuple[Scope, list[Path]]] = (),
        problems: Iterable[LandingProblem] = (),
    ) -> None:
        super().__init__(tenants)
        self.problems: list[LandingProblem] = list(problems)


def is_landing_file(path: Path) -> bool:
    return is_landing_name(path.name)


def is_landing_name(name: str) -> bool:
    return not name.startswith(".") and name.lower().endswith(LANDING_SUFFIXES)


def _tenant_entries(
    repo_dir: str | int, rel_repo: str, scope: Scope, *, sizes: bool = True
) -> tuple[list[_Entry], list[LandingProblem]]:
    """(landing files, problems) of one tenant directory (a path or an fd); without `sizes`
    the files' sizes and times are 0 (the problems are the same: `_entries`)."""
    files: list[_Entry] = []
    problems: list[LandingProblem] = []
    hidden: list[str] = []
    for entry in _entries(repo_dir, hidden, sizes=sizes):
        rel = f"{rel_repo}/{entry.name}"
        if stat.S_ISLNK(entry.mode):
            problems.append(_problem(rel, "symlink", _SYMLINK, scope))
        elif stat.S_ISDIR(entry.mode):
            problems.append(_problem(rel, "nested_directory", _NESTED, scope))
        elif is_landing_name(entry.name):
            if stat.S_ISREG(entry.mode):
                files.append(entry)
            else:
                problems.append(_problem(rel, "not_a_regular_file", _special(entry.mode), scope))
    problems += _hidden_problems(repo_dir, rel_repo, hidden, scope)
    return files, problems


def tenant_files(
    landing_root: str | os.PathLike[str], scope: Scope
) -> tuple[list[Path], list[LandingProblem]]:
    """One tenant's landing files (as `discover` lists them, sorted by name) and the problems
    of its directory, listing that directory only (no symlink followed on the way). A missing
    directory holds no file and is no problem."""
    root = Path(landing_root)
    files, problems = _list_tenant(root, scope, missing_is_a_problem=False)
    folder = root / scope.tenant_id / scope.ns
    return [folder / f.name for f in files], problems


def _list_tenant(
    root: Path, scope: Scope, *, missing_is_a_problem: bool
) -> tuple[list[_Entry], list[LandingProblem]]:
    """(landing files, problems) of the tenant's directory, listed through its fd."""
    rel_repo = f"{scope.tenant_id}/{scope.ns}"
    try:
        dir_fd = _open_dir(root, (scope.tenant_id, scope.ns))
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            missing = _problem(rel_repo, "vanished", _os_detail(exc), scope)
            return [], [missing] if missing_is_a_problem else []
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            return [], [_problem(rel_repo, "symlink", _SYMLINK, scope)]
        return [], [_problem(rel_repo, "unreadable_directory", _os_detail(exc), scope)]
    try:
        return _tenant_entries(dir_fd, rel_repo, scope)
    except OSError as exc:
        return [], [_problem(rel_repo, "unreadable_directory", _os_detail(exc), scope)]
    finally:
        os.close(dir_fd)


def discover(landing_root: str | os.PathLike[str]) -> Discovery:
    """Find the tenants (``<org>/<repo>`` directories holding landing files) under the root.

    Lists only regular files (by lstat: no symlink is followed, no special file opened);
    everything else that looks like landing data is a problem with a reason. Never raises for
    what the landing zone holds."""
    root = Path(landing_root)
    problems: list[LandingProblem] = []
    found = [
        (scope, [root / scope.tenant_id / scope.ns / f.name for f in files])
        for scope, files in _walk(root, problems)
    ]
    return Discovery(found, problems)


def zone_listing(
    landing_root: str | os.PathLike[str],
) -> tuple[dict[Scope, tuple[Listed, ...]], list[LandingProblem]]:
    """What `discover` finds, as listings only (no paths built): what the sensor digests on
    every tick."""
    problems: list[LandingProblem] = []
    listings = {
        scope: tuple(Listed(f.name, f.size, f.mtime_ns) for f in files)
        for scope, files in _walk(Path(landing_root), problems)
    }
    return listings, problems


def zone_problems(landing_root: str | os.PathLike[str]) -> list[LandingProblem]:
    """`discover`'s problems alone (the same walk; no path is built for the files found)."""
    problems: list[LandingProblem] = []
    for _ in _walk(Path(landing_root), problems, sizes=False):  # no lstat per file
        pass
    return problems


def tenant_listings(
    landing_root: str | os.PathLike[str], scopes: Iterable[Scope]
) -> dict[Scope, tuple[Listed, ...]]:
    """`zone_listing`'s entries of these tenants only (those holding landing files, in scope
    order), listing their directories and nothing else: the same files, sizes and times as
    the whole zone's walk gives them. Problems are not gathered (the survey reports them)."""
    root = Path(landing_root)
    out = {}
    for scope in sorted(set(scopes), key=lambda s: (s.tenant_id, s.ns)):
        files, _ = _list_tenant(root, scope, missing_is_a_problem=False)
        if files:
            out[scope] = tuple(Listed(f.name, f.size, f.mtime_ns) for f in files)
    return out


def _walk(
    root: Path, problems: list[LandingProblem], *, sizes: bool = True
) -> Iterator[tuple[Scope, list[_Entry]]]:
    """Each tenant holding landing files, with its files (lstat'ed, unless not `sizes`), in
    scope order; what is met on the way goes to `problems`."""
    if not root.is_dir():
        problems.append(_problem(".", "missing_root", f"{root} is not a directory"))
        return

    def listing(directory: str, rel: str) -> list[_Entry]:
        hidden: list[str] = []
        try:
            entries = _entries(directory, hidden, sizes=False)
        except OSError as exc:
            problems.append(_problem(rel, "unreadable_directory", _os_detail(exc)))
            return []
        if hidden:
            problems.extend(_hidden_problems(directory, "" if rel == "." else rel, hidden))
        return entries

    base = os.fspath(root)
    for org in listing(base, "."):
        if not _is_directory(org, org.name, problems):
            continue
        org_dir = os.path.join(base, org.name)
        for repo in listing(org_dir, org.name):
            rel_repo = f"{org.name}/{repo.name}"
            if not _is_directory(repo, rel_repo, problems):
                continue
            scope = _scope(org.name, repo.name)
            if isinstance(scope, str):
                problems.append(_problem(rel_repo, "invalid_scope", scope))
                continue
            try:
                files, found_problems = _tenant_entries(
                    os.path.join(org_dir, repo.name), rel_repo, scope, sizes=sizes
                )
            except OSError as exc:
                problems.append(_problem(rel_repo, "unreadable_directory", _os_detail(exc), scope))
                continue
            problems += found_problems
            if files:
                yield scope, files


@functools.lru_cache(maxsize=1 << 17)
def _scope(org: str, repo: str) -> Scope | str:
    """The scope of a tenant directory, or why its names are not one (kept: the sensor lists
    every directory on every tick)."""
    try:
        return Scope(org, repo)
    except ScopeError as exc:
        return _scope_detail(exc)


def _is_directory(entry: _Entry, rel: str, problems: list[LandingProblem]) -> bool:
    """Whether an org or repo entry is a directory to go into; a symlink, a landing file out
    of place or a special file named like one is a problem."""
    if stat.S_ISLNK(entry.mode):
        problems.append(_problem(rel, "symlink", _SYMLINK))
        return False
    if stat.S_ISDIR(entry.mode):
        return True
    if is_landing_name(entry.name):
        problems.append(_misplaced_or_special(rel, entry.mode))
    return False


def _misplaced_or_special(rel: str, mode: int) -> LandingProblem:
    if stat.S_ISREG(mode):
        return _problem(rel, "misplaced_file", _MISPLACED)
    return _problem(rel, "not_a_regular_file", _special(mode))


# ------------------------------------------------------------------------ hidden directories


def _hidden_problems(
    parent: str | int | Path, rel_parent: str, names: list[str], scope: Scope | None = None
) -> list[LandingProblem]:
    """A ``hidden_directory`` problem for each dot-directory of `parent` that holds landing
    files (names starting with ``.`` are writers' temporary names and are never read)."""
    out = []
    for name in sorted(names):
        try:
            fd = (
                os.open(name, _DIR_FLAGS, dir_fd=parent)
                if isinstance(parent, int)
                else os.open(os.path.join(parent, name), _DIR_FLAGS)
            )
        except OSError:
            continue  # gone, a symlink, unreadable: nothing is read from it either way
        if _holds_landing_files(fd, 0, [_HIDDEN_ENTRIES]):
            rel = f"{rel_parent}/{name}" if rel_parent else name
            out.append(_problem(rel, "hidden_directory", _HIDDEN, scope))
    return out


def _holds_landing_files(fd: int, depth: int, budget: list[int]) -> bool:
    """Whether the directory (an fd, closed here) or one below it holds a regular file with a
    landing name; symlinks are not followed, the search is bounded (depth, entries)."""
    try:
        subdirs = []
        with os.scandir(fd) as it:
            for entry in it:
                budget[0] -= 1
                if budget[0] < 0:
                    return False
                if entry.is_dir(follow_symlinks=False):
                    subdirs.append(entry.name)
                elif is_landing_name(entry.name) and entry.is_file(follow_symlinks=False):
                    return True
        if depth >= _HIDDEN_DEPTH:
            return False
        for name in subdirs:
            try:
                sub = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except OSError:
                continue
            if _holds_landing_files(sub, depth + 1, budget):
                return True
        return False
    except OSError:
        return False
    finally:
        os.close(fd)
