"""Reading the landing zone: the files clients (or ``POST /v1/turns``) drop for the pipeline.

Format
======

Layout: ``<landing>/<org>/<repo>/<name>.jsonl`` (or ``.parquet``). ``<org>`` and ``<repo>`` are
the tenant scope and must be valid :class:`~schemas.scope.Scope` names. Names starting with
``.`` are ignored, so a writer should write ``.<name>.tmp`` and rename it when complete. Other
file types are ignored. Only regular files are ever opened: symlinks are not followed (at any
level), FIFOs, sockets and devices are never opened, and what `discover` did not list is not
read. Everything skipped is reported as a `LandingProblem` with a reason (and, where it can be
counted without following a link or blocking, the number of lines it holds).

JSON Lines: UTF-8, one JSON object (one conversation turn) per line; blank lines are skipped.

==============  ===========================================================================
field           meaning
==============  ===========================================================================
``org``         tenant id; must equal the ``<org>`` directory (required, string)
``repo``        namespace; must equal the ``<repo>`` directory (required, string)
``session_id``  the agent session (required, non-empty string)
``turn_id``     unique within the session (required, non-empty string)
``ts``          ISO-8601 timestamp WITH a zone, e.g. ``2026-11-03T09:15:02-08:00`` or ``...Z``,
                inside the time window (`schemas.rules.TimeWindow`: from the setting
                ``MEMFLOW_HISTORY_START`` to a day after the moment the file is read)
``role``        ``user`` | ``assistant`` | ``tool``
``content``     the turn's text (required key; string, ``null`` is read as ``""``)
``client``      the agent, e.g. ``claude-code``, ``codex``, ``cursor`` (required, string)
``tool_name``   optional; the tool a ``tool`` turn called
``tool_input``  optional; the tool's input, any JSON value (a string holding a JSON object or
                array is decoded)
==============  ===========================================================================

A turn in which the agent saved facts itself has ``tool_name: "upsert_graph_triples"`` and
``tool_input: {"triples": [{"subject", "predicate", "object", "confidence"?, "valid_from"?,
"supersedes"?, "subject_type"?, "object_type"?}, ...]}``, where ``supersedes`` names the replaced
triple as ``{"subject", "predicate", "object"}``. Only the envelope (``triples`` is a list) is
checked here; each triple is validated downstream. Unknown fields are ignored.

Parquet: one row per turn with the same columns; ``ts`` may be an ISO string or a timestamp with
a time zone; ``tool_input`` may be a JSON string or a struct (null struct fields are dropped).

Rejects
=======

A bad line (row) is quarantined with its file, 1-based line number and a reason, and the rest of
the file is still read. Reasons: ``invalid_json``, ``not_an_object``, ``missing_field:<name>``,
``bad_type:<name>``, ``bad_timestamp`` (unparseable or without a zone), ``ts_before_history_start``
and ``ts_in_future`` (outside the time window; the detail names the setting),
``bad_role``, ``scope_mismatch``, ``bad_tool_input``, ``duplicate_turn`` (the same session_id
+ turn_id again: a turn already ingested wins, then the earliest by ts, file and line),
``line_too_long`` (over :data:`MAX_LINE_BYTES`), ``bad_encoding`` (not UTF-8), ``bad_value``
(a Parquet value Python cannot hold) and ``unreadable_file`` (a Parquet file that cannot be
opened). Every non-blank line (Parquet row) read is one accepted turn or one reject.

Reading
=======

`read_tenant_files` is the one way to read a tenant: it reads the regular files `discover`
lists (or the given ones, checked to lie in the tenant's directory), each through one open file
descriptor, hashing exactly the bytes it parses, so every `FileRead` names the precise version
it describes (`FileFingerprint`: size, mtime_ns, sha256). A file that changes while it is read
(in place, or replaced by a rename: the old inode's size, mtime or ctime moves) is read again,
from its name; one that keeps changing is skipped and reported (``changed_during_read``), so a
result never mixes two versions.

Secrets: rejected records go through `_record` and id fields (session_id, turn_id, client,
tool_name, file names) through `_id`, the two places redaction of this module's output
happens. Turn content is not redacted here (the turns stage does it), so never log what this
module returns.
"""

from __future__ import annotations

import errno
import functools
import hashlib
import io
import os
import stat
from collections import Counter
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, NamedTuple

import orjson
import polars as pl

from schemas import ids, redaction
from schemas.redaction import redact_id as _redact_id
from schemas.redaction import redact_record as _redact_record
from schemas.rules import (
    DEFAULT_TIME_WINDOW,
    EPOCH,
    MAX_RECORD_CHARS,
    ROLES,
    SEVERITY_ERROR,
    Reason,
    TimeWindow,
)
from schemas.scope import Scope, ScopeError
from schemas.tables import LANDING_PROBLEMS, QUARANTINE, RAW_TURNS

JSONL_SUFFIX = ".jsonl"
PARQUET_SUFFIX = ".parquet"
LANDING_SUFFIXES = (JSONL_SUFFIX, PARQUET_SUFFIX)
MAX_LINE_BYTES = 1 << 20
UPSERT_TOOL = "upsert_graph_triples"
# A turn that takes facts out of memory: tool_input {"retract": [{"fact_id"} | {"subject",
# "predicate", "object"} | {"entity"}], "reason"?, "by"?} (applied by the facts stage).
RETRACT_TOOL = "retract_facts"
STAGE = "landing"
READ_ATTEMPTS = 3  # reads of a file that changes in place before it is skipped

