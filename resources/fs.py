"""Operating-system plumbing in one place: atomic file writes, file locks, process liveness,
and storage errors that name the path and the cause.

- **Atomic writes**: a temp file in the target's directory, optionally fsynced, then renamed
  over the target, so a killed writer never leaves half a file under the real name. A temp
  file is named ``.tmp-<pid>-<start>-<random><suffix>`` (the writing process and when it
  started); a write into a directory first removes the temp files there whose writer is gone
  (or whose pid now belongs to a later process), at most every few minutes per process and
  directory.
- **Locks**: `file_lock` is `filelock.FileLock` (an OS lock on an open file: released when its
  holder dies, so a killed process never leaves a lock behind), with a timeout that names the
  file.
- **Liveness**: `process_started_at` / `process_alive` through `psutil` (`create_time` tells a
  live process from a later one that reused its pid; zombies count as gone).

Nothing else in memflow uses `fcntl`, `/proc` or `os.replace` (tests/test_layers.py), except
the landing writer, which writes through directory descriptors of its own.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import filelock
import psutil

if TYPE_CHECKING:
    import polars as pl

TEMP_PREFIX = ".tmp-"
SWEEP_INTERVAL_S = 300.0
LOCK_TIMEOUT_S = 60.0

_CAUSES = {
    errno.ENOSPC: "no space left on device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EROFS: "read-only file system",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.EIO: "input/output error",
    errno.EFBIG: "file too large",
}
_TEXT_CAUSES = {
    "no space left on device": errno.ENOSPC,
    "disk quota exceeded": errno.EDQUOT,
    "read-only file system": errno.EROFS,
    "permission denied": errno.EACCES,
}
_OS_ERROR = re.compile(r"os error (\d+)")
_TEMP_NAME = re.compile(r"\.tmp-(\d+)-(\d+)-[0-9a-f]+")


# ------------------------------------------------------------------------- storage errors


class StorageError(OSError):
    """A write failed for a reason of the storage, not of the data: no space, a read-only file
    system, no permission, an I/O error. ``str()`` is one line naming the path and the cause;
    ``errno`` and ``path`` are set."""

    def __init__(self, path: str | os.PathLike[str], code: int | None, cause: str) -> None:
        super().__init__(code, cause)
        self.path = path if isinstance(path, str) and "://" in path else Path(path)
        self.cause = cause

    def __str__(self) -> str:
        return f"cannot write {self.path}: {self.cause}"


def storage_errno(exc: BaseException) -> int | None:
    """The errno behind a write error: an OSError's, or the one a Rust I/O error (polars,
    delta-rs) names in its message; None when it is not a storage error."""
    if isinstance(exc, OSError) and exc.errno:
        return exc.errno
    text = str(exc)
    if m := _OS_ERROR.search(text):
        return int(m.group(1))
    lower = text.lower()
    return next((code for phrase, code in _TEXT_CAUSES.items() if phrase in lower), None)


def as_storage_error(path: str | os.PathLike[str], exc: BaseException) -> StorageError | None:
    """`exc` as a StorageError about `path`, or None when it is not one."""
    if isinstance(exc, StorageError):
        return exc
    code = storage_errno(exc)
    if code is None and not isinstance(exc, OSError):
        return None
    cause = _CAUSES.get(code or 0) or (
        exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc).splitlines()[0]
    )
    return StorageError(path, code, cause)


# ---------------------------------------------------------------------------- liveness


def process_started_at(pid: int) -> float | None:
    """When process `pid` started (epoch seconds); None when there is none or it is a zombie."""
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
        return proc.create_time()
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return None
    except psutil.AccessDenied:
        return 0.0  # it exists; when it started is not ours to know


def process_alive(pid: int, started_at: float | None = None, slack_s: float = 1.0) -> bool:
    """Whether `pid` runs, and (given `started_at`) is the process that started then rather
    than a later one that reused the pid."""
    now = process_started_at(pid)
    if now is None:
        return False
    return started_at is None or now == 0.0 or abs(now - started_at) <= slack_s


_PROCESS_STARTED = time.time()
_starts: dict[int, int] = {}
_swept: dict[str, float] = {}  # directory -> when this process last swept it
_sweep_lock = threading.Lock()


def _own() -> tuple[int, int]:
    pid = os.getpid()  # looked up each time: a forked child is another owner
    if pid not in _starts:
        _starts[pid] = int((process_started_at(pid) or 0.0) * 100)
    return pid, _starts[pid]


def temp_name(suffix: str = ".parquet") -> str:
    """A temp file name owned by this process: ``.tmp-<pid>-<start>-<random><suffix>``."""
    pid, start = _own()
    return f"{TEMP_PREFIX}{pid}-{start}-{os.urandom(4).hex()}{suffix}"


def stale_temp(path: Path) -> bool:
    """Whether a temp file's writer is gone (its pid dead or reused). A name without an owner
    (older versions) is stale when it is older than this process."""
    m = _TEMP_NAME.match(path.name)
    if m:
        pid, start = int(m.group(1)), int(m.group(2))
        if (pid, start) == _own():
            return False  # this process's (another thread may be writing it)
        if start == 0:
            return not process_alive(pid)
        return not process_alive(pid, start / 100, slack_s=0.02)
    try:
        return path.stat().st_mtime < _PROCESS_STARTED
    except FileNotFoundError:
        return False


def sweep_temp_files(folder: str | os.PathLike[str], *, force: bool = False) -> int:
    """Remove temp files of dead writers in `folder` (at most every `SWEEP_INTERVAL_S` per
    process and directory, unless `force`); returns how many went. Never raises."""
    key = os.path.abspath(folder)
    now = time.monotonic()
    with _sweep_lock:
        last = _swept.get(key)
        if last is not None and now - last < SWEEP_INTERVAL_S and not force:
            return 0
        _swept[key] = now
    removed = 0
    try:
        entries = list(os.scandir(key))
    except OSError:
        return 0
    for entry in entries:
        if not entry.name.startswith(TEMP_PREFIX) or not entry.is_file(follow_symlinks=False):
            continue
        path = Path(entry.path)
        if stale_temp(path):
            with contextlib.suppress(OSError):
                path.unlink()
                removed += 1
    return removed


# ------------------------------------------------------------------------- atomic writes


def atomic_write(
    target: str | os.PathLike[str],
    write: Callable[[Path], None],
    *,
    suffix: str = "",
    fsync: bool = False,
    mode: int | None = None,
) -> Path:
    """Call `write(temp_path)`, then rename the temp file over `target` (same directory);
    temp files of dead writers there are swept first. Storage failures raise `StorageError`
    naming `target`; nothing is left under the temp name."""
    target = Path(target)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise as_storage_error(target.parent, exc) or exc from exc
    sweep_temp_files(target.parent)
    tmp = target.parent / temp_name(suffix or target.suffix)
    try:
        if mode is not None:  # created with its mode: never readable by others meanwhile
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode))
        write(tmp)
        if mode is not None:
            os.chmod(tmp, mode)
        if fsync:
            fd = os.open(tmp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        os.replace(tmp, target)
    except Exception as exc:
        error = as_storage_error(target, exc)
        if error is None:
            raise
        raise error from exc
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
    return target


def atomic_write_bytes(
    target: str | os.PathLike[str], data: bytes, *, fsync: bool = False, mode: int | None = None
) -> Path:
    return atomic_write(target, lambda tmp: tmp.write_bytes(data), fsync=fsync, mode=mode)


def atomic_write_text(
    target: str | os.PathLike[str], text: str, *, fsync: bool = False, mode: int | None = None
) -> Path:
    data = text.encode("utf-8")
    return atomic_write(target, lambda tmp: tmp.write_bytes(data), fsync=fsync, mode=mode)


def atomic_write_parquet(
    df: pl.DataFrame,
    target: str | os.PathLike[str],
    *,
    statistics: bool = True,
    fsync: bool = False,
    metadata: dict[str, str] | None = None,
) -> Path:
    """A Parquet file written atomically (see `atomic_write`)."""
    return atomic_write(
        target,
        lambda tmp: df.write_parquet(tmp, statistics=statistics, metadata=metadata),
        suffix=".parquet",
        fsync=fsync,
    )


# ---------------------------------------------------------------------------------- locks


@contextlib.contextmanager
def file_lock(path: str | os.PathLike[str], timeout_s: float = LOCK_TIMEOUT_S) -> Iterator[None]:
    """An exclusive lock on `path` (created if missing) shared by every process and thread;
    waits at most `timeout_s` (negative: forever), then raises TimeoutError naming the file."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise as_storage_error(path.parent, exc) or exc from exc
    lock = filelock.FileLock(path, timeout=timeout_s, thread_local=False)
    try:
        lock.acquire()
    except filelock.Timeout:
        raise TimeoutError(f"{path} stayed locked for {timeout_s:g} s") from None
    try:
        yield
    finally:
        lock.release()


__all__ = [
    "StorageError",
    "as_storage_error",
    "atomic_write",
    "atomic_write_bytes",
    "atomic_write_parquet",
    "atomic_write_text",
    "file_lock",
    "process_alive",
    "process_started_at",
    "storage_errno",
    "sweep_temp_files",
    "temp_name",
]
