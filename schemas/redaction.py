"""Redaction: secrets and e-mail addresses leave a text before it is stored, logged or embedded.

Each secret span is replaced by a typed placeholder, ``[REDACTED:<kind>]`` with ``kind`` in
``[a-z0-9_]+`` (``password``, ``aws_key``, ``email`` ...), and the text around it is kept:
``password=[REDACTED:password]``, ``postgres://app:[REDACTED:password]@db:5432/pay``,
``https://x.blob.core.windows.net/c/f?sv=2021-08-06&sig=[REDACTED:signature]``.

Placeholders are atoms. A placeholder (``[REDACTED]`` or ``[REDACTED:<kind>]``, whoever wrote
it) is never a secret, never part of one and never the key or value of an assignment: a match
that begins or ends inside one is dropped (``[REDACTED:gcp_api_key]: please`` is not
``api_key: please``), and so is a secret span that overlaps one. Text next to a
placeholder was judged by the pass that wrote it, while the secret still stood there; judged
again next to the placeholder (other characters, other length) it could read otherwise. So
``redact`` is idempotent and ``contains_secret`` is False on anything ``redact`` returned;
property-based tests (``tests/unit/test_redaction_properties.py``) check both over generated
secrets of every kind. The price: a secret someone glues to a placeholder they typed
(``password=[REDACTED]hunter2``) is left alone.

Detection reuses detect-secrets: the ``denylist`` regexes of its token plugins (cloud, VCS,
chat, payment and registry tokens, JWTs, basic-auth URLs, private-key headers), the keyword
list of its KeywordDetector and its Shannon entropy. Patterns are added here only where the
library finds a line but not the span to cut, or has no plugin; each says why. They cover
token families the library lacks (DigitalOcean, Hugging Face, Anthropic, Shopify, Vault,
Databricks ...), assignments (``.env`` lines, code, YAML, JSON, query strings, ``--flags``,
Dockerfile ``ENV``, XML), credentials on the command lines agents run (``curl -u``,
``mysql -p``, ``sshpass -p``, ``redis-cli -a``, ``docker login -p``, ``echo X | sudo -S`` ...),
signed-URL signatures (Azure SAS ``sig=``, ``X-Amz-Signature``), AWS secret keys near an AWS or
secret word, SQL (``WITH PASSWORD 'x'``, ``IDENTIFIED BY 'x'``), ``.netrc``, Docker's
``config.json``, PostgreSQL's ``.pgpass`` lines (``db:5432:pay:app:[REDACTED:password]``: only the
password field), cookies (``Cookie:`` and ``Set-Cookie:`` headers, curl's ``-b``/``--cookie``,
a HAR file's cookie header, Netscape ``cookies.txt`` lines: each value, never a name or a
``Path=/; HttpOnly`` attribute, ``[REDACTED:cookie]``), and passwords stated in prose
("my password is hunter2RT", "the password for prod was 'x y'", "password Hunter2RT"), in
English and in German, French, Spanish, Portuguese, Dutch, Swedish, Norwegian, Danish, Polish,
Russian, Ukrainian, Turkish, Chinese, Japanese and Korean ("das Passwort ist ...", "le mot de
passe est « ... »", "пароль от базы — ...", "数据库密码是...", "パスワードは..."); their words
for password are assignment keys too (``passwort=``, ``contraseña:``, ``şifre =``).

Text in JSON-escaped form (``postgres:\\/\\/app:pw@db``, ``\\u0070assword``, a JSON document
inside a JSON string) is also read decoded, up to three levels deep; what is found there is cut
from the text as written, whole escape sequences included.

Deliberately not detected: detect-secrets' entropy plugins on their own (they flag commit SHAs,
content hashes and base64 blobs, common and legitimate in coding conversations), its IP-address
plugin (not a secret) and its vendor plugins that need context words (Artifactory, IBM,
SoftLayer, Cloudant; assignments such as ``ibm_api_key = ...`` are still caught by keyword).
Code is not a value: ``password = get_password()``, ``os.environ['PW']``, ``settings.PW``,
``password=password``, ``token: str``, ``$VAR``, ``${VAR}``, ``$(cmd ...)``, templates; a call
of a password-like name (``Hunter2RT(prod)``) and brackets inside a word (``Sup3r[Secret]RT``)
are values, and so is everything after ``KEY=`` in a ``.env`` line or shell variable. A prose
password must look like one (a digit with letters, a symbol or inner capitals; or quoted):
"the password is correcthorsebatterystaple" is not found, "the password is required",
"passwords are hashed", "das Passwort ist erforderlich", "le mot de passe est requis" and
"пароль обязателен" are left alone; Spanish ``clave`` and Turkish/Italian ``parola`` (also key,
word) need a value that looks strongly like one even when quoted. A line of five
colon-separated fields is a ``.pgpass`` line only in a text that mentions ``pgpass``, or with
a host, a port, no space in its first four fields, a database that is no number and a
password that looks like one (or PostgreSQL's port): timestamps, IPv6 and MAC addresses,
``host:port``, ``ERROR:root:...`` log lines, slices and linter output
(``app/db.py:12:5: E501 ...``) stay; a pgpass password with an unescaped colon is found only
where the text says ``pgpass``. Not detected: a cookie object as JSON text
(``{"name": "sid", "value": ...}``, HAR's ``cookies``; ``redact_json`` finds it parsed),
cookies set in code (``document.cookie = ...``, ``response.set_cookie(...)``).

Speed: everything compiles once at import. Each detector has a gate, a few lowercase
substrings or regexes that every match implies and that demand its structure, not just a word
(``key=``, not ``key``; ``://user@``, not ``://``); a text none of the gates opens is clean
without running a detector. The gates run as one regex factored by common prefixes (Python's
engine tries alternatives one by one); a text of ASCII only is searched without the gates that
start with another character (``пароль``, ``密码``: each such first character costs every
position of every text a comparison). ``redact_series`` runs the same gates in polars (Rust)
over the unique values of a column and sends only the candidates through the detectors.

Time is linear in the text, hostile text included (a landing line may hold a mebibyte; the
forms before this took 45 s for 64 KB of ``-``, hours for a mebibyte). Each gate matches
within a bounded width (a longer run opens its detector through a hatch, ``_bounded``); no
detector reads a run, a value or a command again for each start inside it (see "linear
time" below). What that changed: an unquoted value longer than 256 characters is cut whole,
judged on its head (a command substitution, a path or a working directory stays); a value in
typographic quotes holds no opening quote of its kind (``“a “b”`` is no value); each ``-b``
or ``--cookie`` after ``curl`` on its continued line is read; npm's token after every
``/:_authToken=``; a JWT at the first 16 ``eyJ`` of a run. ``bench/bench_redaction_adversarial.py``
times every gate's literal and keyword, and chains of matches, repeated to n and 4n characters.

Helpers for ingestion: ``redact_record`` (a rejected raw line, clipped after redaction) and
``redact_id`` (id-like fields: a secret inside an id is replaced, and the id stays unique).
"""

from __future__ import annotations

import base64
import bisect
import dataclasses
import functools
import hashlib
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from detect_secrets.filters.heuristic import is_templated_secret
from detect_secrets.plugins import keyword
from detect_secrets.plugins.aws import AWSKeyDetector
from detect_secrets.plugins.azure_storage_key import AzureStorageKeyDetector
from detect_secrets.plugins.base import RegexBasedDetector
from detect_secrets.plugins.basic_auth import BasicAuthDetector
from detect_secrets.plugins.discord import DiscordBotTokenDetector
from detect_secrets.plugins.github_token import GitHubTokenDetector
from detect_secrets.plugins.gitlab_token import GitLabTokenDetector
from detect_secrets.plugins.high_entropy_strings import Base64HighEntropyString
from detect_secrets.plugins.jwt import JwtTokenDetector
from detect_secrets.plugins.mailchimp import MailchimpDetector
from detect_secrets.plugins.npm import NpmDetector
from detect_secrets.plugins.openai import OpenAIDetector
from detect_secrets.plugins.private_key import PrivateKeyDetector
from detect_secrets.plugins.pypi_token import PypiTokenDetector
from detect_secrets.plugins.sendgrid import SendGridDetector
from detect_secrets.plugins.slack import SlackDetector
from detect_secrets.plugins.square_oauth import SquareOAuthDetector
from detect_secrets.plugins.stripe import StripeDetector
from detect_secrets.plugins.telegram_token import TelegramBotTokenDetector
from detect_secrets.plugins.twilio import TwilioKeyDetector

if TYPE_CHECKING:  # polars loads only where a Series is redacted (agent hooks stay light)
    import polars as pl

__all__ = [
    "PLACEHOLDER",
    "PLACEHOLDER_PATTERN",
    "PREFILTER_PATTERN",
    "contains_secret",
    "redact",
    "redact_id",
    "redact_json",
    "redact_record",
    "redact_series",
    "redact_series_with_count",
    "redact_with_count",
    "secret_mask",
]

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
            if start >= end:
                continue
            # Never split a backslash escape (JSON or shell text stays well formed): a span
            # right after an escaping backslash takes it along; one ending on it leaves it.
            if _escapes_next(text, start):
                start -= 1
            if _escapes_next(text, end) and end - 1 > start:
                end -= 1
            lo, hi = min(start, m.start()), max(end, m.end())
            if atoms and _touches_an_atom(atoms, lo, hi, start, end):
                continue
            out.append((start, end, self.priority, kind))
        return out


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


# --- detect-secrets' token plugins ------------------------------------------------------------


# `scheme://user[:password]@`, and GitLab's `gl<kind>-` prefixes, within a bounded width.
_URL_USER_GATE = "://" + _bounded(r"[^\s/?#@]", "@")
_GITLAB_GATE = ("gl" + _bounded("[a-z]", "-", least=1), "gr1348941")


class _Plugin(NamedTuple):
    plugin: type[RegexBasedDetector]
    kind: str
    in_group: bool  # the secret is group 1 where a pattern has groups
    tail: re.Pattern[str] | None
    gate: tuple[str, ...]  # implied by every pattern of the denylist below, as reviewed
    reviewed: str  # fingerprint of that denylist


_LIBRARY: tuple[_Plugin, ...] = (
    _Plugin(AWSKeyDetector, "aws_key", True, _TOKEN_TAIL,
            ("a3t", "abia", "acca", "akia", "asia", "aws"), "2442535eca47"),
    _Plugin(AzureStorageKeyDetector, "azure_storage_key", False, None,
            ("accountkey=",), "8e27b61d2248"),
    _Plugin(BasicAuthDetector, "password", True, None, (_URL_USER_GATE,), "de1d18ad6f14"),
    _Plugin(DiscordBotTokenDetector, "discord_token", False, _TOKEN_TAIL,
            (r"\.[a-z0-9_-]{6}\.",), "fe064d6f9d32"),
    # group 1 of the GitHub and GitLab patterns is the prefix only: the token is the match
    _Plugin(GitHubTokenDetector, "github_token", False, _TOKEN_TAIL,
            ("gh[opusr]_",), "5deb36728575"),
    _Plugin(GitLabTokenDetector, "gitlab_token", False, _TOKEN_TAIL,
            _GITLAB_GATE, "088caa7db6e3"),
    _Plugin(JwtTokenDetector, "jwt", False, _JWT_TAIL, ("eyj",), "39549fd323b5"),
    _Plugin(MailchimpDetector, "mailchimp_key", False, _TOKEN_TAIL,
            ("-us[0-9]",), "d5687e015476"),
    _Plugin(NpmDetector, "npm_token", True, None, ("_authtoken",), "f14156c56edf"),
    _Plugin(OpenAIDetector, "openai_key", False, _TOKEN_TAIL, ("t3blbkfj",), "a2802213e73b"),
    _Plugin(PrivateKeyDetector, "private_key", False, None,
            ("private key", "putty-user-key-file"), "1611ba7642b4"),
    _Plugin(PypiTokenDetector, "pypi_token", False, _TOKEN_TAIL, ("pypi-age",), "9a232d75b6e3"),
    _Plugin(SendGridDetector, "sendgrid_key", False, _TOKEN_TAIL, (r"sg\.",), "11d94bdefe78"),
    _Plugin(SlackDetector, "slack_token", False, _TOKEN_TAIL,
            ("xox", r"hooks\.slack\.com"), "9da34c83c226"),
    _Plugin(SquareOAuthDetector, "square_secret", False, _TOKEN_TAIL,
            ("sq0csp-",), "ef73f5dac6f5"),
    _Plugin(StripeDetector, "stripe_key", False, _TOKEN_TAIL, ("k_live_",), "1e68da2ed787"),
    _Plugin(TelegramBotTokenDetector, "telegram_token", False, _TOKEN_TAIL,
            (":[0-9a-z_-]{35}",), "3e018cd64d8c"),
    _Plugin(TwilioKeyDetector, "twilio_key", False, _TOKEN_TAIL,
            ("ac[a-z0-9]{32}", "sk[a-z0-9]{32}"), "b5f86cce3bba"),
)  # fmt: skip

