from __future__ import annotations

import bisect
import re

from schemas.redaction._base import (
    _BLANK_RUN,
    _at,
    _bounded,
    _Detector,
    _memo,
    _run_end,
)
from schemas.redaction.assignments import (
    _VALUE_SCAN,
)
from schemas.redaction.connections import (
    _quote_before,
)
from schemas.redaction.values import (
    _is_value,
)

# --- cookies ----------------------------------------------------------------------------------

# HTTP cookies are bearer credentials (a session cookie is a login); no library plugin. Found
# in `Cookie:` request and `Set-Cookie:` response headers (raw HTTP, curl's `-H`, devtools'
# "copy as fetch" JSON, a HAR file's `{"name": "Cookie", "value": ...}`), curl's `-b` and
# `--cookie`, and Netscape `cookies.txt` lines. Every cookie's value is cut; its name and a
# Set-Cookie's attributes (`Path=/; HttpOnly; Secure; Max-Age=3600; Expires=...; SameSite=Lax;
# Domain=...`) stay. Code is not a value here either (`session=${SID}`, `$COOKIE`).
_COOKIE_NAME = r"[!#$%&'*+.^_`|~0-9A-Za-z-]+"  # RFC 6265's token
# In a Set-Cookie header, a value ends at a comma too: some clients join headers with `, `.
# An unquoted value is read `_VALUE_SCAN` characters at most (`cookie:a=cookie:a=...` holds a
# header in each value), then to the end of its run, and a long one is judged on its head.
_COOKIE_PAIR = re.compile(
    rf'(?P<name>{_COOKIE_NAME})=(?P<value>"[^"]*"|[^;\s"]{{0,{_VALUE_SCAN}}})'
)
_SET_COOKIE_PAIR = re.compile(
    rf'(?P<name>{_COOKIE_NAME})=(?P<value>"[^"]*"|[^;,\s"]{{0,{_VALUE_SCAN}}})'
)
_COOKIE_VALUE_RUN = re.compile(r'[^;\s"]*')
_SET_COOKIE_VALUE_RUN = re.compile(r'[^;,\s"]*')
# Attributes end before another `Set-Cookie:` too, which then reads its own cookies: else each
# header read all the headers after it as its attributes.
_SET_COOKIE_ATTRIBUTE = re.compile(
    rf"(?:(?!(?i:set-cookie\\*[\"']?[ \t]*:))[^;,]|,(?![ \t]*{_COOKIE_NAME}=))*"
)
_COOKIE_ATTRIBUTES = frozenset(
    {"path", "domain", "expires", "max-age", "secure", "httponly", "samesite", "priority",
     "partitioned", "version", "comment"}
)  # fmt: skip
# A cookie string ends at the end of its line, a backslash (a JSON `\n` or `\"`: cookie values
# hold none) or the quote it stands in.
_COOKIE_STRING_ENDS = {q: re.compile(rf"[^\n\r\\{q}]*") for q in ("", '"', "'", "`")}


