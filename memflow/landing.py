"""Reading the landing zone: the files clients (or ``POST /v1/turns``) drop for the pipeline.

Format
======

Layout: ``<landing>/<org>/<repo>/<name>.jsonl`` (or ``.parquet``). ``<org>`` and ``<repo>`` are
the tenant scope and must be valid :class:`~schemas.scope.Scope` names. Names starting with
``.`` are ignored, so a writer should write ``.<name>.tmp`` and rename it when complete. Other
file types are ignored; symlinks are not followed; misplaced landing files and directories
that are not valid scopes are reported as problems by :func:`discover`.

JSON Lines: UTF-8, one JSON object (one conversation turn) per line; blank lines are skipped.

==============  ===========================================================================
field           meaning
==============  ===========================================================================
``org``         tenant id; must equal the ``<org>`` directory (required, string)
``repo``        namespace; must equal the ``<repo>`` directory (required, string)
``session_id``  the agent session (required, non-empty string)
``turn_id``     unique within the session (required, non-empty string)
``ts``          ISO-8601 timestamp WITH a zone, e.g. ``2026-11-03T09:15:02-08:00`` or ``...Z``
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
``bad_type:<name>``, ``bad_timestamp`` (unparseable or without a zone), ``bad_role``,
``scope_mismatch``, ``bad_tool_input``, ``duplicate_turn`` (the first occurrence of a
session_id + turn_id in the file wins), ``line_too_long`` (over :data:`MAX_LINE_BYTES`),
``bad_encoding`` (not UTF-8), and ``unreadable_file`` (a Parquet file that cannot be opened).

Nothing here redacts: turns and reject records may hold secrets until the ``raw_turns`` asset
redacts them, so never log what this module returns.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import polars as pl

from schemas.rules import EPOCH, MAX_RECORD_CHARS, ROLES
from schemas.scope import Scope, ScopeError
from schemas.tables import QUARANTINE, RAW_TURNS

JSONL_SUFFIX = ".jsonl"
PARQUET_SUFFIX = ".parquet"
LANDING_SUFFIXES = (JSONL_SUFFIX, PARQUET_SUFFIX)
MAX_LINE_BYTES = 1 << 20
UPSERT_TOOL = "upsert_graph_triples"
STAGE = "landing"

_FROM_RAW_TURNS = ("tenant_id", "ns", "day", "session_id", "turn_id", "ts", "role", "client")
TURN_COLUMNS: dict[str, pl.DataType] = {
    **{c: RAW_TURNS[c] for c in (*_FROM_RAW_TURNS, "content", "tool_name")},
    "tool_input_json": pl.String(),  # the raw tool_input as JSON; RAW_TURNS keeps only triples
    "source_file": RAW_TURNS["source_file"],
    "line_no": RAW_TURNS["line_no"],
}
REJECT_COLUMNS: dict[str, pl.DataType] = {c: t for c, t in QUARANTINE.items() if c != "reject_id"}

_MICROSECOND = timedelta(microseconds=1)
_BOM = b"\xef\xbb\xbf"
# Where a clipped record may end, so that it never ends in part of a token (a secret cut in two
# would no longer be recognisable to the redactor).
_TOKEN_END = re.compile(r"[\s\"',:;=(){}\[\]<>\\]")
_ID_FIELDS = ("org", "repo", "session_id", "turn_id", "ts", "role", "client")


# ---------------------------------------------------------------------------------- discovery


@dataclass(frozen=True, slots=True)
class LandingProblem:
    """Something in the landing zone that is not a tenant's landing file and was not read."""

    path: str  # relative to the landing root, posix
    reason: str  # missing_root | invalid_scope | misplaced_file | nested_directory | symlink
    detail: str


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
    return not path.name.startswith(".") and path.name.lower().endswith(LANDING_SUFFIXES)


