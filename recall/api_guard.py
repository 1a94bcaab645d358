"""The API's guard rails: the error body, and an ASGI middleware that bounds requests.

Errors always have the shape ``{"error": {"code", "message", "details"?}}`` and do not echo the
request: pydantic's `input` is dropped and locations are clipped; a rejected triple's `detail` is
the contract's own (redacted, at most 80 characters of the offending value).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

import orjson
from fastapi.responses import Response
from starlette.types import ASGIApp, Message, Receive, Send
from starlette.types import Scope as AsgiScope

from recall.metrics import ApiMetrics
from recall.requests import ApiLimits, ErrorBody
from recall.writes import WriteRefused
from schemas.redaction import redact_record

# One refusal type for the routes and the write path (`recall.writes`): the error body is
# built from it wherever it is raised.
ApiError = WriteRefused


NOT_FOUND_MESSAGE = "tenant not found"


def tenant_not_found() -> ApiError:
    # One body for "not granted to this key" and "does not exist": neither may be told apart.
    return ApiError(404, "tenant_not_found", NOT_FOUND_MESSAGE)


def error_response(
    status: int,
    code: str,
    message: str,
    details: list[dict[str, Any]] | None = None,
    headers: Mapping[str, str] | None = None,
) -> Response:
    info: dict[str, Any] = {"code": code, "message": message}
    if details is not None:
        info["details"] = details
    # orjson never fails on the strings we put here (ours, or pydantic locations we clipped).
    return Response(
        orjson.dumps({"error": info}),
        status_code=status,
        media_type="application/json",
        headers=dict(headers or {}),
    )


def _clip(value: Any, size: int = 100) -> Any:
    """A location part or message as an error may show it: redacted, then clipped. A location
    names what the client sent, an unknown field's name included, and that name may be a
    secret (``{"ghp_...": 1}``)."""
    if isinstance(value, str):
        text = value.encode("utf-8", "replace").decode("utf-8")
        return redact_record(text, size)
    return value if isinstance(value, int) else redact_record(str(value), size)


def validation_details(errors: Sequence[Any]) -> list[dict[str, Any]]:
    """Pydantic errors without their `input` (never echo a request back)."""
    out = []
    for err in list(errors)[:50]:
        out.append(
            {
                "loc": [_clip(part) for part in err.get("loc", ())],
                "type": str(err.get("type", "invalid")),
                "msg": _clip(str(err.get("msg", "")), 300),
            }
        )
    return out


def responses(*pairs: tuple[int, str]) -> dict[int | str, dict[str, Any]]:
    return {status: {"model": ErrorBody, "description": text} for status, text in pairs}


AUTH_ERRORS = responses(
    (400, "the body could not be parsed"),
    (401, "missing, malformed or unknown bearer key"),
    (413, "request body too large"),
    (414, "query string too long"),
    (422, "invalid request"),
)
TENANT_ERRORS = responses((404, "tenant not found (or not granted to this key: the same)"))
STORE_ERRORS = responses((503, "a store is unavailable"))

# -- middleware --------------------------------------------------------------------------

_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89abcdefABCDEF]")
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


def _lone_surrogates(body: bytes) -> bool:
    """True when the JSON body decodes to text that is not valid Unicode (a lone surrogate
    escape such as \\ud800). Pairs (escaped emoji) are fine."""
    if not _SURROGATE_ESCAPE.search(body):
        return False
    try:
        orjson.loads(body)  # orjson rejects lone surrogates; the stdlib accepts them
    except orjson.JSONDecodeError:
        try:
            json.loads(body)
        except ValueError:
            return False  # not JSON at all: the framework answers 422
        return True
    return False


class GuardMiddleware:
    """Bounds the request (query string and body bytes, read before the app sees them), rejects
    JSON text that is not valid Unicode, and counts requests by route template."""

    def __init__(self, app: ASGIApp, *, limits: ApiLimits, metrics: ApiMetrics) -> None:
        self.app = app
        self.limits = limits
        self.metrics = metrics

    async def __call__(self, scope: AsgiScope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status_seen = 500

        async def send_wrapper(message: Message) -> None:
            nonlocal status_seen
            if message["type"] == "http.response.start":
                status_seen = message["status"]
            await send(message)

        try:
            rejected = await self._check(scope, receive)
            if rejected is not None:
                await rejected(scope, receive, send_wrapper)
                return
            body = scope.pop("memflow.body", None)
            if body is not None:
                receive = _replay(body)
            await self.app(scope, receive, send_wrapper)
        finally:
            route = scope.get("route")
            self.metrics.request(getattr(route, "path", "unmatched"), status_seen)

    async def _check(self, scope: AsgiScope, receive: Receive) -> Response | None:
        limits = self.limits
        if len(scope.get("query_string", b"")) > limits.max_query_string_bytes:
            self.metrics.error("uri_too_long")
            return error_response(414, "uri_too_long", "the query string is too long")
        if scope["method"] not in _BODY_METHODS:
            return None
        declared = _content_length(scope)
        too_large = error_response(
            413, "payload_too_large", f"the body is larger than {limits.max_body_bytes} bytes"
        )
        if declared is not None and declared > limits.max_body_bytes:
            self.metrics.error("payload_too_large")
            return too_large
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limits.max_body_bytes:
                self.metrics.error("payload_too_large")
                return too_large
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        if _lone_surrogates(body):
            self.metrics.error("invalid_request")
            return error_response(
                422, "invalid_request", "the JSON text holds a lone surrogate (not valid Unicode)"
            )
        scope["memflow.body"] = body
        return None


def _content_length(scope: AsgiScope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


def _replay(body: bytes) -> Receive:
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return {"type": "http.disconnect"}

    return receive
