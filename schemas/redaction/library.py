from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Iterator
from typing import Any, NamedTuple

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

from schemas.redaction._base import (
    _JWT_TAIL,
    _TOKEN_TAIL,
    _bounded,
    _Detector,
    _run_end,
    _Starts,
)
from schemas.redaction.values import (
    _password_like,
)

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


_ENTROPY = Base64HighEntropyString().calculate_shannon_entropy
# Random 40-character base64 keys measure 4.27 to 5.2 bits per character; CamelCase paths and
# identifiers near 4.0-4.2; hex SHA-1s lack an upper or lower case.
_AWS_SECRET_MIN_ENTROPY = 4.2
_AWS_CONTEXT = re.compile(
    r"aws|secret|access[ _-]?key|(?-i:\b(?:AKIA|ASIA|LTAI)[A-Z0-9a-z]{12,20}\b)", re.IGNORECASE
)


def _aws_secret_ok(m: re.Match[str]) -> bool:
    """detect-secrets' AWS plugin finds a 40-character secret key only quoted and within 20
    characters of `aws` and `key`; here an unquoted one is found too, when `aws`, `secret` or
    `access key` is within 80 characters on its line and it is random-looking."""
    token = m.group(0)
    if not _password_like(token) or _ENTROPY(token) < _AWS_SECRET_MIN_ENTROPY:
        return False
    return _near(m, _AWS_CONTEXT)


def _near(m: re.Match[str], context: re.Pattern[str], width: int = 80) -> bool:
    """Whether `context` is found within `width` characters of the match on its line."""
    text = m.string
    lo = max(0, m.start() - width)
    lo = max(lo, text.rfind("\n", lo, m.start()) + 1)
    hi = text.find("\n", m.end(), m.end() + width)
    hi = min(len(text), m.end() + width) if hi < 0 else hi
    return bool(context.search(text, lo, m.start()) or context.search(text, m.end(), hi))


# --- other added detectors --------------------------------------------------------------------


DETECTORS: tuple[_Detector, ...] = tuple(_library_detectors())