def discover(landing_root: str | os.PathLike[str]) -> Discovery:
    """Find the tenants (``<org>/<repo>`` directories holding landing files) under the root."""
    root = Path(landing_root)
    if not root.is_dir():
        return Discovery(
            problems=[LandingProblem(".", "missing_root", f"{root} is not a directory")]
        )
    found: list[tuple[Scope, list[Path]]] = []
    problems: list[LandingProblem] = []

    def visible(directory: Path) -> list[Path]:
        return sorted(p for p in directory.iterdir() if not p.name.startswith("."))

    for org_dir in visible(root):
        rel_org = org_dir.name
        if org_dir.is_symlink():
            problems.append(LandingProblem(rel_org, "symlink", "symlinks are not followed"))
            continue
        if not org_dir.is_dir():
            if is_landing_file(org_dir):
                problems.append(_misplaced(rel_org))
            continue
        for repo_dir in visible(org_dir):
            rel_repo = f"{rel_org}/{repo_dir.name}"
            if repo_dir.is_symlink():
                problems.append(LandingProblem(rel_repo, "symlink", "symlinks are not followed"))
                continue
            if not repo_dir.is_dir():
                if is_landing_file(repo_dir):
                    problems.append(_misplaced(rel_repo))
                continue
            try:
                scope = Scope(org_dir.name, repo_dir.name)
            except ScopeError as exc:
                problems.append(LandingProblem(rel_repo, "invalid_scope", str(exc)))
                continue
            files: list[Path] = []
            for entry in visible(repo_dir):
                rel = f"{rel_repo}/{entry.name}"
                if entry.is_symlink():
                    problems.append(LandingProblem(rel, "symlink", "symlinks are not followed"))
                elif entry.is_dir():
                    problems.append(
                        LandingProblem(
                            rel,
                            "nested_directory",
                            "landing files belong directly "
                            "in <org>/<repo>/; this directory was not read",
                        )
                    )
                elif is_landing_file(entry):
                    files.append(entry)
            if files:
                found.append((scope, files))
    return Discovery(found, problems)


def _misplaced(rel: str) -> LandingProblem:
    return LandingProblem(
        rel, "misplaced_file", "landing files belong in <org>/<repo>/; this file was not read"
    )


def relative_name(path: str | os.PathLike[str], landing_root: str | os.PathLike[str]) -> str:
    """The path relative to the landing root, posix-style (the ``source_file`` column)."""
    rel = Path(os.path.abspath(path)).relative_to(os.path.abspath(landing_root))
    return rel.as_posix()


def scope_of_file(path: str | os.PathLike[str], landing_root: str | os.PathLike[str]) -> Scope:
    """The tenant a landing file belongs to, from its ``<org>/<repo>/<name>`` location."""
    try:
        parts = Path(relative_name(path, landing_root)).parts
    except ValueError as exc:
        raise ScopeError(f"{path} is not under the landing root {landing_root}") from exc
    if len(parts) != 3:
        raise ScopeError(f"{path} is not at <landing>/<org>/<repo>/<file>")
    return Scope(parts[0], parts[1])


# ------------------------------------------------------------------------------- fingerprints


@dataclass(frozen=True, slots=True)
class FileFingerprint:
    """What a sensor's cursor remembers about a landing file; JSON-friendly via ``as_dict``."""

    path: str  # relative to the landing root, posix
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


def fingerprint(
    path: str | os.PathLike[str],
    landing_root: str | os.PathLike[str],
    previous: FileFingerprint | None = None,
) -> FileFingerprint:
    """Size, mtime and content hash of a file. When ``previous`` (the cursor's entry) has the
    same path, size and mtime, its hash is reused without reading the file, so a sensor tick
    over unchanged files costs one ``stat`` each."""
    rel = relative_name(path, landing_root)
    st = os.stat(path)
    if (
        previous is not None
        and previous.path == rel
        and previous.size == st.st_size
        and previous.mtime_ns == st.st_mtime_ns
    ):
        return previous
    with open(path, "rb") as fh:
        digest = hashlib.file_digest(fh, "sha256").hexdigest()
    return FileFingerprint(rel, st.st_size, st.st_mtime_ns, digest)


# ------------------------------------------------------------------------------------ reading


@dataclass(frozen=True)
class LandingRead:
    """One landing file, read: accepted turns (not redacted) and quarantined lines."""

    scope: Scope
    source_file: str
    turns: pl.DataFrame  # TURN_COLUMNS
    rejects: pl.DataFrame  # REJECT_COLUMNS
    records: int  # non-blank lines (JSONL) or rows (Parquet) examined

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