# A gate let everything through: the polars prefilter then passes every value.
CATCH_ALL: tuple[str, ...] = ("",)


def fingerprint(plugin: type[RegexBasedDetector]) -> str:
    patterns = "\n".join(p.pattern for p in plugin.denylist)  # type: ignore[attr-defined]
    return hashlib.sha256(patterns.encode()).hexdigest()[:12]


def _rust_compiles(pattern: str) -> bool:
    import polars as pl

    try:
        pl.Series([""], dtype=pl.String).str.contains(pattern)
    except pl.exceptions.ComputeError:
        return False
    return True


def _unreviewed_gate(pattern: re.Pattern[str]) -> tuple[str, ...]:
    """After a detect-secrets upgrade changed a denylist, its hand-written gate is unproven:
    the pattern gates itself (case-insensitively, so it still holds on lowercased text) or,
    where Rust cannot compile it, everything passes. Slower, never a hole; a unit test fails
    until the gate is reviewed again."""
    gate = f"(?i:{pattern.pattern})"
    return (gate,) if _rust_compiles(gate) else CATCH_ALL


def _jwt_valid(m: re.Match[str]) -> bool:
    return JwtTokenDetector.is_formally_valid(m.group(0))


# Three library patterns read a run again from each place a match may start in it, and are
# found otherwise here (only while their denylist is the one reviewed):
# - the JWT pattern (`eyJ[...]+\.`) from each `eyJ` reads the run up to its `.`, and each
#   candidate is decoded: `eyJ` is tried at its first `_JWT_TRIES` places in a run;
# - npm's `//.+/:_authToken=...` from each `//` reads the line: the token is found after each
#   `/:_authToken=`, with or without a `//` before it on its line, and not only after the
#   last one (more is cut, never less);
# - OpenAI's legacy `sk-[...]*[...]{20}T3BlbkFJ[...]{20}` from each `sk-` reads the run: only
#   the first `sk-` of a run is tried (a later one finds a part of what the first finds).
_JWT_TRIES = 16
_JWT_RUN = re.compile(r"[A-Za-z0-9_=-]*")
_OPENAI_RUN = re.compile(r"[A-Za-z0-9_-]*")


def _first_in_runs(needle: str, run: re.Pattern[str], tries: int) -> _Starts:
    """Starts at each `needle`, the first `tries` of them in each run of `run`."""

    def starts(text: str, lowered: str) -> Iterator[int]:
        run_end, tried = -1, 0
        hit = text.find(needle)
        while hit >= 0:
            if hit >= run_end:
                run_end, tried = _run_end(run, text, hit), 0
            if tried < tries:
                yield hit
            tried += 1
            hit = text.find(needle, hit + 1)

    return starts


_LINEAR_LIBRARY: dict[str, tuple[dict[str, Any], ...]] = {
    JwtTokenDetector.denylist[0].pattern: (  # type: ignore[attr-defined]
        {"starts": _first_in_runs("eyJ", _JWT_RUN, _JWT_TRIES)},
    ),
    NpmDetector.denylist[0].pattern: (  # type: ignore[attr-defined]
        {"pattern": re.compile(r"/:_authToken=\s*(npm_)(?=.)"), "tail": _TOKEN_TAIL, "clip": None},
        {"pattern": re.compile(r"/:_authToken=\s*([A-Fa-f0-9-]{36})")},
    ),
    OpenAIDetector.denylist[0].pattern: (  # type: ignore[attr-defined]
        {"starts": _first_in_runs("sk-", _OPENAI_RUN, 1)},
    ),
}


def _library_detectors() -> list[_Detector]:
    out: list[_Detector] = []
    for spec in _LIBRARY:
        reviewed = fingerprint(spec.plugin) == spec.reviewed
        for pattern in spec.plugin.denylist:  # type: ignore[attr-defined]
            group = 1 if spec.in_group and pattern.groups else 0
            detector = _Detector(
                kind=spec.kind,
                pattern=pattern,
                gate=spec.gate if reviewed else _unreviewed_gate(pattern),
                groups=(group,),
                tail=spec.tail if group == 0 else None,
                clip=_TOKEN_TAIL if spec.plugin is NpmDetector else None,
                accept=_jwt_valid if spec.plugin is JwtTokenDetector else None,
                keep_prefix="AccountKey=" if spec.plugin is AzureStorageKeyDetector else "",
                priority=1 if spec.plugin is BasicAuthDetector else 0,
            )
            linear = _LINEAR_LIBRARY.get(pattern.pattern, ()) if reviewed else ()
            out.extend(dataclasses.replace(detector, **change) for change in linear)
            if not linear:
                out.append(detector)
    return out


# --- what a value is --------------------------------------------------------------------------

# Unquoted words that stand where a value would in code: literals, types, expression keywords.
_NOT_A_VALUE = frozenset(
    {"null", "none", "nil", "true", "false", "undefined", "str", "string", "bytes", "int",
     "bool", "boolean", "float", "number", "object", "dict", "list", "any", "secretstr",
     "secretbytes", "optional", "required", "empty", "redacted", "await", "new", "yield",
     "async", "function", "lambda", "typeof"}
)  # fmt: skip
_MASK_CHARS = frozenset("*xX.•#?_-")
# References a value stands for: `$VAR`, `${VAR}`, `$(command ...` (cut at its first space),
# `%(name)s`, `%s`, `{{ template }}`, `${{ ci.expression }}`.
_SHELL_REF = re.compile(r"\$\{?\w+\}?|\$\(.*|%\(\w+\)s|%s|\{\{.*\}\}|\$\{\{.*")
# A variable named like a secret (`password=password`, `== confirm_password`): no digit, as
# `Password123` is a password.
# (A look-ahead for the word, then the letters whole: `[A-Za-z_]*(?:pass|...)[A-Za-z_]*`
# tried each `pass` of `passpass...pass1` against the rest of the value.)
_SECRET_NAMED_VARIABLE = re.compile(
    r"(?=[A-Za-z_]*?(?:pass|pwd|secret|token|key|credential))[A-Za-z_]*+", re.IGNORECASE
)
_YAML_TAG = re.compile(r"![A-Za-z]+")
_IDENT = re.compile(r"[A-Za-z_$][\w$]*")
_OPENERS = {"(": ")", "[": "]", "{": "}"}
_CLOSERS = frozenset(_OPENERS.values())


def _balanced_len(value: str) -> int:
    """How much of an unquoted value is the value: it ends before a closing bracket it did
    not open (`f(password=x)` holds `x`, `f(password=x).run()` too, `Hunter2RT(prod)` is one
    value). A closer it starts with, or one a letter or digit follows (`]close9`, `0)Aa000`),
    is its own: an enclosing call does not end before its argument or inside a word."""
    if _BRACKET(value) is None:
        return len(value)
    stack: list[str] = []
    for i, c in enumerate(value):
        if c in _OPENERS:
            stack.append(_OPENERS[c])
        elif c in _CLOSERS and (not stack or stack.pop() != c):
            if i and (i + 1 == len(value) or not value[i + 1].isalnum()):
                return i
            stack.clear()
    return len(value)


_BRACKETS = re.compile(r"[()\[\]{}]")
_BRACKET = _BRACKETS.search
_HAS_DIGIT = re.compile(r"\d").search
_CODE_SYNTAX = re.compile(r"[(\[{.:]").search  # what an expression needs beyond a name


def _password_like(word: str) -> bool:
    """An identifier no one names a function: upper and lower case and a digit (Hunter2RT)."""
    return word != word.lower() and word != word.upper() and _HAS_DIGIT(word) is not None


def _is_code(value: str) -> bool:
    """An expression, not a literal: `get_password()`, `os.environ['PW']`, `Optional[str]`,
    `settings.DB_PASSWORD`. A call of a password-like name (`Hunter2RT(prod)`) or brackets
    followed by more text (`Sup3r[Secret]RT`) are literals."""
    if _CODE_SYNTAX(value) is None:
        return False
    pos = 0
    segments = 0
    groups = 0
    while pos < len(value):
        m = _IDENT.match(value, pos)
        if m is None or _password_like(m.group()):
            return False
        segments += 1
        pos = m.end()
        while pos < len(value) and value[pos] in _OPENERS:
            close = _group_end(value, pos)
            if close is None:  # cut off before it closes (`data.get(`): still a call
                return True
            groups += 1
            pos = close
        if pos == len(value):
            break
        if value.startswith("?.", pos):
            pos += 2
        elif value[pos] == "." or value.startswith("::", pos):
            pos += 1 if value[pos] == "." else 2
        else:
            return False
    return groups > 0 or segments > 1


def _group_end(value: str, pos: int) -> int | None:
    depth = 0
    for i in range(pos, len(value)):
        if value[i] in _OPENERS:
            depth += 1
        elif value[i] in _CLOSERS:
            depth -= 1
            if depth == 0:
                return i + 1
    return None


def _without_placeholders(value: str) -> str:
    if _PLACEHOLDER_START not in value:
        return value
    return PLACEHOLDER_PATTERN.sub(" ", value).strip()


def _is_value(value: str, key: str, quoted: bool, literal: bool = False) -> bool:
    """False for what stands where a secret would but is none: references, masks, types, code.
    `literal`: the syntax has no expressions (a `.env` line, a shell variable)."""
    value = _without_placeholders(value)
    if len(value) < 2 or set(value) <= _MASK_CHARS:
        return False
    if is_templated_secret(value) or _SHELL_REF.fullmatch(value):
        return False
    if key.lower().endswith("token") and (len(value) < 8 or value.isdigit()):
        return False  # max_token: 512, next_token: "2"
    weak = _WEAK_KEY.fullmatch(key.strip("\\\"']"))
    if weak and not _prose_password(value, strong=weak.group("strong") is not None):
        return False  # `pass: 12` is a count, `pass: Hunter2RT` a password
    if key.lower() == "pwd" and value[0] in "/~":
        return False  # `pwd: /home/dev` is the working directory
    if quoted:
        return True
    if key in ("PWD", "OLDPWD"):  # the shell's working directory
        return False
    if value.lower() in _NOT_A_VALUE or _YAML_TAG.fullmatch(value):
        return False
    if literal:
        return True
    if _SECRET_NAMED_VARIABLE.fullmatch(value.rstrip(":;,.")):
        return False
    if value[0] in _OPENERS and _group_end(value, 0) in (None, len(value)):
        return False  # a list, dict or tuple literal is no secret of its own
    return not _is_code(value)


# --- keyword assignments ----------------------------------------------------------------------

