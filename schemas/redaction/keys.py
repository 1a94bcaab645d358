"""Key material: PEM blocks (plain, URL-encoded, OpenVPN's), base64 key bodies without their
armour, a PEM's second half, JSON Web Keys' private members, Kubernetes Secrets' values."""

from __future__ import annotations

import base64
import bisect
import re

from schemas.redaction._base import (
    _Detector,
    _memo,
)

_PRIVATE_KEY_GATE = ("private key", "putty-user-key-file")

# --- armour ------------------------------------------------------------------------------------

# The label of a block that holds a secret: any private or secret key (RSA, EC, DSA, OPENSSH,
# ENCRYPTED, PGP ... BLOCK, SSH2's `---- BEGIN SSH2 ENCRYPTED PRIVATE KEY ----`) and OpenVPN's
# static key. A public key or a certificate holds none.
_LABEL = r"(?:[A-Z0-9 ]*(?:PRIVATE|SECRET) KEY(?: BLOCK)?|OpenVPN Static key V1)"
_PEM = re.compile(
    rf"-{{4,5}} ?BEGIN {_LABEL} ?-{{4,5}}[\s\S]*?(?:-{{4,5}} ?END {_LABEL} ?-{{4,5}}|\Z)"
)
# The same URL- or form-encoded (a key pasted into a query string or a `.env` value):
# `-----BEGIN%20PRIVATE%20KEY-----%0A...`, `-----BEGIN+RSA+PRIVATE+KEY-----`.
_SEP = r"(?:%20|\+)"
_ENCODED_LABEL = rf"(?:[A-Z0-9]+{_SEP})*(?:PRIVATE|SECRET){_SEP}KEY"
_ENCODED_PEM = re.compile(
    rf"-{{5}}BEGIN{_SEP}{_ENCODED_LABEL}-{{5}}[\s\S]*?(?:-{{5}}END{_SEP}{_ENCODED_LABEL}-{{5}}|\Z)"
)
_ENCODED_GATE = ("private%20key", r"private\+key", "secret%20key", r"secret\+key")

# --- bodies without armour ------------------------------------------------------------------

# The base64 of a private key's DER starts with its structure, whatever the key: OpenSSH's
# `openssh-key-v1`, PKCS#1's RSA (a version 0, then the modulus), PKCS#8 (a version 0, then
# the algorithm: RSA, EC, Ed25519/X25519), SEC1's EC keys (version 1), an encrypted PKCS#8
# (PBES2). Public keys and certificates start otherwise.
_BODY_HEADS = (
    r"b3BlbnNzaC1rZXktdjE",
    r"MII[A-Za-z0-9+/]{3}IBAA[JK]",
    r"MII[A-Za-z0-9+/]{3}IBADAN",
    r"MI[A-Za-z0-9+/]{2,3}(?:gEAMBMGByqGSM49|CAQAw)",
    r"MC4CAQAwBQYDK2",
    r"MHcCAQEE",
    r"MIGkAgEBBD",
    r"MIHcAgEBBE",
    r"MII[A-Za-z0-9+/]{2}[A-Za-z0-9+/]{0,4}BgkqhkiG9w0BBQ0w",
)
# A run of base64 lines (a body is wrapped at 64 or 70 characters, or not at all).
_B64_RUN = r"[A-Za-z0-9+/]+(?:\r?\n[ \t]*[A-Za-z0-9+/]+)*={0,2}"
_BODY = re.compile(rf"(?<![A-Za-z0-9+/])(?:{'|'.join(_BODY_HEADS)}){_B64_RUN}")
_BODY_MIN = 64
_BODY_GATE = (
    "b3blbnnzac1rzxktdje",
    "mii",
    "mc4caqawbqydk2",
    "mhccaqee",
    "migkagebbd",
    "mihcagebbe",
)

# A whole PEM file in base64 (a Kubernetes `tls.key`, a `.env` value, a CI variable):
# `LS0tLS1CRUdJTi` is `-----BEGIN` in base64, whatever the alignment of what precedes it
# (the file starts the value). Its head, decoded, must name a private or secret key block.
_PEM_B64 = re.compile(r"(?<![A-Za-z0-9+/])LS0tLS1CRUdJTi[A-Za-z0-9+/]*={0,2}")
_PEM_B64_LABEL = re.compile(rf"^-{{5}}BEGIN {_LABEL}-{{5}}")


