"""Writing the landing zone: what ``POST /v1/turns`` and ``POST /v1/triples`` hand the pipeline.

One request becomes one file, ``<landing>/<org>/<repo>/api-<UTC time>-<uuid>.jsonl``, in the
format `memflow.landing` documents (one turn per line, with ``org`` and ``repo``). The file is
written as ``.api-....jsonl`` (the landing reader ignores dot files), flushed to disk, checked,
and only then renamed, so the sensor never sees half a file nor one that failed its check.
Nothing is written through a symlinked ``<org>`` or ``<repo>`` directory (`LandingUnsafe`).
"""

from __future__ import annotations

import contextlib
import errno
import os
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from memflow.landing import JSONL_SUFFIX, MAX_LINE_BYTES, UPSERT_TOOL
from schemas.scope import Scope

FILE_PREFIX = "api-"


class LineTooLong(ValueError):
    """A turn does not fit in one landing line (`memflow.landing.MAX_LINE_BYTES`)."""


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


class LandingUnsafe(OSError):
    """The tenant's landing directory is not a plain directory under the root (a symlink, a
    file): nothing is written through it, since the reader would never read it back."""


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


class LandingWriter:
    """Writes whole files atomically under one landing root, never through a symlink."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    def directory(self, scope: Scope) -> Path:
        return self.root / scope.tenant_id / scope.ns

    def _directory_fd(self, scope: Scope) -> int:
        """An fd of ``<root>/<org>/<repo>``, created as needed; the org and repo directories
        are opened without following symlinks (the root may be one: the operator chose it)."""
        self.root.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
        try:
            for part in (scope.tenant_id, scope.ns):
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o750, dir_fd=fd)
                try:
                    nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                        raise LandingUnsafe(
                            exc.errno, f"{self.directory(scope)} is not a plain directory"
                        ) from None
                    raise
                os.close(fd)
                fd = nxt
        except BaseException:
            os.close(fd)
            raise
        return fd

    def write(
        self,
        scope: Scope,
        turns: Sequence[Mapping[str, Any]],
        check: Callable[[Path], None] | None = None,
    ) -> Landed:
        """Land `turns` of `scope` as one new file; returns where it went. `check` sees the
        complete file under its hidden name first; if it raises, nothing is landed. Raises
        `LandingUnsafe` when the tenant's directory is a symlink or not a directory."""
        if not turns:
            raise ValueError("nothing to land")
        body = b"".join(turn_line(scope, t) + b"\n" for t in turns)
        directory = self.directory(scope)
        dir_fd = self._directory_fd(scope)
        try:
            stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
            name = f"{FILE_PREFIX}{stamp}-{uuid.uuid4().hex}{JSONL_SUFFIX}"
            hidden = f".{name}"  # still a .jsonl, so the reader can check it
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
            fd = os.open(hidden, flags, 0o640, dir_fd=dir_fd)
            try:
                with os.fdopen(fd, "wb") as fh:
                    fh.write(body)
                    fh.flush()
                    os.fsync(fh.fileno())
                if check is not None:
                    check(directory / hidden)
                os.replace(hidden, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            except BaseException:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(hidden, dir_fd=dir_fd)
                raise
        finally:
            os.close(dir_fd)
        return Landed(scope, directory / name, len(turns))