# detect-secrets' KeywordDetector finds the line of `password = ...` but its unquoted value
# runs to the end of the line; here the value stops at the first delimiter, so
# `PGPASSWORD=x psql -h db` keeps its command. Its keyword list is reused as is; added: `token`
# (GITHUB_TOKEN, access_token) only as the end of a name, so that max_tokens, token_type and
# tokenizer stay; `access_key` (SharedAccessKey, access_key_id); `pw` only as a whole name or
# its last part (`pw`, `DB_PW`), so that `pw_hash` and `upward` stay.
# Also added: the word for password in other languages (`_PASSWORD_WORDS`: Passwort, Kennwort,
# mot_de_passe, senha, palavra_passe, wachtwoord, lösenord, passord, adgangskode, kodeord,
# hasło, şifre, пароль, 密码, パスワード, 비밀번호 ...; contraseña is in the library's list);
# `pass` and `psk` as a whole name or its last part (`pass:`, `'pass':`, WPA's `psk=`), and so
# `clave` (Spanish: key, password) and `parola` (Turkish: password; Italian: word), all of
# which need a value that looks like a password ("tests pass: 12", `clave: id` stay).
# Those a longer name can hold by chance end where a letter would go on (`bypassOrder`,
# `hasLoaded`), and so do the Chinese, Japanese and Korean ones, which prose glues to the next
# word ("密码是...": the key is 密码, not 密码是).
_CJK_KEYWORDS = ("密码", "密碼", "パスワード", "비밀번호", "패스워드")
_PASSWORD_WORDS = (
    "passwort", "kennwort", "mot_?de_?passe", "senha", "palavra_?passe", "wachtwoord",
    "lösenord", "passord(?:et)?(?![a-z])", "adgangskode", "kodeord", "has[lł]o(?![a-z])",
    "[şs]ifre(?![a-z])", "пароль", *(f"{w}(?![^\\W\\d_])" for w in _CJK_KEYWORDS),
)  # fmt: skip
_MORE_KEYWORDS = ("access_?key", *_PASSWORD_WORDS)
_KW = "|".join(k.replace("_?", "[_.-]?") for k in (*keyword.DENYLIST, *_MORE_KEYWORDS))
_WEAK_WORDS = "pw|pass|psk|clave|parola"
# A key is a whole name (`[\w.-]` on both sides ends it) that holds a keyword, ends in `token`
# or ends in a weak word: looked ahead for, then the name taken whole (possessive). As
# `[\w.-]*?(?:kw)[\w.-]*(?![\w.-])` each keyword of a long name was tried against the rest
# of the name once a match failed after it: `pw` * 32000 read the name 32000 times.
_KEY = (
    rf"(?=[\w.-]*?(?:{_KW})|[\w.-]*token(?![\w.-])|(?:[\w.-]*[_.-])?(?:{_WEAK_WORDS})(?![\w.-]))"
    r"[\w.-]++"
)
# fullmatch: a bare `pass`, not `db_pass`; `clave` and `parola`, words for other things too,
# also as the last part of a name, with a value that looks strongly like a password.
_WEAK_KEY = re.compile(r"pass|(?P<strong>(?:[\w.-]*[_.-])?(?:clave|parola))", re.IGNORECASE)
_KEY_ONLY = re.compile(_KEY, re.IGNORECASE)
# Names that describe a secret without holding it: `SharedAccessKeyName=Root`,
# `password_file=/run/secrets/db`, `token_url`, `secret_length`, `keyType`.
_DESCRIBES_A_SECRET = re.compile(
    r"(?:[_.-]|(?<=[a-z])(?=[A-Z]))(?i:names?|file|path|dir|url|uri|length|len|size|type|ttl"
    r"|expiry|expires|version|count|format|header|field|env|var|policy|rotation|refs?)$"
)


@functools.lru_cache(maxsize=1024)
def _holds_a_secret(key: str) -> bool:
    return _DESCRIBES_A_SECRET.search(key.rstrip("\\\"'])")) is None


# Substrings every keyword of the list contains (a unit test checks each keyword against them).
# Those of a password word also name the kind (`_kind_for_key`).
_PASSWORD_STEMS = (
    "pass", "pwd", "contrase", "senha", "wachtwoord", "пароль", "kennwort", "lösenord",
    "adgangskode", "kodeord", "hasło", "haslo", "şifre", "sifre", "clave", "parola", "密码",
    "密碼", "パスワード", "비밀번호", "패스워드",
)  # fmt: skip
_KEYWORD_GATE = ("key", "secret", "token", "pw", "psk", *_PASSWORD_STEMS)
# Where names holding a keyword start: each word no other word of the list is part of (`pw`
# finds `pwd`), the ASCII ones alone in an ASCII text.
_START_WORDS = tuple(w for w in _KEYWORD_GATE if not any(v != w and v in w for v in _KEYWORD_GATE))
_START_WORDS_ASCII = tuple(w for w in _START_WORDS if w.isascii())
_KEYWORDS_RE = "|".join(_KEYWORD_GATE)
# Gates demand what every match of their detector shows, not just a word: a bare `key` or
# `token` is in most coding turns, `key=` or `token:` is not, and a text no gate opens never
# reaches a detector.
# The name's end, closing quotes and blanks before the operator (`_ASSIGNMENT`: `[\w.-]*`,
# `(?:\\*["'\]]){0,2}`, `[ \t]*`), each bounded with its hatch.
_ASSIGNMENT_GATE = tuple(
    w + _bounded(r"[\w.-]", _bounded(r"""[\\"'\]]""", _bounded(r"[ \t]", "[:=!]")))
    for w in _KEYWORD_GATE
)
# (Dashes first, taken whole, then a word character: a line of dashes, common in code and
# Markdown, opens nothing and costs each place one run of at most 64. A match whose dashes run
# longer holds a `--` 64 before their end; from there the name follows as bounded.)
_FLAG_DASHES = rf"(?:-{{0,{_GATE_RUN}}}+(?!-))"
_UNBOUNDED[_FLAG_DASHES] = ""  # Python's prefilter only: Rust's reads `--[\w-]*(?:pass|...)`
_FLAG_GATE = (
    "--" + _FLAG_DASHES + _bounded(r"[\w-]", "(?:pass|secret|token|key)", backtrack=True),
)
_PROSE_GATE = (r"pass(?:word|wd|phrase|code)s?[ \t]", r"pwd[ \t]", r"pw[ \t]")
_IDENTIFIED_BY_GATE = "identified" + _bounded(r"[ \t]", "by", least=1)
# Python annotations: `password: str = "..."` assigns after the type.
_ANNOTATION = r"str|bytes|secretstr|secretbytes|any|optional\[\w+\]|\w+[ \t]*\|[ \t]*none"
# A quoted value: first read with backslash escapes (`"ab\"cd"` is one value), else up to the
# first closing quote (`'C:\temp\'`, an escaped quote as delimiter: `\"x\"`).
# (A scan from each quote stops at the next unescaped one of its kind, which the next
# assignment's opening quote is: scans overlap only across the three kinds. Escaped quotes
# as delimiters take at most 16 backslashes, three JSON levels and more: the text is also
# read decoded, and each place of the scan compares that many.)
_QUOTED = r"""(?:(?P<qa>["'`])(?P<qva>(?:\\.|[^\n\\])*?)(?P=qa)
               |(?P<q>\\{0,16}["'`])(?P<qv>[^\n]*?)(?P=q))"""
# An unquoted value runs up to a space, a quote or a separator; `&` ends it before a `name=`.
# Values hold keys (`password=password=...`, `PW=$(PW=$(...`), and each key's value runs to
# the same end: read and judged again from each key, that was a scan per key. The regex stops
# where the value starts; its run is read once (`_run_end`: it ends at the same place from
# each key inside it), at most `_VALUE_SCAN` characters of it are judged, and a longer value
# runs to the end of its run and is judged on its head alone (`_value_end`, `_long_value`).
_VALUE_SCAN = 256
_VALUE_CHARS = r"""[^\s"'`,;&<>，。；、]*+"""
_VALUE_RUN = re.compile(rf"{_VALUE_CHARS}(?:&(?![\w.-]+=){_VALUE_CHARS})*")
_ASSIGNMENT = re.compile(
    rf"""
    (?<![\w.-])(?P<key>{_KEY})
    (?:\\*["'\]]){{0,2}}                      # closing quote of "password" or config['pwd']
    (?:[ \t]*:[ \t]*(?:{_ANNOTATION})(?=[ \t]*=[^=]))?
    (?P<op>[ \t]*(?::=|=>|===?|!==?|=|:)[ \t]*)
    (?:{_QUOTED}|(?P<v>))                    # an unquoted value starts here (`_value_end`)
    """,
    re.IGNORECASE | re.VERBOSE,
)
# A shell variable's value: up to whitespace, a quote or an operator; `&` only ends it before
# `&&` or a space (`PGPASSWORD=Tr0ub4dor&3 psql` is how people write it).
_ENV_VALUE_RUN = re.compile(r"""(?:[^\s"'`;&|<>]|&(?![&\s]|$))*""")
_EXPORT = re.compile(r"export[ \t]+")


@functools.lru_cache(maxsize=1024)
def _kind_for_key(key: str) -> str:
    low = key.lower()
    if any(w in low for w in _PASSWORD_STEMS) or low.endswith(("pw", "psk")):
        return "password"
    if low.endswith("token"):
        return "token"
    return "api_key" if "api" in low else "secret"


def _quoted_span(m: re.Match[str], key: str) -> tuple[int, int] | None:
    group = "qva" if m.group("qva") is not None else "qv"
    if m.group(group) is None:
        return None
    quote = m.group("qa" if group == "qva" else "q")
    if quote == "`" and key.isupper() and "op" in m.re.groupindex and m.group("op") == "=":
        return None  # DB_PASSWORD=`cat /run/secrets/db`: the shell runs a command
    return m.span(group) if _is_value(m.group(group), key, quoted=True) else None


def _assignment_span(m: re.Match[str]) -> tuple[int, int] | None:
    key = m.group("key")
    text = m.string
    if not _holds_a_secret(key) or (len(key) >= 20 and _password_like(key)):
        return None  # `password_file=...`; a token that holds `pwd` or `pass` is no name
    if m.group("op") == ":" and text.endswith("://", 0, m.start()):
        return None  # `https://x-access-token:TOKEN@host/path` is a URL's user and password
    if m.group("v") is None:
        return _quoted_span(m, key)
    # `DB_PASSWORD=...` with no spaces, as in `.env` files and shell variables: a literal from
    # right after the `=` (`==x` holds `=x`), and on a line of its own (`.env`) all of the
    # rest of the line when that holds no space (it may start with `,`).
    key_end = m.end("key")
    env = (
        key.isupper()
        and text.startswith("=", key_end)
        and not text[key_end + 1 : key_end + 2].isspace()
    )
    if not env:
        start = m.start("v")
        end, long = _value_end(text, start, _VALUE_RUN)
    else:
        start = key_end + 1
        end, long = _value_end(text, start, _ENV_VALUE_RUN)
        if _env_line_start(text, m.start()):  # one key a line: its rest is read once
            rest_end = _run_end(_LINE_REST, text, start)
            while rest_end > start and text[rest_end - 1] == "\r":
                rest_end -= 1
            if rest_end > start and _NO_SPACE.fullmatch(text, start, rest_end):
                end, long = rest_end, False
    if long:
        return (start, end) if _long_value(text, start, key) else None
    if not _is_value(text[start:end], key, quoted=False, literal=env):
        return None
    return start, end


_LINE_REST = re.compile(r"[^\n]*")
_NO_SPACE = re.compile(r"\S*")


def _env_line_start(text: str, pos: int) -> bool:
    """Whether `pos` starts its line, after blanks and an `export` (`.env` files)."""
    first = _run_end(_BLANK_RUN, text, _line_start(text, pos))
    if first < pos and (export := _EXPORT.match(text, first, pos)):
        first = export.end()
    return first == pos


def _value_end(text: str, start: int, run: re.Pattern[str]) -> tuple[int, bool]:
    """Where the unquoted value at `start` (a run of `run`) ends, and whether it is long
    (`_VALUE_SCAN` characters or more, before any closing bracket of its own ends it)."""
    run_end = _run_end(run, text, start)
    head_end = min(run_end, start + _VALUE_SCAN + 1)
    if _BRACKETS.search(text, start, head_end) is None:
        cut = head_end - start  # (what `_balanced_len` of it gives, without a copy)
    else:
        cut = _balanced_len(text[start:head_end])
    if cut < _VALUE_SCAN or run_end - start <= _VALUE_SCAN:
        return start + cut, False  # what `_balanced_len` of the whole value gives
    return run_end, True


