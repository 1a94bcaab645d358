"""Retries for model calls over httpx: transport errors, timeouts, 429 and 5xx, with backoff.

Every provider that talks HTTP goes through `post_json` (or wraps its own call in `retrying`),
so one policy decides what is worth another try. On exhaustion the caller gets a `ModelError`
naming the endpoint and the last cause; a non-retryable answer (e.g. 400, 401, 404) fails at once.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

import httpx
import tenacity

from resources.models.base import ModelError

P = ParamSpec("P")
R = TypeVar("R")

RETRY_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})
DEFAULT_MAX_ATTEMPTS = 4
DEFAULT_BASE_DELAY = 0.5
DEFAULT_MAX_DELAY = 8.0


class RetryableStatus(Exception):
    """An HTTP answer worth retrying (429/5xx); carries the response for the final message."""

    def __init__(self, response: httpx.Response) -> None:
        super().__init__(f"HTTP {response.status_code}")
        self.response = response


def is_retryable(exc: BaseException) -> bool:
    """Transport failures (connect, read, timeouts, protocol) and retryable statuses."""
    return isinstance(exc, RetryableStatus | httpx.TransportError)


def _describe(exc: BaseException | None) -> str:
    if exc is None:
        return "unknown error"
    if isinstance(exc, RetryableStatus):
        body = exc.response.text[:200] if exc.response.content else ""
        return f"HTTP {exc.response.status_code} {body}".strip()
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _wait(base_delay: float, max_delay: float) -> tenacity.wait.wait_base:
    backoff = tenacity.wait_exponential_jitter(initial=base_delay, max=max_delay, jitter=base_delay)

    def wait(state: tenacity.RetryCallState) -> float:
        # Honour a server's Retry-After (seconds form) on 429/503, capped by max_delay.
        outcome = state.outcome
        exc = outcome.exception() if outcome is not None else None
        if isinstance(exc, RetryableStatus):
            after = exc.response.headers.get("retry-after", "")
            if after.replace(".", "", 1).isdigit():
                return min(float(after), max_delay)
        return backoff(state)

    return wait  # type: ignore[return-value]


def retrying(
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    base_delay: float = DEFAULT_BASE_DELAY,
    *,
    endpoint: str,
    max_delay: float = DEFAULT_MAX_DELAY,
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Decorate a call so retryable failures are retried; exhaustion raises ModelError.

    The wrapped function signals a retryable HTTP answer by raising `RetryableStatus`
    (see `raise_for_retry`); httpx transport errors and timeouts are retried as they come.
    """
    if max_attempts < 1:
        raise ValueError("max_attempts must be at least 1")

    def decorate(fn: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(fn)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            retryer = tenacity.Retrying(
                stop=tenacity.stop_after_attempt(max_attempts),
                wait=_wait(base_delay, max_delay),
                retry=tenacity.retry_if_exception(is_retryable),
                reraise=False,
            )
            try:
                return retryer(fn, *args, **kwargs)
            except tenacity.RetryError as err:
                last = err.last_attempt.exception()
                raise ModelError(
                    f"model endpoint {endpoint} failed after {max_attempts} attempts: "
                    f"{_describe(last)}"
                ) from last

        return wrapper

    return decorate


def raise_for_retry(response: httpx.Response, endpoint: str) -> httpx.Response:
    """Return a 2xx response; raise RetryableStatus for 429/5xx, ModelError for other errors."""
    if response.is_success:
        return response
    if response.status_code in RETRY_STATUS:
        raise RetryableStatus(response)
    raise ModelError(
        f"model endpoint {endpoint} answered HTTP {response.status_code}: {response.text[:200]}"
    )


def post_json(
    client: httpx.Client,
    url: str,
    payload: dict[str, Any],
    *,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    base_delay: float = DEFAULT_BASE_DELAY,
    max_delay: float = DEFAULT_MAX_DELAY,
    headers: dict[str, str] | None = None,
) -> Any:
    """POST `payload` as JSON with retries and return the decoded JSON body.

    `url` is what error messages name; pass one without credentials in it.
    """

    @retrying(max_attempts, base_delay, endpoint=url, max_delay=max_delay)
    def call() -> Any:
        response = raise_for_retry(client.post(url, json=payload, headers=headers), url)
        try:
            return response.json()
        except ValueError as err:
            raise ModelError(f"model endpoint {url} returned a body that is not JSON") from err

    return call()
