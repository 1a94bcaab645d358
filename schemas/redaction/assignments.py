from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Iterator

from schemas.redaction._base import (
    _BLANK_RUN,
    _GATE_RUN,
    _UNBOUNDED,
    _at,
    _bounded,
    _Detector,
    _first_on_line,
    _is_ident,
    _line_start,
    _run_end,
    _Scan,
    _word_starts,
)
from schemas.redaction.keywords import (
    _KEY,
    _KEY_ONLY,
    _KEYWORD_GATE,
    _KEYWORDS_RE,
    _START_WORDS,
    _START_WORDS_ASCII,
    _holds_a_secret,
    _kind_for_key,
)
from schemas.redaction.values import (
    _BRACKETS,
    _balanced_len,
    _is_value,
    _password_like,
    _prose_password,
    _random_value,
)

# `token` is in most coding turns, `key=` or `token:` is not, and a text no gate opens never
# reaches a detector.
# The name's end, closing quotes and blanks before the operator (`_ASSIGNMENT`: `[\w.-]*`,
# `(?:\\*["'\]]){0,2}`, `[ \t]*`), each bounded with its hatch.
# What follows the name: an operator's first character, or a declared type and its `=`.
_OPERATOR_GATE = (
    r"(?:[:=!.?+]|string[ \t]{0,8}=|&(?:'static[ \t]{1,8})?str[ \t]{0,8}=|\[\]byte[ \t]{0,8}=)"
)
_ASSIGNMENT_GATE = tuple(
    w + _bounded(r"[\w.-]", _bounded(r"""[\\"'\]]""", _bounded(r"[ \t]", _OPERATOR_GATE)))
    for w in _KEYWORD_GATE
)
# (Dashes first, taken whole, then a word character: a line of dashes, common in code and
# Markdown, opens nothing and costs each place one run of at most 64. A match whose dashes run
# longer holds a `--` 64 before their end; from there the name follows as bounded.)
_FLAG_DASHES = rf"(?:-{{0,{_GATE_RUN}}}+(?!-))"
_UNBOUNDED[_FLAG_DASHES] = ""  # Python's prefilter only: Rust's reads `--[\w-]*(?:pass|...)`
_FLAG_GATE = (
    "--" + _FLAG_DASHES + _bounded(r"[\w-]", "(?:pass|secret|token|key)", backtrack=True),
    "-(?:password|passwd|secret|token|apikey|api-key|auth-token|src|dest|new|old|store|key)",
)
_PROSE_GATE = (r"pass(?:word|wd|phrase|code)s?[ \t]", r"pwd[ \t]", r"pw[ \t]")
_IDENTIFIED_BY_GATE = "identified" + _bounded(r"[ \t]", "by", least=1)
# Python annotations: `password: str = "..."` assigns after the type.
# Type annotations and declared types before the `=`: Python's (`password: str = ...`),
# TypeScript's (`token: string = ...`), Go's (`var token string = ...`), Rust's (`&str`).
_ANNOTATION = (
    r"str|bytes|secretstr|secretbytes|any|optional\[\w+\]|\w+[ \t]*\|[ \t]*none|string"
    r"|&(?:'static[ \t]+)?str|\[\]byte"
)
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
    (?:[ \t]*:?[ \t]*(?:{_ANNOTATION})(?=[ \t]*=[^=]))?
    (?P<op>[ \t]*(?::{{1,3}}=|\?=|\.=|\+=|=>|===?|!==?|=|:)[ \t]*)
    (?:{_QUOTED}|(?P<v>))                    # an unquoted value starts here (`_value_end`)
    """,
    re.IGNORECASE | re.VERBOSE,
)
# A shell variable's value: up to whitespace, a quote or an operator; `&` only ends it before
# `&&` or a space (`PGPASSWORD=Tr0ub4dor&3 psql` is how people write it).
_ENV_VALUE_RUN = re.compile(r"""(?:[^\s"'`;&|<>]|&(?![&\s]|$))*""")
_EXPORT = re.compile(r"export[ \t]+")


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
    if text.startswith("base64:", start) and end - start > 23:
        start += 7  # Laravel's `APP_KEY=base64:...`: the label stays
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
# Single-dash long flags of Java's and Go's tools: keytool's and jarsigner's `-storepass`,
# `-keypass`, `-srcstorepass`; influx's `-password`; `-secret`, `-token`, `-apikey`. (`-pass`
# alone is openssl's, whose `pass:` source `_COMMANDS` reads.)
_DASH_FLAGS = (
    "password", "passwd", "passphrase", "secret", "token", "apikey", "api-key", "auth-token",
    *(f"{w}{k}" for w in ("", "src", "dest", "new", "old") for k in ("storepass", "keypass")),
)  # fmt: skip
_CLI_FLAG = re.compile(
    r"(?<![\w-])(?P<key>--(?:[\w-]*(?:password|passwd|secret|token|api-?key|access-?key)"
    rf"|(?:[\w-]*-)?pass(?:phrase)?)|-(?:{'|'.join(_DASH_FLAGS)})(?![\w-]))"
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


# A secret's name and value as a call's two string arguments: `System.setProperty("API_TOKEN",
# "...")`, `setenv("DB_PASSWORD", "...", 1)`, `config.set('api_key', '...')`, `put("secret", ...)`.
_CALL_PAIR = re.compile(
    rf"""(?P<kq>["'])(?P<key>{_KEY})(?P=kq)[ \t]*,[ \t]*{_QUOTED}""", re.IGNORECASE | re.VERBOSE
)
_CALL_PAIR_GATE = tuple(w + _bounded(r"[\w.-]", r"""["'][ \t]{0,8},""") for w in _KEYWORD_GATE)


_MAPPING_KEY_NEXT = re.compile(r"[ \t]*\\{0,16}[:=]")


def _call_pair_span(m: re.Match[str]) -> tuple[int, int] | None:
    """A quoted string followed by `:` is a mapping's next key, not the call's second
    argument: in `"predicate": "KEPT_SECRET", "object": "..."` nothing is secret."""
    key = m.group("key")
    if _MAPPING_KEY_NEXT.match(m.string, m.end()):
        return None
    return _quoted_span(m, key) if _holds_a_secret(key) else None


def _call_pair_starts(text: str, lowered: str) -> Iterator[int]:
    return (s - 1 for s in _keyword_starts(text, lowered) if s and text[s - 1] in "\"'")


def _keyword_starts(text: str, lowered: str) -> Iterable[int]:
    """The start of each name holding a keyword: where an assignment can begin. A walk back
    to the start of the name stops at the word's previous hit, whose start it shares (`key`
    * 21000 is one name, walked once)."""
    words = _START_WORDS_ASCII if lowered.isascii() else _START_WORDS
    return _word_starts(text, lowered, words, _is_ident)


# Configuration directives that take a password, with no `=`: redis.conf's `requirepass` and
# `masterauth`, Sentinel's `sentinel auth-pass <master>`, pgbouncer's userlist is `"u" "pw"`.
# Anywhere a word can start, not only at a line's start: `CONFIG SET requirepass <pw>` and a
# directive quoted in prose carry the same value.
_DIRECTIVE = re.compile(
    r"(?i)(?<![\w-])(?:requirepass|masterauth|masterpass|sentinel[ \t]+auth-pass[ \t]+\S+)"
    r"""[ \t]+(?:"(?P<dq>[^"\n]*)"|'(?P<sq>[^'\n]*)'|(?P<v>[^\s"'#]\S*))"""
)


def _directive_span(m: re.Match[str]) -> tuple[int, int] | None:
    for group in ("dq", "sq", "v"):
        if m.group(group) is not None:
            value = m.group(group)
            quoted = group != "v"
            if not _is_value(value, "password", quoted, literal=True):
                return None
            # Mid-line the directive may be named in prose ("the requirepass directive"):
            # an unquoted word there must look like a password.
            if not quoted and not _first_on_line(m.string, m.start()):
                return m.span(group) if _prose_password(value, strong=False) else None
            return m.span(group)
    return None


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

# `<add key="DbPassword" value="x"/>`, `<input name="pw" value="x">`: the key, then (a
# `_Scan`) the first `value=` after it in the same tag.
_KEY_VALUE_HEAD = r"""(?<![\w-])(?:key|name)[ \t]*=[ \t]*(?P<q>["'])(?P<key>[^"'<>\n]*)(?P=q)"""
_KEY_VALUE_FLAG = r"""(?<![\w-])value[ \t]*=[ \t]*(?P<q2>["'])(?P<v>[^"'\n]*)(?P=q2)"""


# --- a secret's name and its value with no sign between -------------------------------------

# `nimble SECRET N2kxq5vKN6S7M9Jp0vHK8z2Qwy6V8d`, `%define token 4b9a...`, `apitemplateKEY
# bu9J...`, "the deploy token ghx7... expires": a name that ends in a secret word, blanks, and
# a value a machine made (`values._random_value`: 16 characters or more, hex of 32 or more or
# letters and digits at 3.5 bits a character; no words, paths or versions). A key that names
# no secret (`cache key`, `sort_key`, `public key`, a `*_file`) is none, the word before it
# read as part of its name.
_BARE_WORDS = ("secret", "token", "key", "apikey", "pat")
_BARE_VALUE = r"[A-Za-z0-9+/=_.~-]"
_BARE = re.compile(
    rf"""(?P<key>[\w.-]*?(?i:secret|token|key|apikey|pat))(?i:s)?
    (?:[ \t]+(?i:secret|token|key|access|private|api)s?){{0,2}}
    [ \t]+(?P<v>{_BARE_VALUE}{{16,256}})(?!{_BARE_VALUE})""",
    re.VERBOSE,
)
_BARE_GATE = tuple(
    f"{w}s?" + _bounded(r"[ \t]", r"[a-z0-9+/=_.~-]{16}", least=1) for w in _BARE_WORDS
)
_WORD_BEFORE = re.compile(r"([A-Za-z][\w.-]*)[ \t]+$")


def _bare_span(m: re.Match[str]) -> tuple[int, int] | None:
    key, value = m.group("key"), m.group("v")
    if not _random_value(value) or ("/" in value and ("." in value or value[0] == "/")):
        return None
    text = m.string
    before = _WORD_BEFORE.search(text, max(0, m.start() - 40), m.start())
    name = f"{before.group(1)}_{key}" if before else key
    if not _holds_a_secret(key) or not _holds_a_secret(name):
        return None
    return m.span("v")


def _bare_starts(text: str, lowered: str) -> Iterable[int]:
    return _word_starts(text, lowered, _BARE_WORDS, _is_ident)


# --- credentials passed to a call ------------------------------------------------------------

# `server.login("alerts@acme.example", "...")`, `new NetworkCredential("svc", "...")`,
# `requests.get(url, auth=("admin", "..."))`, `HTTPBasicAuth("u", "...")`: a call whose name
# says it signs in takes the user and then the password; `mysqli_connect("db", "root", "...",
# "shop")`, `new PDO($dsn, "root", "...")`, `pymysql.connect("db", "app", "...")`: a connect
# call takes a host, the user, the password. `curl_easy_setopt(curl, CURLOPT_PASSWORD, "...")`:
# the string after a constant naming a secret. Only string literals are read (a variable is
# code), and the password must look like one (`values._prose_password`, or machine-made):
# `login("admin", "admin")` and `auth("user", "Please sign in")` stay.
_CALL_NAME = re.compile(
    r"""(?P<fn>[\w$]*(?i:login|logon|signin|authenticate|auth|credentials?|connect|pdo|setopt))
    [ \t]*(?:=[ \t]*)?\([ \t]*""",
    re.VERBOSE,
)
_CALL_WORDS = ("login", "logon", "signin", "authenticate", "auth", "credential", "connect",
               "pdo", "setopt")  # fmt: skip
_CALL_GATE = tuple(w + _bounded(r"[\w$]", r"[ \t]{0,8}=?[ \t]{0,8}\(") for w in _CALL_WORDS)
_ARG = re.compile(
    r"""[ \t]*(?:(?P<q>["'])(?P<s>(?:\\.|(?!(?P=q))[^\\\n])*)(?P=q)|(?P<bare>[^,()"'\n]*))[ \t]*"""
)
_SECRET_CONSTANT = re.compile(r"(?:PASSWORD|PASSWD|USERPWD|BEARER|TOKEN|SECRET|APIKEY)")
_CALL_ARGS = 6


def _call_args(text: str, pos: int) -> list[tuple[str, int, int]]:
    """Up to `_CALL_ARGS` arguments after the `(` at `pos`: ("s", start, end) for a string
    literal's content, ("b", start, end) for anything else, up to the first `)` or newline."""
    out: list[tuple[str, int, int]] = []
    while len(out) < _CALL_ARGS:
        m = _ARG.match(text, pos)
        if m is None:
            break
        if m.group("q") is not None:
            out.append(("s", m.start("s"), m.end("s")))
        else:
            out.append(("b", m.start("bare"), m.end("bare")))
        pos = m.end()
        if not text.startswith(",", pos):
            break
        pos += 1
    return out


def _call_span(m: re.Match[str]) -> tuple[int, int] | None:
    fn = m.group("fn").lower()
    text = m.string
    args = _call_args(text, m.end())
    if fn.endswith("setopt"):
        pairs = itertools.pairwise(args)
        found = [b for a, b in pairs if a[0] == "b" and _SECRET_CONSTANT.search(text, a[1], a[2])]
        secret = found[0] if found and found[0][0] == "s" else None
    elif fn.endswith(("connect", "pdo")):
        secret = args[2] if len(args) >= 3 and args[1][0] == "s" and args[2][0] == "s" else None
    else:
        secret = args[1] if len(args) >= 2 and args[0][0] == "s" and args[1][0] == "s" else None
    if secret is None or secret[2] <= secret[1]:
        return None
    value = text[secret[1] : secret[2]]
    if any(c.isspace() for c in value) or not _is_value(value, "password", quoted=True):
        return None
    if not (_prose_password(value, strong=False) or _random_value(value)):
        return None
    return secret[1], secret[2]


def _call_starts(text: str, lowered: str) -> Iterable[int]:
    return _word_starts(text, lowered, _CALL_WORDS, _is_call_name)


def _is_call_name(c: str) -> bool:
    return c.isalnum() or c in "_$"


DETECTORS: tuple[_Detector, ...] = (
    _Detector(
        "secret",
        _BARE,
        _BARE_GATE,
        priority=7,  # after the rule set's rules: where a rule names the token, its kind stays
        refine=_bare_span,
        kind_of=_assignment_kind,
        starts=_bare_starts,
    ),
    _Detector(
        "password",
        _CALL_NAME,
        _CALL_GATE,
        priority=4,
        refine=_call_span,
        starts=_call_starts,
    ),
    _Detector(
        "secret",
        _ASSIGNMENT,
        _ASSIGNMENT_GATE,
        priority=3,
        refine=_assignment_span,
        kind_of=_assignment_kind,
        starts=_keyword_starts,
        precheck=re.compile(
            rf"""[\w.-]+(?:\\*["'\]]){{0,2}}[ \t]*{_OPERATOR_GATE}""", re.IGNORECASE
        ),
    ),
    _Detector(
        "secret",
        _CLI_FLAG,
        _FLAG_GATE,
        priority=3,
        refine=_cli_flag_span,
        kind_of=_assignment_kind,
        starts=_at("--", *(f"-{f}" for f in _DASH_FLAGS), before=r"(?<![\w-])"),
    ),
    _Detector(
        "secret",
        _CALL_PAIR,
        _CALL_PAIR_GATE,
        priority=3,
        refine=_call_pair_span,
        kind_of=_assignment_kind,
        starts=_call_pair_starts,
    ),
    _Detector(
        "password",
        _DIRECTIVE,
        ("requirepass", "masterauth", "masterpass", "auth-pass"),
        priority=3,
        refine=_directive_span,
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
        re.compile(
            rf"<(?P<key>{_KEY})(?:[ \t][^<>]*)?>[ \t]*(?:\r?\n[ \t]*)?"
            rf"(?P<v>[^<\s](?:[^<\n]*[^<\s])?)[ \t]*(?:\r?\n[ \t]*)?</(?P=key)>",
            re.IGNORECASE,
        ),
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
)
