"""Vendor and token formats from a maintained rule set, loaded as data and run by RE2.

The rules are Betterleaks' default configuration (the successor of gitleaks' rule set by its
authors, and Kingfisher's built-in rules too): `data/betterleaks.toml` as the package ships it,
translated by `scripts/secret_rules.py` into `data/betterleaks.json` (MIT, see
`data/LICENSE.betterleaks`). Each rule has lowercase keywords, an RE2 regex, the group that
holds the secret and a filter (a minimum entropy, values that are no secret). Here:

- one `re2.Set` of every keyword tells, in one pass over the lowercased text, which rules can
  match (RE2 runs a literal set as one automaton: 540 keywords cost what one does);
- each rule whose keyword is there runs its regex (compiled on first use) with RE2, whose
  time is linear in the text whatever the pattern, and takes non-overlapping matches, as
  Betterleaks does;
- the secret is the rule's group (or the first group that matched, or the match); its filter
  decides, then the secret runs on over the characters a token goes on with (a rule that
  fixes a length, `ghp_[0-9a-zA-Z]{36}`, leaves no tail of a longer token behind).

Placeholders are atoms here too: a match that begins or ends inside one, or a secret that
holds one, is dropped (`_base._keeps`).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import re2

from schemas.redaction._base import _TOKEN_TAIL, _Atoms, _encodable, _keeps, _run_end, _Span

DATA = Path(__file__).with_name("data") / "betterleaks.json"
# The automaton's cache per regex: some rules outgrow RE2's default 8 MiB on long texts, and
# RE2 then falls back to a slower (still linear) engine and logs each time.
_OPTIONS = re2.Options()
_OPTIONS.max_mem = 32 << 20
_PRIORITY = 6  # after every memflow detector: where one finds the span too, its kind names it


def _entropy(value: str) -> float:
    """Shannon entropy in bits per character, as Betterleaks' `entropy()` computes it."""
    if not value:
        return 0.0
    n = len(value)
    return -sum(c / n * math.log2(c / n) for c in Counter(value).values())


@dataclass(slots=True)
class _Term:
    """One reason to discard a finding (Betterleaks' filter is a disjunction of them)."""

    entropy_below: float | None = None
    or_equal: bool = False
    patterns: tuple[str, ...] = ()
    substrings: tuple[str, ...] = ()
    target: str = "secret"
    negated: bool = False
    _compiled: list[Any] = field(default_factory=list)

    @classmethod
    def of(cls, term: dict[str, Any]) -> _Term:
        return cls(
            entropy_below=term.get("entropy_below"),
            or_equal=term.get("or_equal", False),
            patterns=tuple(term.get("matches", ())),
            substrings=tuple(term.get("contains", ())),
            target=term.get("target", "secret"),
            negated=term.get("negated", False),
        )

    def discards(self, secret: str, match: str) -> bool:
        if self.entropy_below is not None:
            h = _entropy(secret)
            return h < self.entropy_below or (self.or_equal and h == self.entropy_below)
        value = secret if self.target == "secret" else match
        if self.substrings:
            hit = any(s in value for s in self.substrings)
        else:
            if not self._compiled:
                self._compiled.extend(re2.compile(p) for p in self.patterns)
            hit = any(p.search(value) for p in self._compiled)
        return hit != self.negated


@dataclass(slots=True)
class _Rule:
    id: str
    kind: str
    regex: str
    group: int
    terms: tuple[_Term, ...]
    _compiled: Any = None

    def compiled(self) -> Any:
        if self._compiled is None:
            self._compiled = re2.compile(self.regex, _OPTIONS)
        return self._compiled

    def secret_span(self, m: Any) -> tuple[int, int] | None:
        if self.group:
            span = m.span(self.group)
            return span if span[0] >= 0 else None
        for g in range(1, (m.re.groups or 0) + 1):
            start, end = m.span(g)
            if end > start:
                return start, end
        return m.span()


class RuleSet:
    """The rules of one data file: which a text can match, and their secrets in it."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.global_terms = tuple(_Term.of(t) for t in data["global_filter"])
        self.rules = tuple(
            _Rule(
                r["id"], r["kind"], r["regex"], r["group"], tuple(_Term.of(t) for t in r["filter"])
            )
            for r in data["rules"]
        )
        by_keyword: dict[str, list[int]] = {}
        for i, r in enumerate(data["rules"]):
            for k in r["keywords"]:
                by_keyword.setdefault(k, []).append(i)
        self.keywords = tuple(sorted(by_keyword))
        self._rules_of = tuple(tuple(by_keyword[k]) for k in self.keywords)
        self._set = re2.Set.SearchSet()
        for k in self.keywords:
            self._set.Add(re2.escape(k))
        self._set.Compile()

    def rules_for(self, lowered: str) -> tuple[int, ...]:
        """The rules one of whose keywords is in the lowercased text (sorted)."""
        try:
            hits = self._set.Match(lowered)
        except UnicodeEncodeError:  # lone surrogates: RE2 reads UTF-8
            hits = self._set.Match(_encodable(lowered))
        return self.rules_of_keywords(hits or ())

    def rules_of_keywords(self, keywords: list[int] | tuple[int, ...]) -> tuple[int, ...]:
        """The rules of these keywords (indices into `keywords`), sorted."""
        if not keywords:
            return ()
        if len(keywords) == 1:
            return self._rules_of[keywords[0]]
        return tuple(sorted({i for h in keywords for i in self._rules_of[h]}))

    def find(self, text: str, rules: tuple[int, ...], atoms: _Atoms) -> Iterator[_Span]:
        readable = text if text.isascii() else _encodable(text)
        for i in rules:
            rule = self.rules[i]
            for m in rule.compiled().finditer(readable):
                span = rule.secret_span(m)
                if span is None or span[0] >= span[1]:
                    continue
                start, end = span
                secret = text[start:end]
                if any(t.discards(secret, m.group()) for t in (*rule.terms, *self.global_terms)):
                    continue
                if end == m.end() or text[end : end + 1].isalnum():
                    end = _run_end(_TOKEN_TAIL, text, end)
                kept = _keeps(text, atoms, m.start(), m.end(), start, end)
                if kept is not None:
                    yield (*kept, _PRIORITY, rule.kind)


def _load() -> RuleSet:
    return RuleSet(json.loads(DATA.read_text(encoding="utf-8")))


RULES = _load()