class _Collector:
    """Accepted rows and rejects of one file; deduplicates turns."""

    def __init__(self, scope: Scope, source_file: str) -> None:
        self.scope = scope
        self.source_file = source_file
        self.records = 0
        self.seen: set[tuple[str, str]] = set()
        self.rows: list[tuple[Any, ...]] = []  # _ROW_FIELDS
        self.rejects: dict[str, list[Any]] = {c: [] for c in REJECT_COLUMNS if c not in _CONSTANT}

    def record(
        self, line_no: int, obj: Any, raw: str | bytes | None, *, from_struct: bool = False
    ) -> None:
        self.records += 1
        try:
            row = _check(obj, self.scope, from_struct, line_no)
            key = (row[0], row[1])
            if key in self.seen:
                raise _Reject(
                    "duplicate_turn",
                    "this session_id and turn_id already appeared earlier in the file; "
                    "the first occurrence was kept",
                )
        except _Reject as rej:
            self.reject(line_no, rej.reason, rej.detail, raw, obj)
            return
        self.seen.add(key)
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
            raw = orjson.dumps(obj, default=str, option=orjson.OPT_NON_STR_KEYS).decode()
        rej = self.rejects
        rej["stage"].append(STAGE)
        rej["reason"].append(reason)
        rej["detail"].append(detail)
        rej["line_no"].append(line_no)
        rej["session_id"].append(_str_field(obj, "session_id"))
        rej["turn_id"].append(_str_field(obj, "turn_id"))
        rej["record"].append(_clip(raw))

    def days(self) -> list[str]:
        numbers = {row[2] // _DAY_US for row in self.rows}
        return sorted((EPOCH + timedelta(days=n)).date().isoformat() for n in numbers)

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
        turns = turns.with_columns(
            pl.col("ts").cast(pl.Datetime("us")).dt.replace_time_zone("UTC"), *constant
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
_DAY_US = 86_400_000_000
_MISSING = object()


def _typed(df: pl.DataFrame, columns: dict[str, pl.DataType]) -> pl.DataFrame:
    return df.select(pl.col(c).cast(t) for c, t in columns.items())


def _check(obj: Any, scope: Scope, from_struct: bool, line_no: int) -> tuple[Any, ...]:
    """Validate one decoded record; returns the `_ROW_FIELDS` values or raises `_Reject`."""
    if not _plainly_valid(obj, scope):
        _diagnose(obj, scope)
    content = obj["content"]
    ts = _epoch_us(obj["ts"])
    tool_name = obj.get("tool_name")
    tool_input = obj.get("tool_input")
    tool_json = None
    if tool_name is not None or tool_input is not None:
        tool_name, tool_json = _tool(tool_name, tool_input, from_struct)
    return (
        obj["session_id"],
        obj["turn_id"],
        ts,
        obj["role"],
        obj["client"],
        content or "",
        tool_name,
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
        and (type(ts) is str or isinstance(ts, datetime))
        and (content is None or type(content) is str)
    )


def _diagnose(obj: Any, scope: Scope) -> None:
    """Raise the first problem of a record's required fields, in a fixed order."""
    if not isinstance(obj, dict):
        raise _Reject("not_an_object", f"a turn must be a JSON object, not {_kind(obj)}")
    for name in _ID_FIELDS:
        value = obj.get(name)
        if value is None or (isinstance(value, str) and not value.strip()):
            raise _Reject(
                f"missing_field:{name}", f"the required field {name!r} is missing or empty"
            )
        if not isinstance(value, str) and not (name == "ts" and isinstance(value, datetime)):
            raise _Reject(f"bad_type:{name}", f"{name!r} must be a string, not {_kind(value)}")
    if "content" not in obj:
        raise _Reject("missing_field:content", "the required field 'content' is missing")
    content = obj["content"]
    if content is not None and not isinstance(content, str):
        raise _Reject("bad_type:content", f"'content' must be a string, not {_kind(content)}")
    if obj["org"] != scope.tenant_id or obj["repo"] != scope.ns:
        raise _Reject(
            "scope_mismatch",
            f"the line names {_short(obj['org'])}/{_short(obj['repo'])} but lies in {scope.key}",
        )
    if obj["role"] not in ROLES:
        raise _Reject("bad_role", "'role' must be one of user, assistant, tool")


def _epoch_us(value: str | datetime) -> int:
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError as exc:
            raise _Reject("bad_timestamp", "'ts' is not an ISO-8601 timestamp") from exc
    if value.tzinfo is None or value.utcoffset() is None:
        raise _Reject("bad_timestamp", "'ts' has no time zone (add Z or an offset like +01:00)")
    if not 1 < value.year < 9999:
        raise _Reject("bad_timestamp", "'ts' is out of range")
    return (value - EPOCH) // _MICROSECOND


def _tool(tool_name: Any, tool_input: Any, from_struct: bool) -> tuple[str | None, str | None]:
    if tool_name is not None and not isinstance(tool_name, str):
        raise _Reject("bad_type:tool_name", f"'tool_name' must be a string, not {_kind(tool_name)}")
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


def _kind(value: Any) -> str:
    return {
        dict: "an object",
        list: "an array",
        str: "a string",
        bool: "a boolean",
        int: "a number",
        float: "a number",
    }.get(type(value), "null" if value is None else type(value).__name__)


def _short(value: str) -> str:
    return repr(value[:100])


def _str_field(obj: Any, name: str) -> str | None:
    value = obj.get(name) if isinstance(obj, dict) else None
    return value[:MAX_RECORD_CHARS] if isinstance(value, str) else None


def _clip(raw: str | bytes) -> str:
    text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else raw
    if len(text) <= MAX_RECORD_CHARS:
        return text
    text = text[:MAX_RECORD_CHARS]
    end = 0
    for match in _TOKEN_END.finditer(text):
        end = match.start()
    return text[:end]


def _jsonl_lines(path: Path, max_line_bytes: int) -> Iterator[tuple[int, bytes, bool]]:
    """(line number, line without its newline, too long?) for every non-blank line. A too-long
    line is skipped to its end without being held in memory; only its head is returned."""
    with path.open("rb") as fh:
        line_no = 0
        while raw := fh.readline(max_line_bytes + 1):
            line_no += 1
            if len(raw) > max_line_bytes and not raw.endswith(b"\n"):
                head = raw[: MAX_RECORD_CHARS * 4]
                while raw and not raw.endswith(b"\n"):
                    raw = fh.readline(1 << 20)
                yield line_no, head, True
                continue
            if line_no == 1 and raw.startswith(_BOM):
                raw = raw[len(_BOM) :]
            line = raw.rstrip(b"\n").rstrip(b"\r")
            if line.strip():
                yield line_no, line, False


def _scan(path: Path, landing_root: Path, max_line_bytes: int) -> _Collector:
    scope = scope_of_file(path, landing_root)
    out = _Collector(scope, relative_name(path, landing_root))
    name = path.name.lower()
    if name.endswith(PARQUET_SUFFIX):
        _scan_parquet(path, out)
    elif name.endswith(JSONL_SUFFIX):
        _scan_jsonl(path, out, max_line_bytes)
    else:
        raise ValueError(f"{path} is neither {JSONL_SUFFIX} nor {PARQUET_SUFFIX}")
    return out


def _scan_jsonl(path: Path, out: _Collector, max_line_bytes: int) -> None:
    for line_no, line, too_long in _jsonl_lines(path, max_line_bytes):
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


def _scan_parquet(path: Path, out: _Collector) -> None:
    try:
        frame = pl.read_parquet(path)
    except Exception as exc:  # any reader error means the file as a whole is unusable
        out.records += 1
        out.reject(
            None, "unreadable_file", f"the Parquet file cannot be read: {type(exc).__name__}", b""
        )
        return
    for row_no, row in enumerate(frame.iter_rows(named=True), start=1):
        out.record(row_no, row, None, from_struct=True)


def read_landing_file(
    path: str | os.PathLike[str],
    landing_root: str | os.PathLike[str],
    max_line_bytes: int = MAX_LINE_BYTES,
) -> LandingRead:
    """Read one landing file into accepted turns and rejects; raises `ScopeError` when the
    file does not lie at ``<landing>/<org>/<repo>/<file>`` under valid names."""
    out = _scan(Path(path), Path(landing_root), max_line_bytes)
    turns, rejects = out.frames()
    return LandingRead(out.scope, out.source_file, turns, rejects, out.records)


def days_in_file(
    path: str | os.PathLike[str],
    landing_root: str | os.PathLike[str],
    max_line_bytes: int = MAX_LINE_BYTES,
) -> list[str]:
    """The UTC days (``YYYY-MM-DD``) of the turns `read_landing_file` would accept, sorted.

    Same parse as a full read minus building the tables; with `scope_of_file` it tells a
    sensor which (tenant, day) partitions a new file touches."""
    return _scan(Path(path), Path(landing_root), max_line_bytes).days()
