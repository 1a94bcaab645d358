"""Claude Code session files into the landing zone.

    report = import_claude_code(["~/.claude/projects"], ImportSettings(Path("landing")))
    print(report.summary())

Input: ``~/.claude/projects/<project>/<session>.jsonl`` and the subagent files under
``<session>/subagents/agent-*.jsonl`` (files, or folders searched for ``*.jsonl``). One JSON
record per line; what is read:

- ``type: "user"`` / ``"assistant"`` records with ``sessionId``, ``uuid``, ``timestamp``, ``cwd``,
  ``gitBranch``, ``isSidechain`` and ``message.content`` (a string, or blocks: ``text``,
  ``tool_use``, ``tool_result``, ``thinking``, ``image``...);
- ``isMeta`` user records (caveats, command output), slash-command wrappers and
  ``isCompactSummary`` records (the summary Claude Code writes after compaction repeats turns
  already in the file) are skipped and counted, as are ``summary``, ``system`` (including
  ``compact_boundary``), ``file-history-snapshot``, ``queue-operation`` and unknown records.

Turn ids: a record's text is turn ``<uuid>``; its ``tool_use`` / ``tool_result`` block number ``i``
is turn ``<uuid>#<i>``. Sidechain (subagent) turns belong to the parent session (same
``sessionId``); ``ImportSettings.include_sidechains=False`` leaves them out. The tenant comes from
the first ``cwd`` of the session (`memflow.importers.tenant`). Abandoned branches of a rewound
conversation are imported like the rest (the file keeps them).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

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
_COMMAND_WRAPPERS = (
    "<command-name>",
    "<command-message>",
    "<command-args>",
    "<local-command-stdout>",
    "<local-command-stderr>",
    "<local-command-caveat>",
)
_KNOWN_OTHER = frozenset(
    {"summary", "system", "file-history-snapshot", "queue-operation", "progress", "attachment"}
)
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


def read_claude_code_file(
    path: Path,
    report: ImportReport,
    limits: Limits | None = None,
    settings: ImportSettings | None = None,
) -> list[SessionTurns]:
    """The sessions of one file with their turns (bounded and redacted, ids not yet redacted)."""
    limits = limits or Limits()
    include_sidechains = settings.include_sidechains if settings is not None else True
    sessions: dict[str, SessionTurns] = {}
    tool_names: dict[str, tuple[str, str | None]] = {}  # tool_use id -> (name, shell command)
    skipped = report.skipped
    for line_no, rec in iter_jsonl(path, report, limits.max_line_bytes):
        kind = rec.get("type")
        if kind not in ("user", "assistant"):
            if kind == "system" and rec.get("subtype") == "compact_boundary":
                skipped["compaction"] += 1
            else:
                skipped[kind if kind in _KNOWN_OTHER else "unknown_record"] += 1
            continue
        if rec.get("isSidechain") is True and not include_sidechains:
            skipped["sidechain"] += 1
            continue
        if rec.get("isMeta") is True:
            skipped["meta"] += 1
            continue
        if rec.get("isCompactSummary") is True:
            skipped["compaction"] += 1
            continue
        session_id, uuid = rec.get("sessionId"), rec.get("uuid")
        problem = None
        if not isinstance(session_id, str) or not session_id.strip():
            problem = "missing_field:sessionId"
        elif not isinstance(uuid, str) or not uuid.strip():
            problem = "missing_field:uuid"
        if problem:
            report.problem(path, line_no, problem)
            continue
        ts = parse_ts(rec.get("timestamp"))
        if ts is None:
            report.problem(path, line_no, "bad_timestamp", "missing or not ISO-8601")
            continue
        message = rec.get("message")
        if not isinstance(message, dict) or "content" not in message:
            report.problem(path, line_no, "bad_message", "no message.content")
            continue
        session = sessions.get(session_id)
        if session is None:
            session = sessions[session_id] = SessionTurns(session_id, str(path))
        if session.cwd is None and isinstance(rec.get("cwd"), str):
            session.cwd = rec["cwd"]
        role = "assistant" if kind == "assistant" else "user"
        _record_turns(
            session.turns, message["content"], role, uuid, ts, (path, line_no), tool_names, limits,
            report,
        )  # fmt: skip
        if len(tool_names) > _MAX_TOOL_IDS:
            tool_names.clear()
    return list(sessions.values())


def _record_turns(
    out: list[Turn],
    content: Any,
    role: str,
    uuid: str,
    ts: str,
    where: tuple[Path, int],
    tool_names: dict[str, tuple[str, str | None]],
    limits: Limits,
    report: ImportReport,
) -> None:
    path, line_no = where
    skipped = report.skipped
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
    if not isinstance(blocks, list):
        report.problem(path, line_no, "bad_message", "content is not text or blocks")
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
            text = block.get("text")
            if isinstance(text, str):
                texts.append(text)
        elif btype == "tool_use":
            name = block.get("name") if isinstance(block.get("name"), str) else "unknown"
            tool_input = block.get("input")
            command = tool_input.get("command") if isinstance(tool_input, dict) else None
            if isinstance(block.get("id"), str):
                tool_names[block["id"]] = (name, command if isinstance(command, str) else None)
            tools.extend(_tool_call(turn_id, ts, name, tool_input, limits, line_no, report))
        elif btype == "tool_result":
            name, command = tool_names.get(str(block.get("tool_use_id")), ("unknown", None))
            text = _result_content(block.get("content"))
            if block.get("is_error") is True:
                text = "error: " + text
            tools.append(
                Turn(
                    turn_id,
                    ts,
                    "tool",
                    result_text(name, text, limits, command=command),
                    _result_name(name),
                    None,
                    line_no,
                )
            )
        elif btype in ("thinking", "redacted_thinking"):
            skipped["thinking"] += 1
        elif btype in ("image", "document"):
            skipped[btype] += 1
        else:
            skipped["unknown_block"] += 1
    text = _clean_text("\n\n".join(texts), role, skipped)
    if text:
        content = redacted(text, limits.text_chars, limits.redact_window_chars)
        out.append(Turn(uuid, ts, role, content, line=line_no))
    out.extend(tools)


def _clean_text(text: str, role: str, skipped: Any) -> str:
    if not text:
        return ""
    if "<system-reminder>" in text:
        text = _REMINDER.sub("", text)
    text = text.strip()
    if role == "user" and text.startswith(_COMMAND_WRAPPERS):
        skipped["command"] += 1
        return ""
    return text


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
