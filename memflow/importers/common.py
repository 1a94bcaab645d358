"""What the transcript importers share: reading JSON Lines defensively, turning agent records into
bounded, redacted landing turns, writing them per session (idempotently), and the report.

Landing files
=============

Each import of a session writes at most one new file into the tenant's landing directory,
``<landing>/<org>/<repo>/<client>-<session>-<digest>.jsonl``, holding only the session's turns
that no earlier file of that session already holds (by ``turn_id``). Re-importing the same
transcript therefore writes nothing; importing it again after it grew writes one small file with
the new turns. ``<session>`` is the session id when it is a plain id, else a hash of it;
``<digest>`` hashes the file's content. The file is written as ``.<name>`` and then renamed; with
``ImportSettings.check_files`` it is first read back by the landing reader
(`memflow.landing.read_landing_file`; a reject means nothing lands). Every line is built from
values already checked (a valid scope, a zoned timestamp, a known role, string ids), so the
check is off by default: it costs about 1 ms a file, more than parsing and redacting a session.
Concurrent imports into one tenant directory (two hooks at once) are serialised by a lock file,
``.memflow-import.lock`` in that directory (dot files are ignored by the pipeline).

Files are not fsynced by default (``ImportSettings.durable``): the transcript stays the source, and
the ledger of landed turns is the landing files themselves, so a file lost or cut short by a
power failure is landed again by the next import (a cut last line is quarantined by the pipeline
as ``invalid_json``). fsync costs about 3 ms a file here, more than the rest of an import.

What a turn keeps
=================

- user and assistant text, with Claude Code's ``<system-reminder>`` blocks removed, at most
  `Limits.text_chars` characters;
- a tool call: ``role: tool``, ``tool_name`` and a bounded ``tool_input`` (scalar arguments, each at
  most `Limits.tool_value_chars`; arguments that carry file bodies or patches are dropped). A call
  of ``upsert_graph_triples`` (also MCP-qualified, e.g. ``mcp__memflow__upsert_graph_triples``)
  keeps its triples as explicit triples: ``tool_name: "upsert_graph_triples"``,
  ``tool_input: {"triples": [...]}`` (known keys only, values at most
  `Limits.triple_value_chars`, split over several turns if one landing line would be too long);
- a tool result: ``role: tool``, ``tool_name: "<tool>:result"``, the output clipped to
  `Limits.tool_result_chars`; the output of tools that return file bodies (Read, Write, Edit,
  NotebookRead, WebFetch, apply_patch, ``cat``/``sed -n``/``head``... commands) is replaced by
  ``[<tool> output omitted: N characters]``.

A turn that is not the user's or the agent's own carries ``origin`` (`memflow.importers.origins`).
Files are written through the one landing writer (`memflow.landing_writer`: directory
descriptors, no symlinks). Everything written (content, tool input, session and turn ids) goes
through `schemas.redaction` first. Thinking/reasoning, images, summaries, compaction summaries and
bookkeeping records are skipped and counted in the report, never written.

A record that cannot be read is reported with its file and line (``invalid_json``,
``bad_encoding``, ``line_too_long``, ``truncated_line``, ``not_an_object``, ``missing_field:<f>``,
``bad_timestamp``, ``bad_message``) and the rest of the file is imported. Reports never hold
record content.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from memflow.importers.tenant import TenantMapper
from memflow.landing import JSONL_SUFFIX, MAX_LINE_BYTES, UPSERT_TOOL, read_landing_file
from memflow.landing_writer import LandingWriter, TenantDir
from schemas.redaction import redact, redact_json
from schemas.scope import Scope

RESULT_SUFFIX = ":result"
MAX_PROBLEMS_KEPT = 1_000
LOCK_TIMEOUT_S = 20.0
LOCK_NAME = ".memflow-import.lock"  # one per tenant directory; dot files are not landing files
_BOM = b"\xef\xbb\xbf"
_PLAIN_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_BOUNDARY = frozenset(" \t\r\n\f\v\"',:;=(){}[]<>\\|")
_BOUNDARY_LOOKBACK = 512
_VALUE_WINDOW = 4096  # of a tool argument, redacted before it is clipped
_TRIPLE_KEYS = (
    "subject",
    "predicate",
    "object",
    "confidence",
    "valid_from",
    "supersedes",
    "subject_type",
    "object_type",
)
# Tools whose arguments or output are file bodies, patches or fetched pages: never landed.
FILE_BODY_TOOLS = frozenset(
    {
        "read",
        "write",
        "edit",
        "multiedit",
        "notebookread",
        "notebookedit",
        "webfetch",
        "apply_patch",
        "view_image",
    }
)
BODY_ARGUMENTS = frozenset(
    {
        "content",
        "contents",
        "new_string",
        "old_string",
        "edits",
        "new_source",
        "file_text",
        "patch",
        "input",
        "text",
        "body",
        "data",
        "code",
    }
)
_READ_COMMANDS = re.compile(
    r"^\s*(?:(?:bash|sh|zsh)\s+-l?c\s+)?['\"]?\s*"
    r"(?:cat|nl|head|tail|less|more|bat|sed\s+-n|awk|xxd|od|strings|base64|jq)\b"
)


# ---------------------------------------------------------------------------------- settings


@dataclass(frozen=True, slots=True)
class Limits:
    """Size bounds of what lands (characters unless said otherwise)."""

    text_chars: int = 16_000
    tool_result_chars: int = 1_000
    tool_value_chars: int = 200
    tool_input_values: int = 12
    blocks_per_record: int = 256  # content blocks of one message read; the rest are counted
    triples_per_call: int = 500
    triple_value_chars: int = 1_000
    redact_window_chars: int = 65_536
    max_line_bytes: int = 16 << 20  # a transcript line longer than this is skipped and reported
    landing_line_bytes: int = MAX_LINE_BYTES


@dataclass(frozen=True)
class ImportSettings:
    landing_dir: Path
    tenants: TenantMapper = field(default_factory=TenantMapper)
    limits: Limits = field(default_factory=Limits)
    include_sidechains: bool = True
    check_files: bool = False  # read each file back with the landing reader before it lands
    durable: bool = False  # fsync each landing file before its rename (see the module docstring)
    incremental: bool = False  # read growing files from where the last import stopped (Codex)

    @classmethod
    def from_env(
        cls, landing_dir: str | os.PathLike[str], env: Mapping[str, str] | None = None
    ) -> ImportSettings:
        """Settings with the tenant map of the environment (read now, not at import)."""
        return cls(Path(landing_dir), TenantMapper.from_env(env))


# ------------------------------------------------------------------------------------ report


@dataclass(frozen=True, slots=True)
class ImportProblem:
    """A record (or file) that was not imported, and why. Never holds record content."""

    file: str
    line: int | None
    reason: str
    detail: str = ""

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line is not None else self.file
        return f"{where}: {self.reason}" + (f" ({self.detail})" if self.detail else "")


@dataclass
class ImportReport:
    client: str
    files: int = 0
    records: int = 0
    sessions: int = 0
    turns_found: int = 0
    turns_written: int = 0
    turns_already_landed: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    errors: list[ImportProblem] = field(default_factory=list)
    errors_total: int = 0
    landed: list[str] = field(default_factory=list)
    tenants: Counter[str] = field(default_factory=Counter)  # turns written per org/repo
    moved: Counter[str] = field(default_factory=Counter)  # "old -> new": landing files moved
    seconds: float = 0.0

    def problem(
        self, file: str | os.PathLike[str], line: int | None, reason: str, detail: str = ""
    ) -> None:
        self.errors_total += 1
        if len(self.errors) < MAX_PROBLEMS_KEPT:
            self.errors.append(ImportProblem(str(file), line, reason, detail))

    def merge(self, other: ImportReport) -> ImportReport:
        for name in (
            "files",
            "records",
            "sessions",
            "turns_found",
            "turns_written",
            "turns_already_landed",
            "errors_total",
            "seconds",
        ):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.skipped.update(other.skipped)
        self.tenants.update(other.tenants)
        self.moved.update(other.moved)
        self.errors.extend(other.errors[: max(0, MAX_PROBLEMS_KEPT - len(self.errors))])
        self.landed.extend(other.landed)
        return self

    def as_dict(self) -> dict[str, Any]:
        return {
            "client": self.client,
            "files": self.files,
            "records": self.records,
            "sessions": self.sessions,
            "turns_found": self.turns_found,
            "turns_written": self.turns_written,
            "turns_already_landed": self.turns_already_landed,
            "skipped": dict(sorted(self.skipped.items())),
            "errors_total": self.errors_total,
            "errors": [str(p) for p in self.errors],
            "landed": list(self.landed),
            "tenants": dict(sorted(self.tenants.items())),
            "moved": dict(sorted(self.moved.items())),
            "exit_code": self.exit_code(),
            "seconds": round(self.seconds, 3),
        }

    def exit_code(self) -> int:
        """What this input came to, whatever was imported before: 0 every record was read (new
        or already landed); 1 some records or files could not be read (the rest was
        imported); 2 nothing could be read (no file, or files in the other agent's format)."""
        if self.errors_total == 0:
            return 0
        return 1 if self.records and self.sessions else 2

    def summary(self) -> str:
        line = (
            f"{self.client}: {self.files} files, {self.records} records, {self.sessions} sessions, "
            f"{self.turns_written} turns written, {self.turns_already_landed} already landed, "
            f"{self.errors_total} errors"
        )
        if self.skipped:
            line += "; skipped " + ", ".join(f"{k} {v}" for k, v in sorted(self.skipped.items()))
        if self.moved:
            line += "; moved to new tenants " + ", ".join(
                f"{k} ({v} files)" for k, v in sorted(self.moved.items())
            )
        return line


# ------------------------------------------------------------------------------------- turns


@dataclass(slots=True)
class Turn:
    """One landing turn before redaction of its ids (content and tool input are final)."""

    turn_id: str
    ts: str  # ISO-8601 UTC with Z
    role: str  # user | assistant | tool
    content: str
    tool_name: str | None = None
    tool_input: Any = None
    line: int | None = None  # where it came from, for reports
    origin: str | None = None  # who said it, when not the user or the agent (importers.origins)


@dataclass
class SessionTurns:
    """The turns of one session read from one transcript file."""

    session_id: str
    source: str
    cwd: str | None = None
    remote_url: str | None = None
    turns: list[Turn] = field(default_factory=list)


def parse_ts(value: Any) -> str | None:
    """ISO-8601 in UTC (``...Z``) or None. A time without a zone is taken as UTC (agents write
    UTC); an unparseable one or one out of range gives None."""
    if not isinstance(value, str) or not value or len(value) > 64:
        return None
    try:
        t = datetime.fromisoformat(value.strip())
    except ValueError:
        return None
    if t.tzinfo is None or t.utcoffset() is None:
        t = t.replace(tzinfo=UTC)
    if not 1970 <= t.year < 9999:
        return None
    return t.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def clip(text: str, limit: int) -> str:
    """`text` cut to at most `limit` characters, at a token boundary when one lies in the last
    512 characters, with a note of how much was cut. Callers redact first (`redacted`): a cut
    never has to keep a secret recognisable."""
    if len(text) <= limit:
        return text
    note = f" [... {len(text) - limit} more characters clipped]"
    head = text[: max(0, limit - len(note))]
    end = len(head)
    stop = max(0, end - _BOUNDARY_LOOKBACK)
    while end > stop and head[end - 1] not in _BOUNDARY:
        end -= 1
    return (head[:end] if end > stop else head).rstrip() + note


def redacted(text: str, limit: int, window: int) -> str:
    """Redact, then clip. Texts longer than `window` are cut at a line end first (never more
    than the window is scanned), so a huge paste costs what a window costs."""
    if len(text) > window:
        cut = text.rfind("\n", 0, window)
        text = text[: cut if cut > window // 2 else window]
    return clip(redact(text) or "", limit)


def short_name(name: Any) -> str:
    """A tool name for comparisons: MCP qualification and case removed."""
    if not isinstance(name, str):
        return ""
    base = re.split(r"__|\.|/", name.strip())[-1]
    return base.lower()


def is_upsert(name: Any, namespace: Any = None) -> bool:
    return short_name(name) == UPSERT_TOOL


def _scalar(value: Any, limits: Limits) -> Any:
    if isinstance(value, bool) or value is None or isinstance(value, int | float):
        return value
    if isinstance(value, str):
        return redacted(value, limits.tool_value_chars, _VALUE_WINDOW)
    if isinstance(value, list) and all(isinstance(v, str) for v in value[:32]):
        return redacted(" ".join(value[:32]), limits.tool_value_chars, _VALUE_WINDOW)  # argv
    return f"[{type(value).__name__} omitted]"


def bounded_tool_input(name: str, value: Any, limits: Limits) -> dict[str, Any] | None:
    """The arguments of a (non-memory) tool call worth keeping: scalars, clipped; file bodies
    and patches dropped (their size kept)."""
    if short_name(name) in FILE_BODY_TOOLS and not isinstance(value, Mapping):
        size = len(value) if isinstance(value, str) else 0
        return {"omitted_chars": size} if size else None
    if isinstance(value, str):
        decoded = _json_object(value)
        value = decoded if decoded is not None else {"input": value}
    if not isinstance(value, Mapping):
        return None
    out: dict[str, Any] = {}
    for key, item in list(value.items())[: limits.tool_input_values]:
        k = str(key)[:64]
        body_tool = short_name(name) in FILE_BODY_TOOLS
        if k.lower() in BODY_ARGUMENTS or (body_tool and k != "file_path"):
            if isinstance(item, str | list | Mapping):
                out[k] = f"[omitted: {len(item)} items or characters]"
            continue
        out[k] = _scalar(item, limits)
    return redact_json(out) if out else None


def upsert_turns(
    turn_id: str, ts: str, name: str, value: Any, limits: Limits, line: int | None
) -> tuple[list[Turn], int] | None:
    """Explicit-triple turns for an ``upsert_graph_triples`` call (split so every landing line
    fits), and how many triples were dropped over `Limits.triples_per_call`; None when the call
    does not have the ``{"triples": [...]}`` shape."""
    if isinstance(value, str):
        value = _json_object(value)
    if not isinstance(value, Mapping) or not isinstance(value.get("triples"), list):
        return None
    items = value["triples"]
    dropped = max(0, len(items) - limits.triples_per_call)
    triples: list[Any] = []
    for item in items[: limits.triples_per_call]:
        if isinstance(item, Mapping):
            triples.append({k: _triple_value(item[k], limits) for k in _TRIPLE_KEYS if k in item})
        else:  # kept, so the pipeline quarantines it with its reason
            triples.append(_triple_value(item, limits))
    triples = redact_json(triples)
    budget = limits.landing_line_bytes - 4096  # room for the turn's other fields
    chunks: list[list[Any]] = [[]]
    size = 0
    for t in triples:
        n = len(orjson.dumps(t)) + 1
        if chunks[-1] and size + n > budget:
            chunks.append([])
            size = 0
        chunks[-1].append(t)
        size += n
    out = [
        Turn(
            turn_id if i == 0 else f"{turn_id}.{i}",
            ts,
            "tool",
            "",
            UPSERT_TOOL,
            {"triples": chunk},
            line,
        )
        for i, chunk in enumerate(chunks)
    ]
    return out, dropped


def _triple_value(value: Any, limits: Limits) -> Any:
    if isinstance(value, str):
        return value[: limits.triple_value_chars]
    if isinstance(value, Mapping):  # supersedes: {"subject", "predicate", "object"}
        return {
            str(k)[:32]: _triple_value(v, limits)
            for k, v in list(value.items())[:8]
            if not isinstance(v, Mapping | list)
        }
    if isinstance(value, bool) or value is None or isinstance(value, int | float):
        return value
    return str(value)[: limits.triple_value_chars]


def result_text(tool: str, output: str, limits: Limits, *, command: str | None = None) -> str:
    """A tool result as it lands: file bodies omitted, the rest redacted and clipped."""
    if short_name(tool) in FILE_BODY_TOOLS or (command and _READ_COMMANDS.match(command)):
        return f"[{short_name(tool) or 'tool'} output omitted: {len(output)} characters]"
    return redacted(output, limits.tool_result_chars, limits.tool_result_chars * 8)


def _json_object(text: str) -> dict[str, Any] | None:
    if not text or len(text) > 8 << 20 or text.lstrip()[:1] != "{":
        return None
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


# ------------------------------------------------------------------------------------ reading


def collect_files(
    paths: Iterable[str | os.PathLike[str]],
    pattern: re.Pattern[str],
    report: ImportReport,
    none_found: str | None = None,
) -> list[Path]:
    """Files named directly, and files under folders whose names match `pattern` (symlinked
    folders are not followed); a path that does not exist is reported, and so is a folder
    holding ``.jsonl`` files none of which match (`none_found` says what they may be)."""
    out: list[Path] = []
    seen: set[str] = set()
    for raw in paths:
        path = Path(raw).expanduser()
        if path.is_symlink():
            report.problem(path, None, "symlink", "symlinks are not followed")
            continue
        if path.is_file():
            found = [path]
        elif path.is_dir():
            found = []
            others = 0
            for root, dirs, files in os.walk(path, followlinks=False):
                dirs.sort()
                found.extend(Path(root) / f for f in sorted(files) if pattern.match(f))
                others += sum(1 for f in files if f.endswith(".jsonl") and not pattern.match(f))
            if not found and others and none_found:
                report.problem(path, None, "no_transcripts", f"{others} .jsonl files: {none_found}")
        else:
            report.problem(path, None, "not_found", "no such file or folder")
            continue
        for f in found:
            key = os.path.abspath(f)
            if key not in seen and not f.is_symlink():
                seen.add(key)
                out.append(f)
    return out


@dataclass
class ReadCursor:
    """Where an incremental read of a file starts and, after it, where it stopped: `offset`
    bytes and `line_no` lines consumed (an incomplete last line is left for the next read);
    `line_start` and `lines_before`: where the line last yielded starts (a reader that must read
    it again next time moves the cursor back there)."""

    offset: int = 0
    line_no: int = 0
    line_start: int = 0
    lines_before: int = 0


def iter_jsonl(
    path: Path, report: ImportReport, max_line_bytes: int, cursor: ReadCursor | None = None
) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for every JSON object line; other lines are reported. Counts
    records. With `cursor`, reading starts at its offset and line, and it is moved past every
    complete line read; a last line without its newline is not read (its writer is still at
    it)."""
    try:
        fh = path.open("rb")
    except OSError as exc:
        report.problem(path, None, "unreadable_file", type(exc).__name__)
        return
    with fh:
        line_no = 0
        if cursor is not None and cursor.offset:
            fh.seek(cursor.offset)
            line_no = cursor.line_no
        while True:
            start = fh.tell()
            raw = fh.readline(max_line_bytes + 1)
            if not raw:
                break
            if cursor is not None and not raw.endswith(b"\n") and len(raw) <= max_line_bytes:
                break  # being written: the next read takes it whole
            if cursor is not None:
                cursor.line_start, cursor.lines_before = start, line_no
            line_no += 1
            if cursor is not None:
                cursor.line_no = line_no
            if len(raw) > max_line_bytes and not raw.endswith(b"\n"):
                while raw and not raw.endswith(b"\n"):
                    raw = fh.readline(1 << 20)
                report.records += 1
                report.problem(path, line_no, "line_too_long", f"over {max_line_bytes} bytes")
                if cursor is not None:
                    cursor.offset = fh.tell()
                continue
            if cursor is not None:
                cursor.offset = fh.tell()
            if line_no == 1 and raw.startswith(_BOM):
                raw = raw[len(_BOM) :]
            complete = raw.endswith(b"\n")
            line = raw.strip()
            if not line:
                continue
            report.records += 1
            try:
                obj = orjson.loads(line)
            except orjson.JSONDecodeError:
                try:
                    line.decode("utf-8")
                except UnicodeDecodeError:
                    report.problem(path, line_no, "bad_encoding", "not UTF-8")
                    continue
                reason = "invalid_json" if complete else "truncated_line"
                report.problem(path, line_no, reason, "the line is not a JSON object")
                continue
            if not isinstance(obj, dict):
                report.problem(path, line_no, "not_an_object", "a record must be a JSON object")
                continue
            yield line_no, obj


# ------------------------------------------------------------------------------------ landing


def file_key(session_id: str) -> str:
    if _PLAIN_ID.match(session_id):
        return session_id
    return "h" + hashlib.sha256(session_id.encode("utf-8", "replace")).hexdigest()[:24]


class LandingSink:
    """Writes each session's new turns as one landing file (see the module docstring), through
    the one landing writer (`memflow.landing_writer`: directory descriptors, no symlinks)."""

    def __init__(self, settings: ImportSettings, report: ImportReport) -> None:
        self.settings = settings
        self.report = report
        self.writer = LandingWriter(settings.landing_dir)
        self._scopes: dict[tuple[str | None, str | None], Scope] = {}

    def scope_of(self, session: SessionTurns) -> Scope:
        key = (session.cwd, session.remote_url)
        scope = self._scopes.get(key)
        if scope is None:
            scope = self.settings.tenants.choose(session.cwd, session.remote_url).scope
            self._scopes[key] = scope
        return scope

    def land(self, client: str, session: SessionTurns) -> Path | None:
        report = self.report
        if not session.turns:
            return None
        report.sessions += 1
        report.turns_found += len(session.turns)
        scope = self.scope_of(session)
        session_id = redact(session.session_id) or "unknown"
        prefix = f"{client}-{file_key(session_id)}-"
        with self.writer.tenant(scope) as directory, directory.lock(LOCK_NAME, LOCK_TIMEOUT_S):
            self._move_legacy(session, scope, directory, prefix)
            landed = _landed_turn_ids(directory, prefix)
            lines: list[bytes] = []
            for turn in session.turns:
                turn_id = redact(turn.turn_id) or turn.turn_id
                if turn_id in landed:
                    report.turns_already_landed += 1
                    continue
                landed.add(turn_id)
                line = _line(scope, session_id, turn_id, client, turn)
                if len(line) > self.settings.limits.landing_line_bytes:
                    report.problem(session.source, turn.line, "turn_too_long", "not landed")
                    continue
                lines.append(line)
            if not lines:
                return None
            body = b"\n".join(lines) + b"\n"
            name = f"{prefix}{hashlib.sha256(body).hexdigest()[:16]}{JSONL_SUFFIX}"
            check = self._check(session.source) if self.settings.check_files else None
            try:
                final = directory.write(name, body, check=check, durable=self.settings.durable)
            except _CheckFailed:
                return None
        report.turns_written += len(lines)
        report.tenants[scope.key] += len(lines)
        report.landed.append(str(final))
        return final

    def _move_legacy(
        self, session: SessionTurns, scope: Scope, directory: TenantDir, prefix: str
    ) -> None:
        """Move this session's landing files from the tenant earlier versions named it (a
        tenant mapping that lost something: `memflow.importers.tenant`) to its tenant now, so a
        re-import migrates what was landed and lands nothing twice."""
        old = self.settings.tenants.legacy(session.cwd, session.remote_url)
        if old is None or old == scope:
            return
        legacy = self.writer.existing(old)
        if legacy is None:
            return
        with legacy, legacy.lock(LOCK_NAME, LOCK_TIMEOUT_S):
            moved = 0
            for name in legacy.names(prefix):
                data = legacy.read(name) if name.endswith(JSONL_SUFFIX) else None
                if data is None:
                    continue
                if name not in directory.names(name):
                    directory.write(name, _rescoped(data, scope), durable=True)
                legacy.unlink(name)
                moved += 1
        if moved:
            self.report.moved[f"{old.key} -> {scope.key}"] += moved

    def _check(self, source: str) -> Callable[[Path], None]:
        def check(hidden: Path) -> None:
            read = read_landing_file(hidden, self.settings.landing_dir)
            if read.rejects.height:
                for line, reason in read.rejects.select("line_no", "reason").iter_rows():
                    self.report.problem(source, None, f"landing_check:{reason}", f"line {line}")
                raise _CheckFailed

        return check


def _rescoped(data: bytes, scope: Scope) -> bytes:
    """A landing file's lines with `scope` as their org and repo (unreadable lines as they
    were: the reader quarantines them where they land)."""
    out = []
    for raw in data.splitlines():
        try:
            record = orjson.loads(raw)
        except orjson.JSONDecodeError:
            out.append(raw)
            continue
        if isinstance(record, dict):
            record["org"], record["repo"] = scope.tenant_id, scope.ns
            out.append(orjson.dumps(record))
        else:
            out.append(raw)
    return b"\n".join(out) + b"\n"


class _CheckFailed(Exception):
    """The landing reader refused a file the importer wrote (reported, nothing landed)."""


def _line(scope: Scope, session_id: str, turn_id: str, client: str, turn: Turn) -> bytes:
    record: dict[str, Any] = {
        "org": scope.tenant_id,
        "repo": scope.ns,
        "session_id": session_id,
        "turn_id": turn_id,
        "ts": turn.ts,
        "role": turn.role,
        "content": turn.content,
        "client": client,
    }
    if turn.tool_name is not None:
        record["tool_name"] = redact(turn.tool_name)
    if turn.tool_input is not None:
        record["tool_input"] = turn.tool_input
    if turn.origin is not None:
        record["origin"] = turn.origin
    return orjson.dumps(record)


def _landed_turn_ids(directory: TenantDir, prefix: str) -> set[str]:
    """Turn ids already in the session's landing files (the idempotency ledger)."""
    ids: set[str] = set()
    for name in directory.names(prefix):
        data = directory.read(name) if name.endswith(JSONL_SUFFIX) else None
        for raw in (data or b"").splitlines():
            try:
                turn_id = orjson.loads(raw).get("turn_id")
            except (orjson.JSONDecodeError, AttributeError):
                continue
            if isinstance(turn_id, str):
                ids.add(turn_id)
    return ids
