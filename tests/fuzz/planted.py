"""Secrets the fuzz plants, and how a leak of one is recognised.

A planted secret comes with its carrier: the text it travels in (a bare token, a connection
string, an env line, a sentence). Only carriers the redactor claims are planted (the token
families and placements of `schemas.redaction`'s docstring and its property tests), so a
secret that reaches any output is a bug, never an unfair test.

A leak is the secret itself, or any 16-character piece of it that the redactor would not
itself keep from the carrier alone (`marks`): a secret clipped before it was redacted leaves
pieces no detector recognises, and those count as leaks too.
"""

from __future__ import annotations

import random
import re
import string
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

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
)


@dataclass(frozen=True)
class Secret:
    """One planted secret: the carrier text placed in the input, and the secret inside it."""

    kind: str
    carrier: str
    secret: str
    marks: tuple[str, ...] = field(default=(), compare=False)

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


def make_secret(kind: str, carrier: str, secret: str) -> Secret:
    assert secret in carrier, (kind, carrier)
    # Only what the redactor claims is planted: a carrier it does not find is a redaction bug.
    assert contains_secret(carrier), f"the redactor misses a claimed carrier: {carrier!r}"
    assert secret not in (redact(carrier) or ""), f"the redactor keeps {secret!r}"
    return Secret(kind, carrier, secret, _marks(carrier, secret))


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
    """A secret as it appears in text: a token, or a password in one of its carriers."""
    return token(rng) if rng.random() < 0.5 else password_text(rng)


MakeSecret = Callable[[random.Random], Secret]


def scan(haystack: str, secrets: Iterable[Secret]) -> list[Secret]:
    """The planted secrets found in `haystack` (decoded JSON escapes included)."""
    texts = [haystack]
    decoded = _lenient_decode(haystack)
    if decoded != haystack:
        texts.append(decoded)
    return [s for s in secrets if any(s.found_in(t) for t in texts)]


_UNICODE_ESCAPE = re.compile(r"\\u([0-9a-fA-F]{4})")


def _lenient_decode(text: str) -> str:
    for _ in range(3):
        text = _UNICODE_ESCAPE.sub(lambda m: chr(int(m.group(1), 16)), text)
        text = text.replace("\\/", "/").replace('\\"', '"').replace("\\\\", "\\")
    return text
