from __future__ import annotations

import re
from collections.abc import Iterator

from schemas.redaction._base import (
    _bounded,
    _Detector,
)
from schemas.redaction.connections import _ends_userinfo

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
        and not _ends_userinfo(m.string, m.start("domain") - 1)
    )


# --- prose ------------------------------------------------------------------------------------

# "my password is hunter2RT", "the password for prod was 'x y'", "changed the pw to Abc123!":


# A domain in any script (IDN: `bücher.de`, `例子.公司`; punycode `xn--...` too), its labels
# letters, digits and inner hyphens, its top level alphabetic.
_LABEL = r"[^\W_](?:[\w-]*[^\W_])?"
_DOMAIN = rf"(?P<domain>{_LABEL}(?:\.{_LABEL})*\.[^\W\d_]{{2,}})(?![\w-])"
_EMAIL = re.compile(
    rf"(?:(?<=mailto:)|(?<![\w.%+\-:@]))(?P<local>(?:[\w.%+\-]|\\u[0-9a-fA-F]{{4}})+)@{_DOMAIN}"
)
# `%40` for `@` (a URL-encoded address in a query string or a path), after any `%XX`.
_EMAIL_ENCODED = re.compile(
    rf"(?:(?<=%2F)|(?<=%2f)|(?<=%3A)|(?<=%3a)|(?<=%20)|(?<=%3D)|(?<=%3d)|(?<![\w.%+\-]))"
    rf"(?P<local>[\w.+\-]+)%40{_DOMAIN}"
)
# A file named after an address (`jane@example.com.pdf`, `export_bob@corp.io.csv`): the
# extension is no part of the address, and stays.
_FILE_EXTENSIONS = frozenset(
    {"pdf", "txt", "md", "csv", "tsv", "json", "jsonl", "ndjson", "log", "zip", "gz", "tgz",
     "tar", "bz2", "xz", "parquet", "png", "jpg", "jpeg", "gif", "svg", "webp", "html", "htm",
     "xml", "yaml", "yml", "toml", "ini", "cfg", "eml", "msg", "vcf", "ics", "doc", "docx",
     "xls", "xlsx", "ppt", "pptx", "py", "js", "ts", "sql", "bak", "old", "tmp", "key", "pem"}
)  # fmt: skip


def _email_span(m: re.Match[str]) -> tuple[int, int] | None:
    if not _email_ok(m):
        return None
    start, end = m.start(), m.end()
    domain = m.group("domain")
    labels = domain.split(".")
    if len(labels) >= 3 and labels[-1].lower() in _FILE_EXTENSIONS:
        end -= len(labels[-1]) + 1
    return start, end


def _encoded_starts(text: str, lowered: str) -> Iterator[int]:
    """The start of the local part before each `%40` (after a `%XX` escape, if one is there)."""
    at = lowered.find("%40")
    while at >= 0:
        start = at
        while start and (text[start - 1].isalnum() or text[start - 1] in "_.+-"):
            start -= 1
            if start >= 3 and text[start - 3] == "%" and lowered[start - 2 : start] in (
                "2f", "3a", "20", "3d"
            ):  # fmt: skip
                break
        if start < at:
            yield start
        at = lowered.find("%40", at + 3)


DETECTORS: tuple[_Detector, ...] = (
    # E-mail addresses (personal data; no library plugin). The domain needs an alphabetic TLD,
    # so `deploy@10.0.0.5`, `root@bastion`, `react@18.2.0` and `image@sha256:...` stay.
    _Detector(
        "email",
        _EMAIL,
        ("@" + _bounded(r"[\w-]", r"\.", least=1),),
        priority=5,
        refine=_email_span,
        starts=_email_starts,
    ),
    _Detector(
        "email",
        _EMAIL_ENCODED,
        ("%40" + _bounded(r"[\w-]", r"\.", least=1),),
        priority=5,
        refine=_email_span,
        starts=_encoded_starts,
    ),
)
