"""Stable ids and entity-name keys: the same input gives the same ids on every run."""

from __future__ import annotations

import hashlib
import re
import unicodedata

# Separators ignored when deciding whether two spellings are one entity. Symbols that carry
# meaning in names (+ # @ & *) are kept so "C++", "C#" and "C" stay three entities.
_SEPARATOR_CHARS = r"\s\-_.,;:/\\'\"`()\[\]{}<>|!?~"
_SEPARATORS = re.compile(f"[{_SEPARATOR_CHARS}]+")
# A run of separators between two digits is part of a number or version ("1.8", "10.0.0.1",
# "s1_10", "1,000"): it is kept, whitespace in it collapsed to one space.
_DIGIT = re.compile(r"\d")
_DIGITS_APART = re.compile(f"\\d[{_SEPARATOR_CHARS}]+\\d")
_SPACES = re.compile(r"\s+")


def _digest(*parts: str, size: int = 16) -> str:
    h = hashlib.sha256("\x1f".join(parts).encode("utf-8"))
    return h.hexdigest()[:size]


def norm_key(name: str) -> str:
    """Names that differ only in case, spacing, punctuation or Unicode form share this key.

    Digits are never merged away: separators between two digits are kept as written (spaces
    collapsed), so ``Node 1.8`` / ``Node 18``, ``10.0.0.1`` / ``100.0.1``, ``Python 3.10`` /
    ``Python 3.1.0`` and ``s1_10`` / ``s11_0`` are different entities, while ``Node 18`` /
    ``node-18`` / ``NODE18`` are one. Invariant (tested): two names with one key have the same
    digits, and the same separators between consecutive digits.
    """
    text = unicodedata.normalize("NFKC", name).casefold()
    if not _DIGITS_APART.search(text):  # the common case: every separator goes
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


def entity_id(tenant_id: str, ns: str, key: str) -> str:
    return "e_" + _digest(tenant_id, ns, key)


def fact_id(tenant_id: str, ns: str, subject_id: str, predicate: str, object_id: str) -> str:
    return "f_" + _digest(tenant_id, ns, subject_id, predicate, object_id)


def turn_key(tenant_id: str, ns: str, session_id: str, turn_id: str) -> str:
    return "t_" + _digest(tenant_id, ns, session_id, turn_id)


def stable_id(prefix: str, *parts: str) -> str:
    return prefix + _digest(*parts)


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
