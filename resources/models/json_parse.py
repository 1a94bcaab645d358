"""Defensive parsing of a model's answer into candidate triple dicts.

A model's answer is untrusted text. `parse_triples` finds the JSON in it (code fences, prose
around it, a `{"triples": [...]}` wrapper, a bare array or one object per line), keeps every
well-formed item and reports everything else as `(reason, detail)` with a short reason code.
Only the shape is checked here; predicate casing, name length, confidence range and scope are
validated later, in one place (`schemas`).

Built on the stdlib `json.JSONDecoder.raw_decode`, one array element at a time, so the C
decoder does the work and a broken or cut element costs only that element: the complete items
before a truncation are kept. A repair library (json-repair) was not used because it guesses
silently: it would turn a cut item into a plausible but wrong fact instead of a reported reject.
Nothing is ever evaluated.

Reason codes: empty_output, not_text, output_too_large, no_json, truncated_output,
too_many_items, malformed_item, not_an_object, missing_field:<key>, wrong_type:<key>,
bad_confidence, duplicate_key:<key>.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

MAX_CHARS = 1_000_000
MAX_ITEMS = 500
# Prose may hold brackets that are not JSON ("see [1]"); each failed start costs a scan.
MAX_CANDIDATES = 256
DETAIL_CHARS = 200

REQUIRED = ("subject", "predicate", "object")
OPTIONAL_TEXT = ("subject_type", "object_type", "valid_from")
KNOWN = frozenset((*REQUIRED, *OPTIONAL_TEXT, "confidence", "turn_id", "supersedes"))
WRAPPER_KEYS = ("triples", "facts", "items", "results", "data")

Reject = tuple[str, str]

_WS = re.compile(r"[ \t\n\r]*")
_FENCE = re.compile(r"```[ \t]*(?:json|JSON|json5)?[ \t]*\r?\n?(.*?)(?:```|\Z)", re.DOTALL)
_THINK = re.compile(r"<think>.*?(?:</think>|\Z)", re.DOTALL | re.IGNORECASE)
_START = re.compile(r"[\[{]")
# Scalar members may precede the wrapper key: {"note": "x", "count": 2, "triples": [
_WRAPPER_START = re.compile(
    r'\{\s*(?:"(?:[^"\\]|\\.)*"\s*:\s*(?:"(?:[^"\\]|\\.)*"|[-+\d.eE]+|true|false|null)\s*,\s*)*'
    r'"(?:' + "|".join(WRAPPER_KEYS) + r')"\s*:\s*(?=\[)'
)
_STRUCTURE = re.compile(r'["\[\]{},]')
_STRING_REST = re.compile(r'(?:[^"\\]|\\.)*"', re.DOTALL)
_SINGLE_QUOTED = re.compile(r"'((?:[^'\\]|\\.)*)'", re.DOTALL)


class _Obj(dict[str, Any]):
    """A decoded JSON object that remembers keys that appeared twice with different values."""

    __slots__ = ("dups",)

    dups: tuple[str, ...]


def _pairs_hook(pairs: list[tuple[str, Any]]) -> _Obj:
    obj = _Obj()
    dups: list[str] = []
    for key, value in pairs:
        if key in obj and obj[key] != value:
            dups.append(key)
        obj[key] = value
    obj.dups = tuple(dups)
    return obj


# strict=False: models put raw newlines and tabs inside strings; that is harmless.
_DECODER = json.JSONDecoder(object_pairs_hook=_pairs_hook, strict=False)


def _snippet(text: str, limit: int = DETAIL_CHARS) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[:limit] + "…"


def _describe(value: Any) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=True)
    except (TypeError, ValueError, RecursionError):
        text = type(value).__name__
    return _snippet(text)


@dataclass(slots=True)
class _Found:
    values: list[Any] = field(default_factory=list)
    rejects: list[Reject] = field(default_factory=list)
    end: int = 0  # where the parsed JSON ended in the text


def _skip_ws(text: str, pos: int) -> int:
    match = _WS.match(text, pos)
    return match.end() if match else pos


def _decode(text: str, pos: int) -> tuple[Any, int] | None:
    try:
        return _DECODER.raw_decode(text, pos)
    except (ValueError, RecursionError):
        return None


def _skip_element(text: str, pos: int) -> int | None:
    """Index of the `,` or closing bracket ending the element at `pos`, or None if cut.

    String-aware, bracket-counting scan used only after the decoder gave up on an element.
    """
    depth = 0
    n = len(text)
    while pos < n:
        match = _STRUCTURE.search(text, pos)
        if match is None:
            return None
        ch = match.group()
        pos = match.end()
        if ch == '"':
            rest = _STRING_REST.match(text, pos)
            if rest is None:
                return None
            pos = rest.end()
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            if depth == 0:
                return match.start()
            depth -= 1
        elif depth == 0:  # a comma between elements
            return match.start()
    return None


def _single_quoted(span: str) -> Any | None:
    """Cheap repair of {'subject': 'a', ...}: only when the span has no double quotes."""
    if "'" not in span or '"' in span:
        return None
    converted = _SINGLE_QUOTED.sub(lambda m: json.dumps(m.group(1)), span)
    decoded = _decode(converted, 0)
    if decoded is None or _skip_ws(converted, decoded[1]) != len(converted):
        return None
    return decoded[0]


def _parse_array(text: str, start: int, max_items: int) -> tuple[_Found, bool]:
    """Parse the array whose `[` is at `start` element by element.

    Returns what was found and whether this looks like an array of items at all: it is
    empty, its first element decoded, or its first element is a (broken) object. An
    implausible first element costs no scan, which keeps prose full of brackets cheap.
    """
    found = _Found()
    n = len(text)
    pos = start + 1
    count = 0
    while True:
        pos = _skip_ws(text, pos)
        while pos < n and text[pos] == ",":  # stray commas: `[,{...},,{...}]`
            pos = _skip_ws(text, pos + 1)
        if pos >= n:
            found.rejects.append(
                ("truncated_output", f"array cut off after {count} complete elements")
            )
            break
        if text[pos] == "]":
            break
        if count >= max_items:
            found.rejects.append(
                ("too_many_items", f"kept the first {max_items} elements, ignored the rest")
            )
            break
        decoded = _decode(text, pos)
        if decoded is not None:
            value, pos = decoded
            found.values.append(value)
        else:
            if count == 0 and text[pos] != "{":
                return found, False
            end = _skip_element(text, pos)
            if end is None:
                found.rejects.append(
                    ("truncated_output", f"array cut off after {count} complete elements")
                )
                break
            if end == pos:  # a stray closing brace: the array's structure is broken here
                found.rejects.append(("malformed_item", _snippet(text[pos:])))
                break
            span = text[pos:end]
            repaired = _single_quoted(span)
            if repaired is not None:
                found.values.append(repaired)
            else:
                found.rejects.append(("malformed_item", _snippet(span)))
            pos = end
        count += 1
        pos = _skip_ws(text, pos)
        if pos >= n:
            found.rejects.append(
                ("truncated_output", f"array not closed after {count} complete elements")
            )
            break
        ch = text[pos]
        if ch == ",":
            pos += 1  # a trailing comma before `]` is tolerated by the next round
        elif ch == "]":
            break
        elif ch != "{":  # `}{` without a comma is tolerated; anything else is junk
            end = _skip_element(text, pos)
            if end is None or end == pos:
                found.rejects.append(("malformed_item", _snippet(text[pos:])))
                break
            found.rejects.append(("malformed_item", _snippet(text[pos:end])))
            pos = end
    found.end = min(pos + 1, n)
    return found, True


def _cap(values: list[Any], max_items: int, found: _Found) -> None:
    if len(values) > max_items:
        found.rejects.append(
            (
                "too_many_items",
                f"kept the first {max_items} of {len(values)} elements, ignored the rest",
            )
        )
        del values[max_items:]
    found.values.extend(values)


def _looks_like_item(value: Any) -> bool:
    return isinstance(value, dict) and any(key in value for key in REQUIRED)


def _object_sequence(text: str, pos: int, first: Any, max_items: int) -> _Found:
    """One object per line (or back to back): collect consecutive top-level objects."""
    values = [first]
    n = len(text)
    while len(values) <= max_items:
        pos = _skip_ws(text, pos)
        if pos < n and text[pos] == ",":
            pos = _skip_ws(text, pos + 1)
        if pos >= n or text[pos] != "{":
            break
        decoded = _decode(text, pos)
        if decoded is None:
            break
        value, pos = decoded
        values.append(value)
    found = _Found()
    _cap(values, max_items, found)
    return found


def _find_items(value: Any, depth: int = 0) -> tuple[list[Any], str | None] | None:
    """The list of items inside a decoded answer: under a wrapper key first, else the first
    list holding an item-like object, searched a few levels deep."""
    if depth > 4:
        return None
    if isinstance(value, dict):
        for key in WRAPPER_KEYS:
            if isinstance(value.get(key), list):
                dup = key if isinstance(value, _Obj) and key in value.dups else None
                return value[key], dup
        children = list(value.values())
    elif isinstance(value, list):
        if any(_looks_like_item(v) for v in value):
            return value, None
        children = value
    else:
        return None
    for child in children:
        if isinstance(child, dict | list):
            found = _find_items(child, depth + 1)
            if found is not None:
                return found
    return None


def _from_object(text: str, pos: int, max_items: int) -> tuple[_Found | None, int]:
    """What the object at `pos` holds, and where the search may resume if it holds nothing."""
    decoded = _decode(text, pos)
    if decoded is not None:
        value, end = decoded
        if _looks_like_item(value):
            return _object_sequence(text, end, value, max_items), end
        inner = _find_items(value)
        if inner is None:
            return None, end  # a complete object without items: skip what is inside it
        found = _Found(end=end)
        if inner[1] is not None:
            found.rejects.append((f"duplicate_key:{inner[1]}", "kept the last list"))
        _cap(list(inner[0]), max_items, found)
        return found, end
    match = _WRAPPER_START.match(text, pos)
    if match is None:
        return None, pos + 1
    found, _ = _parse_array(text, match.end(), max_items)
    return found, found.end


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _search(text: str, max_items: int) -> _Found | None:
    fallback: _Found | None = None
    attempts = 0
    resume = 0
    for match in _START.finditer(text):
        pos = match.start()
        if pos < resume:
            continue
        attempts += 1
        if attempts > MAX_CANDIDATES:
            break
        if text[pos] == "{":
            found, resume = _from_object(text, pos, max_items)
        else:
            found, plausible = _parse_array(text, pos, max_items)
            if not plausible:
                found = None
            elif found.values and not any(isinstance(v, dict) for v in found.values):
                # "turns [1, 2]" in prose is no answer; ["api USES redis"] is a bad one:
                # remember it, but look for real items first.
                if fallback is None and not all(_is_number(v) for v in found.values):
                    fallback = found
                if any(reason == "truncated_output" for reason, _ in found.rejects):
                    break  # it ran to the end of the text: later starts lie inside it
                resume = found.end
                continue
        if found is not None:
            return found
    return fallback


def _text_field(item: dict[str, Any], key: str) -> str | Reject | None:
    """The field as a stripped string; numbers become text; None when absent or empty."""
    value = item.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return (f"wrong_type:{key}", f"{key} is {type(value).__name__}")
    text = value.strip() if isinstance(value, str) else str(value)
    return text or None


def _confidence(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        text = value.strip()
        scale = 1.0
        if text.endswith("%"):
            text, scale = text[:-1].strip(), 100.0
        try:
            number = float(text) / scale
        except ValueError:
            return None
    elif isinstance(value, int | float):
        number = float(value)
    else:
        return None
    return number if math.isfinite(number) else None


def _supersedes(value: Any) -> str | dict[str, str] | Reject | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value.strip() or None
    if isinstance(value, dict):
        if isinstance(value, _Obj) and value.dups:
            return ("duplicate_key:supersedes", f"repeated keys {list(value.dups)}")
        parts = {k: value.get(k) for k in REQUIRED}
        if all(isinstance(v, str) and v.strip() for v in parts.values()):
            return {k: str(v).strip() for k, v in parts.items()}
    return (
        "wrong_type:supersedes",
        "supersedes is neither a string nor {subject,predicate,object}",
    )


def normalize_item(value: Any) -> tuple[dict[str, Any] | None, Reject | None]:
    """One candidate as a clean dict of known keys, or the reason it cannot be used."""
    if not isinstance(value, dict):
        return None, ("not_an_object", _describe(value))
    if isinstance(value, _Obj):
        for key in value.dups:
            if key in KNOWN:
                return None, (f"duplicate_key:{key}", _describe(value))
    item: dict[str, Any] = {}
    for key in REQUIRED:
        text = _text_field(value, key)
        if isinstance(text, tuple):
            return None, (text[0], _describe(value))
        if text is None:
            return None, (f"missing_field:{key}", _describe(value))
        item[key] = text
    if value.get("confidence") is None:
        return None, ("missing_field:confidence", _describe(value))
    confidence = _confidence(value["confidence"])
    if confidence is None:
        return None, ("bad_confidence", _describe(value))
    item["confidence"] = confidence
    for key in (*OPTIONAL_TEXT, "turn_id"):
        text = _text_field(value, key)
        if isinstance(text, tuple):
            return None, (text[0], _describe(value))
        if text is not None:
            item[key] = text
    supersedes = _supersedes(value.get("supersedes"))
    if isinstance(supersedes, tuple):
        return None, (supersedes[0], _describe(value))
    if supersedes is not None:
        item["supersedes"] = supersedes
    return item, None


def parse_triples(
    text: str, *, max_chars: int = MAX_CHARS, max_items: int = MAX_ITEMS
) -> tuple[list[dict[str, Any]], list[Reject]]:
    """Candidate triples found in a model's answer, and (reason, detail) for what was unusable.

    Items carry only known keys: subject, predicate, object (stripped strings), confidence
    (float), and when given subject_type, object_type, valid_from, turn_id (strings) and
    supersedes (a string or a {subject, predicate, object} dict).
    """
    rejects: list[Reject] = []
    if not isinstance(text, str):
        return [], [("not_text", f"answer is {type(text).__name__}")]
    if len(text) > max_chars:
        rejects.append(
            ("output_too_large", f"{len(text)} characters; parsed only the first {max_chars}")
        )
        text = text[:max_chars]
    text = _THINK.sub("", text)
    if not text.strip():
        return [], [*rejects, ("empty_output", "the answer has no text")]

    found: _Found | None = None
    for fence in _FENCE.finditer(text):
        found = _search(fence.group(1), max_items)
        if found is not None:
            break
    if found is None:
        found = _search(text, max_items)
    if found is None:
        return [], [
            *rejects,
            ("no_json", f"no JSON items in {len(text)} characters: {_snippet(text, 80)!r}"),
        ]

    rejects.extend(found.rejects)
    items: list[dict[str, Any]] = []
    for value in found.values:
        item, reject = normalize_item(value)
        if item is not None:
            items.append(item)
        elif reject is not None:
            rejects.append(reject)
    return items, rejects
