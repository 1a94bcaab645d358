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

from memflow.landing_writer import LandingWriter

STATE_DIR = ".memflow-import"
OFFSETS = "offsets"
HEAD_BYTES = 4096
MAX_STATE_BYTES = 4 << 20
VERSION = 2  # 2: each role's source saved on its own
LOCK_NAME = ".lock"
LOCK_TIMEOUT_S = 10.0
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
    """The incremental-read states of one landing zone, read and written through the landing
    writer's directory descriptors (`LandingWriter.state`: never through a link someone put in
    the zone), one writer at a time (a lock file in the folder)."""

    def __init__(self, landing_dir: Path) -> None:
        self.writer = LandingWriter(landing_dir)
        self.dir = Path(landing_dir) / STATE_DIR / OFFSETS

    @staticmethod
    def _name(path: Path) -> str:
        key = hashlib.sha256(os.path.abspath(path).encode("utf-8", "surrogatepass")).hexdigest()
        return f"{key[:32]}.json"

    def load(self, path: Path) -> FileState:
        """Where to start reading `path` (from the beginning unless it is the file read)."""
        folder = self.writer.state(STATE_DIR, OFFSETS, create=False)
        if folder is None:
            return FileState()
        with folder:
            body = folder.read(self._name(path), MAX_STATE_BYTES)
        try:
            raw = orjson.loads(body) if body is not None else None
        except orjson.JSONDecodeError:
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
        with contextlib.suppress(OSError, TimeoutError):
            folder = self.writer.state(STATE_DIR, OFFSETS)
            if folder is None:
                return  # a link or a file where the folder should be: nothing is written
            with folder, folder.lock(LOCK_NAME, LOCK_TIMEOUT_S):
                folder.write(self._name(path), body, durable=False)
