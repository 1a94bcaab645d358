"""Where the last import of a growing transcript stopped, so the next one reads only what is new.

Codex's ``Stop`` hook runs after every turn; re-reading a whole 1 MB rollout each time cost about
2 s a turn. An incremental import keeps, per transcript file, the byte offset and line number it
read up to and the reader's state (the session, the choices it made about the file), in
``<landing>/.memflow-import/offsets/<digest of the file's path>.json`` (a dot directory: the
pipeline never reads it; no landing files in it). The next import starts there, if the file is
still the one it read: same device and inode, not shorter than the offset, the same first bytes
(up to 4 KiB of what was read).
Anything else (a rewritten or replaced file, a state file that cannot be read) starts from the
beginning, which lands nothing twice: the landing files stay the ledger of landed turns. The state
is saved only after what was read has landed.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

STATE_DIR = ".memflow-import"
OFFSETS = "offsets"
HEAD_BYTES = 4096
MAX_STATE_BYTES = 4 << 20
VERSION = 1
_NOFOLLOW = os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


@dataclass
class FileState:
    """What an incremental read of one file knows: where it stopped and the reader's state."""

    offset: int = 0
    line_no: int = 0
    reader: dict[str, Any] = field(default_factory=dict)
    identity: tuple[int, int] = (0, 0)  # (st_dev, st_ino)
    head: str = ""  # sha256 of the first min(offset, HEAD_BYTES) bytes


def _head(path: Path, n: int) -> tuple[str, tuple[int, int], int] | None:
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        head = os.read(fd, min(n, HEAD_BYTES))
    finally:
        os.close(fd)
    return hashlib.sha256(head).hexdigest(), (st.st_dev, st.st_ino), st.st_size


class Offsets:
    """The incremental-read states of one landing zone."""

    def __init__(self, landing_dir: Path) -> None:
        self.dir = Path(landing_dir) / STATE_DIR / OFFSETS

    def _file(self, path: Path) -> Path:
        key = hashlib.sha256(os.path.abspath(path).encode("utf-8", "surrogatepass")).hexdigest()
        return self.dir / f"{key[:32]}.json"

    def load(self, path: Path) -> FileState:
        """Where to start reading `path` (from the beginning unless it is the file read)."""
        try:
            fd = os.open(self._file(path), os.O_RDONLY | _NOFOLLOW)
            with os.fdopen(fd, "rb") as fh:
                raw = orjson.loads(fh.read(MAX_STATE_BYTES))
        except (OSError, orjson.JSONDecodeError):
            return FileState()
        if not isinstance(raw, dict) or raw.get("version") != VERSION:
            return FileState()
        offset = raw.get("offset")
        now = _head(path, offset) if isinstance(offset, int) and offset >= 0 else None
        if now is None:
            return FileState()
        head, identity, size = now
        same = (
            raw.get("path") == os.path.abspath(path)
            and tuple(raw.get("identity") or ()) == identity
            and raw.get("head") == head
            and isinstance(offset, int)
            and offset <= size
        )
        if not same:
            return FileState()
        return FileState(offset, int(raw.get("line_no") or 0), dict(raw.get("reader") or {}))

    def seal(self, path: Path, state: FileState) -> FileState:
        """`state` with the identity and head of `path` as read up to its offset."""
        now = _head(path, state.offset)
        if now is not None:
            state.head, state.identity = now[0], now[1]
        return state

    def save(self, path: Path, state: FileState) -> None:
        """Record `state` for `path` (atomically; a failure only costs a full read next time)."""
        with contextlib.suppress(OSError):
            self.dir.mkdir(parents=True, exist_ok=True, mode=0o750)
            if any(p.is_symlink() for p in (self.dir, self.dir.parent)) or not self.dir.is_dir():
                return  # never write through a link someone put in the landing zone
            final = self._file(path)
            tmp = final.with_name(f".{final.name}.{os.getpid()}.tmp")
            body = orjson.dumps(
                {
                    "version": VERSION,
                    "path": os.path.abspath(path),
                    "identity": list(state.identity),
                    "head": state.head,
                    "offset": state.offset,
                    "line_no": state.line_no,
                    "reader": state.reader,
                }
            )
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _NOFOLLOW, 0o640)
            with os.fdopen(fd, "wb") as fh:
                fh.write(body)
            os.replace(tmp, final)
