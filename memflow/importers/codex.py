"""Codex rollout files into the landing zone.

    report = import_codex(["~/.codex/sessions"], ImportSettings(Path("landing")))

Input: ``~/.codex/sessions/YYYY/MM/DD/rollout-<time>-<uuid>.jsonl`` (files, or folders searched
for ``rollout-*.jsonl``), in either shape Codex has written:

- newer: every line is ``{"timestamp", "type", "payload"}`` with ``type`` one of
  ``session_meta`` (``id``, ``cwd``, ``git.repository_url``, ``source``, ``forked_from_id``...),
  ``response_item`` (``message``, ``function_call`` / ``custom_tool_call`` /
  ``local_shell_call`` / ``web_search_call`` and their outputs, ``reasoning``), ``event_msg``
  (``user_message``, ``agent_message``, token counts...), ``turn_context`` and ``compacted``;
- older: a first line ``{"id", "timestamp", "instructions", "git"}`` followed by bare response
  items (no timestamps: the session's start time is used) and ``{"record_type": "state"}`` lines.

Codex writes what the user typed twice (an ``event_msg`` ``user_message`` and a ``response_item``
user message, the latter also carrying injected context such as ``<environment_context>`` and
AGENTS.md text); the same for the assistant's answer. One source per role is used, decided by the
first of the role's messages: user turns from the ``user_message`` events when the first user
response item is followed by one (else from the response items, injected context skipped),
assistant turns from the response items when one comes before anything but an ``agent_message``
event (else from the ``agent_message`` events). An incremental read that ends before a role is
decided leaves the lines from its first message for the next read, so the turn ids (the chosen
source's lines) are those a whole read gives. ``developer`` messages, reasoning, token counts
and compaction summaries are skipped and counted.

**Sub-agents.** A rollout whose ``session_meta`` names a parent (``source.subagent``,
``thread_source: "subagent"``, ``parent_thread_id``, ``forked_from_id``) is a sub-agent's: its
user turns are the main agent's task and its turns are marked (`memflow.importers.origins`). A
forked one starts with the parent's history copied in (a second ``session_meta``, then the
parent's items in order): those turns are the parent's and are not landed again. Where Codex
records it (``subagent_history_start_ordinal`` and each line's ``ordinal``), lines before the
child's first own ordinal are the parent's; otherwise they are found by matching, in order, the
child's first turns against the parent's, read from the parent's
rollout (in the same import, or beside the child under ``sessions/``) or from the turns the
parent already landed; without any of these, turns stamped before the child started (or within a
second of the copied ``session_meta``) are taken as copied. Counted as ``replayed_parent``.

A file in Claude Code's format is named as such (``claude_code_transcript``), and a folder with
``.jsonl`` files none of which is a rollout is reported (``no_transcripts``).

Turn ids are ``L<line number>`` (rollout files only grow). An MCP call of
``upsert_graph_triples`` (``name`` plus ``namespace``, or a qualified name) keeps its triples as
explicit triples. The tenant comes from the ``git.repository_url`` the rollout recorded, else
the session's ``cwd`` (`memflow.importers.tenant`). With ``ImportSettings.incremental`` (the
hooks), each file is read from where the last import stopped (`memflow.importers.offsets`).
"""

from __future__ import annotations

import hashlib
import os
import re
import time
from collections.abc import Iterable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import orjson

from memflow.importers import origins
from memflow.importers.common import (
    RESULT_SUFFIX,
    ImportReport,
    ImportSettings,
    LandingSink,
    Limits,
    ReadCursor,
    SessionTurns,
    Turn,
    bounded_tool_input,
    collect_files,
    file_key,
    is_upsert,
    iter_jsonl,
    parse_ts,
    redacted,
    result_text,
    upsert_turns,
)
from memflow.importers.offsets import FileState, Offsets
from schemas.redaction import redact

CLIENT = "codex"
FILE_PATTERN = re.compile(r"^rollout-.*\.jsonl$")
_UUID_IN_NAME = re.compile(
    r"([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})"
)
_NEW_TYPES = frozenset({"session_meta", "response_item", "event_msg", "turn_context", "compacted"})
_CLAUDE_TYPES = frozenset(
    {"user", "assistant", "summary", "queue-operation", "file-history-snapshot"}
)
_ITEM_TYPES = frozenset(
    {
        "message",
        "function_call",
        "function_call_output",
        "custom_tool_call",
        "custom_tool_call_output",
        "local_shell_call",
        "web_search_call",
        "reasoning",
    }
)
_INJECTED = (
    "<environment_context",
    "<user_instructions",
    "<permissions instructions",
    "<instructions",
    "# agents.md instructions",
    "<user_shell_command",
    "<turn_aborted",
    "<subagent_notification",
)
_MAX_CALLS = 10_000
_BURST = timedelta(seconds=1)

