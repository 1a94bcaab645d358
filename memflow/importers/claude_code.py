"""Claude Code session files into the landing zone.

    report = import_claude_code(["~/.claude/projects"], ImportSettings(Path("landing")))
    print(report.summary())

Input: ``~/.claude/projects/<project>/<session>.jsonl`` and the subagent files under
``<session>/subagents/agent-*.jsonl`` (files, or folders searched for ``*.jsonl``). One JSON
record per line; what is read:

- ``type: "user"`` / ``"assistant"`` records with ``sessionId``, ``uuid``, ``parentUuid``,
  ``timestamp``, ``cwd``, ``isSidechain``, ``origin`` and ``message.content`` (a string, or
  blocks: ``text``, ``tool_use``, ``tool_result``, ``thinking``, ``image``...);
- **slash commands**: the record ``<command-name>/note</command-name><command-args>this
  feature</command-args>`` and the ``isMeta`` record holding the command's expansion (the prompt
  Claude Code sends) become one user turn, ``/note this feature`` followed by the expansion
  (``origin: "command:/note"``). A built-in command without arguments or expansion (``/clear``,
  ``/model``) and its ``<local-command-stdout>`` are skipped and counted;
- **typed-ahead steering**: a ``queue-operation`` that Claude Code ``remove``d from its queue
  with ``content`` was taken into the running turn, and appears nowhere else: it lands as a user
  turn (``origin: "steering"``). One that was ``dequeue``d arrives as an ordinary user record
  (landed once, from there); one still queued at the end of the file is counted, not landed;
- **turns that are not the user's**: a sub-agent's turns (``isSidechain``: its "user" is the
  main agent's task), teammate messages (``<teammate-message>``), other sessions'
  (``<cross-session-message>``, ``origin.kind: "peer"``), agents' (``<agent-message>``) and
  harness notifications (``<task-notification>``) are marked (`memflow.importers.origins`:
  an ``origin`` field and a text marker the extractor reads);
- **rewound branches** are left out: when the user went back and sent another prompt from the
  same point (two prompts with one ``parentUuid``), the branch that does not lead to the
  session's last record is abandoned; its records are counted as ``rewound``. A branch imported
  before the user rewound it stays landed (imports are append-only);
- ``isMeta`` records (caveats, command output), ``isCompactSummary`` records (the summary
  Claude Code writes after compaction repeats turns already in the file), ``summary``,
  ``system`` (including ``compact_boundary``), ``file-history-snapshot``, ``attachment`` and
  unknown records are skipped and counted.

A file in Codex's format is named as such (``codex_transcript``) and not read.

Turn ids: a record's text is turn ``<uuid>``; its ``tool_use`` / ``tool_result`` block number ``i``
is turn ``<uuid>#<i>``; a steering message is ``queue:<timestamp>:<digest>``. Sidechain turns
belong to the parent session (same ``sessionId``); ``ImportSettings.include_sidechains=False``
leaves them out. The tenant comes from the first ``cwd`` of the session
(`memflow.importers.tenant`).
"""

from __future__ import annotations

import hashlib
import os
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memflow.importers import origins
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

CLIENT = "claude-code"
FILE_PATTERN = re.compile(r"^[^.].*\.jsonl$")
_REMINDER = re.compile(r"<system-reminder>.*?</system-reminder>", re.DOTALL)
_COMMAND_NAME = re.compile(r"<command-name>\s*(.*?)\s*</command-name>", re.DOTALL)
_COMMAND_ARGS = re.compile(r"<command-args>(.*?)</command-args>", re.DOTALL)
_COMMAND_WRAPPERS = ("<command-name>", "<command-message>", "<command-args>")
_LOCAL_OUTPUT = (
    "<local-command-stdout>",
    "<local-command-stderr>",
    "<local-command-caveat>",
    "Caveat: The messages below were generated",
)
_KNOWN_OTHER = frozenset(
    {"summary", "system", "file-history-snapshot", "progress", "attachment", "permission-mode",
     "last-prompt"}
)  # fmt: skip
CODEX_TYPES = frozenset({"session_meta", "response_item", "event_msg", "turn_context"})
_MAX_TOOL_IDS = 100_000


