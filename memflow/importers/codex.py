"""Codex rollout files into the landing zone.

    report = import_codex(["~/.codex/sessions"], ImportSettings(Path("landing")))

Input: ``~/.codex/sessions/YYYY/MM/DD/rollout-<time>-<uuid>.jsonl`` (files, or folders searched
for ``rollout-*.jsonl``), in either shape Codex has written:

- newer: every line is ``{"timestamp", "type", "payload"}`` with ``type`` one of
  ``session_meta`` (``id``, ``cwd``, ``git.repository_url``...), ``response_item`` (``message``,
  ``function_call`` / ``custom_tool_call`` / ``local_shell_call`` / ``web_search_call`` and their
  outputs, ``reasoning``), ``event_msg`` (``user_message``, ``agent_message``, token counts...),
  ``turn_context`` and ``compacted``;
- older: a first line ``{"id", "timestamp", "instructions", "git"}`` followed by bare response
  items (no timestamps: the session's start time is used) and ``{"record_type": "state"}`` lines.

Codex writes what the user typed twice (an ``event_msg`` ``user_message`` and a ``response_item``
user message, the latter also carrying injected context such as ``<environment_context>`` and
AGENTS.md text); the same for the assistant's answer. One source per role is used: user turns
from the ``user_message`` events when the file has any (else from the response items, injected
context skipped), assistant turns from the response items when the file has any (else from the
``agent_message`` events). ``developer`` messages, reasoning, token counts and compaction
summaries are skipped and counted.

Turn ids are ``L<line number>`` (rollout files only grow). An MCP call of
``upsert_graph_triples`` (``name`` plus ``namespace``, or a qualified name) keeps its triples as
explicit triples. The tenant comes from the session's ``cwd`` and, when that directory holds no
repository here, the ``git.repository_url`` the rollout recorded.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson

from memflow.importers.common import (
    RESULT_SUFFIX,
    ImportReport,
    ImportSettings,
    LandingSink,
    Limits,
    SessionTurns,
    Turn,
    bounded_tool_input,
    collect_files,
    is_upsert,
    iter_jsonl,
    parse_ts,
    redacted,
    result_text,
    upsert_turns,
)

CLIENT = "codex"
FILE_PATTERN = re.compile(r"^rollout-.*\.jsonl$")
_UUID_IN_NAME = re.compile(
    r"([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})"
)
_NEW_TYPES = frozenset({"session_meta", "response_item", "event_msg", "turn_context", "compacted"})
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

# Candidate turns, tagged by source; the choice between duplicate sources is made per file.
_USER_EVENT, _USER_ITEM, _ASSISTANT_ITEM, _ASSISTANT_EVENT, _TOOL = range(5)


def import_codex(paths: Iterable[str | os.PathLike[str]], settings: ImportSettings) -> ImportReport:
    """Import Codex rollout files (files or folders) into `settings.landing_dir`."""
    started = time.perf_counter()
    report = ImportReport(CLIENT)
    sink = LandingSink(settings, report)
    for path in collect_files(paths, FILE_PATTERN, report):
        report.files += 1
        session = read_codex_file(path, report, settings.limits)
        if session is None:
            continue
        try:
            sink.land(CLIENT, session)
        except (OSError, TimeoutError) as exc:
            report.problem(path, None, "landing_failed", type(exc).__name__)
    report.seconds = time.perf_counter() - started
    return report


class _Reader:
    def __init__(self, path: Path, report: ImportReport, limits: Limits) -> None:
        self.path = path
        self.report = report
        self.limits = limits
        self.session_id: str | None = None
        self.cwd: str | None = None
        self.remote_url: str | None = None
        self.last_ts: str | None = None
        self.candidates: list[tuple[int, Turn]] = []
        self.calls: dict[str, tuple[str, str | None]] = {}  # call_id -> (tool, shell command)

    def meta(self, payload: dict[str, Any], ts: str | None) -> None:
        sid = payload.get("id")
        if isinstance(sid, str) and sid.strip() and self.session_id is None:
            self.session_id = sid
        if isinstance(payload.get("cwd"), str) and self.cwd is None:
            self.cwd = payload["cwd"]
        git = payload.get("git")
        if isinstance(git, dict) and isinstance(git.get("repository_url"), str):
            self.remote_url = git["repository_url"]
        start = parse_ts(payload.get("timestamp")) or ts
        if start and self.last_ts is None:
            self.last_ts = start

    def add(self, source: int, turn: Turn) -> None:
        self.candidates.append((source, turn))

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
            command = _command(args)
            if isinstance(p.get("call_id"), str):
                self.calls[p["call_id"]] = (qualified, command)
            for t in self._tool_call(
                turn_id, ts, qualified, args if args is not None else raw, line
            ):
                self.add(_TOOL, t)
        elif kind == "local_shell_call":
            action = p.get("action") if isinstance(p.get("action"), dict) else {}
            command = _command(action)
            if isinstance(p.get("call_id"), str):
                self.calls[p["call_id"]] = ("local_shell", command)
            tool_input = bounded_tool_input("local_shell", {"command": command}, self.limits)
            self.add(_TOOL, Turn(turn_id, ts, "tool", "", "local_shell", tool_input, line))
        elif kind == "web_search_call":
            action = p.get("action") if isinstance(p.get("action"), dict) else {}
            tool_input = bounded_tool_input(
                "web_search", {"query": action.get("query")}, self.limits
            )
            self.add(_TOOL, Turn(turn_id, ts, "tool", "", "web_search", tool_input, line))
        elif kind in ("function_call_output", "custom_tool_call_output"):
            name, command = self.calls.get(str(p.get("call_id")), ("unknown", None))
            output = _output_text(p.get("output"))
            content = result_text(name, output, self.limits, command=command)
            self.add(
                _TOOL, Turn(turn_id, ts, "tool", content, name[:200] + RESULT_SUFFIX, None, line)
            )
        elif kind == "reasoning":
            skipped["reasoning"] += 1
        else:
            skipped["unknown_item"] += 1

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

    def session(self) -> SessionTurns | None:
        if not self.candidates:
            return None
        if self.session_id is None:
            m = _UUID_IN_NAME.search(self.path.name)
            if m is None:
                self.report.problem(self.path, None, "missing_field:session_id", "no session id")
                return None
            self.session_id = m.group(1)
        sources = {s for s, _ in self.candidates}
        user = _USER_EVENT if _USER_EVENT in sources else _USER_ITEM
        assistant = _ASSISTANT_ITEM if _ASSISTANT_ITEM in sources else _ASSISTANT_EVENT
        keep = {user, assistant, _TOOL}
        dropped = sum(1 for s, _ in self.candidates if s not in keep)
        if dropped:
            self.report.skipped["duplicate_message"] += dropped
        turns = [t for s, t in self.candidates if s in keep]
        return SessionTurns(self.session_id, str(self.path), self.cwd, self.remote_url, turns)


def read_codex_file(
    path: Path, report: ImportReport, limits: Limits | None = None
) -> SessionTurns | None:
    """The session of one rollout file (turns bounded and redacted, ids not yet redacted)."""
    reader = _Reader(path, report, limits or Limits())
    skipped = report.skipped
    for line_no, rec in iter_jsonl(path, report, reader.limits.max_line_bytes):
        kind = rec.get("type")
        payload = rec.get("payload")
        if kind in _NEW_TYPES and isinstance(payload, dict):
            ts = parse_ts(rec.get("timestamp"))
            if kind == "session_meta":
                reader.meta(payload, ts)
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
            reader.meta(rec, parse_ts(rec.get("timestamp")))
        else:
            skipped["unknown_record"] += 1
    return reader.session()


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
