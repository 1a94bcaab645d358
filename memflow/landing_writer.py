"""The one writer of the landing zone: what the API, the MCP server, the importers and the hooks
hand the pipeline.

Every landing file is written the same way, through an open descriptor of its tenant's directory
``<landing>/<org>/<repo>``: the ``<org>`` and ``<repo>`` directories are created and opened with
``O_NOFOLLOW`` (a symlink there, or a file, is refused with `LandingUnsafe`: the reader would
never read through it), the body goes to a hidden ``.<name>`` (the landing reader ignores dot
files), is flushed and fsynced when the write is durable, is checked (optional: the caller's
`check` sees the complete hidden file, e.g. the landing reader's own rules), and only then renamed
to ``<name>``, so the sensor never sees half a file nor one that failed its check. Nothing is
opened by path under the root: names are resolved against the directory's descriptor only.

- `LandingWriter.write`: one request of the API or MCP becomes one file,
  ``api-<UTC time>-<uuid>.jsonl`` (durable: fsynced before the rename, the directory after).
- `LandingWriter.tenant`: a `TenantDir` for writers that keep a ledger in the directory
  (the importers: ``<client>-<session>-<digest>.jsonl``, a lock file, reading their own files).
- `LandingWriter.state`: a `TenantDir` of the zone's own state under a dot directory (the
  importers' per-file offsets), written and read the same way.

The format of a line is `memflow.landing`'s; `turn_line` writes one.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from memflow.landing import JSONL_SUFFIX, MAX_LINE_BYTES, UPSERT_TOOL
from schemas.scope import Scope

FILE_PREFIX = "api-"
FILE_MODE = 0o640
DIR_MODE = 0o750
MAX_OWN_FILE_BYTES = 64 << 20  # a ledger file read back larger than this is not ours
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | _CLOEXEC
_READ_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | _CLOEXEC
_LOCK_FILE = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | _CLOEXEC
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | _CLOEXEC


class LineTooLong(ValueError):
    """A turn does not fit in one landing line (`memflow.landing.MAX_LINE_BYTES`)."""


class LandingUnsafe(OSError):
    """The tenant's landing directory is not a plain directory under the root (a symlink, a
    file): nothing is written through it, since the reader would never read it back."""


def iso_utc(t: datetime) -> str:
    """ISO-8601 with an explicit zone, as the landing format requires."""
    if t.tzinfo is None:
        t = t.replace(tzinfo=UTC)
    return t.astimezone(UTC).isoformat().replace("+00:00", "Z")


def turn_line(scope: Scope, turn: Mapping[str, Any]) -> bytes:
    """One landing line for `turn` (fields of the landing format), with the scope set; absent
    optional fields are left out, a missing `content` is written as "" (the key is required)."""
    record: dict[str, Any] = {"org": scope.tenant_id, "repo": scope.ns, "content": ""}
    for key, value in turn.items():
        if key in ("org", "repo") or value is None:
            continue
        record[key] = iso_utc(value) if isinstance(value, datetime) else value
    line = orjson.dumps(record)
    if len(line) > MAX_LINE_BYTES:
        raise LineTooLong(f"a turn is longer than {MAX_LINE_BYTES} bytes as a landing line")
    return line


def explicit_turn(
    *,
    session_id: str,
    turn_id: str,
    ts: datetime,
    client: str,
    triples: Sequence[Mapping[str, Any]],
) -> dict[str, Any]:
    """A tool turn in which the agent saved `triples` (the pipeline's explicit-triple path)."""
    return {
        "session_id": session_id,
        "turn_id": turn_id,
        "ts": ts,
        "role": "tool",
        "content": "",
        "client": client,
        "tool_name": UPSERT_TOOL,
        "tool_input": {"triples": list(triples)},
    }


@dataclass(frozen=True, slots=True)
class Landed:
    scope: Scope
    path: Path
    lines: int

    @property
    def name(self) -> str:
        return self.path.name


Check = Callable[[Path], None]


class TenantDir:
    """An open descriptor of one tenant's landing directory; every name is resolved against it.

    Use it as a context manager (`LandingWriter.tenant`); it is closed on exit."""

    def __init__(self, fd: int, path: Path) -> None:
        self.fd = fd
        self.path = path

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def names(self, prefix: str = "") -> list[str]:
        """Names in the directory that start with `prefix` (dot files included)."""
        return sorted(n for n in os.listdir(self.fd) if n.startswith(prefix))

    def read(self, name: str, limit: int = MAX_OWN_FILE_BYTES) -> bytes | None:
        """The bytes of regular file `name`, or None when it is gone, a link, not a regular
        file or larger than `limit` (never followed, never blocks on a FIFO)."""
        try:
            fd = os.open(
                name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | _CLOEXEC, dir_fd=self.fd
            )
        except OSError:
            return None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
                return None
            with os.fdopen(fd, "rb", closefd=False) as fh:
                return fh.read(limit + 1)[:limit]
        finally:
            os.close(fd)

    def write(
        self, name: str, body: bytes, *, check: Check | None = None, durable: bool = True
    ) -> Path:
        """`body` as the new file `name`: hidden write, fsync (if `durable`), `check`, rename.
        If `check` raises, nothing is landed and the exception propagates."""
        if name.startswith(".") or "/" in name or not name:
            raise ValueError(f"not a landing file name: {name!r}")
        hidden = f".{name}"  # still ends in the file's suffix, so the reader can check it
        with contextlib.suppress(FileNotFoundError):
            os.unlink(hidden, dir_fd=self.fd)  # left by a crashed writer of the same name
        fd = os.open(hidden, _NEW_FILE, FILE_MODE, dir_fd=self.fd)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(body)
                if durable:
                    fh.flush()
                    os.fsync(fh.fileno())
            if check is not None:
                check(self.path / hidden)
            os.replace(hidden, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(hidden, dir_fd=self.fd)
            raise
        if durable:
            os.fsync(self.fd)  # the rename itself survives a power failure
        return self.path / name

    def unlink(self, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=self.fd)

    @contextlib.contextmanager
    def lock(self, name: str, timeout_s: float) -> Iterator[None]:
        """An exclusive lock on the dot file `name` of this directory (POSIX flock), waited for
        at most `timeout_s`; the lock file is opened without following a link."""
        try:
            import fcntl
        except ImportError:  # no flock (Windows): writers of one session must not overlap
            yield
            return
        fd = os.open(
            name, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | _CLOEXEC, FILE_MODE, dir_fd=self.fd
        )
        try:
            deadline = time.monotonic() + timeout_s
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"{self.path / name} stayed locked") from None
                    time.sleep(0.05)
            yield
        finally:
            os.close(fd)

    def __enter__(self) -> TenantDir:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class LandingWriter:
    """Writes whole files atomically under one landing root, never through a symlink."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    def directory(self, scope: Scope) -> Path:
        return self.root / scope.tenant_id / scope.ns

    def existing(self, scope: Scope) -> TenantDir | None:
        """The tenant's directory if it exists as a plain directory (nothing is created)."""
        try:
            return self._open((scope.tenant_id, scope.ns), create=False)
        except OSError:
            return None

    def tenant(self, scope: Scope) -> TenantDir:
        """The tenant's directory, created as needed; the org and repo directories are opened
        without following symlinks (the root may be one: the operator chose it)."""
        return self._open((scope.tenant_id, scope.ns), create=True)

    def state(self, *parts: str, create: bool = True) -> TenantDir | None:
        """A directory of the zone's own state under a dot directory (``.memflow-import/
        offsets``: the landing reader never reads dot directories), opened like a tenant's;
        None when it is absent (and not `create`), a link or not a directory."""
        if (
            not parts
            or not parts[0].startswith(".")
            or any("/" in p or p in ("", "..") for p in parts)
        ):
            raise ValueError(f"not a state directory: {parts!r}")
        try:
            return self._open(parts, create=create)
        except OSError:
            return None

    def _open(self, parts: Sequence[str], *, create: bool) -> TenantDir:
        """`root/parts...` opened part by part against the parent's descriptor, never through a
        link (`LandingUnsafe` for a link or a file; `OSError` when absent and not `create`)."""
        if create:
            self.root.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | _CLOEXEC)
        try:
            for part in parts:
                if create:
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(part, DIR_MODE, dir_fd=fd)
                try:
                    nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                        where = self.root.joinpath(*parts)
                        raise LandingUnsafe(
                            exc.errno, f"{where} is not a plain directory"
                        ) from None
                    raise
                os.close(fd)
                fd = nxt
        except BaseException:
            os.close(fd)
            raise
        return TenantDir(fd, self.root.joinpath(*parts))

    def write(
        self,
        scope: Scope,
        turns: Sequence[Mapping[str, Any]],
        check: Check | None = None,
    ) -> Landed:
        """Land `turns` of `scope` as one new durable file; returns where it went. `check` sees
        the complete file under its hidden name first; if it raises, nothing is landed. Raises
        `LandingUnsafe` when the tenant's directory is a symlink or not a directory."""
        if not turns:
            raise ValueError("nothing to land")
        body = b"".join(turn_line(scope, t) + b"\n" for t in turns)
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
        name = f"{FILE_PREFIX}{stamp}-{uuid.uuid4().hex}{JSONL_SUFFIX}"
        with self.tenant(scope) as directory:
            path = directory.write(name, body, check=check, durable=True)
        return Landed(scope, path, len(turns))
