"""An OpenAI-compatible chat server that ranks what it is asked to rerank, for the listwise
rerank tests: a real HTTP server (tests.support.openai_chat_server) whose default answer is
computed from the request instead of scripted.

It reads the `Question:` line and the numbered `[i] ...` candidate lines of the last user
message and answers `{"ranking": [...]}`: candidates by how many of the question's words
(longer than 3 letters) they contain, ties in their given order. Scripted answers queued with
`enqueue` still come first (errors, delays, junk)."""

from __future__ import annotations

import json
import re

from tests.support.openai_chat_server import OpenAIChatServer, Received, Scripted

JUDGE = "<judge the request>"
_CANDIDATE = re.compile(r"^\[(\d+)\] (.*)$", re.MULTILINE)
_WORD = re.compile(r"[a-z]{4,}")


def judge(received: Received) -> str:
    messages = received.json["messages"]
    text = next(m["content"] for m in reversed(messages) if m["role"] == "user")
    question = next(line for line in text.splitlines() if line.startswith("Question: "))
    words = set(_WORD.findall(question.lower()))
    found = [(int(n), body) for n, body in _CANDIDATE.findall(text)]
    ranked = sorted(found, key=lambda c: -len(words & set(_WORD.findall(c[1].lower()))))
    return json.dumps({"ranking": [n for n, _ in ranked]})


class RankingChatServer(OpenAIChatServer):
    def __init__(self, model: str = "judge-model") -> None:
        super().__init__(model, default=Scripted.answer(JUDGE))

    def render(self, scripted: Scripted, received: Received) -> bytes:
        if scripted.content == JUDGE and scripted.body is None:
            scripted = Scripted.answer(judge(received))
        return super().render(scripted, received)
