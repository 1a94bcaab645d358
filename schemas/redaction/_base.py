from __future__ import annotations

import bisect
import re
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

PLACEHOLDER = "[REDACTED:{kind}]"
# Every placeholder this module writes, and the bare `[REDACTED]` people write by hand.
PLACEHOLDER_PATTERN = re.compile(r"\[REDACTED(?::[a-z0-9_]+)?\]")
_PLACEHOLDER_START = "[REDACTED"

# Characters a token goes on with: library patterns fix a length (``[A-Za-z0-9]{24}``) where
# real tokens have grown longer; the rest of the token is cut too, never left behind.
_TOKEN_TAIL = re.compile(r"[A-Za-z0-9_-]*")
_JWT_TAIL = re.compile(r"[A-Za-z0-9_\-.+/=]*")
_REGEX_META = frozenset("\\[](){}.*+?|^$")

# A gate (below) is tried at every position where its literal starts: by the prefilter's
# search and by `_open_detectors`. An unbounded repetition in it therefore costs a scan of a
# whole run at each occurrence of the literal inside that run: `key[\w.-]*=` over
# `"key" * 21000` read 21,000 x 63,000 characters (42 s for 63 KB). So every gate matches
# within a bounded width (a unit test checks each), and stays implied by every match of its
# detectors: where a detector allows a longer run, the gate bounds it with an escape hatch.
# Rust's regex (the polars prefilter) runs in linear time whatever the pattern, and compiles
# `\w{0,64}` (Unicode) into more than its size limit allows: it gets the unbounded form.
_GATE_RUN = 64
_UNBOUNDED: dict[str, str] = {}  # each bounded part of a gate: its unbounded form


def _bounded(run: str, rest: str, least: int = 0, backtrack: bool = False) -> str:
    """The gate `run{least,}rest` within a bounded width: at most `_GATE_RUN` of `run`, then
    `rest`; or more than `_GATE_RUN` of `run`, whatever follows (the hatch). Every match of
    the unbounded form matches one of the two, so the gate stays a necessary condition; the
    hatch opens the detector, anchored at the start of its run, which decides in one pass.
    The run is possessive (no character given back to `rest`, which then never starts with
    one of the run's) unless `backtrack`: `rest` may start inside the run
    (`--[\\w-]{0,64}(?:pass|...)`)."""
    repeat = f"{{{least},{_GATE_RUN}}}" + ("" if backtrack else "+")
    bounded = f"(?:{run}{repeat}{rest}|{run}{{{_GATE_RUN + 1}}})"
    _UNBOUNDED[bounded] = f"(?:{run}{{{least},}}{_unbounded(rest)})"
    return bounded


def _unbounded(gate: str) -> str:
    """A gate with each bounded part in its unbounded form (the outermost first)."""
    for bounded in sorted(_UNBOUNDED, key=len, reverse=True):
        gate = gate.replace(bounded, _UNBOUNDED[bounded])
    return gate


# --- linear time ------------------------------------------------------------------------------
#
# A landing line may hold a mebibyte, and one hostile or broken turn must not stall a tenant's
# ingestion. Every gate, the prefilter and every detector run in time linear in the text: a
# scan may start at each position, but never reads a stretch of text again for each start
# inside it. Where a detector's match or a helper reads "up to where the run ends", "the
# start of this line" or "the first flag after here", these answer from what an earlier
# start read (each answer is the same from anywhere inside the run, line or stretch that
# read it), per thread and per text.

_LOCAL = threading.local()

_SURROGATE = re.compile("[\ud800-\udfff]")


def _encodable(text: str) -> str:
    """The text as RE2 can read it (UTF-8): each lone surrogate (undecodable bytes read with
    `surrogateescape`) as U+FFFD, one code point for one, so positions stay where they were."""
    return _SURROGATE.sub("\ufffd", text)


def _memo(text: str) -> dict[Any, Any]:
    """Answers found in this text (the last text one asked about, on this thread)."""
    memo = getattr(_LOCAL, "memo", None)
    if memo is None or memo[0] is not text:
        memo = (text, {})
        _LOCAL.memo = memo
    return memo[1]  # type: ignore[no-any-return]


def _run_end(pattern: re.Pattern[str], text: str, pos: int) -> int:
    """Where `pattern` matched at `pos` ends. Only for a run whose each step depends on the
    text there, not on where the run started (`[A-Za-z0-9_-]*`, `(?:[^&]|&(?!x))*`): from
    anywhere inside a run read before, it ends where that run ended."""
    memo = _memo(text)
    last = memo.get(pattern)
    if last is not None and last[0] <= pos <= last[1]:
        return last[1]  # type: ignore[no-any-return]
    end = pattern.match(text, pos).end()  # type: ignore[union-attr]
    memo[pattern] = (pos, end)
    return end