def import_claude_code(
    paths: Iterable[str | os.PathLike[str]], settings: ImportSettings
) -> ImportReport:
    """Import Claude Code transcripts (files or folders) into `settings.landing_dir`."""
    started = time.perf_counter()
    report = ImportReport(CLIENT)
    sink = LandingSink(settings, report)
    for path in collect_files(paths, FILE_PATTERN, report):
        report.files += 1
        for session in read_claude_code_file(path, report, settings.limits, settings):
            try:
                sink.land(CLIENT, session)
            except (OSError, TimeoutError) as exc:
                report.problem(path, None, "landing_failed", type(exc).__name__)
    report.seconds = time.perf_counter() - started
    return report


def looks_like_codex(rec: dict[str, Any]) -> bool:
    """A record of a Codex rollout (either shape), never of a Claude Code session."""
    kind = rec.get("type")
    if kind in CODEX_TYPES and isinstance(rec.get("payload"), dict):
        return True
    return kind is None and "instructions" in rec and "sessionId" not in rec


@dataclass(slots=True)
class _Node:
    parent: str | None
    line: int
    prompt: bool  # a user record holding text the user typed


@dataclass(slots=True)
class _Command:
    turn: Turn
    name: str
    args: str
    expansion: str = ""


@dataclass
class _Session:
    turns: SessionTurns
    nodes: dict[str, _Node] = field(default_factory=dict)
    last: str | None = None  # the last main-thread record
    commands: dict[str, _Command] = field(default_factory=dict)
    queued: list[str] = field(default_factory=list)  # enqueued, not yet taken


def read_claude_code_file(
    path: Path,
    report: ImportReport,
    limits: Limits | None = None,
    settings: ImportSettings | None = None,
) -> list[SessionTurns]:
    """The sessions of one file with their turns (bounded and redacted, ids not yet redacted)."""
    reader = _Reader(path, report, limits or Limits(), settings)
    for line_no, rec in iter_jsonl(path, report, reader.limits.max_line_bytes):
        if not reader.record(line_no, rec):
            return []
    return reader.sessions()


