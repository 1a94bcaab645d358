"""Discovery: the tenants of the landing zone and their files, and what is skipped on the way."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path

from memflow.landing.files import (
    _entries,
    _Entry,
)
from memflow.landing.format import (
    LANDING_SUFFIXES,
)
from memflow.landing.problems import (
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
    repo_dir: str | int, rel_repo: str, scope: Scope
) -> tuple[list[str], list[LandingProblem]]:
    """(landing file names, problems) of one tenant directory."""
    names: list[str] = []
    problems: list[LandingProblem] = []
    for name, mode in _entries(repo_dir):
        rel = f"{rel_repo}/{name}"
        if stat.S_ISLNK(mode):
            problems.append(_problem(rel, "symlink", _SYMLINK, scope))
        elif stat.S_ISDIR(mode):
            problems.append(_problem(rel, "nested_directory", _NESTED, scope))
        elif is_landing_name(name):
            if stat.S_ISREG(mode):
                names.append(name)
            else:
                problems.append(_problem(rel, "not_a_regular_file", _special(mode), scope))
    return names, problems


def discover(landing_root: str | os.PathLike[str]) -> Discovery:
    """Find the tenants (``<org>/<repo>`` directories holding landing files) under the root.

    Lists only regular files (by lstat: no symlink is followed, no special file opened);
    everything else that looks like landing data is a problem with a reason. Never raises for
    what the landing zone holds."""
    root = Path(landing_root)
    if not root.is_dir():
        return Discovery(problems=[_problem(".", "missing_root", f"{root} is not a directory")])
    found: list[tuple[Scope, list[Path]]] = []
    problems: list[LandingProblem] = []

    def listing(directory: Path, rel: str) -> list[_Entry]:
        try:
            return _entries(directory)
        except OSError as exc:
            problems.append(_problem(rel, "unreadable_directory", _os_detail(exc)))
            return []

    for org_name, org_mode in listing(root, "."):
        if stat.S_ISLNK(org_mode):
            problems.append(_problem(org_name, "symlink", _SYMLINK))
            continue
        if not stat.S_ISDIR(org_mode):
            if is_landing_name(org_name):
                problems.append(_misplaced_or_special(org_name, org_mode))
            continue
        for repo_name, repo_mode in listing(root / org_name, org_name):
            rel_repo = f"{org_name}/{repo_name}"
            if stat.S_ISLNK(repo_mode):
                problems.append(_problem(rel_repo, "symlink", _SYMLINK))
                continue
            if not stat.S_ISDIR(repo_mode):
                if is_landing_name(repo_name):
                    problems.append(_misplaced_or_special(rel_repo, repo_mode))
                continue
            try:
                scope = Scope(org_name, repo_name)
            except ScopeError as exc:
                problems.append(_problem(rel_repo, "invalid_scope", _scope_detail(exc)))
                continue
            try:
                names, found_problems = _tenant_entries(
                    root / org_name / repo_name, rel_repo, scope
                )
            except OSError as exc:
                problems.append(_problem(rel_repo, "unreadable_directory", _os_detail(exc), scope))
                continue
            problems += found_problems
            if names:
                found.append((scope, [root / org_name / repo_name / n for n in names]))
    return Discovery(found, problems)


def _misplaced_or_special(rel: str, mode: int) -> LandingProblem:
    if stat.S_ISREG(mode):
        return _problem(rel, "misplaced_file", _MISPLACED)
    return _problem(rel, "not_a_regular_file", _special(mode))
