"""The entity-key rule memflow used before issue 16 (schemas/ids.py at commit bc5929a), kept
only so tests can write state the way an existing data directory holds it and check the
re-keying path (`memflow.rekey`). Not used by memflow itself."""

from __future__ import annotations

import re
import unicodedata

_SEPARATOR_CHARS = r"\s\-_.,;:/\\'\"`()\[\]{}<>|!?~"
_SEPARATORS = re.compile(f"[{_SEPARATOR_CHARS}]+")
_DIGIT = re.compile(r"\d")
_DIGITS_APART = re.compile(f"\\d[{_SEPARATOR_CHARS}]+\\d")
_SPACES = re.compile(r"\s+")


def norm_key(name: str) -> str:
    text = unicodedata.normalize("NFKC", name).casefold()
    if not _DIGITS_APART.search(text):
        return _SEPARATORS.sub("", text) or " ".join(text.split())
    parts: list[str] = []
    pos = 0
    for run in _SEPARATORS.finditer(text):
        parts.append(text[pos : run.start()])
        pos = run.end()
        if run.start() > 0 and _DIGIT.match(text, run.start() - 1) and _DIGIT.match(text, pos):
            parts.append(_SPACES.sub(" ", run.group()))
    parts.append(text[pos:])
    key = "".join(parts)
    return key or " ".join(text.split())
