"""Property-based tests of redaction (hypothesis): every kind of secret the redactor claims, in
every place a coding conversation puts one, never survives; redaction is idempotent; the check
agrees with it; the text around a secret stays; the polars fast path, the record and id
helpers and `redact_json` agree with `redact`.

Secrets use the real formats. Random tokens come from a drawn seed (so shrinking keeps them
random-looking, as real ones are); passwords are drawn from printable ASCII, with the
characters each syntax allows (a JSON string takes anything, an unquoted shell word no space,
quote or operator), and always hold an upper-case letter, a lower-case letter and a digit
(what makes them recognisable as passwords in prose and keeps them apart from code).

Profiles: a small default (seconds; derandomized under `CI`), and `HYPOTHESIS_PROFILE=fuzz`
for a long run. The combinatorial test at the end is the red team's offline shape: carriers x
prefixes x suffixes, every combination (a stride of them by default).
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import itertools
import json
import os
import random
import re
import string
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import polars as pl
import pytest
from detect_secrets.plugins.jwt import JwtTokenDetector
from detect_secrets.plugins.npm import NpmDetector
from detect_secrets.plugins.openai import OpenAIDetector
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schemas.redaction import (
    PLACEHOLDER_PATTERN,
    _base,
    _gates,
    contains_secret,
    cookies,
    detectors,
    redact,
    redact_id,
    redact_json,
    redact_record,
    redact_series,
    redact_series_with_count,
    redact_with_count,
    secret_mask,
    values,
)

_FUZZ = os.environ.get("HYPOTHESIS_PROFILE") == "fuzz"
SETTINGS = settings(
    max_examples=3000 if _FUZZ else 60,
    deadline=None,
    derandomize=bool(os.environ.get("CI")) and not _FUZZ,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    database=None,
)

ALNUM = string.ascii_letters + string.digits
URLSAFE = ALNUM + "-_"
HEX = "0123456789abcdef"
B64 = ALNUM + "+/"
PRINTABLE = "".join(chr(c) for c in range(32, 127))  # space to tilde


def _chars(rng: random.Random, n: int, alphabet: str) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def _mixed(rng: random.Random, n: int, alphabet: str = ALNUM) -> str:
    """n random characters holding an upper-case letter, a lower-case one and a digit."""
    assert any(c.islower() for c in alphabet) and any(c.isupper() for c in alphabet)
    while True:
        value = "".join(rng.choice(alphabet) for _ in range(n))
        if (
            any(c.isupper() for c in value)
            and any(c.islower() for c in value)
            and any(c.isdigit() for c in value)
        ):
            return value


def _b64url_json(obj: dict[str, object]) -> str:
    return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()


def _pem(rng: random.Random, label: str) -> str:
    body = "\n".join(_mixed(rng, 64, B64) for _ in range(3))
    return f"-----BEGIN {label}-----\n{body}\n-----END {label}-----"


# Each maker: a seeded random -> a token of that kind, as issued.
TOKEN_MAKERS: dict[str, Callable[[random.Random], str]] = {
    "aws_key_id": lambda r: r.choice(["AKIA", "ASIA", "ABIA", "ACCA"])
    + _chars(r, 16, string.ascii_uppercase + string.digits),
    "github_classic": lambda r: f"gh{r.choice('pousr')}_" + _mixed(r, 36),
    "github_fine_grained": lambda r: "github_pat_" + _mixed(r, 22) + "_" + _mixed(r, 59),
    "gitlab": lambda r: "glpat-" + _mixed(r, 20, URLSAFE),
    "slack_bot": lambda r: f"xox{r.choice('bpa')}-{r.randrange(10**11, 10**12)}-"
    f"{r.randrange(10**12, 10**13)}-{_mixed(r, 24)}",
    "slack_webhook": lambda r: "https://hooks.slack.com/services/T"
    + _chars(r, 8, string.ascii_uppercase + string.digits)
    + "/B"
    + _chars(r, 10, string.ascii_uppercase + string.digits)
    + "/"
    + _mixed(r, 24),
    "stripe": lambda r: r.choice(["sk_live_", "rk_live_", "sk_test_", "rk_test_"])
    + _mixed(r, r.randint(24, 99)),
    "openai_project": lambda r: "sk-proj-" + _mixed(r, 74, URLSAFE) + "T3BlbkFJ" + _mixed(r, 74),
    "openai_service": lambda r: "sk-svcacct-" + _mixed(r, 48, URLSAFE),
    "openai_legacy": lambda r: "sk-" + _mixed(r, 20) + "T3BlbkFJ" + _mixed(r, 20),
    "anthropic": lambda r: "sk-ant-api03-" + _mixed(r, 93, URLSAFE) + "AA",
    "huggingface": lambda r: "hf_" + _mixed(r, 34),
    "npm": lambda r: "npm_" + _mixed(r, 36),
    "sendgrid": lambda r: "SG." + _mixed(r, 22, URLSAFE) + "." + _mixed(r, 43, URLSAFE),
    "digitalocean": lambda r: r.choice(["dop", "doo", "dor"])
    + "_v1_"
    + _chars(r, 64, HEX),
    "gcp_api_key": lambda r: "AIza" + _mixed(r, 35, URLSAFE),
    "jwt": lambda r: ".".join(
        [
            _b64url_json({"alg": "HS256", "typ": "JWT"}),
            _b64url_json({"sub": str(r.randrange(10**9)), "iat": r.randrange(10**9, 2 * 10**9)}),
            _mixed(r, 43, URLSAFE),
        ]
    ),
    "azure_client_secret": lambda r: _mixed(r, 3)
    + str(r.randint(0, 9))
    + "Q~"
    + _mixed(r, 33, ALNUM + "_~.-")
    + "x",
    "twilio": lambda r: "SK" + _chars(r, 32, HEX),
    "shopify": lambda r: r.choice(["shpat_", "shpss_", "shpca_"]) + _chars(r, 32, HEX),
    "databricks": lambda r: "dapi" + _chars(r, 32, HEX),
    "vault": lambda r: "hvs." + _mixed(r, 90, URLSAFE),
    "linear": lambda r: "lin_api_" + _mixed(r, 40),
    "postman": lambda r: "PMAK-" + _chars(r, 24, HEX) + "-" + _chars(r, 34, HEX),
    "slack_app": lambda r: f"xapp-1-A{_chars(r, 10, string.ascii_uppercase + string.digits)}-"
    f"{r.randrange(10**12, 10**13)}-{_chars(r, 64, HEX)}",
    "mailgun": lambda r: "key-" + _chars(r, 32, string.ascii_lowercase + string.digits),
}  # fmt: skip


def aws_secret(rng: random.Random) -> str:
    return _mixed(rng, 40, B64)


def azure_account_key(rng: random.Random) -> str:
    return base64.b64encode(rng.randbytes(64)).decode()


def azure_sas_sig(rng: random.Random) -> str:
    return urllib.parse.quote(base64.b64encode(rng.randbytes(32)).decode(), safe="")


PEM_LABELS = [
    "RSA PRIVATE KEY",
    "EC PRIVATE KEY",
    "OPENSSH PRIVATE KEY",
    "PRIVATE KEY",
    "ENCRYPTED PRIVATE KEY",
    "DSA PRIVATE KEY",
]


# --- placements -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Placed:
    """A text holding `secret`, and the parts around it that must come back as they were."""

    where: str
    text: str
    secret: str
    kept: tuple[str, ...] = field(default=())
    more: tuple[str, ...] = field(default=())  # other secrets of the text, gone as well


WORDS = st.sampled_from(
    ["deploy", "billing", "the staging db", "our CI", "payments-api", "cache", "worker 3"]
)
HOSTS = st.sampled_from(["db", "db.internal", "10.0.0.5", "pg-1.acme.io", "localhost"])
PATHS = st.sampled_from(["", "/pay", "/app/v2", "/0", "/my-db_1"])
QUERIES = st.sampled_from(["", "?sslmode=require", "?sslmode=require&connect_timeout=10"])
SCHEMES = st.sampled_from(["postgres", "postgresql", "mysql", "mongodb+srv", "redis", "amqp"])


def _password(alphabet: str, min_size: int = 4, max_size: int = 20) -> st.SearchStrategy[str]:
    """A password of these characters, with an upper- and a lower-case letter and a digit
    (drawn, at a drawn place) so that it reads as one."""

    @st.composite
    def build(draw: st.DrawFn) -> str:
        body = draw(st.text(alphabet=alphabet, min_size=min_size, max_size=max_size))
        core = (
            draw(st.sampled_from(string.ascii_uppercase))
            + draw(st.sampled_from(string.ascii_lowercase))
            + draw(st.sampled_from(string.digits))
        )
        at = draw(st.integers(0, len(body)))
        return body[:at] + core + body[at:]

    return build()


def _no(*chars: str) -> str:
    return "".join(c for c in PRINTABLE if c not in "".join(chars))


ANY_PRINTABLE = PRINTABLE
NO_NEWLINE = PRINTABLE  # printable ASCII holds no newline
# A URL's userinfo as people paste it (unencoded), where a URL can still be read: no space,
# `/`, `?`, `#` (they end the authority), no quote or angle bracket (they end the URL in
# text), no backslash (JSON would escape it).
URL_USERINFO = _no(" /?#\"'<>\\`")
# An unquoted `.env` value: no space or quote.
ENV_BARE = _no(" \"'`")
# An unquoted shell word: no space, quote, operator, glob, expansion or escape.
SHELL_BARE = _no(" \"'`|&;<>()$\\*?[]{}!#~")
# An unquoted YAML/colon value: up to a space, quote, comma, semicolon or angle bracket.
COLON_BARE = _no(" \"'`,;<>&()[]{}")


def _q1(value: str) -> bool:
    return "'" not in value


def _not_template(pw: str) -> bool:
    """Templates and references stand where a secret would and are none (documented):
    `{x}`, `<x>`, `${X}`, `$X`, `$(command ...`, `%(x)s`, `{{ x }}`."""
    return not (
        (pw[0], pw[-1]) in {("{", "}"), ("<", ">")}
        or pw.startswith(("${", "$("))
        or re.fullmatch(r"\$\{?\w+\}?|%\(\w+\)s|%s|\{\{.*\}\}", pw) is not None
    )


@st.composite
def password_placements(draw: st.DrawFn) -> Placed:
    where = draw(
        st.sampled_from(
            [
                "url",
                "url_encoded",
                "json",
                "json_nested",
                "json_escaped",
                "env_line",
                "env_double_quoted",
                "env_single_quoted",
                "prose",
                "prose_quoted",
                "pw_colon",
                "yaml",
                "curl",
                "mysql",
                "pgpassword",
                "docker_login",
                "docker_login_long",
                "sshpass",
                "redis_cli",
                "db_password_flag",
                "db_password_flag_eq",
                "query_param",
                "python_kwarg",
                "pgpass_line",
                "pgpass_file",
                "prose_intl",
                "prose_intl_quoted",
            ]
        )
    )
    word = draw(WORDS)
    if where.startswith("pgpass"):
        return draw(pgpass_placements(where))
    if where.startswith("prose_intl"):
        return draw(intl_prose_placements(where == "prose_intl_quoted"))
    if where == "url":
        pw = draw(_password(URL_USERINFO).filter(lambda p: "@" not in p[-1:] and _not_template(p)))
        host, port, path, query = (
            draw(HOSTS),
            draw(st.integers(1, 65535)),
            draw(PATHS),
            draw(QUERIES),
        )
        scheme = draw(SCHEMES)
        head, tail = f"{scheme}://app:", f"@{host}:{port}{path}{query}"
        return Placed(where, f"{word}: {head}{pw}{tail} ok", pw, (f"{word}: ", head, tail, " ok"))
    if where == "url_encoded":
        pw = draw(_password(ANY_PRINTABLE))
        enc = urllib.parse.quote(pw, safe="")
        host, path = draw(HOSTS), draw(PATHS)
        head, tail = "postgres://app:", f"@{host}:5432{path}"
        return Placed(where, f"DATABASE_URL={head}{enc}{tail}", enc, (head, tail))
    if where == "json":
        pw = draw(_password(ANY_PRINTABLE).filter(_not_template))
        key = draw(st.sampled_from(["password", "db_password", "secret", "api_key", "passwd"]))
        text = json.dumps({"user": "app", key: pw, "host": "db"})
        return Placed(where, text, json.dumps(pw)[1:-1], ('"user": "app"', '"host": "db"'))
    if where == "json_nested":
        pw = draw(_password(ANY_PRINTABLE).filter(_not_template))
        text = json.dumps({"config": {"database": {"password": pw, "port": 5432}}, "env": word})
        return Placed(where, text, json.dumps(pw)[1:-1], ('"port": 5432', f'"env": "{word}"'))
    if where == "json_escaped":
        pw = draw(_password(ANY_PRINTABLE).filter(_not_template))
        inner = json.dumps({"db": {"password": pw}})
        return Placed(where, json.dumps({"tool_input": inner}), pw, ('{"tool_input": ',))
    if where == "env_line":
        pw = draw(_password(ENV_BARE).filter(_not_template))
        key = draw(st.sampled_from(["DB_PASSWORD", "PGPASSWORD", "API_KEY", "SECRET_KEY"]))
        text = f"# {word}\nexport {key}={pw}\nDB_HOST=db"
        return Placed(where, text, pw, (f"# {word}\n", f"export {key}=", "\nDB_HOST=db"))
    if where == "env_double_quoted":
        pw = draw(_password(ANY_PRINTABLE).filter(_not_template))
        escaped = pw.replace("\\", "\\\\").replace('"', '\\"')
        text = f'DB_PASSWORD="{escaped}"\nDB_HOST=db'
        return Placed(where, text, escaped, ('DB_PASSWORD="', '"\nDB_HOST=db'))
    if where == "env_single_quoted":
        pw = draw(_password(ANY_PRINTABLE).filter(_q1).filter(_not_template))
        return Placed(where, f"DB_PASSWORD='{pw}' ./migrate", pw, ("DB_PASSWORD='", "' ./migrate"))
    if where == "prose":
        lead = draw(
            st.sampled_from(
                [
                    "my password is",
                    "the password is",
                    "The admin password for prod is",
                    "btw the password was",
                    "I changed the password to",
                    "the password is now",
                    "the pw is",
                    "password:",
                    "pw:",
                ]
            )
        )
        # after a colon, `,` `;` `&` and brackets end a value (`password: x; user: y`)
        alphabet = COLON_BARE if lead.endswith(":") else _no(" \"'`")
        pw = draw(
            _password(alphabet).filter(
                lambda p: p[-1] not in ".,;:!?)]}>" and p[0] not in "([<{/~." and _not_template(p)
            )
        )
        text = f"For {word}, {lead} {pw} and it works."
        return Placed(where, text, pw, (f"For {word}, {lead} ", " and it works."))
    if where == "prose_quoted":
        quote = draw(st.sampled_from(['"', "'", "`"]))
        pw = draw(_password(_no(quote)).filter(_not_template))
        text = f"the password for {word} is {quote}{pw}{quote}, keep it safe"
        return Placed(where, text, pw, (f"the password for {word} is {quote}", ", keep it safe"))
    if where in ("pw_colon", "yaml"):
        pw = draw(_password(COLON_BARE).filter(_not_template))
        if where == "pw_colon":
            return Placed(where, f"pw: {pw}\nuser: app", pw, ("pw: ", "\nuser: app"))
        text = f"database:\n  host: db\n  password: {pw}\n  port: 5432"
        return Placed(where, text, pw, ("  host: db\n  password: ", "\n  port: 5432"))
    if where == "curl":
        pw = draw(_password(ANY_PRINTABLE).filter(_q1).filter(_not_template))
        text = f"curl -s -u 'admin:{pw}' https://api.example.com/v1/{word.replace(' ', '-')}"
        return Placed(where, text, pw, ("curl -s -u 'admin:", "' https://api.example.com/v1/"))
    if where == "mysql":
        quoted = draw(st.booleans())
        pw = draw(
            _password(ANY_PRINTABLE if quoted else SHELL_BARE).filter(_q1).filter(_not_template)
        )
        arg = f"-p'{pw}'" if quoted else f"-p{pw}"
        return Placed(
            where, f"mysql -u root {arg} -h db app", pw, ("mysql -u root -p", " -h db app")
        )
    if where == "pgpassword":
        pw = draw(_password(ANY_PRINTABLE).filter(_q1).filter(_not_template))
        text = f"PGPASSWORD='{pw}' psql -h db -U app"
        return Placed(where, text, pw, ("PGPASSWORD='", "' psql -h db -U app"))
    if where in ("docker_login", "docker_login_long", "sshpass", "redis_cli"):
        quoted = draw(st.booleans())
        pw = draw(
            _password(ANY_PRINTABLE if quoted else SHELL_BARE.replace("-", ""))
            .filter(_q1)
            .filter(_not_template)
        )
        arg = f"'{pw}'" if quoted else pw
        before, after = {
            "docker_login": ("docker login -u bot -p ", " registry.example.com"),
            "docker_login_long": ("docker login -u bot --password ", " registry.example.com"),
            "sshpass": ("sshpass -p ", " ssh deploy@10.0.0.5 uptime"),
            "redis_cli": ("redis-cli -h cache -a ", " --no-auth-warning ping"),
        }[where]
        return Placed(where, before + arg + after, pw, (before, after))
    if where in ("db_password_flag", "db_password_flag_eq"):
        pw = draw(_password(ANY_PRINTABLE).filter(_q1).filter(_not_template))
        sep = "=" if where.endswith("_eq") else " "
        text = f"./manage.py migrate --db-password{sep}'{pw}' --noinput"
        return Placed(where, text, pw, ("./manage.py migrate --db-password", "' --noinput"))
    if where == "query_param":  # an access token is never shorter than 8 (`next_token=2`)
        pw = draw(_password(ANY_PRINTABLE, min_size=5))
        enc = urllib.parse.quote(pw, safe="")
        head = "https://api.example.com/v1/items?page=2&access_token="
        return Placed(where, f"{head}{enc}&sort=asc", enc, (head, "&sort=asc"))
    # python_kwarg
    pw = draw(_password(ANY_PRINTABLE).filter(_not_template))
    lit = json.dumps(pw)
    text = f"conn = connect(host='db', password={lit}, port=5432)"
    return Placed(where, text, lit[1:-1], ("conn = connect(host='db', password=", ", port=5432)"))


@st.composite
def token_placements(draw: st.DrawFn) -> Placed:
    kind = draw(st.sampled_from(sorted(TOKEN_MAKERS)))
    token = TOKEN_MAKERS[kind](random.Random(draw(st.integers(0, 2**32))))
    word = draw(WORDS)
    where = draw(
        st.sampled_from(
            ["prose", "env", "json", "json_note", "query", "userinfo", "header", "colon_prose"]
        )
    )
    if where == "prose":
        return Placed(
            where, f"For {word} use {token} please.", token, (f"For {word} use ", " please.")
        )
    if where == "colon_prose":
        # F3: a token followed by `: word` must not make the placeholder read as a key
        text = f"Here is the key {token}: please restrict it to {word}."
        return Placed(where, text, token, ("Here is the key ", ": please restrict it to "))
    if where == "env":
        return Placed(where, f"export SERVICE_CREDENTIAL={token}\nmake {word}", token, ("\nmake ",))
    if where == "json":
        text = json.dumps({"note": f"token for {word}", "value": token, "n": 3})
        return Placed(where, text, token, (f'"note": "token for {word}"', '"n": 3'))
    if where == "json_note":
        text = json.dumps({"content": f"I set {token} in {word}"})
        return Placed(where, text, token, ('{"content": "I set ', f' in {word}"}}'))
    if where == "query":
        head = "https://api.example.com/hook?v=2&key="
        return Placed(where, f"{head}{token}&page=3", token, ("https://api.example.com/hook?v=2&",))
    if where == "userinfo":
        text = f"git clone https://x-access-token:{token}@github.com/acme/{word.replace(' ', '-')}"
        return Placed(
            where, text, token, ("git clone https://x-access-token:", "@github.com/acme/")
        )
    text = f'curl -H "Authorization: Bearer {token}" https://api.example.com/v1'
    return Placed(
        where, text, token, ('curl -H "Authorization: Bearer ', '" https://api.example.com')
    )


@st.composite
def other_placements(draw: st.DrawFn) -> Placed:
    rng = random.Random(draw(st.integers(0, 2**32)))
    word = draw(WORDS)
    which = draw(
        st.sampled_from(["aws_secret", "aws_prose", "pem", "pem_json", "azure", "sas", "amz"])
    )
    if which == "aws_secret":
        key = aws_secret(rng)
        text = f'aws_secret_access_key = "{key}"\nregion = eu-west-1'
        return Placed(which, text, key, ("aws_secret_access_key = ", "\nregion = eu-west-1"))
    if which == "aws_prose":
        key = aws_secret(rng)
        lead = draw(
            st.sampled_from(
                [
                    "my AWS secret access key is",
                    "aws secret:",
                    "the secret key for the aws account is",
                    "AWS_SECRET_ACCESS_KEY",
                ]
            )
        )
        return Placed(which, f"{lead} {key} (for {word})", key, (f"{lead} ", f" (for {word})"))
    if which in ("pem", "pem_json"):
        block = _pem(rng, draw(st.sampled_from(PEM_LABELS)))
        if which == "pem":
            return Placed(
                which, f"key for {word}:\n{block}\nthanks", block, (f"key for {word}:\n",)
            )
        text = json.dumps({"type": "service_account", "private_key": block + "\n", "x": word})
        return Placed(which, text, json.dumps(block)[1:-1], ('"type": "service_account"',))
    if which == "azure":
        key = azure_account_key(rng)
        text = (
            "DefaultEndpointsProtocol=https;AccountName=acme;"
            f"AccountKey={key};EndpointSuffix=core.windows.net"
        )
        kept = ("AccountName=acme;AccountKey=", ";EndpointSuffix=core.windows.net")
        return Placed(which, text, key, kept)
    if which == "sas":
        sig = azure_sas_sig(rng)
        head = "https://acme.blob.core.windows.net/c/f.txt?sv=2021-08-06&se=2026-01-01&sp=r&sig="
        return Placed(which, f"{head}{sig}&spr=https", sig, (head, "&spr=https"))
    sig = "".join(rng.choice(HEX) for _ in range(64))
    head = (
        "https://b.s3.amazonaws.com/k.csv?X-Amz-Algorithm=AWS4-HMAC-SHA256"
        "&X-Amz-Date=20260101T000000Z&X-Amz-Expires=3600&X-Amz-SignedHeaders=host"
        "&X-Amz-Signature="
    )
    return Placed(which, head + sig, sig, (head,))


# --- .pgpass lines ---------------------------------------------------------------------------

PG_HOSTS = st.sampled_from(
    ["db", "db.internal", "10.0.0.5", "pg-1.acme.io", "localhost", "*", "/var/run/postgresql",
     r"fe80\:\:1", "postgres"]
)  # fmt: skip
PG_PORTS = st.one_of(st.sampled_from(["5432", "6432", "*"]), st.integers(1, 65535).map(str))
PG_DBS = st.sampled_from(["payments", "app_db", "*", "my-db", "analytics_2024", r"odd\:name"])
PG_USERS = st.sampled_from(["app", "postgres", "*", "svc_payments", "replicator", "read.only"])
# One word: no space, no unescaped colon or backslash (`\:` and `\\` are drawn in).
PG_WORD = _no(" :\\")


@st.composite
def _pg_password(draw: st.DrawFn, alphabet: str) -> str:
    pw = draw(_password(alphabet).filter(lambda p: p[0] not in "/~." and _not_template(p)))
    at = draw(st.integers(0, len(pw)))
    return pw[:at] + draw(st.sampled_from(["", r"\:", "\\\\"])) + pw[at:]


@st.composite
def pgpass_placements(draw: st.DrawFn, where: str = "pgpass_line") -> Placed:
    """A pgpass line: only its password goes, its first four fields stay as written."""
    head = f"{draw(PG_HOSTS)}:{draw(PG_PORTS)}:{draw(PG_DBS)}:{draw(PG_USERS)}:"
    if where == "pgpass_line":  # no word `pgpass` around: one word that looks like a password
        pw = draw(_pg_password(PG_WORD))
        word = draw(WORDS)
        return Placed(
            where, f"# {word}\n{head}{pw}\nnext line", pw, (f"# {word}\n{head}", "\nnext")
        )
    # a pgpass file shown: the password is the rest of its line, spaces and colons included
    pw = draw(_pg_password(_no("\\")).filter(lambda p: p == p.strip()))
    first = draw(_pg_password(PG_WORD))
    text = f"$ cat ~/.pgpass\nlocalhost:5432:*:postgres:{first}\n{head}{pw}\n"
    kept = ("$ cat ~/.pgpass\nlocalhost:5432:*:postgres:", f"\n{head}")
    return Placed(where, text, pw, kept, more=(first,))


# --- cookies ----------------------------------------------------------------------------------

# RFC 6265's cookie-octet, less the quotes the shell and JSON samples stand in.
COOKIE_OCTETS = "".join(c for c in PRINTABLE if c not in " \",;\\'`")
COOKIE_SHELL_BARE = "".join(c for c in COOKIE_OCTETS if c in SHELL_BARE)
COOKIE_NAMES = ["sessionid", "csrftoken", "_ga", "JSESSIONID", "__Host-session", "sid",
                "remember_me", "auth_token", "XSRF-TOKEN", "_gh_sess", "PHPSESSID"]  # fmt: skip
COOKIE_ATTRIBUTES = ["Path=/", "HttpOnly", "Secure", "Max-Age=3600", "SameSite=Lax",
                     "Expires=Wed, 21 Oct 2026 07:28:00 GMT", "SameSite=None",
                     "Domain=.example.com", "Priority=High", "Partitioned"]  # fmt: skip


def _cookie_value(rng: random.Random, alphabet: str = COOKIE_OCTETS) -> str:
    while True:
        value = _mixed(rng, rng.randint(8, 48), alphabet)
        if _not_template(value):
            return value


@dataclass(frozen=True)
class CookieText:
    where: str
    text: str
    values: tuple[str, ...]
    kept: tuple[str, ...]  # names and attributes, with what stands around them


@st.composite
def cookie_texts(draw: st.DrawFn) -> CookieText:
    rng = random.Random(draw(st.integers(0, 2**32)))
    where = draw(
        st.sampled_from(
            ["header_curl", "header_raw", "set_cookie", "set_cookie_joined", "curl_b",
             "curl_b_bare", "devtools_curl", "fetch_json", "har", "cookies_txt"]
        )
    )  # fmt: skip
    names = draw(st.lists(st.sampled_from(COOKIE_NAMES), min_size=1, max_size=4, unique=True))
    if where == "set_cookie_joined":
        names = [n.lower() for n in names]  # `XSRF-TOKEN=x,` reads as an env line's `x,`
    bare = where == "curl_b_bare"
    values = [_cookie_value(rng, COOKIE_SHELL_BARE if bare else COOKIE_OCTETS) for _ in names]
    if bare:
        names, values = names[:1], values[:1]
    attributes = draw(st.lists(st.sampled_from(COOKIE_ATTRIBUTES), max_size=4, unique=True))
    pairs = [f"{n}={v}" for n, v in zip(names, values, strict=True)]
    cookie = "; ".join(pairs)
    if where in ("set_cookie", "set_cookie_joined"):
        one = [f"Set-Cookie: {'; '.join([p, *attributes])}" for p in pairs]
        if where == "set_cookie":
            text = "HTTP/1.1 200 OK\r\n" + "\r\n".join(one) + "\r\nContent-Length: 0\r\n"
        else:
            text = "set-cookie: " + ", ".join("; ".join([p, *attributes]) for p in pairs)
        kept = (*(f"{n}=" for n in names), *(f"; {a}" for a in attributes))
        return CookieText(where, text, tuple(values), kept)
    text = {
        "header_curl": f"curl -s -H 'Cookie: {cookie}' https://app.example.com/api/me",
        "header_raw": f"GET /api/me HTTP/1.1\r\nHost: app.example.com\r\nCookie: {cookie}\r\n\r\n",
        "curl_b": f'curl -b "{cookie}" https://app.example.com/api/me',
        "curl_b_bare": f"curl -sS -b {cookie} https://app.example.com/api/me",
        "devtools_curl": "curl 'https://app.example.com/api/me' \\\n"
        "  -H 'accept-language: en-US,en;q=0.9' \\\n"
        f"  -b '{cookie}' \\\n  -H 'user-agent: Mozilla/5.0'",
        "fetch_json": json.dumps({"headers": {"accept": "*/*", "cookie": cookie}}),
        "har": json.dumps({"headers": [{"name": "Cookie", "value": cookie}]}),
        "cookies_txt": "# Netscape HTTP Cookie File\n"
        + "".join(
            f"{'#HttpOnly_' if i % 2 else ''}.example.com\tTRUE\t/\tFALSE\t1767225600\t{n}\t{v}\n"
            for i, (n, v) in enumerate(zip(names, values, strict=True))
        ),
    }[where]
    sep = "\t" if where == "cookies_txt" else "="
    return CookieText(where, text, tuple(values), tuple(f"{n}{sep}" for n in names))


@st.composite
def cookie_placements(draw: st.DrawFn) -> Placed:
    c = draw(cookie_texts())
    return Placed(f"cookie_{c.where}", c.text, c.values[0], c.kept, more=c.values[1:])


# --- passwords stated in prose, beyond English -----------------------------------------------

# (before the password, after it): a copula of the language or a colon, then the value.
INTL_LEADS = [
    ("das Passwort ist ", " und es geht."),
    ("Das Kennwort lautet: ", " (neu)"),
    ("das Passwort für die Datenbank ist jetzt ", " und es geht."),
    ("le mot de passe est ", " et ça marche."),
    ("le mot de passe de l'admin est ", " et ça marche."),
    ("mi contraseña es ", " y funciona."),
    ("la contraseña de producción es ", " y funciona."),
    ("a senha é ", " e funciona."),
    ("het wachtwoord is ", " en het werkt."),
    ("lösenordet är ", " och det fungerar."),
    ("passordet er ", " og det virker."),
    ("adgangskoden er ", " og det virker."),
    ("hasło do bazy to ", " i działa."),
    ("пароль от базы — ", " и всё работает."),
    ("пароль це ", " і все працює."),
    ("veritabanı şifresi: ", " ve çalışıyor."),
    ("数据库密码是", "，请勿外传。"),
    ("パスワードは", "です。"),
    ("비밀번호는 ", "입니다."),
]
INTL_QUOTES = [("« ", " »"), ("„", "“"), ("“", "”"), ("'", "'"), ('"', '"'), ("「", "」")]


@st.composite
def intl_prose_placements(draw: st.DrawFn, quoted: bool = False) -> Placed:
    before, after = draw(st.sampled_from(INTL_LEADS))
    if quoted:
        opening, closing = draw(st.sampled_from(INTL_QUOTES))
        pw = draw(_password(_no(closing)).filter(lambda p: p == p.strip() and _not_template(p)))
        text = f"{before}{opening}{pw}{closing}{after}"
        return Placed("prose_intl_quoted", text, pw, (f"{before}{opening}", f"{closing}{after}"))
    pw = draw(
        _password(_no(" \"'`\\")).filter(
            lambda p: p[-1] not in ".,;:!?)]}>" and p[0] not in "([<{/~." and _not_template(p)
        )
    )
    return Placed("prose_intl", f"{before}{pw}{after}", pw, (before, after))


PLACEMENTS = st.one_of(
    password_placements(), token_placements(), other_placements(), cookie_placements()
)


# --- invariants -------------------------------------------------------------------------------


def _assert_gone(out: str, p: Placed) -> None:
    for secret in (p.secret, *p.more):
        assert secret not in out, (p.where, secret, out)
        if len(secret) >= 20:  # a token went whole, not a prefix of it
            assert secret[-8:] not in out, (p.where, out)


def _assert_redaction_holds(p: Placed) -> str:
    out = redact(p.text)
    assert out is not None
    _assert_gone(out, p)
    assert PLACEHOLDER_PATTERN.search(out), (p.where, out)
    assert redact(out) == out, (p.where, out)
    assert not contains_secret(out), (p.where, out)
    for part in p.kept:
        assert part in out, (p.where, part, out)
    return out


@SETTINGS
@given(PLACEMENTS)
def test_secret_goes_text_stays_and_redaction_is_a_fixed_point(p: Placed) -> None:
    assert contains_secret(p.text), p
    _assert_redaction_holds(p)


@SETTINGS
@given(PLACEMENTS, st.sampled_from(["\n", " ", "; ", " | ", ": "]), WORDS)
def test_placements_in_a_longer_text(p: Placed, sep: str, word: str) -> None:
    """Placed between ordinary sentences, as in a turn."""
    text = f"Running {word} now{sep}{p.text}{sep}then {word} again: done."
    out = redact(text)
    assert out is not None
    _assert_gone(out, p)
    assert redact(out) == out
    assert not contains_secret(out)
    assert out.startswith(f"Running {word} now")
    assert out.endswith(f"then {word} again: done.")


@SETTINGS
@given(st.lists(PLACEMENTS, min_size=1, max_size=4), st.lists(WORDS, min_size=4, max_size=4))
def test_fast_path_agrees_with_scalar_path(placed: list[Placed], words: list[str]) -> None:
    values: list[str | None] = [p.text for p in placed] + [*words, None]
    values += [redact(p.text) for p in placed]
    column = pl.Series("v", values)
    expected = [None if v is None else redact(v) for v in values]
    assert redact_series(column).to_list() == expected
    redacted, counts = redact_series_with_count(column)
    assert redacted.to_list() == expected
    assert counts.to_list() == [0 if v is None else redact_with_count(v)[1] for v in values]
    assert secret_mask(column).to_list() == [v is not None and contains_secret(v) for v in values]
    assert not secret_mask(redacted).any()


@SETTINGS
@given(PLACEMENTS, WORDS)
def test_tool_call_triples(p: Placed, word: str) -> None:
    """`redact_json` on an agent's tool call: the secret goes from every string, the structure
    stays, and the stored JSON text passes the check."""
    call = {
        "name": "upsert_graph_triples",
        "input": {
            "triples": [
                {"subject": word, "predicate": "USES", "object": p.text},
                {"subject": p.text, "predicate": "CONFIGURED_WITH", "object": word},
                {"subject": "payments-api", "predicate": "DEPENDS_ON", "object": "postgres"},
            ],
            "note": p.text,
        },
    }
    out = redact_json(call)
    stored = json.dumps(out, ensure_ascii=False, sort_keys=True)
    _assert_gone(stored, p)
    assert redact_json(out) == out
    assert not contains_secret(stored)
    triples = out["input"]["triples"]
    assert triples[0]["subject"] == word and triples[1]["object"] == word
    assert triples[2] == call["input"]["triples"][2]  # type: ignore[index]
    assert triples[0]["object"] == redact(p.text)


def _escape_json_string(value: str, rng: random.Random, *, slashes: bool, unicode: float) -> str:
    """A JSON string literal as other writers produce it: `\\/` for `/` (PHP), `\\uXXXX` for
    some characters."""
    out = ['"']
    for c in value:
        if c == '"':
            out.append('\\"')
        elif c == "\\":
            out.append("\\\\")
        elif c == "\n":
            out.append("\\n")
        elif ord(c) < 0x20:
            out.append(f"\\u{ord(c):04x}")
        elif c == "/" and slashes:
            out.append("\\/")
        elif rng.random() < unicode:
            out.append(f"\\u{ord(c):04x}")
        else:
            out.append(c)
    out.append('"')
    return "".join(out)


def _lenient_decode(text: str) -> str:
    """JSON escapes decoded wherever they stand (the text may be clipped)."""
    for _ in range(3):
        text = re.sub(r"\\u([0-9a-fA-F]{4})", lambda m: chr(int(m.group(1), 16)), text)
        text = text.replace("\\/", "/").replace('\\"', '"').replace("\\\\", "\\")
    return text


@SETTINGS
@given(
    PLACEMENTS,
    st.integers(0, 2**32),
    st.booleans(),
    st.sampled_from([0.0, 0.0, 0.3, 1.0]),
    st.integers(1, 400),
)
def test_quarantine_record(
    p: Placed, seed: int, slashes: bool, unicode: float, limit_seed: int
) -> None:
    """A rejected raw line, escaped as other writers escape JSON, redacted then clipped at
    any point: no secret, in any escaped form, and no part of one at the cut."""
    rng = random.Random(seed)
    content = _escape_json_string(p.text, rng, slashes=slashes, unicode=unicode)
    raw = f'{{"org":"acme","repo":"r","session_id":"s1","content":{content},"role":"user"}}'
    # 8-character pieces of the secret that nothing else in the line holds
    around = p.text.replace(p.secret, "\n") + raw
    windows = {p.secret[i : i + 8] for i in range(0, max(0, len(p.secret) - 7), 4)}
    windows = {w for w in windows if w not in around}
    for limit in (len(raw) + 10, limit_seed, max(1, len(raw) - limit_seed), 2000):
        out = redact_record(raw, limit)
        assert len(out) <= limit
        assert not contains_secret(out), out
        decoded = _lenient_decode(out)
        _assert_gone(decoded, p)
        for window in windows:  # no part of the secret is left at the cut
            assert window not in decoded, (p.where, window, out)
    if unicode == 0.0 and not slashes:
        whole = redact_record(raw, len(raw) * 2)
        assert json.loads(whole)["org"] == "acme"  # still JSON where the input was plain JSON


@SETTINGS
@given(token_placements(), st.sampled_from(["sess-", "turn_", "", "client/"]), st.text(ALNUM))
def test_ids(p: Placed, prefix: str, suffix: str) -> None:
    value = f"{prefix}{p.secret}{suffix}"
    out = redact_id(value)
    _assert_gone(out, p)
    assert not contains_secret(out)
    assert redact_id(out) == out
    assert redact_id(value) == out  # deterministic
    assert out.startswith(prefix)
    other = redact_id(f"{prefix}{p.secret}x{suffix}")
    assert other != out  # two secret-bearing ids do not collide


CLEAN_IDS = st.one_of(
    st.uuids().map(str),
    st.binary(min_size=20, max_size=32).map(lambda b: hashlib.sha256(b).hexdigest()),
    st.integers(0, 10**9).map(lambda n: f"sess-{n}"),
    st.integers(0, 10**6).map(lambda n: f"turn_{n:06d}"),
    st.sampled_from(["claude-code", "codex", "cursor/0.42", "2026-11-20.jsonl", "a.parquet"]),
    st.dates().map(lambda d: f"{d.isoformat()}-turns.jsonl"),
)


@SETTINGS
@given(CLEAN_IDS)
def test_clean_ids_come_back_unchanged(value: str) -> None:
    assert redact_id(value) == value


# --- what the new kinds keep ------------------------------------------------------------------

_ANY_PLACEHOLDER = r"\[REDACTED:[a-z0-9_]+\]"


@SETTINGS
@given(PG_HOSTS, PG_PORTS, PG_DBS, PG_USERS, st.booleans(), st.data())
def test_a_pgpass_line_keeps_its_first_four_fields(
    host: str, port: str, db: str, user: str, said: bool, data: st.DataObject
) -> None:
    """Only the password field goes: host, port, database and user stay as written (escapes
    included); where the text says pgpass, the password is the rest of the line."""
    head = f"{host}:{port}:{db}:{user}:"
    if said:
        pw = data.draw(_pg_password(_no("\\")).filter(lambda p: p == p.strip()))
        text, before, after = f"$ cat ~/.pgpass\n{head}{pw}\n", "$ cat ~/.pgpass\n", "\n"
    else:
        pw = data.draw(_pg_password(PG_WORD))
        text, before, after = f"{head}{pw}", "", ""
    out = redact(text)
    assert out is not None
    assert re.fullmatch(re.escape(before + head) + _ANY_PLACEHOLDER + re.escape(after), out), out
    assert redact(out) == out and not contains_secret(out)


@SETTINGS
@given(cookie_texts())
def test_a_cookie_text_keeps_names_and_attributes(c: CookieText) -> None:
    """Every cookie value goes and nothing else does: names, attributes (`Path=/; HttpOnly;
    Expires=...`), separators and the command or document around them stay."""
    out = redact(c.text)
    assert out is not None
    expected = c.text
    for value in c.values:
        expected = expected.replace(value, "[REDACTED:cookie]")
    assert PLACEHOLDER_PATTERN.sub("[REDACTED:cookie]", out) == expected, (c.where, out)
    assert redact(out) == out and not contains_secret(out)


@SETTINGS
@given(
    st.lists(st.sampled_from(COOKIE_NAMES), min_size=1, max_size=4, unique=True),
    st.integers(0, 2**32),
    st.sampled_from(["Cookie", "cookie", "Set-Cookie", "set-cookie"]),
)
def test_redact_json_cuts_the_values_of_parsed_cookies(
    names: list[str], seed: int, header: str
) -> None:
    """Parsed, a cookie has no header around it in the text: a headers mapping, a HAR header
    entry and cookie objects still lose their values, never their names."""
    rng = random.Random(seed)
    values = [_cookie_value(rng) for _ in names]
    if header.lower() == "set-cookie":
        names, values = names[:1], values[:1]
        cookie = f"{names[0]}={values[0]}; Path=/; HttpOnly"
    else:
        cookie = "; ".join(f"{n}={v}" for n, v in zip(names, values, strict=True))
    doc = {
        "headers": {header: cookie, "accept": "*/*"},
        "entries": [{"name": header, "value": cookie}],
        "cookies": [
            {"name": n, "value": v, "domain": ".example.com", "path": "/"}
            for n, v in zip(names, values, strict=True)
        ],
    }
    out = redact_json(doc)
    stored = json.dumps(out)
    for value in values:
        assert value not in stored, stored
    for name in names:
        assert f"{name}=" in out["headers"][header] and f'"name": "{name}"' in stored
    assert redact_json(out) == out and not contains_secret(stored)


# Words in the scripts of the languages the prose rule reads, as prose writes them.
PLAIN_WORDS = st.text(
    alphabet=st.sampled_from(
        "abcdefghijklmnopqrstuvwxyzäöüßéèàçñãåøæłśżąęışğабвгдежзиклмнопрстуфхцчшщыьэюяєії"
    ),
    min_size=1,
    max_size=16,
)


@SETTINGS
@given(st.sampled_from(INTL_LEADS), PLAIN_WORDS, st.sampled_from(["lower", "title", "upper"]))
def test_prose_beyond_english_needs_a_value_that_looks_like_a_password(
    lead: tuple[str, str], word: str, case: str
) -> None:
    """ "das Passwort ist erforderlich", "пароль — обязательное": a plain word is no password,
    in any of these languages, whatever its case."""
    before, after = lead
    text = f"{before}{getattr(word, case)()}{after}"
    assert redact(text) == text


# --- the red team's offline shape: carriers x prefixes x suffixes ----------------------------

_R = random.Random(20261201)
_PW = [
    "Tr0ub4dor&3",
    "p@ss:w0rd",
    "Hunter2RT(prod)",
    "Sup3r[Secret]RT",
    "a&b=c#d?e9X",
    "q\"uo'te1X",
    "back\\slash9X",
    "pct%41x9X",
    "x:y@z9X",
    "]close9X",
    "semi;colon9X",
    "comma,9X",
]
CARRIERS: list[tuple[str, str]] = [(k, make(_R)) for k, make in sorted(TOKEN_MAKERS.items())]
CARRIERS += [("aws_secret_env", f"AWS_SECRET_ACCESS_KEY={aws_secret(_R)}")]
CARRIERS += [("aws_secret_prose", f"the aws secret key is {aws_secret(_R)}")]
CARRIERS += [("pem", _pem(_R, "RSA PRIVATE KEY"))]
CARRIERS += [("sas", f"https://x.blob.core.windows.net/c/f?sv=2021-08-06&sig={azure_sas_sig(_R)}")]
for _i, _pw in enumerate(_PW):
    CARRIERS += [
        (f"url{_i}", f"postgres://app:{_pw}@db:5432/pay"),
        (f"env{_i}", f"DB_PASSWORD={_pw}"),
        (f"json{_i}", json.dumps({"password": _pw})),
        (f"jsonesc{_i}", json.dumps(json.dumps({"db": {"password": _pw}}))),
        (f"prose{_i}", f"my password is {_pw}"),
        (f"pw{_i}", f"pw: {_pw}"),
        (f"mysql{_i}", f"mysql -u root -p'{_pw}' -h db"),
        (f"sshpass{_i}", f"sshpass -p '{_pw}' ssh host"),
        (f"redis{_i}", f"redis-cli -a '{_pw}' ping"),
        (f"docker{_i}", f"docker login -u bot -p '{_pw}' r.io"),
        (f"curl{_i}", f"curl -u 'admin:{_pw}' https://api"),
        (f"flag{_i}", f"deploy --db-password '{_pw}' --yes"),
        (f"pgpass{_i}", "db:5432:pay:app:" + _pw.replace("\\", "\\\\").replace(":", "\\:")),
        (f"pgpassfile{_i}", f"# ~/.pgpass\n*:*:*:app:{_pw}"),
        (f"cookie{_i}", f"Cookie: sid={_pw}; theme=dark"),
        (f"setcookie{_i}", f"Set-Cookie: sid={_pw}; Path=/; HttpOnly"),
        (f"cookiestxt{_i}", f".example.com\tTRUE\t/\tFALSE\t0\tsid\t{_pw}"),
        (f"prose_de{_i}", f"das Passwort ist {_pw}"),
        (f"prose_zh{_i}", f"密码是{_pw}"),
    ]
PREFIXES = [
    "",
    "Here is the key ",
    "Note: ",
    "[REDACTED:private_key] ",
    "[REDACTED:gcp_api_key]: ",
    '"',
    "'",
    "(",
    "[",
    '{"k": "',
    "x=",
    "password: ",
    "token ",
    "see\n",
    "`",
    "key ",
    "api_key ",
    "Authorization: Bearer ",
]
SUFFIXES = [
    "",
    ": please restrict it",
    ": word",
    " is my key",
    ".",
    ",",
    ")",
    "]",
    '"',
    "'",
    "&x=1",
    "/path",
    "\nnext",
    ": secret",
    "=value",
    "`",
    "}",
    "; ok",
    " api_key: word",
    " [REDACTED:password]: word",
    "[REDACTED:private_key]: word",
]
COMBINATIONS = list(itertools.product(CARRIERS, PREFIXES, SUFFIXES))
_STRIDE = 1 if _FUZZ else 7


def test_every_combination_is_a_fixed_point_the_check_accepts() -> None:
    broken = []
    for (name, carrier), prefix, suffix in COMBINATIONS[::_STRIDE]:
        text = prefix + carrier + suffix
        once = redact(text)
        assert once is not None
        if redact(once) != once or contains_secret(once):
            broken.append((name, text, once))
    assert not broken, f"{len(broken)} of {len(COMBINATIONS[::_STRIDE])}: {broken[:5]}"


@pytest.mark.parametrize("limit", [1, 17, 40, 80])
def test_every_combination_as_a_clipped_record(limit: int) -> None:
    for (_, carrier), prefix, suffix in COMBINATIONS[:: _STRIDE * 5]:
        raw = json.dumps({"content": prefix + carrier + suffix}).replace("/", "\\/")
        out = redact_record(raw, limit)
        assert len(out) <= limit and not contains_secret(out), (raw, out)


# --- linear time: the bounded gates and the one-pass detectors lose nothing -------------------
#
# Gates match within a bounded width (a long run opens them through a hatch), and detectors
# whose matches read a run again from each start inside it are found in one pass
# (`schemas/redaction.py`, "linear time"). These check that each rewrite finds what the form
# before it found (tests assert no time).

_LONG = _base._GATE_RUN + 6  # past every gate's bound


@SETTINGS
@given(st.data())
def test_a_bounded_gate_is_implied_by_its_unbounded_form(data: st.DataObject) -> None:
    """Whatever the unbounded gate (a necessary condition of its detectors, and what polars
    reads) matches, the bounded one matches too: within the bound, or through its hatch."""
    gate = data.draw(st.sampled_from([g for g in _gates._GATES if g != _base._unbounded(g)]))
    unbounded = _base._unbounded(gate)
    if data.draw(st.booleans()):  # runs past the bound, where only a hatch matches
        unbounded = re.sub(r"\{(\d+),\}", f"{{{_LONG},{2 * _LONG}}}", unbounded)
    text = data.draw(st.from_regex(unbounded))
    assert re.search(gate, text), (gate, text)


@st.composite
def long_run_placements(draw: st.DrawFn) -> Placed:
    """A secret whose gate opens only through a hatch: a name, blanks or a field longer than
    the gate's bound before the operator, flag or value."""
    pad = draw(st.integers(_LONG, 3 * _LONG))
    pw = draw(_password(ALNUM, min_size=8))
    shapes = [
        (f"{'x' * pad}_password={pw}", f"{'x' * pad}_password="),
        (f"db.{'conn_' * (pad // 5)}password = {pw};", "db."),
        (f"password{' ' * pad}= {pw}", "password"),
        (f"api_key{chr(9) * pad}: {pw}", "api_key"),
        (f"run --{'x' * pad}-password {pw} now", "run --"),
        (f"<{'x' * pad}password>{pw}</{'x' * pad}password>", f"<{'x' * pad}password>"),
        (f"ENV{' ' * pad}DB_PASSWORD {pw}", "ENV"),
        (f"docker login{' -u bot' * (pad // 7)} -p {pw} registry.io", "docker login"),
        (f"echo {pw}{' ' * pad}| sudo -S true", "echo "),
        (f"CREATE USER app IDENTIFIED{' ' * pad}BY '{pw}'", "CREATE USER app"),
        (f"curl -b{' ' * pad}sid={pw} https://x.example.com", "curl -b"),
        (f"Cookie{' ' * pad}: sid={pw}", "Cookie"),
        (f"h.example.com:5432:{'d' * pad}:app:{pw}  # ~/.pgpass", "h.example.com:5432:"),
        (f"see https://{'u' * pad}:{pw}@db.example.com/x", f"https://{'u' * pad}:"),
        (f"mail {'a' * 3}@{'b' * pad}.example.com now", "mail "),
    ]
    text, kept = draw(st.sampled_from(shapes))
    secret = pw if "@b" not in text else text.split(" ")[1]
    return Placed("long_run", text, secret, (kept,))