_FROM_RAW_TURNS = ("tenant_id", "ns", "day", "session_id", "turn_id", "ts", "role", "client")
TURN_COLUMNS: dict[str, pl.DataType] = {
    "turn_key": RAW_TURNS["turn_key"],
    **{c: RAW_TURNS[c] for c in (*_FROM_RAW_TURNS, "content", "tool_name")},
    "tool_input_json": pl.String(),  # the raw tool_input as JSON; RAW_TURNS keeps only triples
    "source_file": RAW_TURNS["source_file"],
    "line_no": RAW_TURNS["line_no"],
}
REJECT_COLUMNS: dict[str, pl.DataType] = {c: t for c, t in QUARANTINE.items() if c != "reject_id"}

_MICROSECOND = timedelta(microseconds=1)
_BOM = b"\xef\xbb\xbf"
_CHUNK = 1 << 20
# A too-long line keeps this much of its head for the record (redacted, then clipped).
_LONG_LINE_HEAD = 1 << 16
_ID_FIELDS = ("org", "repo", "session_id", "turn_id", "ts", "role", "client")
_PARQUET_FIELDS = (*_ID_FIELDS, "content", "tool_name", "tool_input")


# ----------------------------------------------------------------------------- redaction hooks


def _record(raw: str | bytes) -> str:
    """The one way a raw line (row) becomes a quarantine ``record``: redacted, then clipped to
    `MAX_RECORD_CHARS` (`schemas.redaction.redact_record`, which also finds JSON-escaped
    secrets and clips after redacting)."""
    text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else raw
    return _redact_record(text, MAX_RECORD_CHARS)


def _id(value: str) -> str:
    """The one way an id-like field (session_id, turn_id, client, a file name) leaves this
    module: with any secret replaced (`schemas.redaction.redact_id`, which keeps ids unique)."""
    return _redacted_id(value)


@functools.lru_cache(maxsize=1 << 16)
def _redacted_id(value: str) -> str:
    return _redact_id(value)


def _redacted_clip(value: str, limit: int) -> str:
    """A value shown in a detail or an id column, redacted before it is clipped (a secret cut
    in two is no longer recognised); not a record (those go through `_record`)."""
    return redaction.redact_record(value, limit)