def _cookie_value_spans(
    text: str, start: int, quote: str, set_cookie: bool
) -> list[tuple[int, int]]:
    """The value of each cookie in the cookie string at `start` (read in place: a copy of
    the string for each header in it was a scan per header)."""
    end = _run_end(_COOKIE_STRING_ENDS[quote], text, start)
    pair, run = (
        (_SET_COOKIE_PAIR, _SET_COOKIE_VALUE_RUN)
        if set_cookie
        else (_COOKIE_PAIR, _COOKIE_VALUE_RUN)
    )
    out: list[tuple[int, int]] = []
    pos, names_a_cookie = start, True
    while True:
        pos = _BLANK_RUN.match(text, pos, end).end()  # type: ignore[union-attr]
        if names_a_cookie or not set_cookie:
            m = pair.match(text, pos, end)
            if m is None:
                break
            vs, ve = m.span("value")
            long = False
            if ve - vs == _VALUE_SCAN and text[vs] != '"':
                ve = min(end, _run_end(run, text, vs))
                long = ve > m.end()
            elif ve - vs >= 2 and text[vs] == text[ve - 1] == '"':
                vs, ve = vs + 1, ve - 1
            cookie = set_cookie or m.group("name").lower() not in _COOKIE_ATTRIBUTES
            if cookie and (
                not text.startswith(("$(", "${{"), vs)
                if long
                else _is_value(text[vs:ve], "cookie", quoted=False, literal=True)
            ):
                out.append((vs, ve))
            pos, names_a_cookie = max(ve, m.end()), False
        else:
            pos = _SET_COOKIE_ATTRIBUTE.match(text, pos, end).end()  # type: ignore[union-attr]
        pos = _BLANK_RUN.match(text, pos, end).end()  # type: ignore[union-attr]
        if text.startswith(";", pos, end):
            pos += 1
        elif set_cookie and text.startswith(",", pos, end):
            pos, names_a_cookie = pos + 1, True
        else:
            break
    return out


_COOKIE_HEADER = re.compile(
    r"""(?:(?<=set-)|(?<![\w-]))cookie\\*["']?[ \t]*:[ \t]*(?P<q>\\*["'`])?""", re.IGNORECASE
)


def _cookie_header_spans(m: re.Match[str]) -> list[tuple[int, int]]:
    text = m.string
    set_cookie = text[max(0, m.start() - 4) : m.start()].lower() == "set-"
    name_start = m.start() - 4 if set_cookie else m.start()
    quote = (m.group("q") or "")[-1:] or _quote_before(text, name_start)
    return _cookie_value_spans(text, m.end(), quote, set_cookie)


# A HAR file's header: `{"name": "Cookie", "value": "a=b; c=d"}`.
# (A run of backslashes is taken whole from its first: a search tried it from each of them.)
_COOKIE_HAR = re.compile(
    r"""(?<!\\)\\*"name\\*"[ \t]*:[ \t]*\\*"(?P<set>set-)?cookie\\*"[ \t]*,"""
    r"""[ \t]*\\*"value\\*"[ \t]*:[ \t]*\\*(?P<q>")""",
    re.IGNORECASE,
)


def _cookie_har_spans(m: re.Match[str]) -> list[tuple[int, int]]:
    return _cookie_value_spans(m.string, m.end(), '"', m.group("set") is not None)


# curl's `-b`/`--cookie 'a=b; c=d'` (a word without `=` names a cookie file); the flag may
# come lines after `curl` in a command continued with `\` (devtools' "copy as cURL").
_CURL_COOKIE_FLAG = (
    r"""[ \t](?:-b[ \t]+|--cookie(?:[ \t]+|=))"""
    r"""(?:'(?P<sq>[^'\n]*)'|"(?P<dq>[^"\\\n]*)"|(?P<v>[^\s"'`|&;<>]+))"""
)
# The one regex the detector was (a unit test checks that what it cut is still cut).
_CURL_COOKIE = re.compile(
    r"""\bcurl\b(?:'[^'\n]*'|"(?:\\.|[^"\\\n])*"|\\\r?\n|[^\n|;&'"])*?""" + _CURL_COOKIE_FLAG
)
# As one regex, the middle (quoted words skipped whole, up to a `|`, `;` or `&`) depends on
# where it starts, and each `curl` read its line again. Each flag is found instead, and kept
# where a `curl` comes before it on its line (continued with `\`): every flag the regex
# found, and also one after a `|`, `;` or `&` or inside a quoted word on that line (`curl ...
# | tool -b a=b`, `curl -H 'X: -b a=b'`): more is cut, never less.
_CURL_COOKIE_FLAG_RE = re.compile(_CURL_COOKIE_FLAG)
_CURL_WORD = re.compile(r"\bcurl\b")
_HARD_NEWLINE = re.compile(r"(?<!\\)(?<!\\\r)\n")  # not a `\` continuation


