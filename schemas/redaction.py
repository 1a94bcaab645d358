"""Redaction: secrets and e-mail addresses leave a text before it is stored, logged or embedded.

Each secret span is replaced by a typed placeholder, ``[REDACTED:<kind>]`` with ``kind`` in
``[a-z0-9_]+`` (``password``, ``aws_key``, ``email`` ...), and the text around it is kept:
``password=[REDACTED:password]``, ``postgres://app:[REDACTED:password]@db:5432/pay``.
Placeholders never match a detector, so ``redact`` is idempotent and ``contains_secret`` is
False on anything ``redact`` returned.

Detection reuses detect-secrets: the ``denylist`` regexes of its token plugins (cloud, VCS,
chat, payment and registry tokens, JWTs, basic-auth URLs, private-key headers) and the keyword
list of its KeywordDetector. Patterns are added here only where the library finds a line but
not the span to cut, or has no plugin; each says why.

Deliberately not detected: detect-secrets' entropy plugins (they flag commit SHAs, content
hashes and base64 blobs, common and legitimate in coding conversations), its IP-address plugin
(not a secret) and its vendor plugins that need context words (Artifactory, IBM, SoftLayer,
Cloudant; assignments such as ``ibm_api_key = ...`` are still caught by keyword). Passwords
stated in prose without assignment syntax ("the password is hunter2") are not found.

Speed: everything compiles once at import. Each detector has a gate, a few lowercase
substrings or regexes that every match implies; a text none of the gates opens is clean
without running a detector. ``redact_series`` runs the same gates in polars (Rust) over the
unique values of a column and sends only the candidates through the detectors.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import polars as pl
from detect_secrets.filters.heuristic import is_templated_secret
from detect_secrets.plugins import keyword
from detect_secrets.plugins.aws import AWSKeyDetector
from detect_secrets.plugins.azure_storage_key import AzureStorageKeyDetector
from detect_secrets.plugins.base import RegexBasedDetector
from detect_secrets.plugins.basic_auth import BasicAuthDetector
from detect_secrets.plugins.discord import DiscordBotTokenDetector
from detect_secrets.plugins.github_token import GitHubTokenDetector
from detect_secrets.plugins.gitlab_token import GitLabTokenDetector
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

__all__ = [
    "PLACEHOLDER",
    "PREFILTER_PATTERN",
    "contains_secret",
    "redact",
    "redact_json",
    "redact_series",
    "redact_series_with_count",
    "redact_with_count",
    "secret_mask",
]

PLACEHOLDER = "[REDACTED:{kind}]"
_PLACEHOLDER_START = "[REDACTED"

# Characters a token goes on with: library patterns fix a length (``[A-Za-z0-9]{24}``) where
# real tokens have grown longer; the rest of the token is cut too, never left behind.
_TOKEN_TAIL = re.compile(r"[A-Za-z0-9_-]*")
_JWT_TAIL = re.compile(r"[A-Za-z0-9_\-.+/=]*")
_REGEX_META = frozenset("\\[](){}.*+?|^$")

_Starts = Callable[[str, str], Iterable[int]]


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
    kind_of: Callable[[re.Match[str]], str] | None = None
    keep_prefix: str = ""  # a literal label at the start of the match that stays readable
    # Where a pattern starts with a character class or a look-behind, scanning every position
    # is slow; `starts` lists the few positions worth a `match` instead.
    starts: _Starts | None = None

    def matches(self, text: str, lowered: str) -> Iterator[re.Match[str]]:
        if self.starts is None or len(lowered) != len(text):
            return self.pattern.finditer(text)
        return self._anchored(text, lowered, self.starts)

    def _anchored(self, text: str, lowered: str, starts: _Starts) -> Iterator[re.Match[str]]:
        end = -1
        for pos in sorted(set(starts(text, lowered))):
            if pos >= end and (m := self.pattern.match(text, pos)):
                end = m.end()
                yield m


# --- detect-secrets' token plugins ------------------------------------------------------------


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
    _Plugin(BasicAuthDetector, "password", True, None, ("://",), "de1d18ad6f14"),
    _Plugin(DiscordBotTokenDetector, "discord_token", False, _TOKEN_TAIL,
            (r"\.[a-z0-9_-]{6}\.",), "fe064d6f9d32"),
    # group 1 of the GitHub and GitLab patterns is the prefix only: the token is the match
    _Plugin(GitHubTokenDetector, "github_token", False, _TOKEN_TAIL,
            ("gh[opusr]_",), "5deb36728575"),
    _Plugin(GitLabTokenDetector, "gitlab_token", False, _TOKEN_TAIL,
            ("gl[a-z]+-", "gr1348941"), "088caa7db6e3"),
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


def _library_detectors() -> list[_Detector]:
    out: list[_Detector] = []
    for spec in _LIBRARY:
        reviewed = fingerprint(spec.plugin) == spec.reviewed
        for pattern in spec.plugin.denylist:  # type: ignore[attr-defined]
            group = 1 if spec.in_group and pattern.groups else 0
            out.append(
                _Detector(
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
            )
    return out


# --- keyword assignments ----------------------------------------------------------------------

# detect-secrets' KeywordDetector finds the line of `password = ...` but its unquoted value
# runs to the end of the line; here the value stops at the first delimiter, so
# `PGPASSWORD=x psql -h db` keeps its command. Its keyword list is reused as is; `token` is
# added (GITHUB_TOKEN, access_token) only as the end of a name, so that max_tokens, token_type
# and tokenizer stay.
_KW = "|".join(k.replace("_?", "[_.-]?") for k in keyword.DENYLIST)
_KEY = rf"(?:[\w.-]*?(?:{_KW})[\w.-]*|[\w.-]*token)(?![\w.-])"
_KEY_ONLY = re.compile(_KEY, re.IGNORECASE)
# Substrings every keyword of the list contains (a unit test checks each keyword against them).
_KEYWORD_GATE = ("key", "pass", "pwd", "secret", "contrase", "token")
# Python annotations: `password: str = "..."` assigns after the type.
_ANNOTATION = r"str|bytes|secretstr|secretbytes|any|optional\[\w+\]|\w+[ \t]*\|[ \t]*none"
_ASSIGNMENT = re.compile(
    rf"""
    (?<![\w.-])(?P<key>{_KEY})
    (?:\\*["'\]]){{0,2}}                      # closing quote of "password" or config['pwd']
    (?:[ \t]*:[ \t]*(?:{_ANNOTATION})(?=[ \t]*=[^=]))?
    [ \t]*(?::=|=>|===?|!==?|=|:)[ \t]*
    (?:(?P<q>\\*["'`])(?P<qv>[^\n]*?)(?P=q)
      |(?P<v>(?:[^\s"'`,;&)}}\]<>]|&(?![\w.-]+=))+))  # `&` ends it before a next `name=`
    """,
    re.IGNORECASE | re.VERBOSE,
)
# `--password hunter2` on a command line: no assignment sign at all.
_CLI_FLAG = re.compile(
    r"(?<![\w-])(?P<key>--[\w-]*(?:password|passwd|secret|token|api-?key))"
    r"[ \t]+(?:(?P<q>[\"'])(?P<qv>[^\n]*?)(?P=q)|(?P<v>[^\s\"'`-][^\s\"'`]*))",
    re.IGNORECASE,
)

# Unquoted words that stand where a value would in code: literals, types, expression keywords.
_NOT_A_VALUE = frozenset(
    {"null", "none", "nil", "true", "false", "undefined", "str", "string", "bytes", "int",
     "bool", "boolean", "float", "number", "object", "dict", "list", "any", "secretstr",
     "secretbytes", "optional", "required", "empty", "redacted", "await", "new", "yield",
     "async", "function", "lambda", "typeof"}
)  # fmt: skip
_MASK_CHARS = frozenset("*xX.•#?_-")
_ATTRIBUTE_CHAIN = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+")
_SHELL_REF = re.compile(r"\$\{?\w+\}?|\$\(.*\)|%\(\w+\)s|%s|\{\{.*\}\}")


def _kind_for_key(key: str) -> str:
    low = key.lower()
    if "pass" in low or "pwd" in low or "contrase" in low:
        return "password"
    if low.endswith("token"):
        return "token"
    return "api_key" if "api" in low else "secret"


def _is_value(value: str, key: str, quoted: bool) -> bool:
    """False for what stands where a secret would but is none: references, masks, types."""
    if len(value) < 2 or value.startswith(_PLACEHOLDER_START) or set(value) <= _MASK_CHARS:
        return False
    if is_templated_secret(value) or _SHELL_REF.fullmatch(value):
        return False
    if key.lower().endswith("token") and (len(value) < 8 or value.isdigit()):
        return False  # max_token: 512, next_token: "2"
    if quoted:
        return True
    if key in ("PWD", "OLDPWD"):  # the shell's working directory
        return False
    return not (
        value.lower() in _NOT_A_VALUE
        or "(" in value
        or "[" in value
        or _ATTRIBUTE_CHAIN.fullmatch(value) is not None  # settings.DB_PASSWORD, self.password
    )


def _assignment_ok(m: re.Match[str]) -> bool:
    quoted = m.group("qv") is not None
    return _is_value(m.group("qv" if quoted else "v"), m.group("key"), quoted)


def _assignment_kind(m: re.Match[str]) -> str:
    return _kind_for_key(m.group("key"))


def _is_ident(c: str) -> bool:
    return c.isalnum() or c in "_.-"


def _keyword_starts(text: str, lowered: str) -> Iterator[int]:
    """The start of each name holding a keyword: where an assignment can begin."""
    for word in _KEYWORD_GATE:
        hit = lowered.find(word)
        while hit >= 0:
            start = hit
            while start and _is_ident(text[start - 1]):
                start -= 1
            yield start
            hit = lowered.find(word, hit + 1)


def _at(*words: str) -> _Starts:
    """Starts where a match begins with one of these lowercase words."""

    def starts(text: str, lowered: str) -> Iterator[int]:
        for word in words:
            hit = lowered.find(word)
            while hit >= 0:
                yield hit
                hit = lowered.find(word, hit + 1)

    return starts


# --- e-mail addresses -------------------------------------------------------------------------


_JSON_UNICODE_ESCAPE = re.compile(r"\\u[0-9a-fA-F]{4}")


def _email_starts(text: str, lowered: str) -> Iterator[int]:
    """The start of the local part before each `@`, JSON `\\uXXXX` escapes included."""
    at = text.find("@")
    while at >= 0:
        start = at
        while start and (
            text[start - 1].isalnum()
            or text[start - 1] in "_.%+-"
            or _JSON_UNICODE_ESCAPE.match(text, start - 1) is not None
        ):
            start -= 1
        if start < at:
            yield start
        at = text.find("@", at + 1)


def _email_ok(m: re.Match[str]) -> bool:
    # git@github.com:org/repo is an SSH remote, not a person; icon@2x.png is an asset name.
    return m.group("local").lower() != "git" and not re.match(r"\d+x\.", m.group("domain"))


# --- other added detectors --------------------------------------------------------------------


def _mixed_token(m: re.Match[str]) -> bool:
    """Random keys mix upper case, lower case and digits; slugs (`sk-learn-...`) do not."""
    body = m.group(0)
    return (
        any(c.isdigit() for c in body)
        and any(c.isupper() for c in body)
        and any(c.islower() for c in body)
    )


def _auth_kind(m: re.Match[str]) -> str:
    scheme = (m.group("scheme") or "bearer").lower()
    return {"bearer": "bearer_token", "basic": "basic_auth"}.get(scheme, "auth_token")


def _url_password_ok(m: re.Match[str]) -> bool:
    return _is_value(m.group("v"), "password", quoted=True)


_PRIVATE_KEY_GATE = ("private key", "putty-user-key-file")

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
    ),
    _Detector(
        "private_key",
        re.compile(r"PuTTY-User-Key-File-\d+:[\s\S]*?(?:Private-MAC:[ \t]*[0-9a-fA-F]+|\Z)"),
        _PRIVATE_KEY_GATE,
    ),
    # Token families detect-secrets 1.5 lacks: fine-grained GitHub PATs, bare npm tokens,
    # project, service-account and Anthropic `sk-` keys (no legacy T3BlbkFJ marker), Stripe
    # test keys, Google API keys, Hugging Face tokens.
    _Detector("github_token", re.compile(r"github_pat_[A-Za-z0-9_]{22,}"), ("github_pat_",)),
    _Detector("npm_token", re.compile(r"npm_[A-Za-z0-9]{36,}"), ("npm_",)),
    _Detector("anthropic_key", re.compile(r"sk-ant-(?<![\w-]sk-ant-)[A-Za-z0-9_-]{20,}"), ("sk-",)),
    _Detector(
        "openai_key",
        re.compile(r"sk-(?<![\w-]sk-)[A-Za-z0-9_-]{20,}"),
        ("sk-",),
        priority=1,
        accept=_mixed_token,
    ),
    _Detector("stripe_key", re.compile(r"[rs]k_test_[0-9a-zA-Z]{24,}"), ("k_test_",)),
    _Detector("gcp_api_key", re.compile(r"AIza[0-9A-Za-z_-]{35}"), ("aiza",), tail=_TOKEN_TAIL),
    _Detector(
        "huggingface_token",
        re.compile(r"hf_(?<![\w-]hf_)[A-Za-z0-9]{34,}"),
        ("hf_",),
        accept=_mixed_token,
    ),
    # Any `scheme://user:pass@`: BasicAuthDetector refuses passwords holding URL sub-delimiters
    # (`!$&*+;=`), which real connection strings carry unencoded. The user stays readable.
    _Detector(
        "password",
        re.compile(r"://(?<=[A-Za-z0-9+.-]://)[^\s:/?#@\[\]\"'<>]*:(?P<v>[^\s/?#\"'<>]+)@"),
        ("://",),
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
        starts=_at("authorization", "authorisation"),
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
        starts=_at("bearer"),
    ),
    _Detector(
        "secret",
        _ASSIGNMENT,
        _KEYWORD_GATE,
        priority=3,
        groups=("qv", "v"),
        accept=_assignment_ok,
        kind_of=_assignment_kind,
        starts=_keyword_starts,
    ),
    _Detector(
        "secret",
        _CLI_FLAG,
        _KEYWORD_GATE,
        priority=3,
        groups=("qv", "v"),
        accept=_assignment_ok,
        kind_of=_assignment_kind,
        starts=_at("--"),
    ),
    # Credentials on the command lines agents run most: `curl -u user:pass`, `mysql -psecret`.
    _Detector(
        "password",
        re.compile(
            r"\bcurl\b[^\n|;]*?[ \t](?:-u[ \t]*|--user[ \t=])[\"']?[^\s:\"']+:(?P<v>[^\s\"']+)"
        ),
        ("curl",),
        priority=3,
        groups=("v",),
        accept=_url_password_ok,
        starts=_at("curl"),
    ),
    _Detector(
        "password",
        re.compile(r"\bmysql(?:dump|admin)?\b[^\n|;]*?[ \t]-p(?P<v>[^\s\"']+)"),
        ("mysql",),
        priority=3,
        groups=("v",),
        accept=_url_password_ok,
        starts=_at("mysql"),
    ),
    # E-mail addresses (personal data; no library plugin). The domain needs an alphabetic TLD,
    # so `deploy@10.0.0.5`, `root@bastion`, `react@18.2.0` and `image@sha256:...` stay.
    _Detector(
        "email",
        re.compile(
            r"(?:(?<=mailto:)|(?<![\w.%+\-:/@]))(?P<local>(?:[\w.%+\-]|\\u[0-9a-fA-F]{4})+)@"
            r"(?P<domain>[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
            r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*\.[A-Za-z]{2,})(?![\w-])"
        ),
        ("@",),
        priority=4,
        accept=_email_ok,
        starts=_email_starts,
    ),
)

_DETECTORS: tuple[_Detector, ...] = (*_library_detectors(), *_ADDED)


_GATES: tuple[str, ...] = tuple(dict.fromkeys(g for d in _DETECTORS for g in d.gate))
# Literal gates are tested with `in` (substring search beats the regex engine), the rest with
# their compiled regex.
_LITERAL_GATES = tuple(g for g in _GATES if _REGEX_META.isdisjoint(g))
_REGEX_GATES = tuple((g, re.compile(g).search) for g in _GATES if g not in _LITERAL_GATES)
_DETECTORS_BY_GATE: dict[str, tuple[int, ...]] = {
    g: tuple(i for i, d in enumerate(_DETECTORS) if g in d.gate) for g in _GATES
}
# All gates in one regex: the quick answer for the many texts no gate opens.
_PREFILTER = re.compile("|".join(f"(?:{g})" for g in _GATES))
# The same for polars (Rust regex), whose case-insensitive flag stands for lowercasing.
PREFILTER_PATTERN = "(?i)" + _PREFILTER.pattern


# --- finding and cutting spans ----------------------------------------------------------------

_Span = tuple[int, int, int, str]  # start, end, priority, kind


def _open_detectors(lowered: str) -> list[_Detector]:
    gates = [g for g in _LITERAL_GATES if g in lowered]
    gates += [g for g, search in _REGEX_GATES if search(lowered)]
    return [_DETECTORS[i] for i in sorted({i for g in gates for i in _DETECTORS_BY_GATE[g]})]


def _spans(text: str, lowered: str) -> list[_Span]:
    found: list[_Span] = []
    for d in _open_detectors(lowered):
        for m in d.matches(text, lowered):
            if d.accept is not None and not d.accept(m):
                continue
            group = next((g for g in d.groups if m.group(g) is not None), 0)
            start, end = m.span(group)
            if start == end:
                continue
            if d.tail is not None and (tail := d.tail.match(text, end)):
                end = tail.end()
            if d.clip is not None and (clip := d.clip.match(text, start)) and clip.end() > start:
                end = min(end, clip.end())
            if d.keep_prefix and text.startswith(d.keep_prefix, start):
                start += len(d.keep_prefix)
            # Never split a backslash escape (JSON or shell text stays well formed): a span
            # right after an escaping backslash takes it along; one ending on it leaves it.
            if _escapes_next(text, start):
                start -= 1
            if _escapes_next(text, end) and end - 1 > start:
                end -= 1
            found.append((start, end, d.priority, d.kind_of(m) if d.kind_of else d.kind))
    return found


def _escapes_next(text: str, i: int) -> bool:
    """Whether text[i] is escaped: an odd run of backslashes ends right before it."""
    run = 0
    while i - run > 0 and text[i - run - 1] == "\\":
        run += 1
    return run % 2 == 1


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


def _cut(text: str) -> tuple[str, int]:
    lowered = text.lower()
    if not _PREFILTER.search(lowered):
        return text, 0
    spans = _merge(_spans(text, lowered))
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
    if text is None:
        return None
    return redact_with_count(text)[0]


def contains_secret(text: str) -> bool:
    return redact_with_count(text)[1] > 0


# --- columns ----------------------------------------------------------------------------------


def _check_dtype(s: pl.Series) -> None:
    if s.dtype not in (pl.String, pl.Null):
        raise TypeError(f"redaction needs a String column, got {s.dtype} for {s.name!r}")


def _candidates(s: pl.Series) -> list[str]:
    """Distinct non-null values the gates cannot prove clean."""
    unique = s.drop_nulls().unique()
    return unique.filter(unique.str.contains(PREFILTER_PATTERN)).to_list()


def _dirty(s: pl.Series) -> dict[str, tuple[str, int]]:
    """Each distinct value holding a secret: its redacted form and how many secrets it held."""
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
    _check_dtype(s)
    dirty = _dirty(s)
    if not dirty:
        return pl.repeat(False, len(s), dtype=pl.Boolean, eager=True).alias(s.name)
    return s.is_in(list(dirty)).fill_null(False)


# --- JSON -------------------------------------------------------------------------------------


def _secret_key_kind(key: str) -> str | None:
    return _kind_for_key(key) if _KEY_ONLY.fullmatch(key) else None


def _under_secret_key(value: Any, kind: str, key: str) -> Any:
    """A scalar stored under a secret-named key is a secret whatever it looks like."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, str | int | float):
        secret = _is_value(str(value), key, quoted=isinstance(value, str))
        return PLACEHOLDER.format(kind=kind) if secret else value
    return _walk(value, (kind, key))


def _walk(value: Any, secret: tuple[str, str] | None) -> Any:
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, Mapping):
        out: dict[Any, Any] = {}
        for k, v in value.items():
            key = redact(k) if isinstance(k, str) else k
            while key in out:  # two keys redacted alike: both values stay
                key = f"{key}'"
            under = secret
            if under is None and isinstance(k, str) and (kind := _secret_key_kind(k)):
                under = (kind, k)
            out[key] = _walk(v, None) if under is None else _under_secret_key(v, *under)
        return out
    if isinstance(value, list | tuple | set | frozenset):
        return [_walk(v, None) if secret is None else _under_secret_key(v, *secret) for v in value]
    return value


def redact_json(value: Any) -> Any:
    """Every string of a JSON-like value redacted (keys too); dicts keep their keys and order,
    sequences their order (tuples and sets come back as lists).

    A scalar under a secret-named key (`{"password": "hunter2"}`) is replaced as a whole:
    alone, the value carries nothing a text detector could recognise.
    """
    return _walk(value, None)
