"""Stable ids and entity-name keys: the same input gives the same ids on every run."""

from __future__ import annotations

import hashlib
import re
import unicodedata

# Separators ignored when deciding whether two spellings are one entity. Symbols that carry
# meaning in names (+ # @ & *) are kept so "C++", "C#" and "C" stay three entities.
_SEPARATORS = re.compile(r"[\s\-_.,;:/\\'\"`()\[\]{}<>|!?~]+")


def _digest(*parts: str, size: int = 16) -> str:
    h = hashlib.sha256("\x1f".join(parts).encode("utf-8"))
    return h.hexdigest()[:size]


def norm_key(name: str) -> str:
    """Names that differ only in case, spacing, punctuation or Unicode form share this key."""
    text = unicodedata.normalize("NFKC", name).casefold()
    key = _SEPARATORS.sub("", text)
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