def _text(name: str) -> str:
    """A file name as text that any table can hold: bytes that are not UTF-8 (surrogate
    escapes from the file system) become backslash escapes."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return os.fsencode(name).decode("utf-8", errors="backslashreplace")
    return name


# ---------------------------------------------------------------------------------- discovery


@dataclass(frozen=True, slots=True)
class LandingProblem:
    """Something in the landing zone that no tenant's reader consumed (a `LANDING_PROBLEMS`
    row). ``lines``: the non-blank lines / Parquet rows it holds, None when not counted (a
    symlink is not followed, a FIFO never opened)."""

    path: str  # relative to the landing root, posix, ids redacted
    reason: str  # see LANDING_PROBLEMS
    detail: str
    lines: int | None = None
    tenant_id: str | None = None
    ns: str | None = None
    # The unredacted relative path, to count lines; in memory only, never in a table.
    fs_path: str | None = field(default=None, repr=False, compare=False)

    def row(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "reason": self.reason,
            "detail": self.detail,
            "lines": self.lines,
            "tenant_id": self.tenant_id,
            "ns": self.ns,
        }


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


_KIND_NAMES = {
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
}


def _kind(mode: int) -> str:
    return _KIND_NAMES.get(stat.S_IFMT(mode), "not a regular file")


def _problem(
    rel: str, reason: str, detail: str, scope: Scope | None = None, lines: int | None = None
) -> LandingProblem:
    return LandingProblem(
        _id(_text(rel)),
        reason,
        detail,
        lines,
        scope.tenant_id if scope else None,
        scope.ns if scope else None,
        rel,
    )


_SYMLINK = "symlinks are not followed; it was not read"
_NESTED = "landing files belong directly in <org>/<repo>/; this directory was not read"
_MISPLACED = "landing files belong in <org>/<repo>/; this file was not read"


def _special(mode: int) -> str:
    return f"{_kind(mode)}, not a regular file; it was never opened"


class _Entry(NamedTuple):
    name: str
    mode: int  # lstat's st_mode


def _entries(directory: str | int) -> list[_Entry]:
    """Visible entries of a directory (path or fd), by name, with their lstat modes."""
    out = []
    with os.scandir(directory) as it:
        for entry in it:
            if entry.name.startswith("."):
                continue
            try:
                mode = entry.stat(follow_symlinks=False).st_mode
            except FileNotFoundError:
                continue  # gone since listed
            out.append(_Entry(entry.name, mode))
    return sorted(out)


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


def _scope_detail(exc: ScopeError) -> str:
    # The name itself may be anything (newlines, secrets): the path column carries it.
    text = str(exc)
    return text[text.find("is not a valid name") :] if "is not a valid name" in text else text


def _os_detail(exc: OSError) -> str:
    code = errno.errorcode.get(exc.errno or 0, "")
    return f"{exc.strerror or type(exc).__name__}" + (f" ({code})" if code else "")


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


# ------------------------------------------------------------------------------------ reading


@dataclass(frozen=True)
class LandingRead:
    """One landing file, read: accepted turns (content not redacted) and quarantined lines.

    ``fingerprint`` is the version read (None when the file was not read); ``problem`` says
    why a file was not read (then both tables are empty and ``records`` is 0)."""

    scope: Scope
    source_file: str
    turns: pl.DataFrame  # TURN_COLUMNS
    rejects: pl.DataFrame  # REJECT_COLUMNS
    records: int  # non-blank lines (JSONL) or rows (Parquet) examined
    fingerprint: FileFingerprint | None = None
    problem: LandingProblem | None = None

    @property
    def days(self) -> list[str]:
        return sorted(self.turns["day"].unique().to_list())

    def rejects_by_reason(self) -> dict[str, int]:
        return dict(sorted(Counter(self.rejects["reason"].to_list()).items()))


class _Reject(Exception):
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.detail = detail


class _Instant(NamedTuple):
    """A Parquet timestamp as microseconds since the epoch (any size: never converted to a
    Python datetime before it is known to fit)."""

    us: int
    aware: bool

    def text(self) -> str:
        try:
            return (EPOCH + self.us * _MICROSECOND).isoformat()
        except OverflowError:
            return f"{self.us} microseconds since 1970-01-01"


class _Unreadable(NamedTuple):
    """A Parquet row whose values cannot be converted to Python."""

    error: str


class _Collector:
    """Accepted rows and rejects of one file."""

    def __init__(self, scope: Scope, source_file: str, window: TimeWindow, now_us: int) -> None:
        self.scope = scope
        self.source_file = source_file
        self.window = window
        self.now_us = now_us
        self.bounds = (window.start_us, window.end_us(now_us))
        self.records = 0
        self.rows: list[tuple[Any, ...]] = []  # _ROW_FIELDS
        self.rejects: dict[str, list[Any]] = {c: [] for c in REJECT_COLUMNS if c not in _CONSTANT}

    def record(
        self, line_no: int, obj: Any, raw: str | bytes | None, *, from_struct: bool = False
    ) -> None:
        self.records += 1
        try:
            row = _check(obj, self.scope, from_struct, line_no, self)
        except _Reject as rej:
            self.reject(line_no, rej.reason, rej.detail, raw, obj)
            return
        self.rows.append(row)

    def reject(
        self,
        line_no: int | None,
        reason: str,
        detail: str,
        raw: str | bytes | None,
        obj: Any = None,
    ) -> None:
        if raw is None:  # a Parquet row: its record is its JSON form
            raw = _row_json(obj)
        rej = self.rejects
        rej["stage"].append(STAGE)
        rej["reason"].append(reason)
        rej["detail"].append(detail)
        rej["line_no"].append(line_no)
        rej["session_id"].append(_str_field(obj, "session_id"))
        rej["turn_id"].append(_str_field(obj, "turn_id"))
        rej["record"].append(_record(raw))
        rej["severity"].append(SEVERITY_ERROR)

    def frames(self) -> tuple[pl.DataFrame, pl.DataFrame]:
        constant = [
            pl.lit(self.scope.tenant_id).alias("tenant_id"),
            pl.lit(self.scope.ns).alias("ns"),
            pl.lit(self.source_file).alias("source_file"),
        ]
        columns = zip(*self.rows, strict=True) if self.rows else ([] for _ in _ROW_FIELDS)
        turns = pl.DataFrame(
            [
                pl.Series(name, values, dtype)
                for (name, dtype), values in zip(_ROW_FIELDS.items(), columns, strict=True)
            ]
        )
        keys = [
            ids.turn_key(self.scope.tenant_id, self.scope.ns, s, t)
            for s, t in zip(turns["session_id"], turns["turn_id"], strict=True)
        ]
        turns = turns.with_columns(
            pl.col("ts").cast(pl.Datetime("us")).dt.replace_time_zone("UTC"),
            pl.Series("turn_key", keys, dtype=pl.String),
            *constant,
        ).with_columns(day=pl.col("ts").dt.strftime("%Y-%m-%d"))
        rejects = pl.DataFrame(self.rejects, schema_overrides={"line_no": pl.Int64})
        return _typed(turns, TURN_COLUMNS), _typed(rejects.with_columns(constant), REJECT_COLUMNS)


_CONSTANT = frozenset({"tenant_id", "ns", "source_file"})
# What `_check` returns, in order; ts is in microseconds since the epoch.
_ROW_FIELDS: dict[str, pl.DataType] = {
    "session_id": pl.String(),
    "turn_id": pl.String(),
    "ts": pl.Int64(),
    "role": pl.String(),
    "client": pl.String(),
    "content": pl.String(),
    "tool_name": pl.String(),
    "tool_input_json": pl.String(),
    "line_no": pl.Int64(),
}
_MISSING = object()


def _typed(df: pl.DataFrame, columns: dict[str, pl.DataType]) -> pl.DataFrame:
    return df.select(pl.col(c).cast(t) for c, t in columns.items())


def _row_json(obj: Any) -> str:
    if isinstance(obj, _Unreadable):
        return ""
    if isinstance(obj, dict) and isinstance(obj.get("ts"), _Instant):
        obj = {**obj, "ts": obj["ts"].text()}
    try:
        return orjson.dumps(obj, default=str, option=orjson.OPT_NON_STR_KEYS).decode()
    except (TypeError, orjson.JSONEncodeError):
        return repr(obj)


def _check(
    obj: Any, scope: Scope, from_struct: bool, line_no: int, out: _Collector
) -> tuple[Any, ...]:
    """Validate one decoded record; returns the `_ROW_FIELDS` values or raises `_Reject`."""
    if not _plainly_valid(obj, scope):
        _diagnose(obj, scope)
    content = obj["content"]
    ts = _epoch_us(obj["ts"])
    if not out.bounds[0] <= ts <= out.bounds[1]:
        problem = out.window.check_us(ts, out.now_us)
        if problem is not None:
            raise _Reject(problem.reason, problem.detail)
    tool_name = obj.get("tool_name")
    tool_input = obj.get("tool_input")
    tool_json = None
    if tool_name is not None or tool_input is not None:
        tool_name, tool_json = _tool(tool_name, tool_input, from_struct)
    return (
        _id(obj["session_id"]),
        _id(obj["turn_id"]),
        ts,
        obj["role"],
        _id(obj["client"]),
        content or "",
        _id(tool_name) if tool_name else None,
        tool_json,
        line_no,
    )


def _plainly_valid(obj: Any, scope: Scope) -> bool:
    """The common case, checked cheaply; `_diagnose` names the problem when this says no."""
    if type(obj) is not dict:
        return False
    get = obj.get
    session_id, turn_id, client, ts = get("session_id"), get("turn_id"), get("client"), get("ts")
    content = get("content", _MISSING)
    return bool(
        get("org") == scope.tenant_id
        and get("repo") == scope.ns
        and type(session_id) is str
        and type(turn_id) is str
        and type(client) is str
        and session_id
        and turn_id
        and client
        and not (session_id.isspace() or turn_id.isspace() or client.isspace())
        and get("role") in ROLES
        and (type(ts) is str or isinstance(ts, datetime | _Instant))
        and (content is None or type(content) is str)
    )


def _diagnose(obj: Any, scope: Scope) -> None:
    """Raise the first problem of a record's required fields, in a fixed order."""
    if isinstance(obj, _Unreadable):
        raise _Reject("bad_value", f"a value of this row cannot be read ({obj.error})")
    if not isinstance(obj, dict):
        raise _Reject("not_an_object", f"a turn must be a JSON object, not {_kind_of(obj)}")
    for name in _ID_FIELDS:
        value = obj.get(name)
        if value is None or (isinstance(value, str) and not value.strip()):
            raise _Reject(
                f"missing_field:{name}", f"the required field {name!r} is missing or empty"
            )
        if not isinstance(value, str) and not (
            name == "ts" and isinstance(value, datetime | _Instant)
        ):
            raise _Reject(f"bad_type:{name}", f"{name!r} must be a string, not {_kind_of(value)}")
    if "content" not in obj:
        raise _Reject("missing_field:content", "the required field 'content' is missing")
    content = obj["content"]
    if content is not None and not isinstance(content, str):
        raise _Reject("bad_type:content", f"'content' must be a string, not {_kind_of(content)}")
    if obj["org"] != scope.tenant_id or obj["repo"] != scope.ns:
        raise _Reject(
            "scope_mismatch",
            f"the line names {_short(obj['org'])}/{_short(obj['repo'])} but lies in {scope.key}",
        )
    if obj["role"] not in ROLES:
        raise _Reject("bad_role", "'role' must be one of user, assistant, tool")


