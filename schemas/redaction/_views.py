from __future__ import annotations

import bisect
import html
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from schemas.redaction._base import (
    _escapes_next,
)

# --- JSON-escaped text ------------------------------------------------------------------------

_JSON_ESCAPE = re.compile(r"""\\(["\\/bfnrt]|u[0-9a-fA-F]{4})""")
_SIMPLE_ESCAPES = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_ESCAPE_LEVELS = 3


def _has_escapes(text: str) -> bool:
    # `\t` or `\\:` alone: a cookies.txt line in a JSON string shows its tabs only decoded, a
    # pgpass line its escaped colons
    return "\\" in text and any(e in text for e in ('\\"', "\\/", "\\u", "\\n", "\\t", "\\\\:"))


def _json_unescape(m: re.Match[str]) -> str:
    esc = m.group(1)
    return chr(int(esc[1:], 16)) if esc[0] == "u" else _SIMPLE_ESCAPES.get(esc, esc)


# HTML and XML character references (`&quot;`, `&amp;`, `&#39;`, `&#x2F;`): a page, a draw.io
# diagram or an XML attribute holding `password: &quot;...&quot;`.
_ENTITY = re.compile(r"&(?:quot|amp|lt|gt|apos|#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6});")
# Percent-encoding of a query or form that holds another (`state=ts%3D1%26token%3D...`), or a
# value in one: read decoded where an encoded `=`, `&`, `:`, `/`, `@`, quote or blank shows it.
_PERCENT = re.compile(r"%[0-9A-Fa-f]{2}")
_PERCENT_MARKS = re.compile(r"%(?:3[dDaA]|2[6fF2702]|40)")


def _html_unescape(m: re.Match[str]) -> str:
    return html.unescape(m.group(0))


def _percent_decode(m: re.Match[str]) -> str:
    return chr(int(m.group(0)[1:], 16))


_Decode = Callable[[re.Match[str]], str]


def _decoded(
    text: str, escape: re.Pattern[str] = _JSON_ESCAPE, decode: _Decode = _json_unescape
) -> tuple[str, list[int], list[int]] | None:
    """The text with its escapes (JSON's by default) decoded, and for each character of it
    the start and end of what it was written as; None where there is no escape to decode."""
    out: list[str] = []
    starts: list[int] = []
    ends: list[int] = []
    pos = 0
    for m in escape.finditer(text):
        for i in range(pos, m.start()):
            out.append(text[i])
            starts.append(i)
            ends.append(i + 1)
        out.append(decode(m))
        starts.append(m.start())
        ends.append(m.end())
        pos = m.end()
    if not starts:
        return None
    for i in range(pos, len(text)):
        out.append(text[i])
        starts.append(i)
        ends.append(i + 1)
    return "".join(out), starts, ends


@dataclass(frozen=True, slots=True)
class _View:
    """One decoded level: its text, where each of its characters starts and ends in the text
    as written, and in the level it was decoded from (`parent`, `from_starts`)."""

    text: str
    starts: list[int]
    ends: list[int]
    parent: str
    from_starts: list[int]
    open_quotes: list[int]  # each unescaped `"` of the parent level, in order

    def raw_span(self, s: int, e: int) -> tuple[int, int] | None:
        """[s, e) in the text as written, cut before the first string boundary of the parent
        level it would cross: decoding `"ab\\\\"` (a value ending in a backslash) yields
        `"ab\\"`, whose quote now reads as escaped and the value as running on. (Both found by
        bisection: spans overlap, and a scan of each was quadratic in their number.)"""
        lo = self.from_starts[s]
        hi = self.from_starts[e - 1] + 1
        i = bisect.bisect_left(self.open_quotes, lo)
        if i < len(self.open_quotes) and self.open_quotes[i] < hi:
            e = bisect.bisect_left(self.from_starts, self.open_quotes[i], s, e)
            if e <= s:
                return None
        return self.starts[s], self.ends[e - 1]


def _has_other_escapes(text: str) -> bool:
    """Whether the text holds character references or telling percent-escapes (`_other`)."""
    return ("&" in text and _ENTITY.search(text) is not None) or (
        "%" in text and _PERCENT_MARKS.search(text) is not None
    )


def _views(text: str) -> Iterator[_View]:
    """Each decoded level of a JSON-escaped text, with offsets into the text as written; and
    of the text and each level, its HTML references and its percent-escapes decoded."""
    starts = list(range(len(text)))
    ends = list(range(1, len(text) + 1))
    yield from _other(text, starts, ends)
    for _ in range(_ESCAPE_LEVELS):
        if not _has_escapes(text):
            return
        decoded = _decoded(text)
        if decoded is None:
            return
        parent = text
        text, s, e = decoded
        starts = [starts[i] for i in s]
        ends = [ends[j - 1] for j in e]
        quotes = [
            q.start() for q in _QUOTE.finditer(parent) if not _escapes_next(parent, q.start())
        ]
        yield _View(text, starts, ends, parent, s, quotes)
        yield from _other(text, starts, ends)


def _other(text: str, starts: list[int], ends: list[int]) -> Iterator[_View]:
    """The text (a level at `starts`/`ends` in the text as written) with its HTML references,
    then its percent-escapes, decoded: one view each that has any."""
    for escape, decode, wanted in (
        (_ENTITY, _html_unescape, "&"),
        (_PERCENT, _percent_decode, "%"),
    ):
        if wanted not in text:
            continue
        if escape is _PERCENT and _PERCENT_MARKS.search(text) is None:
            continue
        decoded = _decoded(text, escape, decode)
        if decoded is None:
            continue
        view_text, s, e = decoded
        yield _View(view_text, [starts[i] for i in s], [ends[j - 1] for j in e], text, s, [])


_QUOTE = re.compile('"')


# --- finding and cutting spans ----------------------------------------------------------------