def _first_after(pattern: re.Pattern[str], text: str, pos: int) -> re.Match[str] | None:
    """The first match of `pattern` starting at `pos` or later (a pattern whose match at a
    place does not depend on where the search began): between where a search began and what
    it found, every later search finds the same."""
    memo = _memo(text)
    key = ("first", pattern)
    last = memo.get(key)
    if last is not None and last[0] <= pos and (last[1] is None or pos <= last[1].start()):
        return last[1]  # type: ignore[no-any-return]
    m = pattern.search(text, pos)
    memo[key] = (pos, m)
    return m


_NEWLINE_WINDOW = 4096


def _line_start(text: str, pos: int) -> int:
    """Where the line holding `pos` starts. A long line is looked up in the text's newlines
    (found once), not searched back character by character for each position on it."""
    near = text.rfind("\n", max(0, pos - _NEWLINE_WINDOW), pos)
    if near >= 0 or pos <= _NEWLINE_WINDOW:
        return near + 1
    memo = _memo(text)
    newlines = memo.get("newlines")
    if newlines is None:
        newlines = memo["newlines"] = [m.start() for m in re.finditer("\n", text)]
    i = bisect.bisect_left(newlines, pos)
    return newlines[i - 1] + 1 if i else 0


_BLANK_RUN = re.compile(r"[ \t]*")


def _first_on_line(text: str, pos: int) -> bool:
    """Whether only blanks come before `pos` on its line."""
    return _run_end(_BLANK_RUN, text, _line_start(text, pos)) >= pos


_Starts = Callable[[str, str], Iterable[int]]
# The secret's (start, end) in the text, or None where the match holds no secret after all.
_Refine = Callable[[re.Match[str]], tuple[int, int] | None]
_Atoms = list[tuple[int, int]]

_Span = tuple[int, int, int, str]  # start, end, priority, kind


@dataclass(frozen=True, slots=True)
class _Scan:
    """A match `head` `[through]*?` `flag`, found without reading its middle once per start.

    A command word and then, anywhere later in the same command, the flag that holds the
    password (`mysql -h db -u app -pX`): as one regex, each start reads its command up to the
    flag, so a command of n words read n times over is quadratic. Here `through` (the run the
    lazy middle may cross, greedy: `[^\\n|;&]*`) and `flag` are looked up from the end of
    `head` with `_run_end` and `_first_after`: the first flag from a place, and the end of the
    run holding it, are the same from every later place before them, so each is read once.
    The result is the one regex's: its lazy middle stops at the first place the flag
    matches, if no character outside `through` comes before."""

    head: re.Pattern[str]
    through: re.Pattern[str]
    flag: re.Pattern[str]

    def match(self, text: str, pos: int) -> _Joined | None:
        head = self.head.match(text, pos)
        if head is None:
            return None
        flag = _first_after(self.flag, text, head.end())
        if flag is None or flag.start() > _run_end(self.through, text, head.end()):
            return None
        return _Joined(head, flag)


class _Joined:
    """A `_Scan` match read as one: groups from the flag's match, else the head's; it starts
    where the head does and ends where the flag does."""

    __slots__ = ("flag", "head", "string")

    def __init__(self, head: re.Match[str], flag: re.Match[str]) -> None:
        self.head, self.flag, self.string = head, flag, head.string

    def _part(self, group: int | str) -> re.Match[str]:
        return self.flag if group in self.flag.re.groupindex else self.head

    def group(self, group: int | str = 0) -> str | None:
        return (
            self.string[self.start() : self.end()] if group == 0 else self._part(group).group(group)
        )

    def span(self, group: int | str = 0) -> tuple[int, int]:
        return (self.start(), self.end()) if group == 0 else self._part(group).span(group)

    def start(self, group: int | str = 0) -> int:
        return self.head.start() if group == 0 else self._part(group).start(group)

    def end(self, group: int | str = 0) -> int:
        return self.flag.end() if group == 0 else self._part(group).end(group)