@SETTINGS
@given(long_run_placements())
def test_a_run_past_a_gate_bound_still_opens_it(p: Placed) -> None:
    assert contains_secret(p.text), p
    out = _assert_redaction_holds(p)
    assert redact_series(pl.Series([p.text, out])).to_list() == [out, out]


def _groups(m: Any) -> tuple[Any, ...] | None:
    if m is None:
        return None
    names = (
        {**m.head.re.groupindex, **m.flag.re.groupindex} if hasattr(m, "head") else m.re.groupindex
    )
    return tuple(
        (name, m.span(name) if m.group(name) is not None else None) for name in sorted(names)
    )


_SCAN_WORDS = (
    "sshpass", "redis-cli", "docker", "podman", "login", "mongo", "mongodump", "sqlcmd",
    "ldapsearch", "zip", "unzip", "7z", "7za", "mysql", "openssl", "htpasswd", "rabbitmqctl",
    "add_user", "gh", "secret", "set", "smbclient", "curl", "-p", "-pX1", "-P", "-a", "--pass",
    "-w", "-k", "-pass", "pass:X1", "-bBb", "-U", "a%b", "--body", "-u", "--user", "a:b",
    "'a:b c'", '"a:b"', "'x y'", '"x\\"y"', "key=\"DbPassword\"", "name='pw'", "value='v1'",
    'value="V2"', "|", ";", "&", "\n", "<", ">", "x", "Y9", "-", "\\", "'", '"', "=",
)  # fmt: skip
SCAN_TEXTS = st.lists(
    st.tuples(st.sampled_from(_SCAN_WORDS), st.sampled_from([" ", "\t", "", "  "])),
    max_size=14,
).map(lambda parts: "".join(w + s for w, s in parts))


