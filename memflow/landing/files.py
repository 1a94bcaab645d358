"""Landing files on disk: names relative to the root, safe opening (no symlink followed, no
special file opened), the hashing byte source and file fingerprints."""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from memflow.landing.format import (
    _CHUNK,
    _id,
    _text,
)
from memflow.landing.problems import (
    _NESTED,
    _SYMLINK,
    LandingProblem,
    _os_detail,
    _problem,
    _special,
)
from schemas.scope import Scope, ScopeError


class _Entry(NamedTuple):
    name: str
    mode: int  # lstat's st_mode
    size: int
    mtime_ns: int


def _entries(
    directory: str | int, hidden: list[str] | None = None, *, sizes: bool = True
) -> list[_Entry]:
    """Visible entries of a directory (path or fd), by name, with their lstat results (one
    ``lstat`` each, no file opened; with ``sizes=False`` the kind only, from the listing itself
    where the file system gives it, size and mtime 0). Names starting with ``.`` are skipped;
    the directories among them are added to `hidden` when it is given."""
    out = []
    with os.scandir(directory) as it:
        for entry in it:
            name = entry.name
            if name[0] == ".":
                if hidden is not None and entry.is_dir(follow_symlinks=False):
                    hidden.append(name)
                continue
            try:
                if not sizes:
                    kind = _kind_of_entry(entry)
                    if kind:
                        out.append(_Entry(name, kind, 0, 0))
                        continue
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue  # gone since listed
            out.append(_Entry(name, st.st_mode, st.st_size, st.st_mtime_ns))
    out.sort()
    return out


def _kind_of_entry(entry: os.DirEntry) -> int:
    """S_IFDIR / S_IFLNK / S_IFREG as the listing says (no syscall where the file system
    fills in the entry's type), 0 for anything else."""
    if entry.is_symlink():
        return stat.S_IFLNK
    if entry.is_dir(follow_symlinks=False):
        return stat.S_IFDIR
    if entry.is_file(follow_symlinks=False):
        return stat.S_IFREG
    return 0


def relative_name(path: str | os.PathLike[str], landing_root: str | os.PathLike[str]) -> str:
    """The path relative to the landing root, posix-style (unredacted; see `source_name`)."""
    rel = Path(os.path.abspath(path)).relative_to(os.path.abspath(landing_root))
    return rel.as_posix()


def source_name(path: str | os.PathLike[str], landing_root: str | os.PathLike[str]) -> str:
    """The ``source_file`` value of a landing file: relative, posix, ids redacted; the key of a
    file in `FileFingerprint` and in every table."""
    return _id(_text(relative_name(path, landing_root)))


def scope_of_file(path: str | os.PathLike[str], landing_root: str | os.PathLike[str]) -> Scope:
    """The tenant a landing file belongs to, from its ``<org>/<repo>/<name>`` location."""
    return _layout(path, landing_root)[0]


def _layout(
    path: str | os.PathLike[str], landing_root: str | os.PathLike[str]
) -> tuple[Scope, str]:
    """(scope, file name) of a path at ``<landing>/<org>/<repo>/<name>``; else ScopeError."""
    try:
        parts = Path(relative_name(path, landing_root)).parts
    except ValueError as exc:
        raise ScopeError(f"{path} is not under the landing root {landing_root}") from exc
    if len(parts) != 3 or parts[2] in ("..", "."):
        raise ScopeError(f"{path} is not at <landing>/<org>/<repo>/<file>")
    return Scope(parts[0], parts[1]), parts[2]


# ---------------------------------------------------------------------------- safe opening


class LandingFileError(OSError):
    """A landing file could not be opened as a regular file (`problem` says why)."""

    def __init__(self, problem: LandingProblem) -> None:
        super().__init__(f"{problem.path}: {problem.reason} ({problem.detail})")
        self.problem = problem


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
_FILE_FLAGS = (
    os.O_RDONLY
    | os.O_NOFOLLOW
    | os.O_NONBLOCK
    | getattr(os, "O_NOCTTY", 0)
    | getattr(os, "O_CLOEXEC", 0)
)