# Candidate turns, tagged by source; the choice between duplicate sources is made per file.
_USER_EVENT, _USER_ITEM, _ASSISTANT_ITEM, _ASSISTANT_EVENT, _TOOL = range(5)


def import_codex(paths: Iterable[str | os.PathLike[str]], settings: ImportSettings) -> ImportReport:
    """Import Codex rollout files (files or folders) into `settings.landing_dir`. Sub-agent
    rollouts are landed after the others, so their parents' turns are known."""
    started = time.perf_counter()
    report = ImportReport(CLIENT)
    sink = LandingSink(settings, report)
    offsets = Offsets(settings.landing_dir) if settings.incremental else None
    known: dict[str, list[str]] = {}  # session id -> fingerprints of its turns, this run
    later: list[tuple[_Reader, FileState | None]] = []
    hint = "Claude Code transcripts? use `memflow import claude-code`"
    for path in collect_files(paths, FILE_PATTERN, report, none_found=hint):
        report.files += 1
        state = offsets.load(path) if offsets is not None else None
        reader = read_codex(path, report, settings.limits, state)
        if reader is None:
            continue
        if reader.parent_id and not reader.replay_checked:
            later.append((reader, state))
            continue
        _land(sink, reader, offsets, state, known)
    for reader, state in later:
        reader.drop_replay(known, sink)
        _land(sink, reader, offsets, state, known)
    report.seconds = time.perf_counter() - started
    return report


def _land(
    sink: LandingSink,
    reader: _Reader,
    offsets: Offsets | None,
    state: FileState | None,
    known: dict[str, list[str]],
) -> None:
    session = reader.session()
    if session is not None:
        known[session.session_id] = [fingerprint(t) for t in session.turns]
        try:
            sink.land(CLIENT, session)
        except (OSError, TimeoutError) as exc:
            sink.report.problem(reader.path, None, "landing_failed", type(exc).__name__)
            return
    if offsets is not None and state is not None and reader.cursor is not None:
        state.offset, state.line_no = reader.cursor.offset, reader.cursor.line_no
        state.reader = reader.saved()
        offsets.save(reader.path, offsets.seal(reader.path, state))


def fingerprint(turn: Turn) -> str:
    """A turn as it lands, without its id and time: what a copied turn shares with the one
    it copies."""
    body = orjson.dumps([turn.role, turn.content, turn.tool_name, turn.tool_input])
    return hashlib.sha256(body).hexdigest()[:24]


