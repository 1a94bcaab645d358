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
from schemas.redaction.ruleset import RULES

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


# All gates in one regex. Python's engine no longer searches texts with it (RE2 does, `_SCAN`);
# it is the reference the unit tests hold the gates to (bounded width, what opens), compiled
# on first use.
_PREFILTER_GATES = (*_GATES, *(re.escape(g) for g in _ESCAPE_GATES))


def _python_prefilter() -> re.Pattern[str]:
    return re.compile(_prefix_tree(_PREFILTER_GATES))


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


# What opens in a text, as RE2 finds it: one `re2.Set` of every gate (its unbounded form, in
# RE2's syntax) and every keyword of the rule set, run as one automaton over the lowercased
# text (linear in it whatever the gates): which detectors and which rules can match. A gate
# found anywhere opens its detectors; the unbounded forms are weaker than the bounded ones
# (`_bounded`), so a detector the gates open in Python's engine is opened here too (a unit
# test compares them), and Python's engine never searches a text for gates.
_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.max_mem = 64 << 20  # the automaton's cache: at 8 MiB (the default) RE2 falls back
_SCAN = re2.Set.SearchSet(_RE2_OPTIONS)
for _gate in _GATES:
    _SCAN.Add(_re2_syntax(_unbounded(_gate)))
for _keyword in RULES.keywords:
    _SCAN.Add(re2.escape(_keyword))
_SCAN.Compile()
_DETECTORS_OF_HIT: tuple[frozenset[int], ...] = tuple(_DETECTORS_BY_GATE[g] for g in _GATES)


def _opened(lowered: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The detectors (indices into `_DETECTORS`) and the rules (into `RULES.rules`) this
    lowercased text opens, each sorted; both empty where nothing opens."""
    try:
        hits = _SCAN.Match(lowered)
    except UnicodeEncodeError:  # lone surrogates: RE2 reads UTF-8
        hits = _SCAN.Match(_encodable(lowered))
    if not hits:
        return (), ()
    n = len(_GATES)
    detectors: set[int] = set()
    keywords = []
    for h in hits:
        if h < n:
            detectors |= _DETECTORS_OF_HIT[h]
        else:
            keywords.append(h - n)
    return tuple(sorted(detectors)), RULES.rules_of_keywords(keywords)