def _after_curl(text: str, pos: int) -> bool:
    """Whether a `curl` comes before `pos` on its line, continuation lines included (both
    indexed once per text)."""
    memo = _memo(text)
    index = memo.get("curl")
    if index is None:
        index = memo["curl"] = (
            [m.start() for m in _CURL_WORD.finditer(text)],
            [m.start() for m in _HARD_NEWLINE.finditer(text)],
        )
    curls, newlines = index
    i = bisect.bisect_left(curls, pos)
    j = bisect.bisect_left(newlines, pos)
    return i > 0 and curls[i - 1] > (newlines[j - 1] if j else -1)


# curl's cookie string after `-b `: quotes, a name, `=` (bounded, `_bounded`).
_CURL_COOKIE_GATE = _bounded(r"\\", r"""["']?""" + _bounded(r"""[^\s"'=;\\]""", "=", least=1))


def _curl_flag_spans(m: re.Match[str]) -> list[tuple[int, int]]:
    return _curl_cookie_spans(m) if _after_curl(m.string, m.start()) else []


def _curl_cookie_spans(m: re.Match[str]) -> list[tuple[int, int]]:
    group = next(g for g in ("sq", "dq", "v") if m.group(g) is not None)
    quote = {"sq": "'", "dq": '"', "v": ""}[group]
    spans = _cookie_value_spans(m.string, m.start(group), quote, set_cookie=False)
    return [(s, e) for s, e in spans if e <= m.end(group)]


# Netscape's cookies.txt (curl's `-c`, browser exports): domain, include-subdomains flag,
# path, secure flag, expiry, name, value, separated by tabs.
_NETSCAPE_COOKIE = re.compile(
    r"^[^\t\n]+\t(?:TRUE|FALSE)\t[^\t\n]*\t(?:TRUE|FALSE)\t[0-9]+\t[^\t\n]*\t(?P<v>[^\s\"\\]+)",
    re.MULTILINE | re.IGNORECASE,
)
_NETSCAPE_GATE = (
    "\t(?:true|false)\t"
    + _bounded(r"[^\t\n]", r"\t(?:true|false)\t" + _bounded("[0-9]", r"\t", least=1)),
    # the same in JSON-escaped text (its decoded form is read, `_views`)
    r"\\t(?:true|false)\\t",
)


def _netscape_cookie_span(m: re.Match[str]) -> tuple[int, int] | None:
    value = m.group("v")
    return m.span("v") if _is_value(value, "cookie", quoted=False, literal=True) else None


DETECTORS: tuple[_Detector, ...] = (
    _Detector(
        "cookie",
        _COOKIE_HEADER,
        ("cookie" + _bounded(r"\\", r"""["']?""" + _bounded(r"[ \t]", ":")),),
        priority=2,
        refine_all=_cookie_header_spans,
        starts=_at("cookie", before=r"(?:(?<=set-)|(?<![\w-]))"),
    ),
    _Detector(
        "cookie",
        _COOKIE_HAR,
        ("cookie" + _bounded(r"\\", '"' + _bounded(r"[ \t]", ",")),),
        priority=2,
        refine_all=_cookie_har_spans,
    ),
    _Detector(
        "cookie",
        _CURL_COOKIE_FLAG_RE,
        (
            "-b" + _bounded(r"[ \t]", _CURL_COOKIE_GATE, least=1),
            "--cookie(?:"
            + _bounded(r"[ \t]", _CURL_COOKIE_GATE, least=1)
            + "|="
            + _CURL_COOKIE_GATE
            + ")",
        ),
        priority=2,
        refine_all=_curl_flag_spans,
    ),
    _Detector("cookie", _NETSCAPE_COOKIE, _NETSCAPE_GATE, priority=2, refine=_netscape_cookie_span),
)
