"""Which tenant (``org/repo``) an agent session belongs to: one documented function of where it
ran, the same for the importers, the hooks and the MCP server.

Rules, first match wins:

1. ``MEMFLOW_TENANT_MAP``: explicit rules ``DIR=ORG/REPO`` separated by ``;`` or newlines. A rule
   applies to ``DIR`` and everything below it; the longest matching ``DIR`` wins; ``~`` is
   expanded; Windows directories (``C:\\Users\\me\\work``) match Windows working directories,
   case-insensitively. ``ORG/*`` keeps the repo that rule 2, 3 or 4 would give and fixes the
   org::

       MEMFLOW_TENANT_MAP="~/work/pay=acme/payments; ~/work=acme/*; /srv/scratch=sandbox/scratch"

2. The remote the transcript recorded (Codex: ``git.repository_url``): what the session itself
   says wins over any guess made on this machine.
3. The git remote (``origin``, else the first remote) of the repository holding the working
   directory, read from its ``.git/config`` (worktrees and submodules included) when that
   directory is an absolute path on this machine. Credentials in a URL are never read.
4. ``MEMFLOW_DEFAULT_ORG`` (default ``local``) and the name of the repository's top directory
   (or of the working directory's last part when it is in no repository here).

The working directory is read as the agent wrote it: ``e:\\Workspace\\app``, ``C:\\Users\\me``
and ``\\\\server\\share\\app`` are Windows paths (their last part names the folder); a relative
path is never resolved against the directory the importer happens to run in.

Names (`remote_tenant`, `folder_tenant`)
========================================

A remote is read as an identity: its host (lowercased, ``www.`` dropped, a non-default port
kept, user info dropped) and its full path (``.git`` dropped). Azure DevOps spellings are one
identity: ``https://dev.azure.com/{org}/{project}/_git/{repo}``, ``https://{org}@dev.azure.com/
...``, ``git@ssh.dev.azure.com:v3/{org}/{project}/{repo}`` and ``https://{org}.visualstudio.com/
[DefaultCollection/]{project}/_git/{repo}`` all name ``dev.azure.com/{org}/{project}/{repo}``.

- A GitHub remote whose owner and repository are already valid names keeps them:
  ``git@github.com:acme/payments.git`` is ``acme/payments`` (as it always was).
- Every other identity is named ``ORG/REST-hhhhhhhh``: ``ORG`` the first path part (GitLab's top
  group, Bitbucket's workspace, Azure's organisation, Gitea's owner), ``REST`` the remaining
  parts joined by ``.`` (subgroups, Azure's project and repository), both made valid, and
  ``hhhhhhhh`` 8 characters (base32) of the SHA-256 of the whole identity (a local or
  ``file://`` remote: its last two parts, ``/srv/git/acme/core.git`` is ``acme/core-...``). So
  ``gitlab.com/acme/team-a/service`` is ``acme/team-a.service-...`` and can never meet
  ``gitlab.com/other/team-a/service``, nor ``github.com/acme/team-a``, nor the same path on
  another host.

A folder without a remote is named by its name: one that is already a valid name keeps it
(``local/my-service``); any other (``C++ tools``, ``Проект``, ``工具``) is transliterated to
ASCII (`anyascii`), made valid and given the suffix of its own name (``local/C-tools-...``,
``local/Proekt-...``), so ``C++ tools`` and ``C tools`` are two tenants. A name that already ends
like a suffix (``-`` and 8 base32 characters) gets one too, so a plain name never equals a
suffixed one. Two folders of the same name in different places are one tenant, and a GitHub
owner spelled like ``MEMFLOW_DEFAULT_ORG`` shares its names with folders; a rule of
``MEMFLOW_TENANT_MAP`` separates them.

Making a part valid (`sanitize_part`): a secret in it is redacted first (a token in a directory or
a remote path never names a tenant), characters outside ``[A-Za-z0-9._-]`` become ``-``, a
leading ``.``/``_``/``-`` is dropped, ``..`` becomes ``.``, at most 100 characters, ``unknown``
when nothing is left.

What changed for existing tenants: GitHub tenants and valid folder names keep their names.
Tenants whose names had lost something (other hosts, subgroups, Azure DevOps' ``git/...``,
punctuated or non-ASCII folders, ``local/unknown``) get new names; `legacy_tenant` gives the old
one, and the importers move a re-imported session's landing files from the old tenant to the
new one (`memflow.importers.common`). Settings are read when `TenantMapper.from_env` is called,
never at import. Standard library and `schemas` only on the fast path (a hook imports this):
`anyascii` loads only for a non-ASCII folder name.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath, PureWindowsPath
from urllib.parse import unquote, urlsplit

from resources.settings import TENANT_MAP_SETTING, agent_env
from schemas.redaction import contains_secret, redact
from schemas.scope import Scope, ScopeError

DEFAULT_ORG = "local"
UNKNOWN = "unknown"
REDACTED_HEAD = "redacted"
MAX_PART = 100
SUFFIX_CHARS = 8
PLAIN_HOSTS = frozenset({"github.com"})
_BAD = re.compile(r"[^A-Za-z0-9._-]+")
_SUFFIXED = re.compile(rf"-[a-z2-7]{{{SUFFIX_CHARS}}}$")
_SCP_LIKE = re.compile(r"^(?:[^@/\s]+@)?(?P<host>[^:/\s]+):(?!//)(?P<path>.+)$")  # git@host:x
_WINDOWS = re.compile(r"^(?:[A-Za-z]:[\\/]|\\\\|//[^/])")
_DEFAULT_PORTS = frozenset({"22", "80", "443", "9418"})
_HOST_ALIASES = {"ssh.github.com": "github.com", "www.github.com": "github.com"}
_MAX_WALK = 64
_MAX_CONFIG_BYTES = 1 << 20


def sanitize_part(text: str | None) -> str:
    """A valid Scope part made from any text (see the module docstring)."""
    value = _BAD.sub("-", redact(text) or "")
    while ".." in value:
        value = value.replace("..", ".")
    value = value.lstrip("._-")[:MAX_PART].rstrip(".")
    return value or UNKNOWN


def _suffix(identity: str) -> str:
    digest = hashlib.sha256(identity.encode("utf-8", "surrogatepass")).digest()
    return base64.b32encode(digest[:5]).decode("ascii").lower()


def _with_suffix(base: str, identity: str) -> str:
    room = MAX_PART - SUFFIX_CHARS - 1
    head = base[:room].rstrip(".-_") or UNKNOWN
    suffix = _suffix(identity)
    named = f"{head}-{suffix}"
    # A head that is no secret can become token-shaped with its suffix (`A-00000110SThAaEu
    # IJJobs` + `-epdgjvf7`, found by Hypothesis); Scope refuses such a name, so it is named
    # by its suffix alone. Still one tenant per identity, and never a plain name (`_plain`).
    return f"{REDACTED_HEAD}-{suffix}" if contains_secret(named) else named


def _org(text: str | None) -> str:
    """The org part made from any text: `sanitize_part`'s, unless that came out token-shaped
    (punctuation made `-` can join a name's pieces into one, `A!0000...!epdgjvf7`), which
    Scope would refuse: then `redacted`. The repo part's suffix still tells tenants apart."""
    org = sanitize_part(text)
    return REDACTED_HEAD if contains_secret(org) else org


def _plain(part: str) -> bool:
    """Already a valid name that names nothing else: kept as it is."""
    return sanitize_part(part) == part and not _SUFFIXED.search(part)


# ------------------------------------------------------------------------------------ remotes


@dataclass(frozen=True, slots=True)
class RemoteIdentity:
    """Where a repository lives: its host (``host[:port]``) and its path parts."""

    host: str
    parts: tuple[str, ...]

    @property
    def key(self) -> str:
        """The identity as hashed (paths as spelled: two spellings are two identities)."""
        return f"{self.host}/{'/'.join(self.parts)}"


def remote_identity(url: str | None) -> RemoteIdentity | None:
    """The identity of a git remote URL (https, ssh, scp-style, file, a local path), or None."""
    if not url or not isinstance(url, str) or len(url) > 2048 or "\x00" in url:
        return None
    url = url.strip()
    host = ""
    if "://" in url:
        try:
            split = urlsplit(url)
            host = (split.hostname or "").lower()
            port = split.port
        except ValueError:
            return None
        if port is not None and str(port) not in _DEFAULT_PORTS:
            host = f"{host}:{port}"
        path = split.path
        if split.scheme == "file":
            host = "file"
    elif m := _SCP_LIKE.match(url):
        host, path = m.group("host").lower(), m.group("path")
    else:
        host, path = "file", url
    parts = [unquote(p) for p in PurePosixPath(path).parts if p not in ("/", "", ".", "..")]
    if parts and parts[-1].endswith(".git"):
        parts[-1] = parts[-1][: -len(".git")]
    host = _HOST_ALIASES.get(host.removeprefix("www."), host.removeprefix("www."))
    parts = _azure(host, parts)
    if parts is None:
        return None
    host = "dev.azure.com" if _is_azure(host) else host
    parts = [p for p in parts if p]
    if len(parts) < 2:
        return None
    return RemoteIdentity(host or "file", tuple(parts))


def _is_azure(host: str) -> bool:
    bare = host.split(":")[0]
    return bare in ("dev.azure.com", "ssh.dev.azure.com", "vs-ssh.visualstudio.com") or (
        bare.endswith(".visualstudio.com")
    )


def _azure(host: str, parts: list[str]) -> list[str] | None:
    """Azure DevOps paths as [org, project, repo]; other hosts' unchanged."""
    bare = host.split(":")[0]
    if not _is_azure(host):
        return parts
    if bare in ("ssh.dev.azure.com", "vs-ssh.visualstudio.com"):
        rest = parts[1:] if parts[:1] == ["v3"] else parts
        return rest if len(rest) == 3 else None
    if bare == "dev.azure.com":
        org, rest = (parts[0], parts[1:]) if parts else ("", [])
    else:  # {org}.visualstudio.com
        org, rest = bare.removesuffix(".visualstudio.com"), parts
        if rest[:1] and rest[0].lower() == "defaultcollection":
            rest = rest[1:]
    if len(rest) == 3 and rest[1] == "_git":
        return [org, rest[0], rest[2]]
    if len(rest) == 2 and rest[0] == "_git":  # the project's default repository
        return [org, rest[1], rest[1]]
    return None


def remote_tenant(url: str | None) -> Scope | None:
    """The tenant of a git remote (see "Names" in the module docstring), or None."""
    identity = remote_identity(url)
    if identity is None:
        return None
    parts = identity.parts
    if identity.host in PLAIN_HOSTS and len(parts) == 2 and all(_plain(p) for p in parts):
        try:
            return Scope(parts[0], parts[1])
        except ScopeError:  # a name holding a secret: named by its suffix below
            pass
    # A local or file remote's first parts are directories: its owner is the one before last.
    head, rest = (parts[-2], parts[-1:]) if identity.host == "file" else (parts[0], parts[1:])
    return Scope(_org(head), _with_suffix(sanitize_part(".".join(rest)), identity.key))


def remote_parts(url: str | None) -> tuple[str, str] | None:
    """(org, repo) of `remote_tenant`, or None."""
    scope = remote_tenant(url)
    return (scope.tenant_id, scope.ns) if scope is not None else None


# ------------------------------------------------------------------------------------ folders


def _ascii(name: str) -> str:
    if name.isascii():
        return name
    from anyascii import anyascii  # only for non-ASCII names: the hook's path stays light

    return anyascii(name)


def folder_repo(name: str | None) -> str:
    """The repo part for a folder named `name` (see "Names" in the module docstring)."""
    if not name or not name.strip():
        return UNKNOWN
    if _plain(name):
        return name
    return _with_suffix(sanitize_part(_ascii(name)), f"folder:{name}")


def folder_tenant(org: str, name: str | None) -> Scope:
    return Scope(_org(org), folder_repo(name))


# ---------------------------------------------------------------------------------- the mapper


@dataclass(frozen=True, slots=True)
class TenantChoice:
    scope: Scope
    how: str  # map | recorded | remote | default


@dataclass(frozen=True, slots=True)
class _Rule:
    prefix: str  # normalised directory, no trailing separator
    org: str
    repo: str | None  # None: "ORG/*"
    windows: bool = False


class TenantMapError(ValueError):
    """``MEMFLOW_TENANT_MAP`` holds a rule that is not ``DIR=ORG/REPO``."""


def is_windows_path(path: str) -> bool:
    return bool(_WINDOWS.match(path)) or ("\\" in path and "/" not in path)


def _norm_windows(path: str) -> str:
    p = str(PureWindowsPath(path))
    return p if len(p) <= 3 and p.endswith("\\") else p.rstrip("\\")


def parse_map(text: str | None) -> list[_Rule]:
    rules: list[_Rule] = []
    for raw in re.split(r"[;\n]", text or ""):
        entry = raw.strip()
        if not entry:
            continue
        directory, sep, target = entry.rpartition("=")
        org, slash, repo = target.strip().partition("/")
        if not sep or not directory.strip() or not slash or not org or not repo:
            raise TenantMapError(
                f"{TENANT_MAP_SETTING}: {entry!r} is not DIR=ORG/REPO or DIR=ORG/*"
            )
        try:
            Scope(org, "probe" if repo == "*" else repo)
        except ScopeError as exc:
            raise TenantMapError(f"{TENANT_MAP_SETTING}: {exc}") from None
        spelled = directory.strip()
        fixed = None if repo == "*" else repo
        if is_windows_path(spelled):
            rules.append(_Rule(_norm_windows(spelled).casefold(), org, fixed, windows=True))
        else:
            rules.append(_Rule(_norm(os.path.expanduser(spelled)), org, fixed))
    return sorted(rules, key=lambda r: len(r.prefix), reverse=True)


def _norm(path: str) -> str:
    p = os.path.normpath(path)
    return p if p == os.sep else p.rstrip(os.sep)


@dataclass(frozen=True, slots=True)
class WorkingDir:
    """A session's working directory as the agent recorded it."""

    path: str  # normalised (POSIX, or Windows, as written)
    windows: bool
    local: bool  # an absolute POSIX path: its repository can be looked up on this machine

    @classmethod
    def read(cls, cwd: str | None) -> WorkingDir | None:
        if not isinstance(cwd, str) or not cwd.strip() or "\x00" in cwd or len(cwd) > 4096:
            return None
        cwd = cwd.strip()
        if is_windows_path(cwd):
            return cls(_norm_windows(cwd), True, False)
        path = _norm(os.path.expanduser(cwd))
        return cls(path, False, os.path.isabs(path))

    @property
    def name(self) -> str:
        return PureWindowsPath(self.path).name if self.windows else PurePosixPath(self.path).name

    def under(self, rule: _Rule) -> bool:
        if rule.windows != self.windows:
            return False
        path = self.path.casefold() if self.windows else self.path
        sep = "\\" if self.windows else os.sep
        return path == rule.prefix or path.startswith(rule.prefix.rstrip(sep) + sep)


class TenantMapper:
    """Maps a working directory (and the remote a transcript recorded) to a tenant scope."""

    def __init__(self, rules: list[_Rule] | None = None, default_org: str = DEFAULT_ORG) -> None:
        self.rules = rules or []
        self.default_org = sanitize_part(default_org)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> TenantMapper:
        found = agent_env(os.environ if env is None else env)
        return cls(parse_map(found.tenant_map or None), found.default_org)

    def choose(self, cwd: str | None, remote_url: str | None = None) -> TenantChoice:
        """The tenant of a session that ran in `cwd` and recorded `remote_url` (if any)."""
        where = WorkingDir.read(cwd)
        top, local_remote = find_repository(where.path) if where and where.local else (None, None)
        recorded = remote_tenant(remote_url)
        guessed = None if recorded is not None else remote_tenant(local_remote)
        remote, how = (recorded, "recorded") if recorded is not None else (guessed, "remote")
        folder = Path(top).name if top else (where.name if where else None)
        fallback = folder_tenant(self.default_org, folder)
        if where is not None:
            for rule in self.rules:
                if where.under(rule):
                    repo = rule.repo or (remote.ns if remote else fallback.ns)
                    return TenantChoice(Scope(rule.org, repo), "map")
        if remote is not None:
            return TenantChoice(remote, how)
        return TenantChoice(fallback, "default")

    def legacy(self, cwd: str | None, remote_url: str | None = None) -> Scope | None:
        """The tenant the mapping before this version gave (see `legacy_tenant`)."""
        return legacy_tenant(self, cwd, remote_url)


# ---------------------------------------------------------------------------------- legacy names


def _legacy_remote_parts(url: str | None) -> tuple[str, str] | None:
    if not url or not isinstance(url, str) or len(url) > 2048:
        return None
    url = url.strip()
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
    org, repo = parts[-2], parts[-1].removesuffix(".git")
    return (org, repo) if repo else None


def _legacy_part(text: str | None) -> str:
    value = _BAD.sub("-", redact(text) or "")
    while ".." in value:
        value = value.replace("..", ".")
    return value.lstrip("._-")[:MAX_PART].rstrip(".") or UNKNOWN


def legacy_tenant(mapper: TenantMapper, cwd: str | None, remote_url: str | None) -> Scope | None:
    """What the mapping of earlier versions named this session (the last two parts of the local
    checkout's remote, else of the recorded one; else the sanitised folder name; a Windows or
    relative cwd resolved as a POSIX path here, which this version no longer does). Used only to
    find landing files to move to the session's new tenant; None when it cannot be known."""
    where = WorkingDir.read(cwd)
    if where is not None and not where.local:
        return None  # the old name depended on the importer's directory: nothing to move
    top, local_remote = find_repository(where.path) if where and where.local else (None, None)
    remote = _legacy_remote_parts(local_remote) or _legacy_remote_parts(remote_url)
    folder = Path(top).name if top else (where.name if where else UNKNOWN)
    try:
        if where is not None:
            for rule in mapper.rules:
                if where.under(rule):
                    return None  # explicit rules did not change
        if remote:
            return Scope(_legacy_part(remote[0]), _legacy_part(remote[1]))
        return Scope(mapper.default_org, _legacy_part(folder))
    except ScopeError:
        return None


# ------------------------------------------------------------------------------- repositories


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