def _pem_b64_ok(m: re.Match[str]) -> bool:
    head = m.group(0)[:96]
    head = head[: len(head) // 4 * 4]
    try:
        decoded = base64.b64decode(head).decode("ascii", "replace")
    except ValueError:
        return False
    return _PEM_B64_LABEL.match(decoded) is not None


# A PEM's second half (the first went in another turn): base64 lines, then the END line.
_END = re.compile(rf"-{{4,5}} ?END {_LABEL} ?-{{4,5}}")
_B64_LINE = re.compile(r"[ \t]*[A-Za-z0-9+/]{16,}={0,2}[ \t]*\r?")


def _tail_spans(m: re.Match[str]) -> list[tuple[int, int]]:
    """The base64 lines right before an END line without its BEGIN, and the END line."""
    text = m.string
    start = m.start()
    if start and text[start - 1] != "\n":
        return []
    lines = 0
    while start > 0:
        prev = text.rfind("\n", 0, start - 1) + 1
        if not _B64_LINE.fullmatch(text, prev, start - 1):
            break
        start, lines = prev, lines + 1
    return [(start, m.end())] if lines else []


# --- JSON Web Keys ----------------------------------------------------------------------------

# A JWK's private members (RFC 7518: `d` of EC, RSA and OKP keys, RSA's primes and CRT values,
# an `oct` key's `k`), in a text that holds `"kty"` within 2 KiB of it.
_JWK_MEMBER = re.compile(
    r"""(?P<q>\\{0,16}")(?:d|p|q|dp|dq|qi|k)(?P=q)[ \t]*:[ \t]*"""
    r"""(?P<vq>\\{0,16}")(?P<v>[A-Za-z0-9_-]{16,})(?P=vq)"""
)
_KTY = re.compile(r'kty\\*"')
_JWK_NEAR = 2048


def _kty_near(text: str, pos: int) -> bool:
    memo = _memo(text)
    found = memo.get("kty")
    if found is None:
        found = memo["kty"] = [m.start() for m in _KTY.finditer(text)]
    i = bisect.bisect_left(found, pos - _JWK_NEAR)
    return i < len(found) and found[i] <= pos + _JWK_NEAR


def _jwk_span(m: re.Match[str]) -> tuple[int, int] | None:
    return m.span("v") if _kty_near(m.string, m.start()) else None


# --- Kubernetes Secrets -----------------------------------------------------------------------

# Every value of a Secret's `data:` or `stringData:` map (base64 key material, a
# `.dockerconfigjson`, passwords), in a YAML document (between `---` lines) that says
# `kind: Secret`; the keys (`tls.key:`) stay. A block scalar (`|`, `>`) is cut whole.
_SECRET_KIND = re.compile(r"""(?mi)^[ \t]*kind:[ \t]*["']?Secret["']?[ \t]*\r?$""")
_DOC_SEPARATOR = re.compile(r"(?m)^---")
_DATA_HEADER = re.compile(r"(?m)^(?P<indent>[ \t]*)(?:data|stringData):[ \t]*\r?\n")
_DATA_ENTRY = re.compile(
    r"""(?P<indent>[ \t]+)(?P<key>[\w.-]+):[ \t]*(?P<value>[^\n]*?)[ \t]*\r?(?:\n|\Z)"""
)
_BLOCK_LINE = re.compile(r"(?P<indent>[ \t]*)(?P<rest>[^\n]*)(?:\n|\Z)")


def _positions(text: str, name: str, pattern: re.Pattern[str]) -> list[int]:
    memo = _memo(text)
    found = memo.get(name)
    if found is None:
        found = memo[name] = [m.start() for m in pattern.finditer(text)]
    return found  # type: ignore[no-any-return]


def _in_a_secret(text: str, pos: int) -> bool:
    """Whether the YAML document holding `pos` says `kind: Secret`."""
    separators = _positions(text, "k8s-docs", _DOC_SEPARATOR)
    i = bisect.bisect_right(separators, pos)
    lo = separators[i - 1] if i else 0
    hi = separators[i] if i < len(separators) else len(text)
    kinds = _positions(text, "k8s-kinds", _SECRET_KIND)
    j = bisect.bisect_left(kinds, lo)
    return j < len(kinds) and kinds[j] < hi


def _secret_data_spans(m: re.Match[str]) -> list[tuple[int, int]]:
    text = m.string
    if not _in_a_secret(text, m.start()):
        return []
    outer = len(m.group("indent"))
    spans: list[tuple[int, int]] = []
    pos = m.end()
    while (entry := _DATA_ENTRY.match(text, pos)) and len(entry.group("indent")) > outer:
        indent = len(entry.group("indent"))
        value = entry.group("value")
        pos = entry.end()
        if value[:1] in ("|", ">"):  # a block scalar: the lines indented deeper
            first = _BLOCK_LINE.match(text, pos)
            start = end = pos + (len(first.group("indent")) if first else 0)
            while (
                (line := _BLOCK_LINE.match(text, end))
                and line.group("rest")
                and len(line.group("indent")) > indent
            ):
                end = line.end()
            if end > start:
                spans.append((start, end - 1 if text[end - 1] == "\n" else end))
            pos = end
        elif value and value not in ('""', "''"):
            spans.append(entry.span("value"))
    return spans


DETECTORS: tuple[_Detector, ...] = (
    # A whole PEM block, not only its header line (all the library flags); a block with no END
    # (cut by a length cap) is cut to the end of the text.
    _Detector(
        "private_key", _PEM, (*_PRIVATE_KEY_GATE, "secret key", "static key v1"), skip_atoms=True
    ),
    _Detector("private_key", _ENCODED_PEM, _ENCODED_GATE, skip_atoms=True),
    _Detector(
        "private_key",
        re.compile(r"PuTTY-User-Key-File-\d+:[\s\S]*?(?:Private-MAC:[ \t]*[0-9a-fA-F]+|\Z)"),
        _PRIVATE_KEY_GATE,
        skip_atoms=True,
    ),
    _Detector(
        "private_key",
        _BODY,
        _BODY_GATE,
        accept=lambda m: len(m.group(0)) >= _BODY_MIN,
        skip_rejected=True,
    ),
    _Detector("private_key", _PEM_B64, ("ls0tls1crudjti",), accept=_pem_b64_ok),
    _Detector("private_key", _END, ("private key", "static key v1"), refine_all=_tail_spans),
    _Detector("private_key", _JWK_MEMBER, (r'kty\\{0,8}"',), refine=_jwk_span, priority=2),
    _Detector(
        "kubernetes_secret",
        _DATA_HEADER,
        ("kind:",),
        priority=2,
        refine_all=_secret_data_spans,
    ),
)