@SETTINGS
@given(SCAN_TEXTS)
def test_a_scan_finds_what_its_one_regex_found(text: str) -> None:
    """Commands, `curl -u` and `key="..." ... value="..."` are found as a `_Scan` (the first
    flag after the head, read once for all heads before it): the same match, group for group,
    as the regex with its lazy middle, at every start."""
    lowered = _base._lower(text)
    for d in detectors._DETECTORS:
        if d.scan is None:
            continue
        for pos in d.starts(text, lowered):  # type: ignore[misc]
            assert _groups(d.scan.match(text, pos)) == _groups(d.pattern.match(text, pos)), (
                d.pattern.pattern[:40],
                text,
                pos,
            )


def _spans_of(d: Any, text: str) -> set[tuple[int, int]]:
    return {(s, e) for s, e, _, _ in d.find(text, _base._lower(text), _base._atoms(text))}


def _covered(inner: set[tuple[int, int]], outer: set[tuple[int, int]]) -> bool:
    return all(any(s <= a and b <= e for s, e in outer) for a, b in inner)


@SETTINGS
@given(
    st.lists(
        st.sampled_from(
            ["curl", "-b", "--cookie", "--cookie=", "'a=B1; c=D2'", '"s=T3"', "sid=Q4",
             "cookies.txt", "-H", "'X: -b a=b'", "|", ";", "&", "\\\n", "\n", "x", "https://h"]
        ),
        max_size=12,
    ).map(" ".join)
)  # fmt: skip
def test_curl_cookies_found_in_one_pass_hold_what_the_regex_found(text: str) -> None:
    """Each `-b`/`--cookie` after a `curl` on its (continued) line is read, quoted words and
    `|`, `;`, `&` included: every value the one regex (a lazy middle from `curl`) cut is
    still cut."""
    d = next(d for d in detectors._DETECTORS if d.pattern is cookies._CURL_COOKIE_FLAG_RE)
    regex = dataclasses.replace(
        d,
        pattern=cookies._CURL_COOKIE,
        starts=_base._at("curl", before=r"\b"),
        refine_all=cookies._curl_cookie_spans,
    )
    assert _covered(_spans_of(regex, text), _spans_of(d, text)), text


