from __future__ import annotations

import re
from collections.abc import Iterator

from schemas.redaction._base import (
    _bounded,
    _Detector,
)

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


DETECTORS: tuple[_Detector, ...] = (
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