def _epoch_us(value: str | datetime | _Instant) -> int:
    """Microseconds since the epoch of an aware timestamp; any int (the window decides)."""
    if isinstance(value, _Instant):
        if not value.aware:
            raise _Reject(
                "bad_timestamp", "'ts' has no time zone (a Parquet timestamp without one)"
            )
        return value.us
    if isinstance(value, str):
        try:  # RFC 3339 allows a lower-case t and z; Python's parser only the upper case
            value = datetime.fromisoformat(value if value.isupper() else value.upper())
        except ValueError as exc:
            raise _Reject("bad_timestamp", "'ts' is not an ISO-8601 timestamp") from exc
    if value.tzinfo is None or value.utcoffset() is None:
        raise _Reject("bad_timestamp", "'ts' has no time zone (add Z or an offset like +01:00)")
    try:
        return (value - EPOCH) // _MICROSECOND
    except OverflowError as exc:  # pragma: no cover - timedelta holds any datetime difference
        raise _Reject("bad_timestamp", "'ts' is out of range") from exc


def _tool(tool_name: Any, tool_input: Any, from_struct: bool) -> tuple[str | None, str | None]:
    if tool_name is not None and not isinstance(tool_name, str):
        raise _Reject(
            "bad_type:tool_name", f"'tool_name' must be a string, not {_kind_of(tool_name)}"
        )
    tool_input = _tool_input(tool_input, from_struct)
    if tool_name == UPSERT_TOOL and not (
        isinstance(tool_input, dict) and isinstance(tool_input.get("triples"), list)
    ):
        raise _Reject("bad_tool_input", f"{UPSERT_TOOL} needs tool_input.triples as a list")
    if tool_input is None:
        return tool_name or None, None
    try:
        tool_json = orjson.dumps(tool_input, default=str, option=orjson.OPT_NON_STR_KEYS)
    except TypeError as exc:
        raise _Reject("bad_tool_input", "tool_input cannot be written as JSON") from exc
    return tool_name or None, tool_json.decode()


def _tool_input(value: Any, from_struct: bool) -> Any:
    if isinstance(value, str):
        try:
            decoded = orjson.loads(value)
        except orjson.JSONDecodeError:
            return value
        return decoded if isinstance(decoded, dict | list) else value
    if from_struct and value is not None:
        return _drop_nulls(value)
    return value