def _jwt(rng: random.Random) -> str:
    head = base64.urlsafe_b64encode(b'{"alg":"HS256"}').rstrip(b"=").decode()
    body = base64.urlsafe_b64encode(b'{"sub":"1"}').rstrip(b"=").decode()
    return f"{head}.{body}.{_chars(rng, 20, ALNUM)}"


@SETTINGS
@given(
    st.lists(
        st.sampled_from(
            ["eyJ", "eyJx", "JWT", "sk-", "x", ".", " ", "=", "-", "T3BlbkFJ", "a" * 20]
        ),
        max_size=16,
    ),
    st.integers(0, 2**32),
)
def test_library_patterns_found_from_fewer_starts_find_what_a_search_found(
    parts: list[str], seed: int
) -> None:
    """The JWT pattern tried at the first `_JWT_TRIES` `eyJ` of a run, OpenAI's legacy pattern
    at the first `sk-` of a run: the spans a search of every position gave (within those tries);
    npm's token after each `/:_authToken=`: at least what the library's line pattern cut."""
    rng = random.Random(seed)
    text = "".join(p if p != "JWT" else _jwt(rng) for p in parts)
    by_pattern = {d.pattern.pattern: d for d in detectors._DETECTORS}
    for plugin in (JwtTokenDetector, OpenAIDetector):
        d = by_pattern[plugin.denylist[0].pattern]
        assert _spans_of(d, text) == _spans_of(dataclasses.replace(d, starts=None), text), text
    npm_text = f"//registry.npmjs.org/:_authToken={text} //r/:_authToken=npm_{rng.randint(0, 9)}Ab"
    library = _base._Detector(
        "npm_token", NpmDetector.denylist[0], ("",), groups=(1,), clip=_base._TOKEN_TAIL
    )
    found = set().union(
        *(_spans_of(d, npm_text) for d in detectors._DETECTORS if d.kind == "npm_token")
    )
    assert _covered(_spans_of(library, npm_text), found), npm_text