def _long_value(text: str, start: int, key: str) -> bool:
    """Whether a long value (`_value_end`) is a secret, judged on what its head proves: a
    command substitution or CI expression (`$(...`, `${{ ...`) or a working directory is
    none; anything else is. Judging the whole value, as a short one is, would read it again
    at each key inside it; a run of hundreds of characters without a space is no word or
    expression a reader needs, and cutting it whole loses nothing."""
    if text.startswith(("$(", "${{"), start) or key in ("PWD", "OLDPWD"):
        return False
    return not (key.lower() == "pwd" and text[start] in "/~")


def _assignment_kind(m: re.Match[str]) -> str:
    return _kind_for_key(m.group("key"))


# `--password hunter2` on a command line: no assignment sign at all.
_CLI_FLAG = re.compile(
    r"(?<![\w-])(?P<key>--(?:[\w-]*(?:password|passwd|secret|token|api-?key|access-?key)"
    r"|(?:[\w-]*-)?pass(?:phrase)?))"
    r"[ \t]+(?:(?P<qa>[\"'])(?P<qva>(?:\\.|[^\n\\])*?)(?P=qa)|(?P<q>[\"'])(?P<qv>[^\n]*?)(?P=q)"
    r"|(?P<v>[^\s\"'`-][^\s\"'`]*))",
    re.IGNORECASE,
)


def _cli_flag_span(m: re.Match[str]) -> tuple[int, int] | None:
    key = m.group("key")
    if not _holds_a_secret(key):
        return None
    if m.group("v") is None:
        return _quoted_span(m, key)
    start = m.start("v")
    end = start + _balanced_len(m.group("v"))
    return (start, end) if _is_value(m.string[start:end], key, quoted=False) else None


def _is_ident(c: str) -> bool:
    return c.isalnum() or c in "_.-"


def _keyword_starts(text: str, lowered: str) -> Iterable[int]:
    """The start of each name holding a keyword: where an assignment can begin. A walk back
    to the start of the name stops at the word's previous hit, whose start it shares (`key`
    * 21000 is one name, walked once)."""
    words = _START_WORDS_ASCII if lowered.isascii() else _START_WORDS
    return _word_starts(text, lowered, words, _is_ident)


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
    look-behind the match starts with: `\\b`, `(?<![\\w-])`) holds. Found by one regex: a
    start each costs a call, and `--` * n or `pw` * n held n starts that failed at once."""
    found = re.compile(before + "(?=" + "|".join(map(re.escape, words)) + ")")

    def starts(text: str, lowered: str) -> Iterator[int]:
        return (m.start() for m in found.finditer(lowered))

    return starts


# --- command lines ----------------------------------------------------------------------------

# A shell word: single-quoted (anything but `'`), double-quoted (backslash escapes), or bare
# up to whitespace, a quote or a shell operator. A bare one never starts with `-` (the next
# flag: `mongo -p --authenticationDatabase admin` prompts for the password).
_QUOTED_WORD = r"""'(?P<sq>[^'\n]*)'|"(?P<dq>(?:\\.|[^"\\\n])*)\""""
_SHELL_WORD = rf"""(?:{_QUOTED_WORD}|(?P<v>[^\s"'`|&;<>-][^\s"'`|&;<>]*))"""
_SHELL_WORD_GLUED = rf"""(?:{_QUOTED_WORD}|(?P<v>[^\s"'`|&;<>]+))"""
_SAME_COMMAND = r"[^\n|;&]*?[ \t]"


def _shell_span(m: re.Match[str]) -> tuple[int, int] | None:
    for group in ("sq", "dq"):
        if m.group(group) is not None:
            ok = _is_value(m.group(group), "password", quoted=True)
            return m.span(group) if ok else None
    start = m.start("v")
    end = start + _balanced_len(m.group("v"))
    value = m.string[start:end]
    return (start, end) if _is_value(value, "password", quoted=False, literal=True) else None


def _command(pattern: str, gate: tuple[str, ...], starts: tuple[str, ...]) -> _Detector:
    # Credentials on the command lines agents run most; detect-secrets has no plugin for
    # them. The command word gates and anchors the search; the flag must be in the same
    # command (no `|`, `;`, `&` or newline before it): a `_Scan` from the command word.
    head, same_command, flag = pattern.partition(_SAME_COMMAND)
    return _Detector(
        "password",
        re.compile(pattern),  # flags are case-sensitive: `mysql -P 3306` is a port
        gate,
        priority=3,
        refine=_shell_span,
        starts=_at(*starts, before=r"\b"),
        scan=_Scan(re.compile(head), _COMMAND_RUN, re.compile(r"[ \t]" + flag))
        if same_command
        else None,
    )


_COMMAND_RUN = re.compile(r"[^\n|;&]*")


_LOGIN_TOOLS = "docker|podman|nerdctl|buildah|skopeo|oras|registry|acr|az"
_COMMANDS: tuple[_Detector, ...] = (
    _command(rf"\bsshpass\b{_SAME_COMMAND}-p[ \t]*{_SHELL_WORD_GLUED}", ("sshpass",), ("sshpass",)),
    _command(
        rf"\bredis-cli\b{_SAME_COMMAND}(?:-a|--pass)[ \t]+{_SHELL_WORD}",
        ("redis-cli",),
        ("redis-cli",),
    ),
    # `docker login -u bot -p X registry` (podman, nerdctl, buildah, skopeo, oras, helm
    # registry, az acr and az login take the same `-p`).
    _command(
        rf"\b(?:{_LOGIN_TOOLS})[ \t]+login\b{_SAME_COMMAND}-p[ \t]+{_SHELL_WORD}",
        ("login" + _bounded(r"[^\n|;&]", r"[ \t]-p", backtrack=True),),
        tuple(_LOGIN_TOOLS.split("|")),
    ),
    _command(
        rf"\bmongo(?:sh|dump|restore|import|export)?\b{_SAME_COMMAND}-p[ \t]+{_SHELL_WORD}",
        ("mongo",),
        ("mongo",),
    ),
    _command(rf"\bsqlcmd\b{_SAME_COMMAND}-P[ \t]*{_SHELL_WORD_GLUED}", ("sqlcmd",), ("sqlcmd",)),
    _command(rf"\bldap[a-z]*\b{_SAME_COMMAND}-w[ \t]*{_SHELL_WORD_GLUED}", ("ldap",), ("ldap",)),
    _command(
        rf"\b(?:un)?zip\b{_SAME_COMMAND}-P[ \t]*{_SHELL_WORD_GLUED}", ("zip",), ("zip", "unzip")
    ),
    _command(rf"\b7za?\b{_SAME_COMMAND}-p{_SHELL_WORD_GLUED}", ("7z",), ("7z",)),
    _command(
        rf"\bmysql(?:dump|admin|sh)?\b{_SAME_COMMAND}-p{_SHELL_WORD_GLUED}", ("mysql",), ("mysql",)
    ),
    # openssl's `-pass pass:X`, `-passin pass:X`, `-passout pass:X`, `-k X`
    _command(
        rf"\bopenssl\b{_SAME_COMMAND}(?:-pass(?:in|out)?[ \t]+pass:|-k[ \t]+){_SHELL_WORD_GLUED}",
        ("openssl",),
        ("openssl",),
    ),
    # `htpasswd -b FILE USER PASS`, `rabbitmqctl add_user USER PASS`, `gh secret set X --body V`
    _command(
        # the flag's letters whole (`-[a-zA-Z]*b[a-zA-Z]*` tried each split of `-bbbb...`)
        rf"\bhtpasswd\b{_SAME_COMMAND}-(?=[a-zA-Z]*b)[a-zA-Z]*+(?:[ \t]+-[a-zA-Z]+)*"
        rf"[ \t]+\S+[ \t]+\S+[ \t]+{_SHELL_WORD_GLUED}",
        ("htpasswd",),
        ("htpasswd",),
    ),
    _command(
        rf"\brabbitmqctl\b{_SAME_COMMAND}(?:add_user|change_password)[ \t]+\S+[ \t]+"
        rf"{_SHELL_WORD_GLUED}",
        ("rabbitmqctl",),
        ("rabbitmqctl",),
    ),
    _command(
        rf"\bgh[ \t]+secret[ \t]+set\b{_SAME_COMMAND}(?:--body(?:[ \t]+|=)|-b[ \t]*)"
        rf"{_SHELL_WORD_GLUED}",
        ("secret" + _bounded(r"[ \t]", "set", least=1),),
        ("gh",),
    ),
    # A password piped into a command that reads it: `echo X | sudo -S ...`,
    # `echo X | docker login ... --password-stdin`, `echo X | passwd --stdin`, `| chpasswd`.
    _command(
        rf"\becho[ \t]+(?:-[ne][ \t]+)*{_SHELL_WORD_GLUED}[ \t]*\|[ \t]*"
        r"(?:sudo[ \t]+(?:-[a-zA-Z]+[ \t]+)*-[a-zA-Z]*S|[^\n|;&]*--password-stdin"
        r"|passwd[ \t]+--stdin|chpasswd)",
        ("echo" + _bounded(r"[^\n|]", r"\|"),),
        ("echo",),
    ),
    # `smbclient -U user%pass`
    _command(
        rf"\bsmbclient\b{_SAME_COMMAND}-U[ \t]*[^\s%'\"]+%{_SHELL_WORD_GLUED}",
        ("smbclient",),
        ("smbclient",),
    ),
)


# --- e-mail addresses -------------------------------------------------------------------------


_JSON_UNICODE_ESCAPE = re.compile(r"\\u[0-9a-fA-F]{4}")


def _email_starts(text: str, lowered: str) -> Iterator[int]:
    """The start of the local part before each `@`, JSON `\\uXXXX` escapes included; and
    right after the first such escape's backslash, where a search of every position would
    start one if that start cannot (`@x\\u0070ay@example.com`: the walk back reaches an `@`).
    Later ones find a part of what it finds."""
    at = text.find("@")
    while at >= 0:
        start, inner = at, None
        while start:
            if _JSON_UNICODE_ESCAPE.match(text, start - 1) is not None:
                inner = start
            elif not (text[start - 1].isalnum() or text[start - 1] in "_.%+-"):
                break
            start -= 1
        if start < at:
            yield start
        if inner is not None:
            yield inner
        at = text.find("@", at + 1)


def _in_url_authority(text: str, at: int) -> bool:
    """Whether the `@` at `at` ends the user part of a URL (`scheme://user:pass@host`)."""
    start = max(0, at - 512)
    scheme = text.rfind("://", start, at)
    return scheme >= 0 and not any(c.isspace() or c in "/?#" for c in text[scheme + 3 : at])


def _email_ok(m: re.Match[str]) -> bool:
    # git@github.com:org/repo is an SSH remote, not a person; icon@2x.png is an asset name;
    # the `host` of `https://user:p~ss@host` is no address (a password may end in `x~y`).
    return (
        m.group("local").lower() != "git"
        and not re.match(r"\d+x\.", m.group("domain"))
        and not _in_url_authority(m.string, m.start("domain") - 1)
    )


# --- prose ------------------------------------------------------------------------------------

# "my password is hunter2RT", "the password for prod was 'x y'", "changed the pw to Abc123!":
# no library plugin finds a password stated in a sentence. Unquoted, the value must look like
# a password (below), so "the password is required" and "passwords are hashed" stay.
_PROSE_KEY = r"(?<![\w.-])(?P<key>pass(?:word|wd|phrase|code)s?|pwd|pw)"
_PROSE = re.compile(
    rf"""
    {_PROSE_KEY}
    (?:[ \t]+(?:for|of|on|to|in|at|from)[ \t]+(?:(?:the|my|our|your|this|that)[ \t]+)?
       (?:[\w.@/:-]+[ \t]+){{0,2}}[\w.@/:-]+)?      # "for the staging db"
    [ \t]+(?:is|was|are|were|became|remains|(?:will|would|should)[ \t]+be|to)[ \t]*:?
    (?:[ \t]+(?:now|still|just|actually|currently|simply|literally|always|again
               |set[ \t]+to|changed[ \t]+to))*
    [ \t]+(?:(?P<q>["'`])(?P<qv>[^\n]*?)(?P=q)|(?P<v>[^\s"'`]+))
    """,
    re.IGNORECASE | re.VERBOSE,
)
# "password Hunter2RT", no verb: only a value that looks strongly like a password; quoted
# right after the word, as SQL writes it (`WITH PASSWORD 'x'`, `IDENTIFIED BY 'x'`), any.
_PROSE_BARE = re.compile(
    rf"""(?:{_PROSE_KEY}|(?<![\w.-])identified[ \t]+by)[ \t]+
    (?:(?P<q>['"])(?P<qv>(?:\\.|''|[^\n\\'"])*)(?P=q)|(?P<v>[^\s"'`]+))""",
    re.IGNORECASE | re.VERBOSE,
)
_PROSE_TRAILING = ".,;:!?)]}>"
# Words a password is said to be, or to be hashed or encoded with.
_PROSE_NOT_A_PASSWORD = frozenset(
    {"md5", "sha1", "sha256", "sha512", "sha-1", "sha-256", "sha-512", "base64", "base32",
     "utf8", "utf-8", "latin-1", "argon2", "argon2id", "argon2i", "pbkdf2", "bcrypt", "scrypt",
     "aes256", "aes-256", "hex", "ascii", "http", "https", "2fa", "mfa", "totp", "oauth2"}
)  # fmt: skip