class _Reader:
    def __init__(
        self, path: Path, report: ImportReport, limits: Limits, settings: ImportSettings | None
    ) -> None:
        self.path = path
        self.report = report
        self.limits = limits
        self.include_sidechains = settings.include_sidechains if settings is not None else True
        self.by_id: dict[str, _Session] = {}
        self.tool_names: dict[str, tuple[str, str | None]] = {}  # tool_use id -> (name, command)
        self.first = True

    def session(self, session_id: str) -> _Session:
        found = self.by_id.get(session_id)
        if found is None:
            found = self.by_id[session_id] = _Session(SessionTurns(session_id, str(self.path)))
        return found

    # -- records ---------------------------------------------------------------------------

    def record(self, line_no: int, rec: dict[str, Any]) -> bool:
        """Read one record; False when the file turns out not to be Claude Code's."""
        skipped = self.report.skipped
        if self.first:
            self.first = False
            if looks_like_codex(rec):
                self.report.problem(
                    self.path, None, "codex_transcript",
                    "a Codex rollout: import it with `memflow import codex`",
                )  # fmt: skip
                return False
        kind = rec.get("type")
        sid = rec.get("sessionId")
        if isinstance(sid, str) and sid.strip() and not rec.get("isSidechain"):
            self._node(self.session(sid), rec, line_no)
        if kind == "queue-operation":
            self._queue(rec, line_no)
            return True
        if kind not in ("user", "assistant"):
            if kind == "system" and rec.get("subtype") == "compact_boundary":
                skipped["compaction"] += 1
            else:
                skipped[kind if kind in _KNOWN_OTHER else "unknown_record"] += 1
            return True
        if rec.get("isSidechain") is True and not self.include_sidechains:
            skipped["sidechain"] += 1
            return True
        if rec.get("isCompactSummary") is True:
            skipped["compaction"] += 1
            return True
        self._message(kind, rec, line_no)
        return True

    def _node(self, session: _Session, rec: dict[str, Any], line_no: int) -> None:
        uuid = rec.get("uuid")
        if not isinstance(uuid, str) or not uuid:
            return
        parent = rec.get("parentUuid") or rec.get("logicalParentUuid")
        prompt = rec.get("type") == "user" and not rec.get("isMeta") and _is_prompt(rec)
        session.nodes[uuid] = _Node(parent if isinstance(parent, str) else None, line_no, prompt)
        session.last = uuid

    def _message(self, kind: str, rec: dict[str, Any], line_no: int) -> None:
        report = self.report
        session_id, uuid = rec.get("sessionId"), rec.get("uuid")
        problem = None
        if not isinstance(session_id, str) or not session_id.strip():
            problem = "missing_field:sessionId"
        elif not isinstance(uuid, str) or not uuid.strip():
            problem = "missing_field:uuid"
        if problem:
            report.problem(self.path, line_no, problem)
            return
        ts = parse_ts(rec.get("timestamp"))
        if ts is None:
            report.problem(self.path, line_no, "bad_timestamp", "missing or not ISO-8601")
            return
        message = rec.get("message")
        if not isinstance(message, dict) or "content" not in message:
            report.problem(self.path, line_no, "bad_message", "no message.content")
            return
        session = self.session(session_id)
        if session.turns.cwd is None and isinstance(rec.get("cwd"), str):
            session.turns.cwd = rec["cwd"]
        content = message["content"]
        if kind == "user" and self._command_or_meta(session, rec, uuid, ts, content, line_no):
            return
        role = "assistant" if kind == "assistant" else "user"
        sidechain = rec.get("isSidechain") is True
        turn_origin = origins.SUBAGENT if role == "assistant" and sidechain else None
        if role == "user":
            text = _plain_text(content)
            turn_origin = origins.of_user_text(text, rec.get("origin")) or (
                origins.SUBAGENT_TASK if sidechain else None
            )
        tool_origin = origins.SUBAGENT if sidechain else None
        self._record_turns(
            session.turns.turns, content, role, uuid, ts, line_no, (turn_origin, tool_origin)
        )
        if len(self.tool_names) > _MAX_TOOL_IDS:
            self.tool_names.clear()

    def _command_or_meta(
        self, session: _Session, rec: dict[str, Any], uuid: str, ts: str, content: Any, line: int
    ) -> bool:
        """Slash commands, their expansions and other meta records; True when handled."""
        skipped = self.report.skipped
        text = _plain_text(content).strip()
        parent = rec.get("parentUuid")
        if rec.get("isMeta") is True:
            command = session.commands.get(parent) if isinstance(parent, str) else None
            if command is not None and text:
                command.expansion = text
                return True
            if origins.of_user_text(text, rec.get("origin")) is not None:
                return False  # a message from elsewhere, marked: it lands
            skipped["meta"] += 1
            return True
        if text.startswith(_LOCAL_OUTPUT):
            skipped["command"] += 1
            return True
        if text.startswith(_COMMAND_WRAPPERS):
            name_m, args_m = _COMMAND_NAME.search(text), _COMMAND_ARGS.search(text)
            name = (name_m.group(1) if name_m else "").strip()
            if not name:
                skipped["command"] += 1
                return True
            name = name if name.startswith("/") else f"/{name}"
            args = (args_m.group(1) if args_m else "").strip()
            turn = Turn(uuid, ts, "user", "", line=line, origin=f"{origins.COMMAND}:{name[:60]}")
            session.commands[uuid] = _Command(turn, name, args)
            session.turns.turns.append(turn)  # filled in when the file is read
            return True
        return False

    def _queue(self, rec: dict[str, Any], line: int) -> None:
        sid = rec.get("sessionId")
        if not isinstance(sid, str) or not sid.strip():
            self.report.skipped["queue-operation"] += 1
            return
        session = self.session(sid)
        op = rec.get("operation")
        text = _plain_text(rec.get("content")).strip()
        if op == "enqueue" and text:
            session.queued.append(text)
        elif op == "dequeue":
            if session.queued:
                session.queued.pop(0)  # taken as an ordinary user record: lands from there
        elif op == "remove" and text:
            if text in session.queued:
                session.queued.remove(text)
            ts = parse_ts(rec.get("timestamp"))
            if ts is None or origins.of_user_text(text) is not None:
                self.report.skipped["queue-operation"] += 1
                return
            digest = hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()[:12]
            content = redacted(
                _clean(text), self.limits.text_chars, self.limits.redact_window_chars
            )
            turn = Turn(f"queue:{ts}:{digest}", ts, "user", content, line=line,
                        origin=origins.STEERING)  # fmt: skip
            session.turns.turns.append(turn)
        elif op in ("popAll", "clear"):
            session.queued.clear()
        self.report.skipped["queue-operation"] += 1

    # -- blocks ----------------------------------------------------------------------------

    def _record_turns(
        self,
        out: list[Turn],
        content: Any,
        role: str,
        uuid: str,
        ts: str,
        line_no: int,
        who: tuple[str | None, str | None],
    ) -> None:
        """The record's text as one turn, each tool call or result as one; `who` is the
        origin of the text and of the tool turns."""
        turn_origin, tool_origin = who
        skipped = self.report.skipped
        limits = self.limits
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        if not isinstance(blocks, list):
            self.report.problem(self.path, line_no, "bad_message", "content is not text or blocks")
            return
        texts: list[str] = []
        tools: list[Turn] = []
        if len(blocks) > limits.blocks_per_record:
            skipped["blocks_over_cap"] += len(blocks) - limits.blocks_per_record
            blocks = blocks[: limits.blocks_per_record]
        for i, block in enumerate(blocks):
            if not isinstance(block, dict):
                skipped["unknown_block"] += 1
                continue
            btype = block.get("type")
            turn_id = f"{uuid}#{i}"
            if btype == "text":
                if isinstance(block.get("text"), str):
                    texts.append(block["text"])
            elif btype == "tool_use":
                tools.extend(self._tool_use(block, turn_id, ts, line_no))
            elif btype == "tool_result":
                tools.append(self._tool_result(block, turn_id, ts, line_no))
            elif btype in ("thinking", "redacted_thinking"):
                skipped["thinking"] += 1
            elif btype in ("image", "document"):
                skipped[btype] += 1
            else:
                skipped["unknown_block"] += 1
        text = _clean("\n\n".join(texts))
        if text:
            marked = origins.mark(text, turn_origin, role)
            body = redacted(marked, limits.text_chars, limits.redact_window_chars)
            out.append(Turn(uuid, ts, role, body, line=line_no, origin=turn_origin))
        for tool in tools:
            tool.origin = tool_origin
        out.extend(tools)

    def _tool_use(self, block: dict[str, Any], turn_id: str, ts: str, line: int) -> list[Turn]:
        name = block.get("name") if isinstance(block.get("name"), str) else "unknown"
        tool_input = block.get("input")
        command = tool_input.get("command") if isinstance(tool_input, dict) else None
        if isinstance(block.get("id"), str):
            self.tool_names[block["id"]] = (name, command if isinstance(command, str) else None)
        return _tool_call(turn_id, ts, name, tool_input, self.limits, line, self.report)

    def _tool_result(self, block: dict[str, Any], turn_id: str, ts: str, line: int) -> Turn:
        name, command = self.tool_names.get(str(block.get("tool_use_id")), ("unknown", None))
        text = _result_content(block.get("content"))
        if block.get("is_error") is True:
            text = "error: " + text
        content = result_text(name, text, self.limits, command=command)
        return Turn(turn_id, ts, "tool", content, _result_name(name), None, line)

    # -- the file read ---------------------------------------------------------------------

    def sessions(self) -> list[SessionTurns]:
        out = []
        for session in self.by_id.values():
            self._finish_commands(session)
            if session.queued:
                self.report.skipped["queued_not_sent"] += len(session.queued)
            rewound = _rewound(session)
            if rewound:
                kept = [t for t in session.turns.turns if t.turn_id.split("#")[0] not in rewound]
                self.report.skipped["rewound"] += len(session.turns.turns) - len(kept)
                session.turns.turns = kept
            out.append(session.turns)
        return out

    def _finish_commands(self, session: _Session) -> None:
        limits = self.limits
        for command in session.commands.values():
            line = f"{command.name} {command.args}".strip()
            if not command.args and not command.expansion:
                self.report.skipped["command"] += 1  # a built-in without arguments
                continue
            text = line + (f"\n\n{_clean(command.expansion)}" if command.expansion else "")
            command.turn.content = redacted(text, limits.text_chars, limits.redact_window_chars)
        session.turns.turns = [
            t
            for t in session.turns.turns
            if not (t.origin or "").startswith(f"{origins.COMMAND}:") or t.content
        ]