def _open_dir(root: Path, parts: Iterable[str]) -> int:
    """An fd of ``root/parts...``; the root may be a symlink (the operator chose it), no
    directory below it is followed if it is one (ELOOP / ENOTDIR)."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
    try:
        for part in parts:
            nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd


def _open_regular(
    root: Path, scope: Scope, name: str, rel: str
) -> tuple[int, os.stat_result] | LandingProblem:
    """Open ``<root>/<org>/<repo>/<name>`` for reading, or say why not: never follows a
    symlink, never opens (or blocks on) anything but a regular file. The lstat comes first
    (a FIFO or device is not even opened); the fstat after the open closes the window in which
    the name could have been swapped."""
    try:
        dir_fd = _open_dir(root, (scope.tenant_id, scope.ns))
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            return _problem(
                rel,
                "symlink",
                "a directory on its path is a symlink or not a directory; it was not read",
                scope,
            )
        if exc.errno == errno.ENOENT:
            return _problem(rel, "vanished", "it was removed before it could be read", scope)
        return _problem(rel, "unreadable_file", _os_detail(exc), scope)
    try:
        try:
            before = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except OSError as exc:
            if exc.errno == errno.ENOENT:
                return _problem(rel, "vanished", "it was removed before it could be read", scope)
            return _problem(rel, "unreadable_file", _os_detail(exc), scope)
        if stat.S_ISLNK(before.st_mode):
            return _problem(rel, "symlink", _SYMLINK, scope)
        if stat.S_ISDIR(before.st_mode):
            return _problem(rel, "nested_directory", _NESTED, scope)
        if not stat.S_ISREG(before.st_mode):
            return _problem(rel, "not_a_regular_file", _special(before.st_mode), scope)
        try:
            fd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                return _problem(rel, "symlink", _SYMLINK, scope)
            if exc.errno == errno.ENOENT:
                return _problem(rel, "vanished", "it was removed before it could be read", scope)
            return _problem(rel, "unreadable_file", _os_detail(exc), scope)
    finally:
        os.close(dir_fd)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        reason = "nested_directory" if stat.S_ISDIR(st.st_mode) else "not_a_regular_file"
        detail = _NESTED if stat.S_ISDIR(st.st_mode) else _special(st.st_mode)
        return _problem(rel, reason, detail, scope)
    if hasattr(os, "set_blocking"):
        os.set_blocking(fd, True)
    return fd, st


class _Source:
    """The bytes of one open file, read once from its fd and hashed as they are read, so a
    fingerprint describes exactly the bytes that were parsed."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.sha = hashlib.sha256()
        self.size = 0

    def read(self, n: int = _CHUNK) -> bytes:
        data = os.read(self.fd, n)
        self.sha.update(data)
        self.size += len(data)
        return data

    def read_all(self) -> bytes:
        chunks = []
        while chunk := self.read():
            chunks.append(chunk)
        return b"".join(chunks)


# ------------------------------------------------------------------------------- fingerprints


@dataclass(frozen=True, slots=True)
class FileFingerprint:
    """One version of a landing file: ``size`` and ``sha256`` of exactly the bytes read,
    ``mtime_ns`` from the open file before reading. JSON-friendly via ``as_dict``."""

    path: str  # source_name: relative to the landing root, posix, ids redacted
    size: int
    mtime_ns: int
    sha256: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "size": self.size,
            "mtime_ns": self.mtime_ns,
            "sha256": self.sha256,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FileFingerprint:
        return cls(str(data["path"]), int(data["size"]), int(data["mtime_ns"]), str(data["sha256"]))

    def same_stat(self, st: os.stat_result) -> bool:
        return self.size == st.st_size and self.mtime_ns == st.st_mtime_ns


def fingerprint(
    path: str | os.PathLike[str],
    landing_root: str | os.PathLike[str],
    previous: FileFingerprint | None = None,
) -> FileFingerprint:
    """Size, mtime and content hash of a landing file. When ``previous`` (the cursor's entry)
    has the same path, size and mtime, its hash is reused without reading the file, so a sensor
    tick over unchanged files costs one ``lstat`` each. Opens only regular files, without
    following symlinks; raises `LandingFileError` (an OSError) for anything else."""
    scope, name = _layout(path, landing_root)
    rel = source_name(path, landing_root)
    opened = _open_regular(Path(landing_root), scope, name, rel)
    if isinstance(opened, LandingProblem):
        raise LandingFileError(opened)
    fd, st = opened
    try:
        if previous is not None and previous.path == rel and previous.same_stat(st):
            return previous
        src = _Source(fd)
        while src.read():
            pass
    finally:
        os.close(fd)
    return FileFingerprint(rel, src.size, st.st_mtime_ns, src.sha.hexdigest())