@dataclass(frozen=True, slots=True)
class _Detector:
    kind: str
    pattern: re.Pattern[str]
    # Lowercase regexes (valid for Python's `re` and Rust's `regex`), one of which every match
    # implies once the text is lowercased: case-insensitive search is slow in Python's engine.
    gate: tuple[str, ...]
    priority: int = 0  # lower names a merged span when detectors overlap (specific first)
    groups: tuple[int | str, ...] = (0,)  # the first of these that took part holds the secret
    tail: re.Pattern[str] | None = None
    # Where a library group runs to the end of the line (npm's `(npm_.+)`), only the token is
    # cut: the rest (a closing JSON quote, say) is no secret.
    clip: re.Pattern[str] | None = None
    accept: Callable[[re.Match[str]], bool] | None = None
    refine: _Refine | None = None  # replaces `groups` and `accept` where given
    # Where one match holds several secrets (a Cookie header's values): each (start, end).
    refine_all: Callable[[re.Match[str]], list[tuple[int, int]]] | None = None
    kind_of: Callable[[re.Match[str]], str] | None = None
    keep_prefix: str = ""  # a literal label at the start of the match that stays readable
    # Where a pattern starts with a character class or a look-behind, scanning every position
    # is slow; `starts` lists the few positions worth a `match` instead.
    starts: _Starts | None = None
    # A cheap pattern every match satisfies at its start: where it fails, the costly one is
    # not tried (most keyword hits are no assignment: `cache key per tenant`).
    precheck: re.Pattern[str] | None = None
    # Where set, matches are found as `scan.match` at each start (`pattern` documents them).
    scan: _Scan | None = None
    # A rejected match rules out every match starting inside it: the next search starts at its
    # end. For a pattern that ends where a run ends (`sk-[...]{20,}`) with an `accept` that a
    # part of a rejected token fails too (`_mixed_token`): else `sk-` * n is read n times.
    skip_rejected: bool = False
    # The secret is the whole match, which no match overlapping a placeholder inside it can
    # leave out (a PEM block up to its END): a search after one such placeholder goes on past
    # it, not from the next character (a block read again for each BEGIN before it).
    skip_atoms: bool = False

    def find(self, text: str, lowered: str, atoms: _Atoms) -> Iterator[_Span]:
        """Every secret span of this detector. A rejected match hides nothing behind it: the
        search goes on from its next character, not from its end (but see `skip_rejected`,
        `skip_atoms`); anchored detectors try every start (`password: DB_PASSWORD="x"` holds
        two assignments)."""
        if self.starts is not None and len(lowered) == len(text):
            precheck = self.precheck
            match = self.pattern.match if self.scan is None else self.scan.match
            for pos in sorted(set(self.starts(text, lowered))):
                if precheck is not None and not precheck.match(text, pos):
                    continue
                if m := match(text, pos):
                    yield from self._spans_of(m, text, atoms)  # type: ignore[arg-type]
            return
        pos = 0
        while pos <= len(text) and (m := self.pattern.search(text, pos)):
            spans = self._spans_of(m, text, atoms)
            yield from spans
            if spans or self.skip_rejected:
                pos = max(m.end(), m.start() + 1)
            elif self.skip_atoms and atoms and (inside := _last_atom_in(atoms, m.start(), m.end())):
                pos = max(inside, m.start() + 1)
            else:
                pos = m.start() + 1

    def _spans_of(self, m: re.Match[str], text: str, atoms: _Atoms) -> list[_Span]:
        if self.refine_all is not None:
            found = self.refine_all(m)
        elif self.refine is not None:
            one = self.refine(m)
            found = [] if one is None else [one]
        else:
            if self.accept is not None and not self.accept(m):
                return []
            group = next((g for g in self.groups if m.group(g) is not None), 0)
            start, end = m.span(group)
            # tails and clips are runs of a class: each read once (`_run_end`), not once per
            # match inside them (`AKIA...` * n, each match's tail running to the end)
            if self.tail is not None:
                end = _run_end(self.tail, text, end)
            if self.clip is not None and (clip := _run_end(self.clip, text, start)) > start:
                end = min(end, clip)
            if self.keep_prefix and text.startswith(self.keep_prefix, start):
                start += len(self.keep_prefix)
            found = [(start, end)]
        kind = self.kind_of(m) if self.kind_of and found else self.kind
        out: list[_Span] = []
        for start, end in found:
            kept = _keeps(text, atoms, m.start(), m.end(), start, end)
            if kept is not None:
                out.append((*kept, self.priority, kind))
        return out


def _keeps(
    text: str, atoms: _Atoms, m_start: int, m_end: int, start: int, end: int
) -> tuple[int, int] | None:
    """The secret [start, end) of a match [m_start, m_end) as cut, or None where it is none.

    Never split a backslash escape (JSON or shell text stays well formed): a span right after
    an escaping backslash takes it along; one ending on it leaves it. A match that reads a
    placeholder as text holds no secret (`_touches_an_atom`)."""
    if start >= end:
        return None
    if _escapes_next(text, start):
        start -= 1
    if _escapes_next(text, end) and end - 1 > start:
        end -= 1
    lo, hi = min(start, m_start), max(end, m_end)
    if atoms and _touches_an_atom(atoms, lo, hi, start, end):
        return None
    return start, end