class _Reader:
    def __init__(self, path: Path, report: ImportReport, limits: Limits) -> None:
        self.path = path
        self.report = report
        self.limits = limits
        self.session_id: str | None = None
        self.cwd: str | None = None
        self.remote_url: str | None = None
        self.last_ts: str | None = None
        self.start_ts: str | None = None
        self.parent_id: str | None = None
        self.history_start: int | None = None  # the child's first own ordinal, when recorded
        self.copied_meta: tuple[int, str | None] | None = None  # (line, ts)
        self.replay_checked = False
        self.user_source: int | None = None  # _USER_EVENT or _USER_ITEM, once decided
        self.assistant_source: int | None = None  # _ASSISTANT_ITEM or _ASSISTANT_EVENT
        self.undecided: dict[str, tuple[int, int, int]] = {}  # role -> (offset, lines, line)
        self.candidates: list[tuple[int, Turn]] = []
        self.calls: dict[str, tuple[str, str | None]] = {}  # call_id -> (tool, shell command)
        self.cursor: ReadCursor | None = None

    # -- saved between incremental reads ---------------------------------------------------

    def saved(self) -> dict[str, Any]:
        calls = list(self.calls.items())[-1000:]
        return {
            "session_id": self.session_id,
            "cwd": self.cwd,
            "remote_url": self.remote_url,
            "last_ts": self.last_ts,
            "start_ts": self.start_ts,
            "parent_id": self.parent_id,
            "sources": [self.user_source, self.assistant_source],
            "calls": [[k, v[0], v[1]] for k, v in calls],
        }

    def restore(self, saved: dict[str, Any]) -> None:
        for name in ("session_id", "cwd", "remote_url", "last_ts", "start_ts", "parent_id"):
            value = saved.get(name)
            setattr(self, name, value if isinstance(value, str) else None)
        sources = saved.get("sources")
        if isinstance(sources, list) and len(sources) == 2:
            user, assistant = sources
            self.user_source = user if user in (_USER_EVENT, _USER_ITEM) else None
            mine = (_ASSISTANT_ITEM, _ASSISTANT_EVENT)
            self.assistant_source = assistant if assistant in mine else None
        for entry in saved.get("calls") or []:
            if isinstance(entry, list) and len(entry) == 3 and isinstance(entry[0], str):
                command = entry[2] if isinstance(entry[2], str) else None
                self.calls[entry[0]] = (str(entry[1]), command)
        self.replay_checked = True  # a copied history sits at the start, read before

    # -- records ---------------------------------------------------------------------------

    def meta(self, payload: dict[str, Any], ts: str | None, line: int) -> None:
        sid = payload.get("id")
        if isinstance(sid, str) and sid.strip():
            if self.session_id is None:
                self.session_id = sid
                self.parent_id = _parent_of(payload)
                start = payload.get("subagent_history_start_ordinal")
                if isinstance(start, int) and not isinstance(start, bool):
                    self.history_start = start
            elif sid != self.session_id and self.copied_meta is None:
                self.copied_meta = (line, ts)  # the parent's history follows
                git = payload.get("git")
                if self.remote_url is None and isinstance(git, dict):  # the parent's repository
                    url = git.get("repository_url")
                    self.remote_url = url if isinstance(url, str) else None
                return
        if self.copied_meta is not None:
            return
        if isinstance(payload.get("cwd"), str) and self.cwd is None:
            self.cwd = payload["cwd"]
        git = payload.get("git")
        if isinstance(git, dict) and isinstance(git.get("repository_url"), str):
            self.remote_url = git["repository_url"]
        start = parse_ts(payload.get("timestamp")) or ts
        if start and self.start_ts is None:
            self.start_ts = start
        if start and self.last_ts is None:
            self.last_ts = start

    def add(self, source: int, turn: Turn) -> None:
        self.candidates.append((source, turn))
        self._decide(source, turn)

    def _decide(self, source: int, turn: Turn) -> None:
        """Settle each role's source at the first evidence (module docstring); remember where
        a role's first message starts while it is not settled."""
        if self.user_source is None:
            if source == _USER_EVENT:
                self.user_source = _USER_EVENT
            elif source != _USER_ITEM and "user" in self.undecided:
                self.user_source = _USER_ITEM
        if self.assistant_source is None:
            if source == _ASSISTANT_ITEM:
                self.assistant_source = _ASSISTANT_ITEM
            elif source != _ASSISTANT_EVENT and "assistant" in self.undecided:
                self.assistant_source = _ASSISTANT_EVENT
        if self.user_source is not None:
            self.undecided.pop("user", None)
        if self.assistant_source is not None:
            self.undecided.pop("assistant", None)
        role = {_USER_ITEM: "user", _ASSISTANT_EVENT: "assistant"}.get(source)
        undecided = role == "user" and self.user_source is None
        undecided |= role == "assistant" and self.assistant_source is None
        if role is not None and undecided and role not in self.undecided:
            cursor = self.cursor or ReadCursor()
            self.undecided[role] = (cursor.line_start, cursor.lines_before, turn.line or 0)

    def hold_back(self) -> None:
        """An incremental read: leave the lines from the first message of a role not yet
        settled for the next read (the cursor moves back there; nothing from them lands)."""
        if not self.undecided or self.cursor is None:
            return
        offset, lines, line = min(self.undecided.values())
        self.cursor.offset, self.cursor.line_no = offset, lines
        self.candidates = [(s, t) for s, t in self.candidates if (t.line or 0) < line]
        self.undecided.clear()

    def item(self, p: dict[str, Any], ts: str, line: int) -> None:
        kind = p.get("type")
        skipped = self.report.skipped
        turn_id = f"L{line}"
        if kind == "message":
            role = p.get("role")
            text = _text(p.get("content"))
            if role == "user":
                if text.lstrip().lower().startswith(_INJECTED):
                    skipped["injected_context"] += 1
                elif text.strip():
                    self.add(_USER_ITEM, self._text_turn(turn_id, ts, "user", text, line))
            elif role == "assistant":
                if text.strip():
                    self.add(_ASSISTANT_ITEM, self._text_turn(turn_id, ts, "assistant", text, line))
            else:
                skipped["instructions"] += 1
        elif kind in ("function_call", "custom_tool_call"):
            name = p.get("name") if isinstance(p.get("name"), str) else "unknown"
            namespace = p.get("namespace") if isinstance(p.get("namespace"), str) else ""
            qualified = f"{namespace}{name}" if namespace else name
            raw = p.get("arguments") if kind == "function_call" else p.get("input")
            args = _decode(raw)
            self._remember(p.get("call_id"), qualified, _command(args))
            value = args if args is not None else raw
            for t in self._tool_call(turn_id, ts, qualified, value, line):
                self.add(_TOOL, t)
        elif kind == "local_shell_call":
            action = p.get("action") if isinstance(p.get("action"), dict) else {}
            command = _command(action)
            self._remember(p.get("call_id"), "local_shell", command)
            tool_input = bounded_tool_input("local_shell", {"command": command}, self.limits)
            self.add(_TOOL, Turn(turn_id, ts, "tool", "", "local_shell", tool_input, line))
        elif kind == "web_search_call":
            action = p.get("action") if isinstance(p.get("action"), dict) else {}
            query = {"query": action.get("query")}
            tool_input = bounded_tool_input("web_search", query, self.limits)
            self.add(_TOOL, Turn(turn_id, ts, "tool", "", "web_search", tool_input, line))
        elif kind in ("function_call_output", "custom_tool_call_output"):
            name, command = self.calls.get(str(p.get("call_id")), ("unknown", None))
            output = _output_text(p.get("output"))
            content = result_text(name, output, self.limits, command=command)
            result = Turn(turn_id, ts, "tool", content, name[:200] + RESULT_SUFFIX, None, line)
            self.add(_TOOL, result)
        elif kind == "reasoning":
            skipped["reasoning"] += 1
        else:
            skipped["unknown_item"] += 1

    def _remember(self, call_id: Any, name: str, command: str | None) -> None:
        if isinstance(call_id, str):
            if len(self.calls) >= _MAX_CALLS:
                self.calls.pop(next(iter(self.calls)))
            self.calls[call_id] = (name, command)

    def event(self, p: dict[str, Any], ts: str, line: int) -> None:
        kind = p.get("type")
        message = p.get("message")
        if kind == "user_message" and isinstance(message, str):
            if message.strip():
                self.add(_USER_EVENT, self._text_turn(f"L{line}", ts, "user", message, line))
        elif kind == "agent_message" and isinstance(message, str):
            if message.strip():
                turn = self._text_turn(f"L{line}", ts, "assistant", message, line)
                self.add(_ASSISTANT_EVENT, turn)
        else:
            self.report.skipped["event"] += 1

    def _text_turn(self, turn_id: str, ts: str, role: str, text: str, line: int) -> Turn:
        limits = self.limits
        content = redacted(text.strip(), limits.text_chars, limits.redact_window_chars)
        return Turn(turn_id, ts, role, content, line=line)

    def _tool_call(self, turn_id: str, ts: str, name: str, args: Any, line: int) -> list[Turn]:
        if is_upsert(name):
            made = upsert_turns(turn_id, ts, name, args, self.limits, line)
            if made is not None:
                turns, dropped = made
                if dropped:
                    self.report.skipped["triples_over_cap"] += dropped
                return turns
            self.report.skipped["bad_upsert_input"] += 1
            name = f"{name}:invalid"
        tool_input = bounded_tool_input(name, args, self.limits)
        return [Turn(turn_id, ts, "tool", "", name[:200], tool_input, line)]

    # -- the session -----------------------------------------------------------------------

    def _choose(self) -> tuple[int, int]:
        """The sources decided; a role not yet settled at the end of a whole read has only
        the one kind of message (or none)."""
        user = self.user_source if self.user_source is not None else _USER_ITEM
        assistant = self.assistant_source
        return user, assistant if assistant is not None else _ASSISTANT_EVENT

    def turns(self) -> list[Turn]:
        user, assistant = self._choose()
        keep = {user, assistant, _TOOL}
        dropped = sum(1 for s, _ in self.candidates if s not in keep)
        if dropped:
            self.report.skipped["duplicate_message"] += dropped
        self.candidates = [(s, t) for s, t in self.candidates if s in keep]
        return [t for _, t in self.candidates]

    def drop_replay(self, known: dict[str, list[str]], sink: LandingSink) -> None:
        """Leave out the parent's turns a forked rollout copied in (module docstring)."""
        self.replay_checked = True
        turns = self.turns()
        parent = self._parent_fingerprints(known, sink)
        start = 0
        if self.copied_meta is not None:
            after = self.copied_meta[0]
            start = next((i for i, t in enumerate(turns) if (t.line or 0) > after), len(turns))
        end = start
        if parent:
            cursor = 0
            for turn in turns[start:]:
                fp = fingerprint(turn)
                try:
                    cursor = parent.index(fp, cursor) + 1
                except ValueError:
                    break
                end += 1
            reason = "replayed_parent"
        else:
            end = start + self._copied_by_time(turns[start:])
            reason = "replayed_parent_unverified"
        if end > start:
            self.report.skipped[reason] += end - start
            copied = {id(t) for t in turns[start:end]}
            self.candidates = [(s, t) for s, t in self.candidates if id(t) not in copied]

    def _copied_by_time(self, turns: list[Turn]) -> int:
        if self.copied_meta is None:
            return 0
        start = _instant(self.start_ts)
        burst = _instant(self.copied_meta[1])
        n = 0
        for turn in turns:
            at = _instant(turn.ts)
            if at is None or not (
                (start is not None and at < start) or (burst is not None and at <= burst + _BURST)
            ):
                break
            n += 1
        return n

    def _parent_fingerprints(self, known: dict[str, list[str]], sink: LandingSink) -> list[str]:
        assert self.parent_id is not None
        if self.parent_id in known:
            return known[self.parent_id]
        beside = _parent_rollout(self.path, self.parent_id)
        if beside is not None:
            quiet = ImportReport(CLIENT)
            parent = read_codex(beside, quiet, self.limits, None)
            if parent is not None:
                return [fingerprint(t) for t in parent.turns()]
        scope = sink.scope_of(SessionTurns(self.parent_id, "", self.cwd, self.remote_url))
        directory = sink.writer.existing(scope)
        if directory is None:
            return []
        prints: list[str] = []
        with directory:
            prefix = f"{CLIENT}-{file_key(redact(self.parent_id) or '')}-"
            for name in directory.names(prefix):
                for raw in (directory.read(name) or b"").splitlines():
                    try:
                        rec = orjson.loads(raw)
                    except orjson.JSONDecodeError:
                        continue
                    prints.append(
                        fingerprint(
                            Turn("", "", rec.get("role", ""), rec.get("content", ""),
                                 rec.get("tool_name"), rec.get("tool_input"))
                        )
                    )  # fmt: skip
        return prints

    def session(self) -> SessionTurns | None:
        turns = self.turns()
        if not turns:
            return None
        if self.session_id is None:
            m = _UUID_IN_NAME.search(self.path.name)
            if m is None:
                self.report.problem(self.path, None, "missing_field:session_id", "no session id")
                return None
            self.session_id = m.group(1)
        if self.parent_id:  # a sub-agent: its "user" is the main agent
            for turn in turns:
                turn.origin = origins.SUBAGENT_TASK if turn.role == "user" else origins.SUBAGENT
                if turn.role in ("user", "assistant"):
                    turn.content = origins.mark(turn.content, turn.origin, turn.role)
        return SessionTurns(self.session_id, str(self.path), self.cwd, self.remote_url, turns)


