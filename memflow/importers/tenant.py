"""Which tenant (``org/repo``) an agent session belongs to, from its working directory.

Rules, first match wins:

1. ``MEMFLOW_TENANT_MAP``: explicit rules ``DIR=ORG/REPO`` separated by ``;`` or newlines. A rule
   applies to ``DIR`` and everything below it; the longest matching ``DIR`` wins; ``~`` is
   expanded. ``ORG/*`` keeps the repo that rule 2 or 3 would give and fixes the org::

       MEMFLOW_TENANT_MAP="~/work/pay=acme/payments; ~/work=acme/*; /srv/scratch=sandbox/scratch"

2. The git remote (``origin``, else the first remote) of the repository holding the directory,
   read from ``.git/config`` (worktrees and submodules included), or the remote URL the transcript
   itself records (Codex does): its last two path parts, ``git@github.com:acme/payments.git`` ->
   ``acme/payments``, ``https://gitlab.com/group/sub/tool`` -> ``sub/tool``. Credentials in a
   URL are never read.
3. ``MEMFLOW_DEFAULT_ORG`` (default ``local``) and the name of the repository's top directory
   (or of the working directory when it is in no repository).

Names are then made valid `schemas.scope.Scope` parts: a secret in a name is redacted first (a
token in a directory or a remote path never names a tenant), characters outside ``[A-Za-z0-9._-]``
become ``-``, a leading ``.``/``_``/``-`` is dropped, ``..`` becomes ``.``, at most 100 characters,
``unknown`` when nothing is left. Settings are read when `TenantMapper.from_env` is called, never
at import. Standard library, `schemas` and `resources.settings`'s light readers only (a hook imports
this on its fast path).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from urllib.parse import urlsplit

from resources.settings import TENANT_MAP_SETTING, agent_env, declared
from schemas.redaction import redact
from schemas.scope import Scope, ScopeError

MAP_SETTING = TENANT_MAP_SETTING
DEFAULT_ORG = declared("MEMFLOW_DEFAULT_ORG").default
UNKNOWN = "unknown"
MAX_PART = 100
_BAD = re.compile(r"[^A-Za-z0-9._-]+")
_SCP_LIKE = re.compile(r"^(?:[^@/\s]+@)?[^:/\s]+:(?!//)(?P<path>.+)$")  # git@host:org/repo.git
_MAX_WALK = 64
_MAX_CONFIG_BYTES = 1 << 20


def sanitize_part(text: str | None) -> str:
    """A valid Scope part made from any text (see the module docstring)."""
    value = _BAD.sub("-", redact(text) or "")
    while ".." in value:
        value = value.replace("..", ".")
    value = value.lstrip("._-")[:MAX_PART].rstrip(".")
    return value or UNKNOWN


def scope_of(org: str | None, repo: str | None) -> Scope:
    return Scope(sanitize_part(org), sanitize_part(repo))


def remote_parts(url: str | None) -> tuple[str, str] | None:
    """(org, repo) from a git remote URL's last two path parts, or None."""
    if not url or not isinstance(url, str) or len(url) > 2048:
        return None
    url = url.strip()
    path: str | None = None
    if "://" in url:
        try:
            path = urlsplit(url).path
        except ValueError:
            return None
    else:
        m = _SCP_LIKE.match(url)
        path = m.group("path") if m else url
    parts = [p for p in PurePosixPath(path or "").parts if p not in ("/", "", ".", "..")]
    if len(parts) < 2:
        return None
    org, repo = parts[-2], parts[-1]
    if repo.endswith(".git"):
        repo = repo[: -len(".git")]
    if not repo:
        return None
    return org, repo


@dataclass(frozen=True, slots=True)
class TenantChoice:
    scope: Scope
    how: str  # map | remote | default


@dataclass(frozen=True, slots=True)
class _Rule:
    prefix: str  # normalised absolute path, no trailing slash
    org: str
    repo: str | None  # None: "ORG/*"


class TenantMapError(ValueError):
    """``MEMFLOW_TENANT_MAP`` holds a rule that is not ``DIR=ORG/REPO``."""


