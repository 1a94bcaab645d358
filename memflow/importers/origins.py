"""Who said a turn, when it was not the user or the session's own agent.

Transcripts hold words the user never typed under ``role: user``: a sub-agent's task (written by
the main agent), messages from teammates (Claude Code agent teams), from other agent sessions
(``<cross-session-message>``), from agents (``<agent-message>``), and harness notifications
(``<task-notification>``). An importer marks such a turn twice:

- the landing line's ``origin`` field (`memflow.landing` ignores fields it does not know; a later
  reader can carry it), e.g. ``"subagent"``, ``"teammate:alice"``, ``"peer:planner"``;
- a bracketed marker at the start of its text, so the extractor, which reads a turn's role and
  text, can tell it apart today: ``[message from teammate alice] ...``.

Typed-ahead steering (``"steering"``) and slash commands (``"command:/name"``) are the user's own
words: they get the field, no marker.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

SUBAGENT = "subagent"  # a sub-agent's own turn
SUBAGENT_TASK = "subagent-task"  # what the main agent asked a sub-agent (its "user" turn)
TEAMMATE = "teammate"
PEER = "peer"  # another agent session
AGENT = "agent"
NOTIFICATION = "notification"
STEERING = "steering"
COMMAND = "command"

_ATTR = r"""(?:teammate_id|from|from-name|name|from-session-id)\s*=\s*["']([^"']{1,80})["']"""
_PEER = r"^\s*(?:Another Claude session sent a message:\s*)?<cross-session-message\b"
_WRAPPERS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(rf"^\s*<teammate-message\b[^>]*?{_ATTR}", re.I), TEAMMATE),
    (re.compile(r"^\s*<teammate-message\b", re.I), TEAMMATE),
    (re.compile(rf"{_PEER}[^>]*?{_ATTR}", re.I), PEER),
    (re.compile(_PEER, re.I), PEER),
    (re.compile(r"^\s*Another Claude session sent a message:", re.I), PEER),
    (re.compile(rf"^\s*<agent-message\b[^>]*?{_ATTR}", re.I), AGENT),
    (re.compile(r"^\s*<agent-message\b", re.I), AGENT),
    (re.compile(r"^\s*<task-notification\b", re.I), NOTIFICATION),
)
_KINDS = {"peer": PEER, "teammate": TEAMMATE, "task-notification": NOTIFICATION, "agent": AGENT}
_CLEAN = re.compile(r"[^A-Za-z0-9._@-]+")


def _who(value: Any) -> str:
    return _CLEAN.sub("-", str(value))[:60].strip("-") if value else ""


def origin(kind: str, who: Any = None) -> str:
    name = _who(who)
    return f"{kind}:{name}" if name else kind


def of_user_text(text: str, record_origin: Any = None) -> str | None:
    """The origin of a user-role text, from the record's ``origin`` (newer Claude Code) or the
    wrapper the harness put around it; None for the user's own words."""
    if isinstance(record_origin, Mapping):
        kind = _KINDS.get(str(record_origin.get("kind") or "").lower())
        if kind is not None:
            return origin(kind, record_origin.get("name"))
    head = text[:600]
    for pattern, kind in _WRAPPERS:
        m = pattern.match(head)
        if m:
            return origin(kind, m.group(1) if m.groups() else None)
    return None


def marker(turn_origin: str | None, role: str) -> str:
    """The text marker of a turn of that origin ("" for none, steering and commands)."""
    if not turn_origin:
        return ""
    kind, _, who = turn_origin.partition(":")
    who = f" {who}" if who else ""
    if kind == SUBAGENT:
        return "[sub-agent] "
    if kind == SUBAGENT_TASK:
        return "[task from the main agent to a sub-agent] "
    if kind == TEAMMATE:
        return f"[message from teammate{who}] "
    if kind == PEER:
        return f"[message from another agent session{who}] "
    if kind == AGENT:
        return f"[message from agent{who}] "
    if kind == NOTIFICATION:
        return "[notification from the agent harness] "
    return ""


def mark(text: str, turn_origin: str | None, role: str) -> str:
    prefix = marker(turn_origin, role)
    return text if not prefix or text.startswith(prefix) else prefix + text