# --- placeholders as atoms --------------------------------------------------------------------


def _atoms(text: str) -> _Atoms:
    if _PLACEHOLDER_START not in text:
        return []
    return [m.span() for m in PLACEHOLDER_PATTERN.finditer(text)]


def _touches_an_atom(atoms: _Atoms, lo: int, hi: int, start: int, end: int) -> bool:
    """Whether a match over [lo, hi) with its secret at [start, end) reads a placeholder as
    text: it begins or ends inside one (the key of `[REDACTED:api_key]: word`, the user of
    `curl -u [REDACTED:email]:...`), or its secret holds one. Text next to a placeholder was
    judged by the pass that wrote it, where the secret itself still stood; judged again with
    the placeholder in its place (other characters, other length) it could read otherwise
    (`password: [REDACTED:private_key]/path`), so it is left as that pass left it.

    The atoms are sorted and apart: the one before each of `lo` and `hi`, and the first to end
    after `start`, are found by bisection (a text of placeholders is no scan per match)."""
    for pos in (lo, hi):
        i = bisect.bisect_left(atoms, pos, key=_atom_start)
        if i and pos < atoms[i - 1][1]:
            return True
    j = bisect.bisect_right(atoms, start, key=_atom_end)
    return j < len(atoms) and atoms[j][0] < end


def _last_atom_in(atoms: _Atoms, lo: int, hi: int) -> int:
    """The end of the last placeholder that starts in [lo, hi), or 0."""
    i = bisect.bisect_left(atoms, hi, key=_atom_start)
    return atoms[i - 1][1] if i and atoms[i - 1][0] >= lo else 0


def _atom_start(atom: tuple[int, int]) -> int:
    return atom[0]


def _atom_end(atom: tuple[int, int]) -> int:
    return atom[1]


def _is_ident(c: str) -> bool:
    return c.isalnum() or c in "_.-"


def _word_starts(
    text: str, lowered: str, words: Iterable[str], inside: Callable[[str], bool]
) -> Iterator[int]:
    """For each hit of each word, where the run of `inside` characters holding it starts."""
    for word in words:
        last_hit = last_start = -1
        hit = lowered.find(word)
        while hit >= 0:
            start = hit
            while start and inside(text[start - 1]):
                start -= 1
                if start == last_hit:
                    start = last_start
                    break
            yield start
            last_hit, last_start = hit, start
            hit = lowered.find(word, hit + 1)


def _at(*words: str, before: str = "") -> _Starts:
    """Starts where a match begins with one of these lowercase words, where `before` (the
    look-behind the match starts with: `\\b`, `(?<![\\w-])`) holds. Each word is found by
    `str.find` and `before` tried at each hit (a regex of look-arounds tried at every place of
    a 4 KB line cost more than the detectors it served); `--` * n or `pw` * n hold n hits,
    each one comparison."""
    check = re.compile(before).match if before else None

    def starts(text: str, lowered: str) -> Iterator[int]:
        for word in words:
            hit = lowered.find(word)
            while hit >= 0:
                if check is None or check(lowered, hit):
                    yield hit
                hit = lowered.find(word, hit + 1)

    return starts


# --- command lines ----------------------------------------------------------------------------

# A shell word: single-quoted (anything but `'`), double-quoted (backslash escapes), or bare
_BACKSLASH_RUN = re.compile(r"\\*")


def _escapes_next(text: str, i: int) -> bool:
    """Whether text[i] is escaped: an odd run of backslashes ends right before it. A run is
    walked once: positions inside one read before are answered from where it starts."""
    if i <= 0 or text[i - 1] != "\\":
        return False
    memo = _memo(text)
    run = memo.get("backslashes")
    if run is None or not run[0] <= i - 1 < run[1]:
        start = i - 1
        while start and text[start - 1] == "\\":
            start -= 1
        run = memo["backslashes"] = (start, _BACKSLASH_RUN.match(text, i).end())  # type: ignore[union-attr]
    return (i - run[0]) % 2 == 1


def _lower(text: str) -> str:
    """The text lowercased character for character. `str.lower` turns `İ` (U+0130, the only
    such character) into two, and anchored detectors look up in the lowered text where to
    start in the text as written: with another length they fell back to a search of every
    position (quadratic where a start reads a run). `İ` becomes `i`, as the regex engine's
    case-insensitive match reads it."""
    lowered = text.lower()
    return lowered if len(lowered) == len(text) else text.replace("\u0130", "i").lower()
