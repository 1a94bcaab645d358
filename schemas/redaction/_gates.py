from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

import re2

from schemas.redaction._base import (
    _REGEX_META,
    _encodable,
    _unbounded,
)
from schemas.redaction.detectors import _DETECTORS

_GATES: tuple[str, ...] = tuple(dict.fromkeys(g for d in _DETECTORS for g in d.gate))
_DETECTORS_BY_GATE: dict[str, frozenset[int]] = {
    g: frozenset(i for i, d in enumerate(_DETECTORS) if g in d.gate) for g in _GATES
}
# JSON escapes that can hide a gate (`:\/\/`, `\u0070assword`): such a text is a candidate.
_ESCAPE_GATES = ("\\u", "\\/")


def _top_level_alternation(pattern: str) -> bool:
    depth, i, in_class = 0, 0, False
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            i += 1
        elif in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
        elif c in "()":
            depth += 1 if c == "(" else -1
        elif c == "|" and depth == 0:
            return True
        i += 1
    return False


def _literal_prefix(gate: str) -> tuple[str, str]:
    """A gate as (its literal start, the regex after it): `gh[opusr]_` is ("gh", "[opusr]_")."""
    if _top_level_alternation(gate):
        return "", gate  # an alternation of its own: kept whole
    literal: list[str] = []
    i = 0
    while i < len(gate):
        if gate[i] == "\\" and i + 1 < len(gate) and not gate[i + 1].isalnum():
            literal.append(gate[i + 1])
            i += 2
        elif gate[i] in _REGEX_META:
            break
        else:
            literal.append(gate[i])
            i += 1
    tail = gate[i:]
    if literal and tail[:1] in ("?", "*", "+", "{"):  # the quantifier takes the last character
        tail = re.escape(literal.pop()) + tail
    return "".join(literal), tail


def _prefix_tree(gates: Iterable[str]) -> str:
    """One regex matching where any gate does, its alternatives factored by common literal
    prefixes. Python's engine tries every alternative at every position that starts one; a
    tree tries one per first character. (With 80 gates, a flat alternation took three times
    as long per clean name as the 45 gates before it.)"""
    tree: dict[str, Any] = {}
    for gate in gates:
        literal, tail = _literal_prefix(gate)
        node = tree
        for c in literal:
            node = node.setdefault(c, {})
        node.setdefault("", set()).add(tail)

    def build(node: dict[str, Any]) -> str:
        tails = sorted(node.get("", ()))
        if "" in tails:  # a gate ends here: whatever follows, it matched
            return ""
        alternatives = [re.escape(c) + build(node[c]) for c in sorted(k for k in node if k)]
        alternatives += [f"(?:{t})" for t in tails]
        return alternatives[0] if len(alternatives) == 1 else f"(?:{'|'.join(alternatives)})"

    return build(tree)


# All gates in one regex: the quick answer for the many texts no gate opens.
_PREFILTER_GATES = (*_GATES, *(re.escape(g) for g in _ESCAPE_GATES))
_PREFILTER = re.compile(_prefix_tree(_PREFILTER_GATES))
# The same for polars (Rust regex), whose case-insensitive flag stands for lowercasing; its
# gates unbounded (`_bounded`): weaker than Python's, where only a hatch differs, never
# stronger, and no detector opens on a hatch alone.
PREFILTER_PATTERN = "(?i)" + _prefix_tree(_unbounded(g) for g in _PREFILTER_GATES)


def _ascii_start(gate: str) -> bool:
    return _literal_prefix(gate)[0][:1].isascii()


# A text of ASCII only (CPython knows it without reading the text) opens no gate that starts
# with another character (пароль, şifre, 密码, パスワード ...): it is searched without them. Each
# such first character costs a comparison at every position of every text (the five Chinese,
# Japanese and Korean password words took the prefilter 7 % longer over coding turns).
_PREFILTER_ASCII = re.compile(_prefix_tree(g for g in _PREFILTER_GATES if _ascii_start(g)))


def _re2_syntax(pattern: str) -> str:
    """A gate regex (Python's syntax, read as Rust's by polars) in RE2's: `\\uXXXX` as
    `\\x{XXXX}`, and `\\w` Unicode-aware as Python's is (RE2's is ASCII): letters, numbers
    and `_`. The gates use `\\s` only inside negated classes, where RE2's narrower `\\s`
    lets more through, never less."""
    out: list[str] = []
    i, in_class = 0, False
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            nxt = pattern[i + 1]
            if nxt == "w":
                out.append(r"\pL\pN_" if in_class else r"[\pL\pN_]")
            elif nxt == "u" and re.fullmatch("[0-9a-fA-F]{4}", pattern[i + 2 : i + 6]):
                out.append(f"\\x{{{pattern[i + 2 : i + 6]}}}")
                i += 4
            else:
                out.append(pattern[i : i + 2])
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
            if pattern.startswith("[^", i) or pattern.startswith("[]", i):
                out.append(pattern[i : i + 2])
                i += 2
                continue
        out.append(c)
        i += 1
    return "".join(out)


# The prefilter as RE2 runs it: one automaton over the text, linear in it whatever the gates,
# and 20 times faster than Python's engine on the landing sample (`bench_redaction.py`). Its
# gates are the unbounded forms (`_bounded`), so it finds every place Python's prefilter does,
# or an earlier one, never a later (a unit test compares them).
_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.max_mem = 64 << 20  # the automaton's cache: at 8 MiB (the default) RE2 falls back
_PREFILTER_RE2 = re2.compile(_re2_syntax(PREFILTER_PATTERN.removeprefix("(?i)")), _RE2_OPTIONS)


def _prefilter(lowered: str) -> re.Match[str] | None:
    """Where the first gate may start in the lowercased text (None: no gate opens)."""
    try:
        return _PREFILTER_RE2.search(lowered)  # type: ignore[no-any-return]
    except UnicodeEncodeError:  # lone surrogates: RE2 reads UTF-8
        return _PREFILTER_RE2.search(_encodable(lowered))  # type: ignore[no-any-return]


# Which gates a candidate opens: the gates' prefix tree finds each position where one may
# start (searching again from the next character, so none hides another), and only the gates
# beginning with that character are tried there (80 substring scans of a 500-character turn
# took longer than the detectors they spared).
_GATE_SEARCH = re.compile(_prefix_tree(_GATES))
_GATE_SEARCH_ASCII = re.compile(_prefix_tree(g for g in _GATES if _ascii_start(g)))
# By first character: each literal start of a gate, with the rest of each gate that starts so
# (a regex, or None) and the detectors it opens.
_GateRest = tuple[re.Pattern[str] | None, frozenset[int]]
_GATES_BY_FIRST: dict[str, dict[str, list[_GateRest]]] = {}
_GATES_ANYWHERE: list[tuple[re.Pattern[str], frozenset[int]]] = []  # no literal start
for _gate in _GATES:
    _literal, _tail = _literal_prefix(_gate)
    _opens = frozenset(_DETECTORS_BY_GATE[_gate])
    if _literal:
        _rest = re.compile(_tail) if _tail else None
        _GATES_BY_FIRST.setdefault(_literal[0], {}).setdefault(_literal, []).append((_rest, _opens))
    else:
        _GATES_ANYWHERE.append((re.compile(_gate), _opens))
# The detectors any gate starting with a character opens.
_OPENS_BY_FIRST: dict[str, frozenset[int]] = {
    c: frozenset().union(*(o for rests in by.values() for _, o in rests))
    for c, by in _GATES_BY_FIRST.items()
}
