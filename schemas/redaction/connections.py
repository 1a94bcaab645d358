from __future__ import annotations

import base64
import functools
import re
from collections.abc import Iterator

from schemas.redaction._base import (
    _at,
    _bounded,
    _Detector,
    _escapes_next,
    _first_on_line,
    _run_end,
)
from schemas.redaction.assignments import _VALUE_SCAN
from schemas.redaction.commands import (
    _SHELL_WORD_GLUED,
    _shell_span,
)
from schemas.redaction.library import (
    _URL_USER_GATE,
)
from schemas.redaction.values import (
    _is_value,
    _prose_password,
)

# --- URL passwords holding raw URL characters ----------------------------------------------

# `postgres://app:pa/ss@db:5432/pay`, `redis://:p#ss@cache`, `amqp://u:p@ss@mq`: a password
# with a reserved character left unencoded, as people paste them. Its end is the first `@`
# (of the URL's run of characters) that a host follows; a port and a path after the user's
# colon (`https://host:8080/p@x`) are no password.
_URL_USER = re.compile(r"://(?<=[A-Za-z0-9+.-]://)[^\s:/?#@\[\]\"'<>]*:")
_URL_RUN = re.compile(r"""[^\s"'<>]*""")
_HOST_AFTER = re.compile(r"[A-Za-z0-9\[][\w.\-\[\]:%]*(?=[/?#\s\"'<>]|$)")
_PORT_PATH = re.compile(r"\d{1,5}(?:[/?#]|$)")
_AT_TRIES = 8
_RAW_URL_GATE = "://" + _bounded(r"[^\s/?#@:]", ":")


def _userinfo_password(text: str, start: int) -> tuple[int, int] | None:
    """The password starting at `start` (right after `scheme://user:`) and its `@`, or None:
    at most `_VALUE_SCAN` characters and `_AT_TRIES` `@` are tried (a run of `@` is no
    password read again from each start)."""
    end = min(_run_end(_URL_RUN, text, start), start + _VALUE_SCAN + 1)
    at = start
    for _ in range(_AT_TRIES):
        at = text.find("@", at, end)
        if at < 0:
            return None
        if _HOST_AFTER.match(text, at + 1):
            break
        at += 1
    else:
        return None
    if at == start or _PORT_PATH.match(text, start, at):
        return None
    return start, at


def _raw_url_password_span(m: re.Match[str]) -> tuple[int, int] | None:
    found = _userinfo_password(m.string, m.end())
    if found is None:
        return None
    start, at = found
    return (start, at) if _is_value(m.string[start:at], "password", quoted=True) else None


def _ends_userinfo(text: str, at: int) -> bool:
    """Whether the `@` at `at` ends `scheme://user:password@` (raw `/`, `#` in it too; the
    password may hold a URL of its own: the last few `://` before it are tried)."""
    lo = max(0, at - _VALUE_SCAN - 64)
    scheme = at
    for _ in range(4):
        scheme = text.rfind("://", lo, scheme)
        if scheme < 0:
            return False
        m = _URL_USER.match(text, scheme)
        if m is not None:
            found = _userinfo_password(text, m.end())
            if found is not None and found[1] == at:
                return True
    return False


def _auth_span(m: re.Match[str]) -> tuple[int, int] | None:
    """The credential of an Authorization header; after a scheme memflow does not name
    (`Api-Token`, `Splunk`, `GenieKey`: RFC 7235's schemes are any token), one with a letter
    and a digit (so `Authorization: handled separately` stays)."""
    for group in ("v", "raw"):
        if m.group(group) is not None:
            return m.span(group)
    value = m.group("ov")
    if value and any(c.isdigit() for c in value) and any(c.isalpha() for c in value):
        return m.span("ov")
    return None


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


# Connection strings with no `scheme://`: Go's MySQL driver takes `user:password@tcp(host:3306)/db`
# (`@unix(/path)`, `@udp(...)`), Oracle's JDBC thin driver `jdbc:oracle:thin:user/password@...`.
_GO_DSN = re.compile(
    r"""(?<![\w.:/@%-])[\w.-]{1,64}:(?P<v>[^\s@"'`]{1,256})@(?:tcp|udp|unix)(?:4|6)?\("""
)
_GO_DSN_GATE = (r"@(?:tcp|udp|unix)(?:4|6)?\(",)
_ORACLE_THIN = re.compile(r"""jdbc:oracle:(?:thin|oci8?|kprb):(?:@|[\w$#.]+/(?P<v>[^\s@"'`]+)@)""")


def _dsn_password_ok(m: re.Match[str]) -> bool:
    return m.group("v") is not None and _is_value(m.group("v"), "password", quoted=True)


DETECTORS: tuple[_Detector, ...] = (
    _Detector(
        "password", _GO_DSN, _GO_DSN_GATE, priority=1, groups=("v",), accept=_dsn_password_ok
    ),
    _Detector(
        "password",
        _ORACLE_THIN,
        ("jdbc:oracle:",),
        priority=1,
        groups=("v",),
        accept=_dsn_password_ok,
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
    _Detector(
        "password",
        _URL_USER,
        (_RAW_URL_GATE,),
        priority=1,
        refine=_raw_url_password_span,
    ),
    # Authorization headers (no library plugin); the scheme word stays readable.
    _Detector(
        "bearer_token",
        re.compile(
            r"""\bauthori[sz]ation\\?["']?(?:[ \t]*[:=][ \t]*|[ \t]+(?=\\?["']))\\?["']?
            (?:(?P<scheme>bearer|basic|token|bot|digest|negotiate|apikey|api-key|ssws|splunk
                  |geniekey|key|klaviyo-api-key|sharedaccesssignature|hmac|otoken)[ \t]+
               (?P<v>(?:\d+\|)?[A-Za-z0-9\-._~+/]{8,}=*)
              |(?P<other>[A-Za-z][A-Za-z0-9_-]{1,30})[ \t]+(?P<ov>[A-Za-z0-9\-._~+/]{12,}=*)
              |(?P<raw>[A-Za-z0-9\-._~+/]{20,}=*))""",
            re.IGNORECASE | re.VERBOSE,
        ),
        ("authori[sz]ation",),
        priority=2,
        refine=_auth_span,
        kind_of=_auth_kind,
        starts=_at("authorization", "authorisation", before=r"\b"),
    ),
    # `Bearer <token>` outside a header; it needs a digit so prose ("bearer authentication")
    # stays.
    _Detector(
        "bearer_token",
        re.compile(
            r"\bbearer(?:[ \t]*:)?[ \t]+"
            r"(?P<v>(?:\d+\|)?(?=[A-Za-z\-._~+/]*\d)[A-Za-z0-9\-._~+/]{16,}=*)",
            re.IGNORECASE,
        ),
        ("bearer",),
        priority=2,
        groups=("v",),
        starts=_at("bearer", before=r"\b"),
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
    _Detector(
        "password", _PGPASS, _PGPASS_GATE, priority=3, refine=_pgpass_span, starts=_pgpass_starts
    ),
)