def _rewound(session: _Session) -> set[str]:
    """Record ids on branches the user rewound away from (see the module docstring)."""
    nodes = session.nodes
    children: dict[str, list[str]] = {}
    for uuid, node in nodes.items():
        if node.parent is not None:
            children.setdefault(node.parent, []).append(uuid)
    live: set[str] = set()
    here = session.last
    while here is not None and here not in live:
        live.add(here)
        node = nodes.get(here)
        here = node.parent if node is not None else None
    abandoned: list[str] = []
    for kids in children.values():
        prompts = [k for k in kids if nodes[k].prompt]
        if len(prompts) < 2:
            continue
        keep = [k for k in prompts if k in live] or [max(prompts, key=lambda k: nodes[k].line)]
        abandoned.extend(k for k in prompts if k not in keep)
    out: set[str] = set()
    stack = list(abandoned)
    while stack:
        uuid = stack.pop()
        if uuid in out or uuid in live:
            continue
        out.add(uuid)
        stack.extend(children.get(uuid, ()))
    return out


def _is_prompt(rec: dict[str, Any]) -> bool:
    message = rec.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, list) and any(
        isinstance(b, dict) and b.get("type") == "tool_result" for b in content
    ):
        return False
    text = _plain_text(content).strip()
    return bool(text) and not text.startswith(_COMMAND_WRAPPERS + _LOCAL_OUTPUT)