def _drop_nulls(value: Any) -> Any:
    """A Parquet struct has every field on every row; a null field means 'not given'."""
    if isinstance(value, dict):
        return {k: _drop_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_nulls(v) for v in value]
    return value


def _kind_of(value: Any) -> str:
    return {
        dict: "an object",
        list: "an array",
        str: "a string",
        bool: "a boolean",
        int: "a number",
        float: "a number",
    }.get(type(value), "null" if value is None else type(value).__name__)


def _short(value: str) -> str:
    """A value for a detail, redacted before it is clipped (a secret cut in two is no longer
    recognised)."""
    return repr(_redacted_clip(value, 100))


def _str_field(obj: Any, name: str) -> str | None:
    """An id field of a rejected record, redacted before it is clipped (a secret cut in two
    is no longer recognised)."""
    value = obj.get(name) if isinstance(obj, dict) else None
    if not isinstance(value, str):
        return None
    if len(value) <= MAX_RECORD_CHARS:
        return _id(value)
    return _redacted_clip(_redact_id(value), MAX_RECORD_CHARS)


def _jsonl_lines(src: _Source, max_line_bytes: int) -> Iterator[tuple[int, bytes, bool]]:
    """(line number, line without its newline, too long?) for every non-blank line, reading the
    file to its end. A too-long line is skipped without being held in memory; only its head is
    returned."""
    buf = b""
    pos = 0
    line_no = 0
    eof = False
    long_head: bytes | None = None  # head of a too-long line whose end is not read yet
    while True:
        nl = buf.find(b"\n", pos)
        if nl < 0 and not eof:
            if long_head is None and len(buf) - pos > max_line_bytes:
                long_head = buf[pos : pos + _LONG_LINE_HEAD]
            if long_head is not None:
                buf, pos = b"", 0
            chunk = src.read()
            if chunk:
                buf = buf[pos:] + chunk
                pos = 0
            else:
                eof = True
            continue
        if nl < 0:  # end of file: the last line has no newline
            if pos >= len(buf) and long_head is None:
                return
            raw, pos = buf[pos:], len(buf)
        else:
            raw, pos = buf[pos:nl], nl + 1
        line_no += 1
        if long_head is not None or len(raw) > max_line_bytes:
            yield line_no, long_head if long_head is not None else raw[:_LONG_LINE_HEAD], True
            long_head = None
            if nl < 0:
                return
            continue
        if line_no == 1 and raw.startswith(_BOM):
            raw = raw[len(_BOM) :]
        line = raw[:-1] if raw.endswith(b"\r") else raw
        if line.strip():
            yield line_no, line, False
        if nl < 0:
            return


def _scan_jsonl(src: _Source, out: _Collector, max_line_bytes: int) -> None:
    for line_no, line, too_long in _jsonl_lines(src, max_line_bytes):
        if too_long:
            out.records += 1
            out.reject(
                line_no, "line_too_long", f"the line is longer than {max_line_bytes} bytes", line
            )
            continue
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            out.records += 1
            try:
                line.decode("utf-8")
            except UnicodeDecodeError as bad:
                detail = f"the line is not valid UTF-8 (byte {bad.start})"
                out.reject(line_no, "bad_encoding", detail, line)
                continue
            out.reject(line_no, "invalid_json", f"the line is not valid JSON: {exc}", line)
            continue
        out.record(line_no, obj, line)


def _conversion_error(exc: BaseException) -> bool:
    """An error converting a value to Python (polars raises a Rust panic for some)."""
    return isinstance(exc, Exception) or type(exc).__name__ == "PanicException"


