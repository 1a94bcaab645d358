"""Secrets the fuzz plants, and how a leak of one is recognised.

A planted secret comes with its carrier: the text it travels in (a bare token, a connection
string, an env line, a sentence). Four sources: the token families of the property tests,
the password carriers below (the families `schemas.redaction` claims), the held-out third
of gitleaks' rule tests (`bench/data/secret_corpus.jsonl`: formats memflow's own detectors do
not name, never used to tune them) and the held-out half of memflow's second corpus of real
configuration, connection and command formats (`bench/data/secret_corpus_formats.jsonl`,
source `held_out_formats`); only those the redactor removes are planted, the rest is counted
in BENCHMARKS.md. A secret that reaches any output is a bug, never an unfair test.
Each secret records its source and the channel it was planted through (`Secret.channel`,
set by the zone builder), so the tally reports planted and found per channel.

A leak is the secret itself, or any 16-character piece of it that the redactor would not
itself keep from the carrier alone (`marks`): a secret clipped before it was redacted leaves
pieces no detector recognises, and those count as leaks too.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import random
import re
import string
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import ahocorasick

from schemas.redaction import contains_secret, redact
from tests.unit.test_redaction_properties import TOKEN_MAKERS, aws_secret

WINDOW = 16
ALNUM = string.ascii_letters + string.digits

# Token families whose characters make a valid org/repo directory name ([A-Za-z0-9._-]).
SCOPE_SAFE_TOKENS = (
    "aws_key_id",
    "github_classic",
    "gitlab",
    "stripe",
    "huggingface",
    "npm",
    "digitalocean",
    "databricks",
    "shopify",
    "linear",
    "slack_bot",
)
# Families whose tokens are recognised inside ids and file names (`redact_id`'s property test
# covers every family; these keep file names short and free of '/').
ID_TOKENS = tuple(k for k in sorted(TOKEN_MAKERS) if k not in ("slack_webhook",))


def _password(rng: random.Random, n: int = 12) -> str:
    """Letters and digits with each class present: a password the prose and assignment
    detectors are documented to find."""
    while True:
        value = "".join(rng.choice(ALNUM) for _ in range(n))
        if (
            any(c.isupper() for c in value)
            and any(c.islower() for c in value)
            and any(c.isdigit() for c in value)
        ):
            return value


# Text carriers of a password: (name, template). Each is a documented placement.
PASSWORD_CARRIERS: tuple[tuple[str, str], ...] = (
    ("url", "DATABASE_URL=postgres://app:{pw}@db:5432/pay"),
    ("env", "export DB_PASSWORD={pw}"),
    ("prose", "for prod my password is {pw} and it works"),
    ("json", '{{"user": "app", "password": "{pw}"}}'),
    ("sshpass", "sshpass -p {pw} ssh deploy@10.0.0.5 uptime"),
    ("docker", "docker login -u bot -p {pw} registry.example.com"),
    ("redis", "redis-cli -h cache -a {pw} ping"),
    ("curl", "curl -s -u admin:{pw} https://api.example.com/v1"),
    ("mysql", "mysql -u root -p{pw} -h db app"),
    ("flag", "./manage.py migrate --db-password {pw} --noinput"),
    ("aws_prose", "my AWS secret access key is {aws}"),
    ("url_raw", "postgres://app:{pw}/x#y@db.internal:5432/pay"),
    ("mariadb", "mariadb -h db -u app -p{pw} payments"),
    ("curl_proxy", "curl --proxy-user proxy:{pw} https://x.example"),
    ("lftp", "lftp -u deploy,{pw} sftp://files.example"),
    ("rdp", "xfreerdp /v:host /u:admin /p:{pw}"),
    ("keytool", "keytool -list -keystore a.p12 -storepass {pw}"),
    ("oracle", "sqlplus scott/{pw}@orcl"),
    ("redis_conf", "requirepass {pw}"),
    ("call_pair", 'System.setProperty("DB_PASSWORD", "{pw}");'),
    ("go_var", 'var dbPassword string = "{pw}"'),
    ("prose_de", "das Passwort für prod: {pw}"),
    ("prose_ru", "пароль от базы {pw}"),
    ("prose_it", "la password è {pw}"),
    ("prose_vi", "mật khẩu là {pw}"),
    ("prose_ko", "암호는 {pw}"),
    ("typographic", "my password is “{pw}”"),
)


@dataclass(frozen=True)
class Secret:
    """One planted secret: the carrier text placed in the input, and the secret inside it."""

    kind: str
    carrier: str
    secret: str
    marks: tuple[str, ...] = field(default=(), compare=False)
    source: str = field(default="claimed", compare=False)  # or "held_out"
    channel: str = field(default="", compare=False)  # where it was planted

    def planted_in(self, channel: str) -> Secret:
        return self if self.channel else dataclasses.replace(self, channel=channel)

    def found_in(self, haystack: str) -> bool:
        return any(m in haystack for m in self.marks)


def _marks(carrier: str, secret: str) -> tuple[str, ...]:
    kept = redact(carrier) or ""
    pieces = {secret}
    for i in range(0, max(0, len(secret) - WINDOW) + 1, 4):
        piece = secret[i : i + WINDOW]
        if len(piece) == WINDOW and piece not in kept:
            pieces.add(piece)
    return tuple(sorted(pieces, key=len, reverse=True))


def make_secret(kind: str, carrier: str, secret: str, source: str = "claimed") -> Secret:
    assert secret in carrier, (kind, carrier)
    # Only what the redactor claims is planted: a carrier it does not find is a redaction bug.
    assert contains_secret(carrier), f"the redactor misses a claimed carrier: {carrier!r}"
    assert secret not in (redact(carrier) or ""), f"the redactor keeps {secret!r}"
    return Secret(kind, carrier, secret, _marks(carrier, secret), source)


CORPUS = Path(__file__).resolve().parents[2] / "bench" / "data" / "secret_corpus.jsonl"
FORMATS = CORPUS.with_name("secret_corpus_formats.jsonl")


@functools.cache
def held_out(corpus: Path = CORPUS, least: int = 1000) -> tuple[tuple[str, str, str], ...]:
    """(rule, line, secret) of a corpus's held-out part (gitleaks' rule tests by default)
    that the redactor removes (one line of 2 KiB at most, a secret of 8 characters or more)."""
    rows = [json.loads(line) for line in corpus.read_text().splitlines()[1:]]
    out = []
    for r in rows:
        secret, text = r["secret"], r["text"]
        if r["label"] != "tp" or r["split"] != "held_out" or len(secret) < 8:
            continue
        if "\n" in text or len(text) > 2048 or secret not in text:
            continue
        if secret not in (redact(text) or ""):
            out.append((r["rule"], text, secret))
    assert len(out) > least, (corpus.name, len(out))
    return tuple(out)


def corpus_secret(rng: random.Random) -> Secret:
    """A line of gitleaks' held-out rule tests or, one time in three, of the held-out formats
    (`FORMATS`), as it was written there."""
    if rng.random() < 1 / 3:
        rule, text, secret = rng.choice(held_out(FORMATS, 100))
        return make_secret(f"formats:{rule}", text, secret, source="held_out_formats")
    rule, text, secret = rng.choice(held_out())
    return make_secret(f"gitleaks:{rule}", text, secret, source="held_out")


def token(rng: random.Random, families: Iterable[str] = ID_TOKENS) -> Secret:
    kind = rng.choice(sorted(families))
    value = TOKEN_MAKERS[kind](rng)
    return make_secret(kind, value, value)


def password_text(rng: random.Random, carrier: str | None = None) -> Secret:
    name, template = (
        next(c for c in PASSWORD_CARRIERS if c[0] == carrier)
        if carrier
        else rng.choice(PASSWORD_CARRIERS)
    )
    if "{aws}" in template:
        value = aws_secret(rng)
        return make_secret(name, template.format(aws=value), value)
    pw = _password(rng)
    return make_secret(name, template.format(pw=pw), pw)


def text_secret(rng: random.Random) -> Secret:
    """A secret as it appears in text: a token, a password in one of its carriers, or a line
    of the held-out rule tests."""
    draw = rng.random()
    if draw < 1 / 3:
        return token(rng)
    return password_text(rng) if draw < 2 / 3 else corpus_secret(rng)


MakeSecret = Callable[[random.Random], Secret]


def scan(haystack: str, secrets: Iterable[Secret]) -> list[Secret]:
    """The planted secrets found in `haystack` (decoded JSON escapes included).

    One Aho-Corasick pass over each text for every mark of every secret: a data directory's
    text runs to tens of MB, and a search per mark took over a minute for one zone."""
    secrets = list(secrets)
    texts = [haystack]
    decoded = _lenient_decode(haystack)
    if decoded != haystack:
        texts.append(decoded)
    marks: dict[str, set[int]] = {}
    found: set[int] = set()
    for number, secret in enumerate(secrets):
        for mark in secret.marks:
            if mark:
                marks.setdefault(mark, set()).add(number)
            else:
                found.add(number)  # an empty mark is in every text, as `in` says
    if not marks:
        return [s for number, s in enumerate(secrets) if number in found]
    automaton = ahocorasick.Automaton()
    for mark, numbers in marks.items():
        automaton.add_word(mark, numbers)
    automaton.make_automaton()
    for text in texts:
        for _end, numbers in automaton.iter(text):
            found |= numbers
            if len(found) == len(secrets):
                break
    return [s for number, s in enumerate(secrets) if number in found]


_UNICODE_ESCAPE = re.compile(r"\\u([0-9a-fA-F]{4})")


def _lenient_decode(text: str) -> str:
    for _ in range(3):
        text = _UNICODE_ESCAPE.sub(lambda m: chr(int(m.group(1), 16)), text)
        text = text.replace("\\/", "/").replace('\\"', '"').replace("\\\\", "\\")
    return text