def _plain_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n\n".join(
            b["text"]
            for b in content[:256]
            if isinstance(b, dict)
            and b.get("type", "text") == "text"
            and isinstance(b.get("text"), str)
        )
    return ""


def _clean(text: str) -> str:
    if "<system-reminder>" in text:
        text = _REMINDER.sub("", text)
    return text.strip()


def _tool_call(
    turn_id: str,
    ts: str,
    name: str,
    tool_input: Any,
    limits: Limits,
    line_no: int,
    report: ImportReport,
) -> list[Turn]:
    if is_upsert(name):
        made = upsert_turns(turn_id, ts, name, tool_input, limits, line_no)
        if made is not None:
            turns, dropped = made
            if dropped:
                report.skipped["triples_over_cap"] += dropped
            return turns
        report.skipped["bad_upsert_input"] += 1
        name = f"{name}:invalid"
    bounded = bounded_tool_input(name, tool_input, limits)
    return [Turn(turn_id, ts, "tool", "", name[:200], bounded, line_no)]


def _result_name(name: str) -> str:
    return name[:200] + RESULT_SUFFIX


def _result_content(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for block in content[:64]:
            if isinstance(block, dict) and isinstance(block.get("text"), str):
                parts.append(block["text"])
            elif isinstance(block, dict) and block.get("type") == "image":
                parts.append("[image omitted]")
        return "\n".join(parts)
    return ""