def read_codex(
    path: Path, report: ImportReport, limits: Limits, state: FileState | None
) -> _Reader | None:
    """A reader holding the file's candidate turns (from `state`'s offset when given), or None
    when the file is not a Codex rollout."""
    reader = _Reader(path, report, limits)
    if state is not None:
        reader.cursor = ReadCursor(state.offset, state.line_no)
        if state.offset:
            reader.restore(state.reader)
    skipped = report.skipped
    first = state is None or not state.offset
    for line_no, rec in iter_jsonl(path, report, limits.max_line_bytes, reader.cursor):
        kind = rec.get("type")
        payload = rec.get("payload")
        ordinal = rec.get("ordinal")
        if (
            reader.history_start is not None
            and isinstance(ordinal, int)
            and ordinal < reader.history_start
            and kind != "session_meta"
        ):
            skipped["replayed_parent"] += 1  # recorded as the parent's history
            continue
        if first:
            first = False
            claude = "sessionId" in rec or "uuid" in rec or "leafUuid" in rec
            if kind in _CLAUDE_TYPES and claude:
                report.problem(
                    path, None, "claude_code_transcript",
                    "a Claude Code session: import it with `memflow import claude-code`",
                )  # fmt: skip
                return None
        if kind in _NEW_TYPES and isinstance(payload, dict):
            ts = parse_ts(rec.get("timestamp"))
            if kind == "session_meta":
                reader.meta(payload, ts, line_no)
                continue
            if ts is None:
                report.problem(path, line_no, "bad_timestamp", "missing or not ISO-8601")
                continue
            reader.last_ts = ts
            if kind == "response_item":
                reader.item(payload, ts, line_no)
            elif kind == "event_msg":
                reader.event(payload, ts, line_no)
            elif kind == "turn_context":
                if reader.cwd is None and isinstance(payload.get("cwd"), str):
                    reader.cwd = payload["cwd"]
                skipped["turn_context"] += 1
            else:
                skipped["compaction"] += 1
        elif "record_type" in rec:
            skipped["state"] += 1
        elif kind in _ITEM_TYPES:  # the older shape: bare response items
            ts = parse_ts(rec.get("timestamp")) or reader.last_ts
            if ts is None:
                report.problem(path, line_no, "bad_timestamp", "no time before this item")
                continue
            reader.item(rec, ts, line_no)
        elif kind is None and "id" in rec and "timestamp" in rec:  # the older session header
            reader.meta(rec, parse_ts(rec.get("timestamp")), line_no)
        else:
            skipped["unknown_record"] += 1
    if reader.history_start is not None:
        reader.replay_checked = True  # the ordinals said which lines were the parent's
    if state is not None:
        reader.hold_back()
    return reader


