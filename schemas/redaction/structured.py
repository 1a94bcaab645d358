from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from schemas.redaction._base import (
    PLACEHOLDER,
    PLACEHOLDER_PATTERN,
)
from schemas.redaction.engine import (
    redact,
)
from schemas.redaction.keywords import (
    _KEY_ONLY,
    _holds_a_secret,
    _kind_for_key,
)
from schemas.redaction.values import (
    _is_value,
)


def _secret_key_kind(key: str) -> str | None:
    return _kind_for_key(key) if _KEY_ONLY.fullmatch(key) and _holds_a_secret(key) else None


def _under_secret_key(value: Any, kind: str, key: str) -> Any:
    """A scalar stored under a secret-named key is a secret whatever it looks like."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, str | int | float):
        if _is_value(str(value), key, quoted=isinstance(value, str)):
            return PLACEHOLDER.format(kind=kind)
        return redact(value) if isinstance(value, str) else value
    return _walk(value, (kind, key))


# Parsed, a cookie loses the header that marks it in text: `{"Cookie": "sid=..."}` (a headers
# mapping), `{"name": "Cookie", "value": "sid=..."}` (a HAR header), and a cookie object
# (HAR's `cookies`, a browser tool's `add_cookies`): a name, a value and what only cookies
# have (`domain`, `path`, `expires`, `httpOnly`, `secure`, `sameSite`).
_COOKIE_HEADERS = {"cookie": "Cookie: ", "set-cookie": "Set-Cookie: "}
_COOKIE_OBJECT_KEYS = frozenset({"domain", "path", "expires", "httponly", "secure", "samesite"})


def _cookie_header_of(mapping: Mapping[Any, Any], key: str) -> str | None:
    """The header whose value the string under `key` is, if a cookie header's."""
    name = mapping.get("name") if key == "value" else key
    return _COOKIE_HEADERS.get(name.lower()) if isinstance(name, str) else None


def _is_cookie_object(mapping: Mapping[Any, Any]) -> bool:
    return (
        isinstance(mapping.get("name"), str)
        and isinstance(mapping.get("value"), str)
        and any(isinstance(k, str) and k.lower() in _COOKIE_OBJECT_KEYS for k in mapping)
    )


def _cookie_value(value: str, header: str | None) -> str:
    if header is None:  # a cookie object's value: a value, whatever it looks like
        ok = _is_value(value, "cookie", quoted=True) and not PLACEHOLDER_PATTERN.search(value)
        return PLACEHOLDER.format(kind="cookie") if ok else redact(value) or ""
    out = redact(header + value) or ""
    return out[len(header) :] if out.startswith(header) else redact(value) or ""


def _walk(value: Any, secret: tuple[str, str] | None) -> Any:
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, Mapping):
        out: dict[Any, Any] = {}
        cookie_object = secret is None and _is_cookie_object(value)
        for k, v in value.items():
            key = redact(k) if isinstance(k, str) else k
            while key in out:  # two keys redacted alike: both values stay
                key = f"{key}'"
            under = secret
            if under is None and isinstance(k, str) and (kind := _secret_key_kind(k)):
                under = (kind, k)
            if under is None and isinstance(k, str) and isinstance(v, str):
                if header := _cookie_header_of(value, k):
                    out[key] = _cookie_value(v, header)
                    continue
                if cookie_object and k == "value":
                    out[key] = _cookie_value(v, None)
                    continue
            out[key] = _walk(v, None) if under is None else _under_secret_key(v, *under)
        return out
    if isinstance(value, list | tuple | set | frozenset):
        return [_walk(v, None) if secret is None else _under_secret_key(v, *secret) for v in value]
    return value


def redact_json(value: Any) -> Any:
    """Every string of a JSON-like value redacted (keys too); dicts keep their keys and order,
    sequences their order (tuples and sets come back as lists).

    A scalar under a secret-named key (`{"password": "hunter2"}`) is replaced as a whole:
    alone, the value carries nothing a text detector could recognise. So are cookie values a
    parsed header holds (`{"Cookie": "sid=..."}`, HAR's `{"name": "Cookie", "value": ...}`,
    a cookie object `{"name": "sid", "value": ..., "domain": ...}`); names stay.
    """
    return _walk(value, None)