def _plain_words(value: str) -> bool:
    """A word or hyphenated words in any alphabet, as prose writes them: lower case,
    capitalised or all capitals ("required", "Hashed", "base64-encoded", "erforderlich",
    "обязательно"); no inner capital, no symbol."""
    if "-" in value:
        return all(p.isalnum() and p == p.lower() for p in value.split("-"))
    return value.isalpha() and (value.islower() or value.isupper() or value.istitle())


def _prose_password(value: str, strong: bool) -> bool:
    """A word said to be a password that looks like one: a digit with letters, a symbol, or
    inner capitals; `strong` (no verb: "password Hunter2RT") needs letters, a digit and a
    capital or a symbol."""
    if len(value) < 4 or value.lower() in _PROSE_NOT_A_PASSWORD:
        return False
    if not _is_value(value, "password", quoted=False, literal=True):
        return False
    if value.isdigit():
        return len(value) >= 6 and not strong
    if _plain_words(value) and not (any(c.isdigit() for c in value) and "-" not in value):
        return False  # words: "required", "Hashed", "base64-encoded"
    if value[0] in "/~." or value.startswith(("http:", "https:")):
        return False  # a path or address
    digit = any(c.isdigit() for c in value)
    alpha = any(c.isalpha() for c in value)
    symbol = any(not c.isalnum() for c in value)
    inner_capital = any(c.isupper() for c in value[1:]) and any(c.islower() for c in value)
    if strong:
        return alpha and digit and (symbol or inner_capital)
    return (digit and alpha) or symbol or inner_capital


def _prose_span(
    m: re.Match[str], strong: bool = False, end: int | None = None
) -> tuple[int, int] | None:
    """`end`: where the value ends, if not where its group does (`_intl_prose_span`)."""
    if m.group("qv") is not None:
        return m.span("qv") if _is_value(m.group("qv"), "password", quoted=True) else None
    start = m.start("v")
    text = m.string
    if end is None:
        end = m.end("v")
    elif end - start > _VALUE_SCAN:  # long: judged on its head, cut whole
        return None if text.startswith(_NO_PASSWORD_HEADS, start) else (start, end)
    while end > start and text[end - 1] in _PROSE_TRAILING:
        end -= 1
    while start < end and text[start] in "([<":
        start += 1
    return (start, end) if _prose_password(text[start:end], strong) else None


# What the head of a long value (`_prose_span`) proves it no password: a path, an address, a
# command substitution or CI expression.
_NO_PASSWORD_HEADS = ("/", "~", ".", "http:", "https:", "$(", "${{")


def _prose_bare_span(m: re.Match[str]) -> tuple[int, int] | None:
    return _prose_span(m, strong=True)


# The same in other languages (no library plugin either): "das Passwort ist Hunter2RT",
# "le mot de passe est « x y »", "mi contraseña es ...", "a senha é ...", "het wachtwoord is
# ...", "lösenordet är ...", "passordet er ...", "adgangskoden er ...", "hasło to ...",
# "пароль от базы — ...", "пароль це ...", "şifre: ...", "数据库密码是...", "パスワードは...",
# "비밀번호는 ...". A word for password, a copula of its language (or a colon or a dash), the
# value; quoted also in the typographic quotes of those languages. The value must look like a
# password as above, so "das Passwort ist erforderlich", "le mot de passe est requis" and
# "пароль обязателен" stay; without a copula ("Passwort Hunter2RT") it must look strongly like
# one. `clave` (Spanish for key as much as for password) and `parola` (Italian for word) need
# that even when quoted, and never stand without a copula.
_SP = "[ \t\u00a0]"  # French sets a no-break space before its colon and inside « »
# The words, by language; German, Dutch and the Scandinavian languages also as the end of a
# compound ("Datenbankpasswort", "Root-Passwort", "adminwachtwoord", "databaslösenordet").
_COMPOUND_WORDS = (
    "passwort", "kennwort", "wachtwoord(?:en)?", "lösenord(?:et)?", "passord(?:et)?",
    "adgangskoden?", "kodeord(?:et)?",
)  # fmt: skip
_SIMPLE_WORDS = (
    rf"mot{_SP}+de{_SP}+passe", "contrase[ñn]as?", "claves?", "senhas?", "palavra-passe",
    "hasł(?:o|a|em)", "парол(?:ь|я|ем)", "şifre(?:si|m|miz|n|niz)?",
    "parola(?:sı|m|mız|n|nız)?",
)  # fmt: skip
_INTL_WORDS = rf"(?:[^\W\d_]+-?)??(?:{'|'.join(_COMPOUND_WORDS)})|{'|'.join(_SIMPLE_WORDS)}"
_CJK_WORDS = "|".join(_CJK_KEYWORDS)
# "for the staging db": a preposition, then up to four words.
_INTL_FOR = (
    r"für|von|vom|zum|zur|des|der|de|du|pour|del|da|do|para|voor|van|för|till|for|til"
    r"|dla|od|от|для|к|від|до"
)
_INTL_COPULA = (
    r"ist|war|lautet|lautete|wäre|bleibt"  # de
    r"|est|était|sera|reste"  # fr
    r"|es|era|será|sigue|é|fica|continua"  # es, pt
    r"|is|was|wordt|blijft"  # nl
    r"|är|var|blir|er|bliver"  # sv, no, da
    r"|to|jest|brzmi|był[oa]?"  # pl
    r"|это|был[оа]?|будет|це|був|було|буде|є"  # ru, uk
)
_INTL_ADVERB = (
    r"jetzt|nun|noch|immer|einfach|maintenant|toujours|encore|siendo|ahora|todavía|aún|agora"
    r"|ainda|sendo|nu|nog|fortfarande|fortsatt|stadig|teraz|nadal|wciąż|теперь|сейчас|всё"
    r"|ещё|тепер|зараз|досі"
)
# Quoted values: ASCII quotes, « », “ ”, „ “ (or ”), 「 」, 『 』. A value in quotes that
# open and close apart holds no opening quote of its kind: a scan from each opening quote
# then stops at the next one (which the next "Passwort: «" opens), not at the one closing
# quote after them all (read again from each). Blanks inside « » are trimmed greedily
# (a lazy value tried the blanks after it at each of its characters).
_INTL_QUOTED = rf"""(?P<q>["'`])(?P<qv>[^\n]*?)(?P=q)
    |«{_SP}*(?P<gv>(?:[^«»\n]*[^«»\n \t\u00a0])?){_SP}*»|“(?P<cv>[^“”\n]*)”
    |„(?P<dv>[^„“”\n]*)[“”]|「(?P<jv>[^「」\n]*)」|『(?P<kv>[^『』\n]*)』"""
_INTL_QUOTE_GROUPS = ("qv", "gv", "cv", "dv", "jv", "kv")
# An unquoted value ends at a space, a quote, CJK punctuation or a CJK character
# ("密码是Hunter2RT，请勿外传", "パスワードはHunter2RTです"), and at a JSON escape (`\n`, `\"`,
# `\u00fc`; an escaped backslash is part of it): such text is read decoded too (`_views`), and
# "Passwort f\u00fcr" is no password.
_INTL_VALUE_STEP = (
    r"(?:[^\s\\\"'`«»“”„「」『』\u3000-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af"
    r"\uff00-\uffef]|\\\\|\\(?![nrtu\"/\\]))"
)
# The regex stops where the value starts (`Passwort:Passwort:...` holds a key in each value,
# each running to the same end): its run is read once (`_run_end`), and a value longer than
# `_VALUE_SCAN` characters is judged on its head (`_prose_span`).
_INTL_VALUE = rf"(?P<v>(?={_INTL_VALUE_STEP}))"
_INTL_VALUE_RUN = re.compile(_INTL_VALUE_STEP + "*")
_PROSE_INTL = re.compile(
    rf"""
    (?<![\w.])(?P<key>{_INTL_WORDS})(?![\w-])
    (?:(?:(?:{_SP}+(?:{_INTL_FOR}){_SP}+|{_SP}+d['’])
          (?:[\w.@/:'’-]+{_SP}+){{0,3}}?[\w.@/:'’-]+)?
       (?P<cop>{_SP}*[:：]|{_SP}+(?:{_INTL_COPULA})(?={_SP}|[:：])(?:{_SP}*[:：](?={_SP}))?
              |{_SP}+[—–-](?={_SP}))
       (?:{_SP}+(?:{_INTL_ADVERB})(?={_SP}))*{_SP}*
     |{_SP}+)
    (?:{_INTL_QUOTED}|{_INTL_VALUE})
    """,
    re.IGNORECASE | re.VERBOSE,
)
# Chinese, Japanese and Korean write no space between the word, its copula or particle and
# the value; the word may end a compound ("数据库密码").
_PROSE_CJK = re.compile(
    rf"""
    (?P<key>{_CJK_WORDS})
    (?:(?P<cop>{_SP}*(?:就是|是|为|為|は|が|는|은|이|가)(?:{_SP}*[:：])?|{_SP}*[:：=])
     |(?={_SP}*[!-~]))
    {_SP}*(?:{_INTL_QUOTED}|{_INTL_VALUE})
    """,
    re.VERBOSE,
)
_WEAK_PROSE_KEY = re.compile(r"claves?|parola", re.IGNORECASE)


def _intl_prose_span(m: re.Match[str]) -> tuple[int, int] | None:
    bare = m.group("cop") is None  # "Passwort Hunter2RT": no copula, no colon
    weak = _WEAK_PROSE_KEY.fullmatch(m.group("key")) is not None
    if bare and weak:
        return None
    for group in _INTL_QUOTE_GROUPS:
        if (value := m.group(group)) is not None:
            if not _is_value(value, "password", quoted=True):
                return None
            if (bare or weak) and not _prose_password(value, strong=True):
                return None
            return m.span(group)
    end = _run_end(_INTL_VALUE_RUN, m.string, m.start("v"))
    if m.string.startswith("\\u", end):
        return None  # a word with an escaped letter: its decoded form is judged
    return _prose_span(m, strong=bare or weak, end=end)


# Each word, followed by what every match shows after it (a space, or a colon).
_MOT_DE_PASSE_GATE = "mot" + _bounded(_SP, "de" + _bounded(_SP, "passe", least=1), least=1)
_INTL_GATE = tuple(
    rf"{_MOT_DE_PASSE_GATE if w.startswith('mot') else w}[ \t\u00a0:：]"
    for w in (*_COMPOUND_WORDS, *_SIMPLE_WORDS)
)
_CJK_GATE = tuple(_CJK_WORDS.split("|"))
_INTL_STEMS = ("passwort", "kennwort", "wachtwoord", "lösenord", "passord", "adgangskode",
               "kodeord", "mot", "contrase", "clave", "senha", "palavra", "hasł", "парол",
               "şifre", "parola")  # fmt: skip


def _intl_starts(text: str, lowered: str) -> Iterable[int]:
    """The start of the word holding each stem (a compound's first letter)."""
    return _word_starts(text, lowered, _INTL_STEMS, _in_compound)


def _in_compound(c: str) -> bool:
    return c.isalpha() or c == "-"


# --- AWS secret access keys without a quote ---------------------------------------------------

