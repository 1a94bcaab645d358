from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterable
from typing import Any

from schemas.redaction._base import (
    _PLACEHOLDER_START,
    PLACEHOLDER,
    PLACEHOLDER_PATTERN,
    _atoms,
    _lower,
    _Span,
)
from schemas.redaction._gates import _opened
from schemas.redaction._views import (
    _has_escapes,
    _has_other_escapes,
    _views,
)
from schemas.redaction.detectors import _DETECTORS
from schemas.redaction.ruleset import RULES

# --- finding and cutting spans ----------------------------------------------------------------


def _spans(text: str, opened: tuple[int, ...], rules: tuple[int, ...]) -> list[_Span]:
    """The spans of the detectors the gates open and of the rules whose keywords the text
    holds (`_gates._opened`)."""
    atoms = _atoms(text)
    found: list[_Span] = []
    if opened:
        lowered = _lower(text)
        for i in opened:
            found.extend(_DETECTORS[i].find(text, lowered, atoms))
    if rules:
        found.extend(RULES.find(text, rules, atoms))
    return found


def _merge(spans: Iterable[_Span]) -> list[tuple[int, int, str]]:
    """Overlapping spans become one, named after its most specific detector."""
    merged: list[list[Any]] = []
    for start, end, priority, kind in sorted(spans):
        if merged and start < merged[-1][1]:
            last = merged[-1]
            last[1] = max(last[1], end)
            if priority < last[2]:
                last[2], last[3] = priority, kind
        else:
            merged.append([start, end, priority, kind])
    return [(s, e, k) for s, e, _, k in merged]


def _all_spans(
    text: str, opened: tuple[int, ...], rules: tuple[int, ...]
) -> list[tuple[int, int, str]]:
    """Merged spans of the text and its decoded views; `opened`, `rules`: what the text as
    written opens (`_gates._opened`)."""
    found = _spans(text, opened, rules)
    if _has_escapes(text) or _has_other_escapes(text):
        for view in _views(text):
            view_opened, view_rules = _opened(_lower(view.text))
            if not view_opened and not view_rules:
                continue
            for s, e, priority, kind in _spans(view.text, view_opened, view_rules):
                if raw := view.raw_span(s, e):
                    found.append((*raw, priority, kind))
    return _merge(found)


def _cut(text: str) -> tuple[str, int]:
    opened, rules = _opened(_lower(text))
    if not opened and not rules and "\\" not in text and not _has_other_escapes(text):
        return text, 0  # the common case: clean, unescaped
    spans = _all_spans(text, opened, rules)
    if not spans:
        return text, 0
    parts: list[str] = []
    pos = 0
    for start, end, kind in spans:
        parts.append(text[pos:start])
        parts.append(PLACEHOLDER.format(kind=kind))
        pos = end
    parts.append(text[pos:])
    return "".join(parts), len(spans)


# Names repeat heavily. The cache holds only what its callers already hold in memory.
_cut_short = functools.lru_cache(maxsize=1 << 16)(_cut)
_SHORT = 256


def redact_with_count(text: str) -> tuple[str, int]:
    """The text with every secret replaced by its placeholder, and how many were replaced."""
    return _cut_short(text) if len(text) <= _SHORT else _cut(text)


def redact(text: str | None) -> str | None:
    """The text with every secret replaced by its placeholder (None stays None)."""
    if text is None:
        return None
    return redact_with_count(text)[0]


def contains_secret(text: str) -> bool:
    """Whether `redact` would change the text. False on anything `redact` returned."""
    return redact_with_count(text)[1] > 0


# --- ingestion helpers ------------------------------------------------------------------------


def _clip(text: str, limit: int) -> str:
    """The first `limit` characters, less a placeholder the cut would split."""
    head = text[:limit]
    start = head.rfind(_PLACEHOLDER_START)
    if start >= 0 and (m := PLACEHOLDER_PATTERN.match(text, start)) and m.end() > limit:
        head = head[:start]
    return head


def redact_record(raw: str, limit: int) -> str:
    """A rejected raw line as the quarantine may keep it: redacted, then clipped.

    `raw` is the line as read (decoded to text): JSON, JSON with escapes (`postgres:\\/\\/`,
    `\\"`, `\\u0041`, a JSON document inside a JSON string), or no JSON at all. Secrets are
    found in the text as written and in its decoded forms, and cut from the text as written
    (an escaped secret goes with all its escape sequences); the rest stays as it was.

    Clipping comes after redaction, so a cut can never leave part of a secret behind: at most
    `limit` characters are kept, never half a placeholder. A cut can make text look like a
    secret that was none (`password = get_password(` becomes `password = get_pass`); the
    clipped text is redacted again, and clipped again should that make it longer.

    The result satisfies ``contains_secret(result) is False`` and ``len(result) <= limit``.
    Pass the whole line, or a head longer than `limit`: a token cut off at the end of `raw`
    may no longer be recognisable.
    """
    if limit <= 0:
        return ""
    out = redact_with_count(raw)[0]
    for _ in range(16):
        if len(out) <= limit:
            return out
        out = redact_with_count(_clip(out, limit))[0]
    # Each round cuts at the limit and redacts again; no known text needs more than two.
    head = _clip(out, limit)
    return head if not contains_secret(head) else ""


_ID_DIGEST_CHARS = 8


def redact_id(value: str) -> str:
    """An id-like field (session_id, turn_id, client, a file name) with any secret in it
    replaced by its placeholder, and made unique again.

    A clean id comes back unchanged. A redacted one is followed by `~` and 8 hex characters of
    the SHA-256 of the whole original value, right after its last placeholder:
    ``sess-AKIA...`` becomes ``sess-[REDACTED:aws_key]~1f0c3e9a``, ``AKIA....jsonl`` becomes
    ``[REDACTED:aws_key]~5b2d...jsonl``. Without it, two sessions whose ids differ only in
    their secret would collide into one id (and their turns pass for duplicates). The result is
    deterministic (the same id always maps to the same value, across runs and machines) and
    is itself a clean id: ``redact_id(redact_id(x)) == redact_id(x)``.

    Trade-off: 32 bits of an unkeyed hash cannot be reversed for a token-shaped secret, but
    they let someone who already guesses a weak password confirm the guess; ids that carry
    weak passwords are the user's mistake this limits, not a place memflow puts secrets.
    """
    redacted, n = redact_with_count(value)
    if not n:
        return value
    digest = hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()
    end = [m.end() for m in PLACEHOLDER_PATTERN.finditer(redacted)][-1]
    return f"{redacted[:end]}~{digest[:_ID_DIGEST_CHARS]}{redacted[end:]}"


# --- columns ----------------------------------------------------------------------------------