def parse_map(text: str | None) -> list[_Rule]:
    rules: list[_Rule] = []
    for raw in re.split(r"[;\n]", text or ""):
        entry = raw.strip()
        if not entry:
            continue
        directory, sep, target = entry.rpartition("=")
        org, slash, repo = target.strip().partition("/")
        if not sep or not directory.strip() or not slash or not org or not repo:
            raise TenantMapError(f"{MAP_SETTING}: {entry!r} is not DIR=ORG/REPO or DIR=ORG/*")
        try:
            Scope(org, "probe" if repo == "*" else repo)
        except ScopeError as exc:
            raise TenantMapError(f"{MAP_SETTING}: {exc}") from None
        prefix = _norm(os.path.expanduser(directory.strip()))
        rules.append(_Rule(prefix, org, None if repo == "*" else repo))
    return sorted(rules, key=lambda r: len(r.prefix), reverse=True)


def _norm(path: str) -> str:
    p = os.path.normpath(path)
    return p if p == os.sep else p.rstrip(os.sep)


class TenantMapper:
    """Maps a working directory (and optionally a remote URL) to a tenant scope."""

    def __init__(self, rules: list[_Rule] | None = None, default_org: str = DEFAULT_ORG) -> None:
        self.rules = rules or []
        self.default_org = sanitize_part(default_org)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> TenantMapper:
        found = agent_env(env)  # names and defaults: resources.settings
        return cls(parse_map(found.tenant_map), found.default_org)

    def choose(self, cwd: str | None, remote_url: str | None = None) -> TenantChoice:
        """The tenant of `cwd`; `remote_url` (what the transcript recorded) is used when the
        directory holds no readable repository."""
        cwd = cwd if isinstance(cwd, str) and cwd.strip() and "\x00" not in cwd else None
        norm = _norm(os.path.expanduser(cwd)) if cwd else None
        top, local_remote = find_repository(norm) if norm else (None, None)
        remote = remote_parts(local_remote) or remote_parts(remote_url)
        fallback_repo = Path(top or norm or UNKNOWN).name
        if norm:
            for rule in self.rules:
                if norm == rule.prefix or norm.startswith(rule.prefix.rstrip(os.sep) + os.sep):
                    repo = rule.repo or (remote[1] if remote else fallback_repo)
                    return TenantChoice(scope_of(rule.org, repo), "map")
        if remote:
            return TenantChoice(scope_of(*remote), "remote")
        return TenantChoice(scope_of(self.default_org, fallback_repo), "default")


def find_repository(start: str) -> tuple[str | None, str | None]:
    """(top directory, remote URL) of the git repository holding `start`; Nones if none."""
    here = Path(start)
    for _ in range(_MAX_WALK):
        dot_git = here / ".git"
        try:
            if dot_git.is_dir():
                return str(here), _remote_url(_common_dir(dot_git))
            if dot_git.is_file():
                return str(here), _remote_url(_common_dir(_gitdir_of(dot_git)))
        except OSError:
            return None, None
        if here.parent == here:
            break
        here = here.parent
    return None, None


def _gitdir_of(dot_git_file: Path) -> Path:
    with dot_git_file.open("rb") as fh:
        text = fh.read(4096).decode("utf-8", errors="replace")
    for line in text.splitlines():
        if line.startswith("gitdir:"):
            target = Path(line[len("gitdir:") :].strip())
            return target if target.is_absolute() else (dot_git_file.parent / target)
    raise OSError("no gitdir")


def _common_dir(gitdir: Path) -> Path:
    """A worktree's gitdir names the shared directory (which holds `config`) in `commondir`."""
    marker = gitdir / "commondir"
    if marker.is_file():
        with marker.open("rb") as fh:
            target = Path(fh.read(4096).decode("utf-8", errors="replace").strip())
        return target if target.is_absolute() else (gitdir / target)
    return gitdir


def _remote_url(gitdir: Path) -> str | None:
    config = gitdir / "config"
    try:
        if not config.is_file():  # never open a FIFO or a device a crafted repo puts here
            return None
        with config.open("rb") as fh:
            text = fh.read(_MAX_CONFIG_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return None
    urls: dict[str, str] = {}
    section: str | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("["):
            m = re.match(r'^\[\s*remote\s+"([^"]*)"\s*\]', line)
            section = m.group(1) if m else None
            continue
        if section is None or section in urls:
            continue
        key, sep, value = line.partition("=")
        if sep and key.strip().lower() == "url":
            urls[section] = value.strip().strip('"')
    return urls.get("origin") or next(iter(urls.values()), None)