_ENTROPY = Base64HighEntropyString().calculate_shannon_entropy
# Random 40-character base64 keys measure 4.27 to 5.2 bits per character; CamelCase paths and
# identifiers near 4.0-4.2; hex SHA-1s lack an upper or lower case.
_AWS_SECRET_MIN_ENTROPY = 4.2
_AWS_CONTEXT = re.compile(r"aws|secret|access[ _-]?key", re.IGNORECASE)


def _aws_secret_ok(m: re.Match[str]) -> bool:
    """detect-secrets' AWS plugin finds a 40-character secret key only quoted and within 20
    characters of `aws` and `key`; here an unquoted one is found too, when `aws`, `secret` or
    `access key` is within 80 characters on its line and it is random-looking."""
    token = m.group(0)
    if not _password_like(token) or _ENTROPY(token) < _AWS_SECRET_MIN_ENTROPY:
        return False
    text = m.string
    lo = max(0, m.start() - 80)
    lo = max(lo, text.rfind("\n", lo, m.start()) + 1)
    hi = text.find("\n", m.end(), m.end() + 80)
    hi = min(len(text), m.end() + 80) if hi < 0 else hi
    return bool(_AWS_CONTEXT.search(text, lo, m.start()) or _AWS_CONTEXT.search(text, m.end(), hi))


# --- other added detectors --------------------------------------------------------------------


def _mixed_token(m: re.Match[str]) -> bool:
    """Random keys mix upper case, lower case and digits; slugs (`sk-learn-...`) do not."""
    return _password_like(m.group(0))


def _auth_kind(m: re.Match[str]) -> str:
    scheme = (m.group("scheme") or "bearer").lower()
    return {"bearer": "bearer_token", "basic": "basic_auth"}.get(scheme, "auth_token")


def _url_password_ok(m: re.Match[str]) -> bool:
    return _is_value(m.group("v"), "password", quoted=True)


def _basic_credentials(m: re.Match[str]) -> bool:
    """Base64 of `user:password`, as Docker's config.json and Basic auth hold them."""
    try:
        decoded = base64.b64decode(m.group("v"), validate=True).decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        return False
    user, sep, password = decoded.partition(":")
    return bool(sep and user and password and decoded.isprintable())


_ENV_LINE = re.compile(r"^[ \t]*env", re.MULTILINE)


def _dockerfile_env_span(m: re.Match[str]) -> tuple[int, int] | None:
    if not _first_on_line(m.string, m.start()) or not _holds_a_secret(m.group("key")):
        return None
    start, end = m.span("v")
    return (
        (start, end)
        if _is_value(m.group("v"), m.group("key"), quoted=False, literal=True)
        else None
    )


def _xml_span(m: re.Match[str]) -> tuple[int, int] | None:
    key = m.group("key")
    if not _KEY_ONLY.fullmatch(key) or not _holds_a_secret(key):
        return None
    return m.span("v") if _is_value(m.group("v"), key, quoted=True) else None


# --- PostgreSQL's password file -------------------------------------------------------------

# `.pgpass` (PGPASSFILE, `pgpass.conf`) holds `hostname:port:database:username:password`; a
# field may be `*`, `\:` and `\\` are escapes, and libpq reads the password up to the next
# unescaped colon. No library plugin. Colon-separated words are everywhere in coding
# conversations: timestamps (`2026-01-01T10:00:00`), IPv6 and MAC addresses, `host:port`,
# log lines (`ERROR:root:module:func:message`), slices (`a[1:2:3]`), linter and compiler
# output (`app/db.py:12:5: E501 ...`, `main.c:3:1: error: ...`), `/etc/passwd`. So a line is
# read as a pgpass line only where all of this holds: it starts a line, a word or a quoted
# string; the first field is a host (a name with a letter, an IPv4 address, a socket
# directory, an escaped IPv6 address, or `*`), neither a source file (`db.py:12:...`) nor a
# log level (`WARNING:1234:...`); the second is a port or `*`; none of the first four fields
# is empty or holds a space (linter output's fourth field is ` E501 ...`), and they are not
# all short hex groups (MAC, IPv6). Then:
# - in a text that says `pgpass`, the password is the rest of the line (or of the quoted
#   string) where the entry starts one, spaces and colons included (better too much than a
#   part left); inside a sentence it ends at a space;
# - elsewhere the line must have exactly five fields, a port from 1 to 65535, a database
#   that is not a number (`file:line:col:`), and a password of one word that looks like a
#   password (the prose rule) unless the port is PostgreSQL's (5432, PgBouncer's 6432) or
#   `*`: `db.internal:5432:payments:app:secret` is cut, `localhost:8080:api:v1:health` stays.
_PG_FIELD = r"(?:\\[\\:]|[^\s:\\])+"
_PGPASS = re.compile(
    rf"""(?<![^\s"'`])(?P<host>{_PG_FIELD}):(?P<port>[0-9]{{1,5}}|\*):(?P<db>{_PG_FIELD})"""
    rf":(?P<user>{_PG_FIELD}):"
)
_PG_GATE_FIELD = r"(?:[^\s:\\]|\\.)"
_PGPASS_GATE = (
    r":(?:[0-9]{1,5}|\*):"
    + _bounded(_PG_GATE_FIELD, ":" + _bounded(_PG_GATE_FIELD, ":", least=1), least=1),
)
_PG_PORT_AHEAD = re.compile(r":(?=(?:[0-9]{1,5}|\*):)")
_PG_HOST = re.compile(
    r"""\*|/[\w.@/-]*|\d{1,3}(?:\.\d{1,3}){3}|(?:[0-9A-Fa-f]*\\:)+[0-9A-Fa-f]*
    |(?=[\w.-]*[^\W\d_])[\w-]+(?:\.[\w-]+)*""",
    re.VERBOSE,
)
_PG_HEX_GROUP = re.compile(r"[0-9A-Fa-f]{1,4}")
_PG_PORTS = frozenset({"*", "5432", "6432"})
_SOURCE_SUFFIXES = frozenset(
    {"py", "pyi", "js", "mjs", "cjs", "ts", "tsx", "jsx", "go", "rs", "java", "kt", "rb", "php",
     "c", "h", "cc", "cpp", "hpp", "cs", "swift", "scala", "sh", "md", "rst", "txt", "json",
     "yaml", "yml", "toml", "ini", "cfg", "sql", "log", "csv", "html", "css", "vue", "ex", "exs"}
)  # fmt: skip
_LOG_LEVELS = frozenset({"trace", "debug", "info", "notice", "warn", "warning", "error", "fatal",
                         "critical"})  # fmt: skip
_PGPASS_CONTEXT = re.compile("pgpass", re.IGNORECASE)


@functools.lru_cache(maxsize=16)
def _mentions_pgpass(text: str) -> bool:
    return _PGPASS_CONTEXT.search(text) is not None


def _pgpass_starts(text: str, lowered: str) -> Iterator[int]:
    """The start of the first field before each `:port:`."""
    for m in _PG_PORT_AHEAD.finditer(text):
        colon = start = m.start()
        while start and colon - start < 256:
            c = text[start - 1]
            if c.isspace() or c in "\"'`" or (c == ":" and not _escapes_next(text, start - 1)):
                break
            start -= 1
        if start < colon:
            yield start


def _pgpass_password_end(text: str, start: int, quote: str, spaces: bool, colons: bool) -> int:
    """Where the password field starting at `start` ends (-1: a sixth field follows).

    It ends at the end of the line, at whitespace unless `spaces`, at a colon unless `colons`
    (-1), and where a quote opened the line (`"db:5432:pay:app:pw"`) at the closing quote,
    backslash escapes read as escapes (`\\"` is part of it, `\\\\:` is pgpass's `\\:` written in
    a JSON or shell string, a JSON `\\n` ends it); where an escaped quote opened it (`\\"` in
    JSON text as written) or none did, at a backslash that is no pgpass escape (`\\:`, `\\\\`)."""
    i, n = start, len(text)
    while i < n:
        c = text[i]
        if c in "\n\r" or c == quote or (not spaces and c.isspace()):
            break
        if c == "\\":
            nxt = text[i + 1 : i + 2]
            if quote and text.startswith("\\\\:", i):
                i += 3
            elif (quote and nxt not in ("", "n", "r")) or (not quote and nxt in (":", "\\")):
                i += 2
            else:
                break
            continue
        if c == ":" and not colons:
            return -1
        i += 1
    end = min(i, n)
    while end > start and text[end - 1] in " \t":
        end -= 1
    return end


def _pgpass_span(m: re.Match[str]) -> tuple[int, int] | None:
    host, port, db, user = m.group("host", "port", "db", "user")
    if not _PG_HOST.fullmatch(host):
        return None
    if all(_PG_HEX_GROUP.fullmatch(f) for f in (host, port, db, user)):
        return None  # a MAC or IPv6 address
    if host.lower() in _LOG_LEVELS or host.rsplit(".", 1)[-1].lower() in _SOURCE_SUFFIXES:
        return None  # `WARNING:1234:...` logs, `db.py:12:...` points into a source file
    text = m.string
    quote = _quote_before(text, m.start())
    context = _mentions_pgpass(text)
    # With `pgpass` said, a line of its own (or quoted) runs to its end, spaces included; one
    # inside a sentence ends at a space.
    own_line = quote or _first_on_line(text, m.start())
    if quote and _escapes_next(text, m.start() - 1):
        quote = ""  # `\"db:...:pw\"` in JSON text as written ends at the backslash
    start = m.end()
    end = _pgpass_password_end(
        text, start, quote, spaces=context and bool(own_line), colons=context
    )
    if end <= start:
        return None
    value = text[start:end]
    if not context:
        if port != "*" and not 1 <= int(port) <= 65535:
            return None
        if db.isdigit():
            return None  # file:line:column:
        if port not in _PG_PORTS and not _prose_password(value, strong=False):
            return None
    if not _is_value(value, "password", quoted=bool(quote), literal=True):
        return None
    return start, end


def _quote_before(text: str, pos: int) -> str:
    return text[pos - 1] if pos and text[pos - 1] in "\"'`" else ""


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


_PRIVATE_KEY_GATE = ("private key", "putty-user-key-file")

# `<add key="DbPassword" value="x"/>`, `<input name="pw" value="x">`: the key, then (a
# `_Scan`) the first `value=` after it in the same tag.
_KEY_VALUE_HEAD = r"""(?<![\w-])(?:key|name)[ \t]*=[ \t]*(?P<q>["'])(?P<key>[^"'<>\n]*)(?P=q)"""
_KEY_VALUE_FLAG = r"""(?<![\w-])value[ \t]*=[ \t]*(?P<q2>["'])(?P<v>[^"'\n]*)(?P=q2)"""
_CURL_USER_FLAG = r"""[ \t](?:-u[ \t]*|--user[ \t=])
    (?:'[^\s:']*:(?P<sq>[^'\n]*)'|"[^\s:"]*:(?P<dq>(?:\\.|[^"\\\n])*)"
      |[^\s:"']+:(?P<v>[^\s"']+))"""