def read_codex_file(
    path: Path, report: ImportReport, limits: Limits | None = None
) -> SessionTurns | None:
    """The session of one rollout file (turns bounded and redacted, ids not yet redacted)."""
    reader = read_codex(path, report, limits or Limits(), None)
    return reader.session() if reader is not None else None


def _parent_of(payload: dict[str, Any]) -> str | None:
    """The parent thread a sub-agent's ``session_meta`` names, if any."""
    own = payload.get("id")
    source = payload.get("source")
    spawn = None
    if isinstance(source, dict) and isinstance(source.get("subagent"), dict):
        spawn = source["subagent"].get("thread_spawn")
    candidates = [payload.get("forked_from_id"), payload.get("parent_thread_id")]
    if isinstance(spawn, dict):
        candidates.append(spawn.get("parent_thread_id"))
    if payload.get("thread_source") == "subagent":
        candidates.append(payload.get("session_id"))
    for value in candidates:
        if isinstance(value, str) and value.strip() and value != own:
            return value
    return None


def _parent_rollout(child: Path, parent_id: str) -> Path | None:
    """The parent's rollout beside the child: under the nearest ``sessions`` folder above it
    (Codex files rollouts by day), else in the child's own folder."""
    if not _UUID_IN_NAME.fullmatch(parent_id):
        return None
    root = child.parent
    for up in child.parents[:4]:
        if up.name == "sessions":
            root = up
            break
    for found in root.rglob(f"rollout-*{parent_id}.jsonl"):
        if found.is_file() and not found.is_symlink() and found != child:
            return found
    return None


def _instant(ts: str | None) -> datetime | None:
    if not ts:
        return None
    try:
        return datetime.fromisoformat(ts.replace("Z", "+00:00"))
    except ValueError:
        return None


def _decode(raw: Any) -> Any:
    if isinstance(raw, str) and raw.lstrip()[:1] in ("{", "["):
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            return raw
    return raw


def _command(args: Any) -> str | None:
    if not isinstance(args, dict):
        return None
    value = args.get("cmd", args.get("command"))
    if isinstance(value, list) and all(isinstance(v, str) for v in value[:64]):
        value = " ".join(value[:64])
    return value if isinstance(value, str) else None


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    parts = []
    for block in content[:256]:
        if isinstance(block, dict) and isinstance(block.get("text"), str):
            parts.append(block["text"])
    return "\n".join(parts)


def _output_text(output: Any) -> str:
    if isinstance(output, str):
        decoded = _decode(output)
        if isinstance(decoded, dict) and isinstance(decoded.get("output"), str):
            return decoded["output"]
        return output
    if isinstance(output, list):
        return _text(output)
    if isinstance(output, dict) and isinstance(output.get("content"), str):
        return output["content"]
    return ""