def _scan_parquet(src: _Source, out: _Collector) -> None:
    data = src.read_all()
    try:
        frame = pl.read_parquet(io.BytesIO(data))
    except BaseException as exc:  # any reader error means the file as a whole is unusable
        if not _conversion_error(exc):
            raise
        out.records += 1
        out.reject(
            None, "unreadable_file", f"the Parquet file cannot be read: {type(exc).__name__}", b""
        )
        return
    frame = frame.select(c for c in _PARQUET_FIELDS if c in frame.columns)
    ts_type = frame.schema.get("ts")
    scale = None
    if isinstance(ts_type, pl.Datetime):
        # Kept as integers: a timestamp Python cannot hold must not stop the read.
        scale = {"ns": (1, 1000), "us": (1, 1), "ms": (1000, 1)}[ts_type.time_unit or "us"]
        aware = ts_type.time_zone is not None
        frame = frame.with_columns(pl.col("ts").cast(pl.Int64))
    for row_no, row in _parquet_rows(frame):
        if scale is not None and isinstance(row, dict) and row.get("ts") is not None:
            mul, div = scale
            row["ts"] = _Instant(row["ts"] * mul // div, aware)
        out.record(row_no, row, None, from_struct=True)


def _parquet_rows(frame: pl.DataFrame, step: int = 4096) -> Iterator[tuple[int, Any]]:
    for start in range(0, frame.height, step):
        chunk = frame.slice(start, step)
        try:
            rows: list[Any] = chunk.rows(named=True)
        except BaseException as exc:
            if not _conversion_error(exc):
                raise
            rows = []
            for i in range(chunk.height):
                try:
                    rows.append(chunk.slice(i, 1).rows(named=True)[0])
                except BaseException as row_exc:
                    if not _conversion_error(row_exc):
                        raise
                    rows.append(_Unreadable(type(row_exc).__name__))
        yield from enumerate(rows, start=start + 1)


def _now_us(now: datetime | None) -> int:
    return ((now or datetime.now(UTC)) - EPOCH) // _MICROSECOND


def _read_file(
    path: Path,
    landing_root: Path,
    max_line_bytes: int,
    window: TimeWindow,
    now_us: int,
) -> LandingRead:
    """One file through one fd; a file changing in place is read again (`READ_ATTEMPTS`)."""
    scope, name = _layout(path, landing_root)
    rel = source_name(path, landing_root)
    lower = name.lower()
    if not lower.endswith(LANDING_SUFFIXES):
        raise ValueError(f"{path} is neither {JSONL_SUFFIX} nor {PARQUET_SUFFIX}")
    for _ in range(READ_ATTEMPTS):
        opened = _open_regular(landing_root, scope, name, rel)
        if isinstance(opened, LandingProblem):
            return _not_read(scope, rel, opened)
        fd, before = opened
        out = _Collector(scope, rel, window, now_us)
        try:
            src = _Source(fd)
            try:
                if lower.endswith(PARQUET_SUFFIX):
                    _scan_parquet(src, out)
                else:
                    _scan_jsonl(src, out, max_line_bytes)
            except OSError as exc:
                problem = _problem(rel, "unreadable_file", _os_detail(exc), scope)
                return _not_read(scope, rel, problem)
            after = os.fstat(fd)
        finally:
            os.close(fd)
        if (
            after.st_size == before.st_size == src.size
            and after.st_mtime_ns == before.st_mtime_ns
            and after.st_ctime_ns == before.st_ctime_ns
        ):
            turns, rejects = out.frames()
            fp = FileFingerprint(rel, src.size, before.st_mtime_ns, src.sha.hexdigest())
            return LandingRead(scope, rel, turns, rejects, out.records, fp)
    problem = _problem(
        rel,
        "changed_during_read",
        f"the file changed while it was read, {READ_ATTEMPTS} times; it is read once it stops "
        "changing (landing writers should write a dot-file and rename it when complete)",
        scope,
        out.records,
    )
    return _not_read(scope, rel, problem)


def _not_read(scope: Scope, rel: str, problem: LandingProblem) -> LandingRead:
    turns = pl.DataFrame(schema=TURN_COLUMNS)
    rejects = pl.DataFrame(schema=REJECT_COLUMNS)
    return LandingRead(scope, rel, turns, rejects, 0, None, problem)


def read_landing_file(
    path: str | os.PathLike[str],
    landing_root: str | os.PathLike[str],
    max_line_bytes: int = MAX_LINE_BYTES,
    *,
    window: TimeWindow | None = None,
    now: datetime | None = None,
) -> LandingRead:
    """Read one landing file into accepted turns and rejects (duplicates within the file
    included). Turns outside `window` (default: `schemas.rules.DEFAULT_TIME_WINDOW`, at `now`)
    are rejected. A file that is not a regular file, or is reached through a symlink, is not
    read: the result has ``problem`` set. Raises `ScopeError` only when the path does not lie
    at ``<landing>/<org>/<repo>/<file>`` under valid names."""
    read = _read_file(
        Path(path),
        Path(landing_root),
        max_line_bytes,
        window or DEFAULT_TIME_WINDOW,
        _now_us(now),
    )
    if read.problem is not None or read.turns.is_empty():
        return read
    kept, duplicates = split_duplicates(read.turns)
    if duplicates.is_empty():
        return read
    rejects = pl.concat([read.rejects, duplicates], how="vertical")
    return replace(read, turns=kept, rejects=rejects.sort("line_no", nulls_last=True))


def days_in_file(
    path: str | os.PathLike[str],
    landing_root: str | os.PathLike[str],
    max_line_bytes: int = MAX_LINE_BYTES,
    *,
    window: TimeWindow | None = None,
    now: datetime | None = None,
) -> list[str]:
    """The UTC days (``YYYY-MM-DD``) of the turns `read_landing_file` would accept, sorted."""
    return read_landing_file(path, landing_root, max_line_bytes, window=window, now=now).days


# ---------------------------------------------------------------------------------- duplicates


def split_duplicates(
    turns: pl.DataFrame, ingested_keys: Collection[str] | pl.Series = ()
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The ``duplicate_turn`` rule, in one place: (kept turns, duplicate rejects).

    A turn is identified by its ``turn_key`` (tenant, ns, session_id, turn_id). A key in
    `ingested_keys` (turns already stored, from earlier files or runs) wins over any new turn;
    among new turns the earliest wins, by ``ts``, then ``source_file``, then ``line_no``.
    `turns` has `TURN_COLUMNS`; kept turns keep their order, rejects have `REJECT_COLUMNS`.
    """
    if turns.is_empty():
        return turns, pl.DataFrame(schema=REJECT_COLUMNS)
    ingested = set(
        ingested_keys.to_list() if isinstance(ingested_keys, pl.Series) else ingested_keys
    )
    keys = turns["turn_key"]
    if not keys.is_duplicated().any() and not (ingested and keys.is_in(list(ingested)).any()):
        return turns, pl.DataFrame(schema=REJECT_COLUMNS)  # the common case: nothing to drop
    ordered = turns.with_row_index("_i").sort("ts", "source_file", "line_no", "_i")
    first: dict[str, tuple[str, int]] = {}
    dropped: list[int] = []
    details: list[str] = []
    for i, key, source, line in ordered.select(
        "_i", "turn_key", "source_file", "line_no"
    ).iter_rows():
        if key in ingested:
            dropped.append(i)
            details.append(
                "this session_id and turn_id were already ingested; the stored turn was kept"
            )
        elif key in first:
            kept_source, kept_line = first[key]
            dropped.append(i)
            where = "earlier in this file" if kept_source == source else f"in {kept_source}"
            details.append(
                f"this session_id and turn_id already appeared {where} (line {kept_line}); "
                "the earliest turn was kept"
            )
        else:
            first[key] = (source, line)
    if not dropped:
        return turns, pl.DataFrame(schema=REJECT_COLUMNS)
    index = pl.Series("_i", dropped, dtype=pl.UInt32)
    marked = turns.with_row_index("_i")
    dupes = (
        marked.join(pl.DataFrame([index, pl.Series("detail", details)]), on="_i", how="inner")
        .sort("_i")
        .select(
            "tenant_id",
            "ns",
            pl.lit(STAGE).alias("stage"),
            pl.lit(Reason.DUPLICATE_TURN).alias("reason"),
            "detail",
            "source_file",
            "line_no",
            "session_id",
            "turn_id",
            pl.lit(None, dtype=pl.String).alias("record"),
            pl.lit(SEVERITY_ERROR).alias("severity"),
        )
    )
    kept = marked.filter(~pl.col("_i").is_in(index)).drop("_i")
    return kept, _typed(dupes, REJECT_COLUMNS)


# -------------------------------------------------------------------------------- one tenant


@dataclass(frozen=True, slots=True)
class FileRead:
    """What reading one landing file of a tenant came to. ``records == turns + rejects`` for a
    file that was read (duplicates of other files count as its rejects)."""

    source_file: str  # the value of the source_file column; the landing index key
    path: Path  # where it was read; keep in memory only (names may hold secrets)
    fingerprint: FileFingerprint | None  # the exact bytes read; None when not read
    records: int
    turns: int
    rejects: int
    problem: LandingProblem | None = None

    @property
    def read(self) -> bool:
        return self.fingerprint is not None


@dataclass(frozen=True)
class TenantRead:
    """One tenant's landing files, read: deduplicated turns (content not redacted), landing
    rejects (duplicates included), one `FileRead` per file and the problems met (entries of the
    tenant's directory that were not read, with the lines they hold where countable)."""

    scope: Scope
    turns: pl.DataFrame  # TURN_COLUMNS
    rejects: pl.DataFrame  # REJECT_COLUMNS
    files: list[FileRead] = field(default_factory=list)
    problems: list[LandingProblem] = field(default_factory=list)

    @property
    def records(self) -> int:
        """Non-blank lines / rows of the files read (= turns + rejects)."""
        return sum(f.records for f in self.files)

    @property
    def fingerprints(self) -> list[FileFingerprint]:
        return [f.fingerprint for f in self.files if f.fingerprint is not None]

    def rejects_by_reason(self) -> dict[str, int]:
        return dict(sorted(Counter(self.rejects["reason"].to_list()).items()))

    def problems_frame(self) -> pl.DataFrame:
        return problems_frame(self.problems)


def read_tenant_files(
    landing_root: str | os.PathLike[str],
    scope: Scope,
    files: Iterable[str | os.PathLike[str]] | None = None,
    *,
    window: TimeWindow | None = None,
    ingested_keys: Collection[str] | pl.Series = (),
    now: datetime | None = None,
    max_line_bytes: int = MAX_LINE_BYTES,
    count_problem_lines: bool = True,
) -> TenantRead:
    """Read a tenant's landing files: the regular files of ``<landing>/<org>/<repo>/`` (listed
    here like `discover` does), or only `files` (e.g. the new or changed ones; each must lie
    directly in that directory, anything else is a problem and is not opened).

    Turns outside `window` (at `now`, one instant for the whole read) are rejected, and
    ``duplicate_turn`` is applied across the files and against `ingested_keys` (`turn_key`
    values already stored). Never raises for what the landing zone holds: every entry that is
    not read is a problem with a reason, and with the lines it holds where they can be counted
    without following a link or blocking (`count_problem_lines`)."""
    root = Path(landing_root)
    rel_repo = f"{scope.tenant_id}/{scope.ns}"
    problems: list[LandingProblem] = []
    names: list[str] = []
    if files is None:
        try:
            dir_fd = _open_dir(root, (scope.tenant_id, scope.ns))
        except OSError as exc:
            reason = "symlink" if exc.errno in (errno.ELOOP, errno.ENOTDIR) else "vanished"
            if exc.errno not in (errno.ELOOP, errno.ENOTDIR, errno.ENOENT):
                reason = "unreadable_directory"
            detail = _SYMLINK if reason == "symlink" else _os_detail(exc)
            problems.append(_problem(rel_repo, reason, detail, scope))
        else:
            try:
                names, problems = _tenant_entries(dir_fd, rel_repo, scope)
            except OSError as exc:
                problems.append(_problem(rel_repo, "unreadable_directory", _os_detail(exc), scope))
            finally:
                os.close(dir_fd)
    else:
        for given in files:
            try:
                given_scope, name = _layout(given, root)
            except (ScopeError, ValueError):
                given_scope, name = None, ""
            if given_scope != scope or not is_landing_name(name):
                try:
                    shown = relative_name(given, root)
                except ValueError:
                    shown = os.path.basename(given)
                problems.append(
                    _problem(
                        shown,
                        "not_in_tenant",
                        f"not a landing file of {scope.key}; it was not read",
                        scope,
                    )
                )
                continue
            if name not in names:
                names.append(name)
    now_us = _now_us(now)
    use = window or DEFAULT_TIME_WINDOW
    reads: list[LandingRead] = []
    paths: list[Path] = []
    for name in sorted(names):
        path = root / scope.tenant_id / scope.ns / name
        reads.append(_read_file(path, root, max_line_bytes, use, now_us))
        paths.append(path)
    read_ok = [r for r in reads if r.problem is None]
    turns = (
        pl.concat([r.turns for r in read_ok], how="vertical")
        if read_ok
        else pl.DataFrame(schema=TURN_COLUMNS)
    )
    kept, duplicates = split_duplicates(turns, ingested_keys)
    rejects = pl.concat(
        [*(r.rejects for r in read_ok), duplicates, pl.DataFrame(schema=REJECT_COLUMNS)],
        how="vertical",
    )
    kept_by_file = Counter(kept["source_file"].to_list())
    rejects_by_file = Counter(rejects["source_file"].to_list())
    outcomes: list[FileRead] = []
    for read, path in zip(reads, paths, strict=True):
        if read.problem is not None:
            problems.append(read.problem)
        outcomes.append(
            FileRead(
                read.source_file,
                path,
                read.fingerprint,
                read.records,
                kept_by_file.get(read.source_file, 0),
                rejects_by_file.get(read.source_file, 0),
                read.problem,
            )
        )
    if count_problem_lines:
        problems = [_with_lines(root, p) if p.lines is None else p for p in problems]
    return TenantRead(scope, kept, rejects, outcomes, problems)


# ---------------------------------------------------------------------------- problem lines

# Problems whose lines can be counted: what they hold is regular files and directories.
_COUNTABLE = frozenset(
    {"invalid_scope", "nested_directory", "misplaced_file", "changed_during_read"}
)
_MAX_DEPTH = 16


def _with_lines(root: Path, problem: LandingProblem) -> LandingProblem:
    if problem.reason not in _COUNTABLE or problem.fs_path is None:
        return problem
    return replace(problem, lines=count_records(root, problem.fs_path))


def count_records(landing_root: str | os.PathLike[str], rel_path: str) -> int | None:
    """How many records (non-blank JSONL lines, Parquet rows; 1 for an unreadable Parquet
    file) the landing files at `rel_path` hold: a file, or every landing file below a
    directory. Symlinks are not followed (at any level), special files never opened, hidden
    names skipped. None when the path itself cannot be counted (a symlink, a special file,
    gone)."""
    root = Path(landing_root)
    parts = [p for p in Path(rel_path).parts if p not in ("", ".")]
    if any(p == ".." for p in parts):
        return None
    try:
        parent_fd = _open_dir(root, parts[:-1]) if parts else None
    except OSError:
        return None
    try:
        if parent_fd is None:
            fd = _open_dir(root, ())
            return _count_dir(fd, 0)
        name = parts[-1]
        st = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
        if stat.S_ISDIR(st.st_mode):
            return _count_dir(os.open(name, _DIR_FLAGS, dir_fd=parent_fd), 0)
        if stat.S_ISREG(st.st_mode):
            return _count_file(parent_fd, name) or 0
        return None
    except OSError:
        return None
    finally:
        if parent_fd is not None:
            os.close(parent_fd)


def _count_dir(fd: int, depth: int) -> int:
    """Records of the landing files below an open directory (the fd is closed)."""
    total = 0
    try:
        if depth > _MAX_DEPTH:
            return 0
        for name, mode in _entries(fd):
            if stat.S_ISDIR(mode):
                try:
                    sub = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except OSError:
                    continue
                total += _count_dir(sub, depth + 1)
            elif stat.S_ISREG(mode) and is_landing_name(name):
                total += _count_file(fd, name) or 0
    finally:
        os.close(fd)
    return total


def _count_file(dir_fd: int, name: str) -> int | None:
    try:
        fd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        src = _Source(fd)
        if name.lower().endswith(PARQUET_SUFFIX):
            import pyarrow.parquet as pq

            try:
                return int(pq.ParquetFile(io.BytesIO(src.read_all())).metadata.num_rows)
            except Exception:
                return 1  # the reader quarantines it as one unreadable_file record
        if not name.lower().endswith(JSONL_SUFFIX):
            return None
        return sum(1 for _ in _jsonl_lines(src, MAX_LINE_BYTES))
    except OSError:
        return None
    finally:
        os.close(fd)


def problems_frame(problems: Iterable[LandingProblem]) -> pl.DataFrame:
    """`LANDING_PROBLEMS` rows for problems (from `discover`, `read_tenant_files`)."""
    rows = [p.row() for p in problems]
    if not rows:
        return pl.DataFrame(schema=LANDING_PROBLEMS)
    return pl.DataFrame(rows, schema=LANDING_PROBLEMS)


def landing_problems(
    landing_root: str | os.PathLike[str],
    found: Discovery | None = None,
    *,
    count_lines: bool = True,
) -> pl.DataFrame:
    """The landing zone's problems as a `LANDING_PROBLEMS` table: `discover`'s (run again
    when `found` is not given), each with the lines it holds where they can be counted
    (directories with invalid scope names, nested directories, misplaced files)."""
    found = discover(landing_root) if found is None else found
    root = Path(landing_root)
    problems = found.problems
    if count_lines:
        problems = [_with_lines(root, p) if p.lines is None else p for p in problems]
    return problems_frame(problems)