_ADDED: tuple[_Detector, ...] = (
    # A whole PEM block, not only its header line (all the library flags); a block with no END
    # (cut by a length cap) is cut to the end of the text.
    _Detector(
        "private_key",
        re.compile(
            r"-{4,5} ?BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)? ?-{4,5}[\s\S]*?"
            r"(?:-{4,5} ?END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)? ?-{4,5}|\Z)"
        ),
        _PRIVATE_KEY_GATE,
        skip_atoms=True,
    ),
    _Detector(
        "private_key",
        re.compile(r"PuTTY-User-Key-File-\d+:[\s\S]*?(?:Private-MAC:[ \t]*[0-9a-fA-F]+|\Z)"),
        _PRIVATE_KEY_GATE,
        skip_atoms=True,
    ),
    # Token families detect-secrets 1.5 lacks: fine-grained GitHub PATs, bare npm tokens,
    # project, service-account and Anthropic `sk-` keys (no legacy T3BlbkFJ marker), Stripe
    # test keys, Google API keys, Hugging Face tokens, DigitalOcean tokens (personal, OAuth,
    # refresh), Azure AD client secrets (the `Q~` of the current format).
    _Detector("github_token", re.compile(r"github_pat_[A-Za-z0-9_]{22,}"), ("github_pat_",)),
    # GitLab's library patterns end in `{20,50}(?!\w)`: a token glued to a word character or
    # longer than 50 (`turn_glpat-..._2` in an id) would pass.
    _Detector(
        "gitlab_token",
        re.compile(r"(?:gl(?:pat|dt|ft|soat|rt|cbt|imt|ptt|agent|oas)-|GR1348941)[\w-]{20,}"),
        _GITLAB_GATE,
    ),
    _Detector("npm_token", re.compile(r"npm_[A-Za-z0-9]{36,}"), ("npm_",)),
    _Detector(
        "anthropic_key", re.compile(r"sk-ant-(?<![A-Za-z0-9]sk-ant-)[A-Za-z0-9_-]{20,}"), ("sk-",)
    ),
    _Detector(
        "openai_key",
        re.compile(r"sk-(?<![A-Za-z0-9]sk-)[A-Za-z0-9_-]{20,}"),
        ("sk-",),
        priority=1,
        accept=_mixed_token,
        skip_rejected=True,
    ),
    _Detector("stripe_key", re.compile(r"[rs]k_test_[0-9a-zA-Z]{24,}"), ("k_test_",)),
    _Detector("gcp_api_key", re.compile(r"AIza[0-9A-Za-z_-]{35}"), ("aiza",), tail=_TOKEN_TAIL),
    _Detector(
        "huggingface_token",
        re.compile(r"hf_(?<![A-Za-z0-9]hf_)[A-Za-z0-9]{34,}"),
        ("hf_",),
        accept=_mixed_token,
        skip_rejected=True,
    ),
    _Detector(
        "digitalocean_token",
        re.compile(r"(?<![A-Za-z0-9])do[opr]_v1_[a-f0-9]{64}"),
        ("_v1_",),
        tail=_TOKEN_TAIL,
    ),
    _Detector(
        "azure_client_secret",
        re.compile(r"[A-Za-z0-9_~.]{3}\dQ~[A-Za-z0-9_~.-]{31,}"),
        ("q~",),
    ),
    # More vendor token families with a fixed prefix, none in detect-secrets 1.5 (formats as
    # gitleaks documents them): one regex, the group that matched names the kind.
    _Detector(
        "token",
        re.compile(
            r"(?P<shopify_token>shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32})"
            r"|(?P<atlassian_token>ATATT3[A-Za-z0-9_=-]{40,})"
            r"|(?P<databricks_token>(?<![A-Za-z0-9])dapi[a-f0-9]{32}(?:-\d)?)"
            r"|(?P<vault_token>(?<![A-Za-z0-9])hv[sb]\.[A-Za-z0-9_-]{24,})"
            r"|(?P<terraform_token>[A-Za-z0-9]{14}\.atlasv1\.[A-Za-z0-9_=-]{60,})"
            r"|(?P<linear_token>lin_(?:api|oauth)_[A-Za-z0-9]{40})"
            r"|(?P<postman_token>PMAK-[a-f0-9]{24}-[a-f0-9]{34})"
            r"|(?P<slack_token>xapp-\d-[A-Z0-9]+-\d+-[A-Za-z0-9]+)"
            r"|(?P<discord_webhook>https://(?:ptb\.|canary\.)?discord(?:app)?\.com/api/webhooks/"
            r"\d+/[\w-]{60,})"
            r"|(?P<mailgun_key>(?<![A-Za-z0-9])key-[0-9a-z]{32})"
        ),
        (
            *("shpat_", "shpca_", "shppa_", "shpss_", "atatt3", "dapi", r"hvs\.", r"hvb\."),
            *(r"\.atlasv1\.", "lin_api_", "lin_oauth_", "pmak-", "xapp-", "/api/webhooks/", "key-"),
        ),
        kind_of=lambda m: m.lastgroup or "token",
        tail=_TOKEN_TAIL,
    ),
    # Signed URLs: the signature is a bearer credential until it expires. Azure SAS `sig=`,
    # AWS SigV4 `X-Amz-Signature=`, Google `X-Goog-Signature=`, CloudFront `Signature=`; the
    # rest of the query (`sv=`, `se=`, `X-Amz-Date=`) stays readable. No library plugin.
    _Detector(
        "signature",
        re.compile(
            r"(?:(?<=[?&;])|(?<![\w.-]))(?:sig|signature|x-amz-signature|x-goog-signature)="
            r"(?P<v>[A-Za-z0-9%+/=_.~-]{16,})",
            re.IGNORECASE,
        ),
        ("sig=", "signature="),
        priority=2,
        groups=("v",),
    ),
    # Any `scheme://user:pass@`: BasicAuthDetector refuses passwords holding URL sub-delimiters
    # (`!$&*+;=`), which real connection strings carry unencoded. The user stays readable.
    _Detector(
        "password",
        re.compile(r"://(?<=[A-Za-z0-9+.-]://)[^\s:/?#@\[\]\"'<>]*:(?P<v>[^\s/?#\"'<>]+)@"),
        (_URL_USER_GATE,),
        priority=1,
        groups=("v",),
        accept=_url_password_ok,
    ),
    # Authorization headers (no library plugin); the scheme word stays readable.
    _Detector(
        "bearer_token",
        re.compile(
            r"""\bauthori[sz]ation\\?["']?[ \t]*[:=][ \t]*\\?["']?
            (?:(?P<scheme>bearer|basic|token|bot|digest|negotiate|apikey)[ \t]+
               (?P<v>[A-Za-z0-9\-._~+/]{8,}=*)
              |(?P<raw>[A-Za-z0-9\-._~+/]{20,}=*))""",
            re.IGNORECASE | re.VERBOSE,
        ),
        ("authori[sz]ation",),
        priority=2,
        groups=("v", "raw"),
        kind_of=_auth_kind,
        starts=_at("authorization", "authorisation", before=r"\b"),
    ),
    # `Bearer <token>` outside a header; it needs a digit so prose ("bearer authentication")
    # stays.
    _Detector(
        "bearer_token",
        re.compile(
            r"\bbearer[ \t]+(?P<v>(?=[A-Za-z\-._~+/]*\d)[A-Za-z0-9\-._~+/]{16,}=*)", re.IGNORECASE
        ),
        ("bearer",),
        priority=2,
        groups=("v",),
        starts=_at("bearer", before=r"\b"),
    ),
    _Detector(
        "secret",
        _ASSIGNMENT,
        _ASSIGNMENT_GATE,
        priority=3,
        refine=_assignment_span,
        kind_of=_assignment_kind,
        starts=_keyword_starts,
        precheck=re.compile(r"""[\w.-]+(?:\\*["'\]]){0,2}[ \t]*[:=!]"""),
    ),
    _Detector(
        "secret",
        _CLI_FLAG,
        _FLAG_GATE,
        priority=3,
        refine=_cli_flag_span,
        kind_of=_assignment_kind,
        starts=_at("--", before=r"(?<![\w-])"),
    ),
    _Detector(
        "password",
        _PROSE,
        _PROSE_GATE,
        priority=4,
        refine=_prose_span,
        starts=_at("pass", "pw", before=r"(?<![\w.-])"),
    ),
    _Detector(
        "password",
        _PROSE_BARE,
        (*_PROSE_GATE, _IDENTIFIED_BY_GATE),
        priority=4,
        refine=_prose_bare_span,
        starts=_at("pass", "pw", "identified", before=r"(?<![\w.-])"),
    ),
    _Detector(
        "password",
        _PROSE_INTL,
        _INTL_GATE,
        priority=4,
        refine=_intl_prose_span,
        starts=_intl_starts,
    ),
    _Detector(
        "password",
        _PROSE_CJK,
        _CJK_GATE,
        priority=4,
        refine=_intl_prose_span,
        starts=_at(*_CJK_GATE),
    ),
    _Detector(
        "aws_secret_key",
        re.compile(r"(?<![A-Za-z0-9/+=])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])"),
        ("aws", "secret", "access"),
        priority=2,
        accept=_aws_secret_ok,
    ),
    # `.netrc`: `machine h login u password p`, on one line or several.
    _Detector(
        "password",
        re.compile(rf"\blogin[ \t]+\S+[ \t]*\n?[ \t]*password[ \t]+{_SHELL_WORD_GLUED}"),
        (r"password[ \t]",),
        priority=3,
        refine=_shell_span,
        starts=_at("login", before=r"\b"),
    ),
    # Docker's config.json: `"auth": "<base64 of user:password>"` (no library plugin).
    _Detector(
        "basic_auth",
        re.compile(r"""(?<=["'])auth\\?["'][ \t]*:[ \t]*\\?["'](?P<v>[A-Za-z0-9+/]{8,}={0,2})"""),
        (r"""auth\\?["']""" + _bounded(r"[ \t]", ":"),),
        priority=2,
        groups=("v",),
        accept=_basic_credentials,
        starts=_at("auth", before=r"(?<=[\"'])"),
    ),
    # Dockerfile's `ENV KEY value` (no `=`): the value runs to the end of the line, less its
    # trailing blanks (greedy, then back to the last other character: a lazy value tried the
    # blanks after each of its characters). Only an `ENV` that starts its line is tried.
    _Detector(
        "secret",
        re.compile(
            rf"(?<![\w.-])ENV[ \t]+(?P<key>{_KEY})[ \t]+(?P<v>[^\s=](?:[^\n]*[^ \t\n])?)[ \t]*$",
            re.MULTILINE | re.IGNORECASE,
        ),
        (
            "env"
            + _bounded(
                r"[ \t]", _bounded(r"[\w.-]", f"(?:{_KEYWORDS_RE})", backtrack=True), least=1
            ),
        ),
        priority=3,
        refine=_dockerfile_env_span,
        kind_of=_assignment_kind,
        starts=lambda text, lowered: (m.end() - 3 for m in _ENV_LINE.finditer(lowered)),
    ),
    # XML: `<password>x</password>`, `<add key="DbPassword" value="x"/>`,
    # `<input name="pw" value="x">`.
    _Detector(
        "secret",
        # (attributes end at the next `<` too: a scan from each `<` stops where the next
        # one begins, not at the one `>` after them all)
        re.compile(rf"<(?P<key>{_KEY})(?:[ \t][^<>]*)?>(?P<v>[^<\n]+)</(?P=key)>", re.IGNORECASE),
        ("<" + _bounded(r"[\w.-]", f"(?:{_KEYWORDS_RE})", backtrack=True),),
        priority=3,
        refine=_xml_span,
        kind_of=_assignment_kind,
        starts=_at("<"),
    ),
    _Detector(
        "secret",
        re.compile(
            _KEY_VALUE_HEAD + r"[^<>\n]*?" + _KEY_VALUE_FLAG,
            re.IGNORECASE,
        ),
        ("value" + _bounded(r"[ \t]", "="),),
        priority=3,
        refine=_xml_span,
        kind_of=_assignment_kind,
        starts=_at("key", "name", before=r"(?<![\w-])"),
        precheck=re.compile(r"""(?:key|name)[ \t]*=[ \t]*["']""", re.IGNORECASE),
        scan=_Scan(
            re.compile(_KEY_VALUE_HEAD, re.IGNORECASE),
            re.compile(r"[^<>\n]*"),
            re.compile(_KEY_VALUE_FLAG, re.IGNORECASE),
        ),
    ),
    # `curl -u user:pass` (quoted or not).
    _Detector(
        "password",
        re.compile(r"\bcurl\b[^\n|;]*?" + _CURL_USER_FLAG, re.VERBOSE),
        ("curl",),
        priority=3,
        refine=_shell_span,
        starts=_at("curl", before=r"\b"),
        scan=_Scan(
            re.compile(r"\bcurl\b"),
            re.compile(r"[^\n|;]*"),
            re.compile(_CURL_USER_FLAG, re.VERBOSE),
        ),
    ),
    *_COMMANDS,
    _Detector(
        "password", _PGPASS, _PGPASS_GATE, priority=3, refine=_pgpass_span, starts=_pgpass_starts
    ),
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
    # E-mail addresses (personal data; no library plugin). The domain needs an alphabetic TLD,
    # so `deploy@10.0.0.5`, `root@bastion`, `react@18.2.0` and `image@sha256:...` stay.
    _Detector(
        "email",
        re.compile(
            r"(?:(?<=mailto:)|(?<![\w.%+\-:/@]))(?P<local>(?:[\w.%+\-]|\\u[0-9a-fA-F]{4})+)@"
            r"(?P<domain>[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
            r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*\.[A-Za-z]{2,})(?![\w-])"
        ),
        ("@" + _bounded("[a-z0-9-]", r"\.", least=1),),
        priority=5,
        accept=_email_ok,
        starts=_email_starts,
    ),
)