@SETTINGS
@given(st.text(alphabet="ab_P1 \t\r=\u00a0«»", max_size=40))
def test_rewritten_value_patterns_match_as_before(text: str) -> None:
    """Greedy forms of lazy values (a lazy value tried the blanks after it at each of its
    characters): the Dockerfile `ENV` value and the « » value match as before; the variable
    name check takes names whole and matches as before."""
    old_env = re.compile(r"[^\s=][^\n]*?[ \t]*$", re.MULTILINE)
    new_env = re.compile(r"[^\s=](?:[^\n]*[^ \t\n])?[ \t]*$", re.MULTILINE)
    for pos in range(len(text) + 1):
        old, new = old_env.match(text, pos), new_env.match(text, pos)
        assert (old and old.span()) == (new and new.span()), (text, pos)
    sp = "[ \t\u00a0]"
    old_quote = re.compile(rf"«{sp}*(?P<v>[^»\n]*?){sp}*»")
    new_quote = re.compile(rf"«{sp}*(?P<v>(?:[^«»\n]*[^«»\n \t\u00a0])?){sp}*»")
    for pos in range(len(text)):
        old, new = old_quote.match(text, pos), new_quote.match(text, pos)
        if old is not None and "«" not in old.group("v"):  # an inner « ends it now
            assert new is not None and new.span("v") == old.span("v"), (text, pos)
    old_var = re.compile(r"[A-Za-z_]*(?:pass|pwd|secret|token|key|credential)[A-Za-z_]*", re.I)
    for word in (text, text.replace(" ", "pass"), text.replace("a", "Key")):
        assert bool(old_var.fullmatch(word)) == bool(values._SECRET_NAMED_VARIABLE.fullmatch(word))


# Hostile shapes (families of `bench/bench_redaction_adversarial.py`, which times them): at a
# size where the quadratic forms took seconds each, redaction keeps its invariants. No time is
# asserted.
HOSTILE = [
    "-", "key", "pw", "token", "pass", "secret", "密码是", "パスワードは", "pw=", "password=",
    "PASSWORD=$(", "password='", "Passwort:", "Passwort: «", "密码：“", "env ", "<token ",
    "Set-Cookie: a=b; ", "cookie:a=", "zip ", "curl ", "eyJ", "sk-", "AKIA", "a@a.",
    "-----BEGIN PRIVATE KEY-----[REDACTED]", "\\u0070assword=", "İkey=", ":1:", "@x\\u0041",
]  # fmt: skip


@pytest.mark.parametrize("unit", HOSTILE)
def test_hostile_repetitions_keep_the_invariants(unit: str) -> None:
    text = (unit * (20_000 // len(unit) + 1))[:20_000]
    out = redact(text)
    assert out is not None
    assert redact(out) == out
    assert not contains_secret(out)
    assert redact_series(pl.Series([text])).to_list() == [out]