_DETECTORS: tuple[_Detector, ...] = (*_library_detectors(), *_ADDED)


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


def _prefilter(lowered: str) -> re.Match[str] | None:
    return (_PREFILTER_ASCII if lowered.isascii() else _PREFILTER).search(lowered)


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


# --- JSON-escaped text ------------------------------------------------------------------------

_JSON_ESCAPE = re.compile(r"""\\(["\\/bfnrt]|u[0-9a-fA-F]{4})""")
_SIMPLE_ESCAPES = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_ESCAPE_LEVELS = 3


def _has_escapes(text: str) -> bool:
    # `\t` or `\\:` alone: a cookies.txt line in a JSON string shows its tabs only decoded, a
    # pgpass line its escaped colons
    return "\\" in text and any(e in text for e in ('\\"', "\\/", "\\u", "\\n", "\\t", "\\\\:"))


def _decoded(text: str) -> tuple[str, list[int], list[int]] | None:
    """The text with its JSON escapes decoded, and for each character of it the start and end
    of what it was written as; None where there is no escape to decode."""
    out: list[str] = []
    starts: list[int] = []
    ends: list[int] = []
    pos = 0
    for m in _JSON_ESCAPE.finditer(text):
        for i in range(pos, m.start()):
            out.append(text[i])
            starts.append(i)
            ends.append(i + 1)
        esc = m.group(1)
        out.append(chr(int(esc[1:], 16)) if esc[0] == "u" else _SIMPLE_ESCAPES.get(esc, esc))
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


def _views(text: str) -> Iterator[_View]:
    """Each decoded level of a JSON-escaped text, with offsets into the text as written."""
    starts = list(range(len(text)))
    ends = list(range(1, len(text) + 1))
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


_QUOTE = re.compile('"')


# --- finding and cutting spans ----------------------------------------------------------------

_Span = tuple[int, int, int, str]  # start, end, priority, kind


def _open_detectors(lowered: str, first: int = 0) -> list[_Detector]:
    """The detectors the gates of this lowercased text open; no gate starts before `first`
    (where the prefilter found the first, so the text is not scanned twice)."""
    opened: set[int] = set()
    for pattern, detectors in _GATES_ANYWHERE:
        if pattern.search(lowered):
            opened |= detectors
    ascii = lowered.isascii()
    gate_search = _GATE_SEARCH_ASCII if ascii else _GATE_SEARCH
    # Gates are tried where the search finds one may start; a gate whose detectors are all open
    # already is not tried again, nor a first character whose gates' detectors all are. After
    # `_IDLE_GATE_HITS` places that opened nothing new (`--` * n: its gate at every place), the
    # search goes on for the gates that still open something, and finds only those.
    done: set[str] = set()
    idle = 0
    pos = first
    while m := gate_search.search(lowered, pos):
        pos = m.start()
        c = lowered[pos]
        before = len(opened)
        if c not in done:
            for literal, rests in _GATES_BY_FIRST[c].items():
                if lowered.startswith(literal, pos):
                    after = pos + len(literal)
                    for rest, detectors in rests:
                        if not detectors <= opened and (rest is None or rest.match(lowered, after)):
                            opened |= detectors
            if _OPENS_BY_FIRST[c] <= opened:
                done.add(c)
        idle = 0 if len(opened) > before else idle + 1
        if idle >= _IDLE_GATE_HITS:
            closed = frozenset(g for g in _GATES if not _DETECTORS_BY_GATE[g] <= opened)
            gate_search, idle = _gate_search_for(closed, ascii), 0
        pos += 1
    return [_DETECTORS[i] for i in sorted(opened)]


_IDLE_GATE_HITS = 256


@functools.lru_cache(maxsize=32)
def _gate_search_for(gates: frozenset[str], ascii: bool) -> re.Pattern[str]:
    """The gate search for these gates (those starting with another character left out of an
    ASCII text's); a search that finds nothing where none is left."""
    chosen = sorted(g for g in gates if not ascii or _ascii_start(g))
    return re.compile(_prefix_tree(chosen) if chosen else "(?!)")


def _spans(text: str, lowered: str, first: int = 0) -> list[_Span]:
    atoms = _atoms(text)
    found: list[_Span] = []
    for d in _open_detectors(lowered, first):
        found.extend(d.find(text, lowered, atoms))
    return found


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


def _all_spans(text: str, lowered: str, first: int | None) -> list[tuple[int, int, str]]:
    """Merged spans of the text and its decoded views; `first`: where the prefilter found the
    first gate in the text as written (None: nowhere, so only a view can hold a secret)."""
    views = list(_views(text)) if _has_escapes(text) else []
    if first is None and not any(_prefilter(_lower(v.text)) for v in views):
        return []
    found = _spans(text, lowered, len(lowered) if first is None else first)
    for view in views:
        for s, e, priority, kind in _spans(view.text, _lower(view.text)):
            if raw := view.raw_span(s, e):
                found.append((*raw, priority, kind))
    return _merge(found)


def _lower(text: str) -> str:
    """The text lowercased character for character. `str.lower` turns `İ` (U+0130, the only
    such character) into two, and anchored detectors look up in the lowered text where to
    start in the text as written: with another length they fell back to a search of every
    position (quadratic where a start reads a run). `İ` becomes `i`, as the regex engine's
    case-insensitive match reads it."""
    lowered = text.lower()
    return lowered if len(lowered) == len(text) else text.replace("\u0130", "i").lower()


def _cut(text: str) -> tuple[str, int]:
    lowered = _lower(text)
    hit = (_PREFILTER_ASCII if lowered.isascii() else _PREFILTER).search(lowered)
    if hit is None and "\\" not in text:  # the common case: clean, nothing escaped
        return text, 0
    spans = _all_spans(text, lowered, None if hit is None else hit.start())
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


def _check_dtype(s: pl.Series) -> None:
    import polars as pl

    if s.dtype not in (pl.String, pl.Null):
        raise TypeError(f"redaction needs a String column, got {s.dtype} for {s.name!r}")


def _candidates(s: pl.Series) -> list[str]:
    """Distinct non-null values the gates cannot prove clean."""
    unique = s.drop_nulls().unique()
    return unique.filter(unique.str.contains(PREFILTER_PATTERN)).to_list()


def _dirty(s: pl.Series) -> dict[str, tuple[str, int]]:
    """Each distinct value holding a secret: its redacted form and how many secrets it held."""
    import polars as pl

    if s.dtype == pl.Null:
        return {}
    out: dict[str, tuple[str, int]] = {}
    for value in _candidates(s):
        redacted, n = _cut(value)
        if n:
            out[value] = (redacted, n)
    return out


def redact_series(s: pl.Series) -> pl.Series:
    """`redact` over a String column, run once per distinct candidate value."""
    _check_dtype(s)
    dirty = _dirty(s)
    return s.replace({v: r for v, (r, _) in dirty.items()}) if dirty else s


def redact_series_with_count(s: pl.Series) -> tuple[pl.Series, pl.Series]:
    """`redact_series` and an Int32 column of the secrets removed per row (0 for nulls)."""
    import polars as pl

    _check_dtype(s)
    dirty = _dirty(s)
    if not dirty:
        return s, pl.repeat(0, len(s), dtype=pl.Int32, eager=True).alias(s.name)
    counts = s.replace_strict(
        list(dirty), [n for _, n in dirty.values()], default=0, return_dtype=pl.Int32
    ).fill_null(0)
    return s.replace({v: r for v, (r, _) in dirty.items()}), counts


def secret_mask(s: pl.Series) -> pl.Series:
    """True where a value holds a secret (null: False). A contract check's fast path."""
    import polars as pl

    _check_dtype(s)
    dirty = _dirty(s)
    if not dirty:
        return pl.repeat(False, len(s), dtype=pl.Boolean, eager=True).alias(s.name)
    return s.is_in(list(dirty)).fill_null(False)


# --- JSON -------------------------------------------------------------------------------------


def _secret_key_kind(key: str) -> str | None:
    return _kind_for_key(key) if _KEY_ONLY.fullmatch(key) and _holds_a_secret(key) else None


def _under_secret_key(value: Any, kind: str, key: str) -> Any:
    """A scalar stored under a secret-named key is a secret whatever it looks like."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, str | int | float):
        if _is_value(str(value), key, quoted=isinstance(value, str)):
            return PLACEHOLDER.format(kind=kind)
        return redact(value) if isinstance(value, str) else value
    return _walk(value, (kind, key))


# Parsed, a cookie loses the header that marks it in text: `{"Cookie": "sid=..."}` (a headers
# mapping), `{"name": "Cookie", "value": "sid=..."}` (a HAR header), and a cookie object
# (HAR's `cookies`, a browser tool's `add_cookies`): a name, a value and what only cookies
# have (`domain`, `path`, `expires`, `httpOnly`, `secure`, `sameSite`).
_COOKIE_HEADERS = {"cookie": "Cookie: ", "set-cookie": "Set-Cookie: "}
_COOKIE_OBJECT_KEYS = frozenset({"domain", "path", "expires", "httponly", "secure", "samesite"})


def _cookie_header_of(mapping: Mapping[Any, Any], key: str) -> str | None:
    """The header whose value the string under `key` is, if a cookie header's."""
    name = mapping.get("name") if key == "value" else key
    return _COOKIE_HEADERS.get(name.lower()) if isinstance(name, str) else None


def _is_cookie_object(mapping: Mapping[Any, Any]) -> bool:
    return (
        isinstance(mapping.get("name"), str)
        and isinstance(mapping.get("value"), str)
        and any(isinstance(k, str) and k.lower() in _COOKIE_OBJECT_KEYS for k in mapping)
    )


def _cookie_value(value: str, header: str | None) -> str:
    if header is None:  # a cookie object's value: a value, whatever it looks like
        ok = _is_value(value, "cookie", quoted=True) and not PLACEHOLDER_PATTERN.search(value)
        return PLACEHOLDER.format(kind="cookie") if ok else redact(value) or ""
    out = redact(header + value) or ""
    return out[len(header) :] if out.startswith(header) else redact(value) or ""


def _walk(value: Any, secret: tuple[str, str] | None) -> Any:
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, Mapping):
        out: dict[Any, Any] = {}
        cookie_object = secret is None and _is_cookie_object(value)
        for k, v in value.items():
            key = redact(k) if isinstance(k, str) else k
            while key in out:  # two keys redacted alike: both values stay
                key = f"{key}'"
            under = secret
            if under is None and isinstance(k, str) and (kind := _secret_key_kind(k)):
                under = (kind, k)
            if under is None and isinstance(k, str) and isinstance(v, str):
                if header := _cookie_header_of(value, k):
                    out[key] = _cookie_value(v, header)
                    continue
                if cookie_object and k == "value":
                    out[key] = _cookie_value(v, None)
                    continue
            out[key] = _walk(v, None) if under is None else _under_secret_key(v, *under)
        return out
    if isinstance(value, list | tuple | set | frozenset):
        return [_walk(v, None) if secret is None else _under_secret_key(v, *secret) for v in value]
    return value


def redact_json(value: Any) -> Any:
    """Every string of a JSON-like value redacted (keys too); dicts keep their keys and order,
    sequences their order (tuples and sets come back as lists).

    A scalar under a secret-named key (`{"password": "hunter2"}`) is replaced as a whole:
    alone, the value carries nothing a text detector could recognise. So are cookie values a
    parsed header holds (`{"Cookie": "sid=..."}`, HAR's `{"name": "Cookie", "value": ...}`,
    a cookie object `{"name": "sid", "value": ..., "domain": ...}`); names stay.
    """
    return _walk(value, None)
