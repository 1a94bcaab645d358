"""Every door of the model layer redacts: an HTTP endpoint's error body and an extractor
program's stderr reach a `ModelError`, and so the Dagster event log and the terminal, only
redacted; log records are redacted as they are made."""

from __future__ import annotations

import io
import logging
import sys
import textwrap

import httpx
import pytest

from resources.models.base import ModelError
from resources.models.command import run_command
from resources.models.retry import post_json
from schemas.redaction import contains_secret
from schemas.redaction.logs import install_log_redaction

# Formats from three families (a vendor token, a cloud key, a prose password), built here so
# no literal secret sits in the source.
SECRETS = (
    "AIza" + "SyD7q9X2vLmN4bT8kR1wE6yU3iO0pA5sZcF",
    "sk-ant-api03-" + "Qw7Er9Ty1Ui3Op5As7Df9Gh1Jk3Lz5Xc7Vb9Nm1Qw3Er5Ty7",
    "password=" + "Hunter2RT!",
)


def _assert_clean(message: str) -> None:
    for secret in SECRETS:
        assert secret not in message
    assert "[REDACTED:" in message
    assert not contains_secret(message)


def test_an_http_error_body_is_redacted_in_the_model_error() -> None:
    body = "upstream said: " + " ".join(SECRETS)

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(400, text=body)

    client = httpx.Client(transport=httpx.MockTransport(handler))
    with client, pytest.raises(ModelError) as caught:
        post_json(client, "http://model.test/v1/chat", {"x": 1}, max_attempts=1)
    _assert_clean(str(caught.value))
    assert "model endpoint http://model.test/v1/chat answered HTTP 400" in str(caught.value)


def test_a_retried_http_error_body_is_redacted_when_retries_run_out() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(503, text=" ".join(SECRETS))

    client = httpx.Client(transport=httpx.MockTransport(handler))
    with client, pytest.raises(ModelError) as caught:
        post_json(client, "http://model.test/v1", {}, max_attempts=2, base_delay=0.0)
    _assert_clean(str(caught.value))
    assert "failed after 2 attempts: HTTP 503" in str(caught.value)


def test_an_extractor_stderr_tail_is_redacted_in_the_model_error() -> None:
    program = textwrap.dedent(
        f"""
        import sys
        sys.stdin.read()
        print({" ".join(SECRETS)!r}, file=sys.stderr)
        sys.exit(3)
        """
    )
    with pytest.raises(ModelError) as caught:
        run_command([sys.executable, "-c", program], {"turns": []}, timeout=30)
    _assert_clean(str(caught.value))
    assert "exited with status 3" in str(caught.value)


def test_a_model_error_made_anywhere_is_redacted() -> None:
    err = ModelError("extractor answered: " + SECRETS[0])
    _assert_clean(str(err))
    assert err.args == (str(err),)


def test_log_records_are_redacted_as_they_are_made() -> None:
    install_log_redaction()
    install_log_redaction()  # twice is once
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    logger = logging.getLogger("memflow.test.redaction")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        logger.warning("model answered %s and %s", SECRETS[0], SECRETS[1])
        try:
            raise ValueError("bad value " + SECRETS[2])
        except ValueError:
            logger.exception("while parsing")
        logger.info("clean line, nothing to cut")
    finally:
        logger.removeHandler(handler)
    out = stream.getvalue()
    _assert_clean(out)
    assert "model answered [REDACTED:" in out
    assert "Traceback" in out and "ValueError: bad value password=[REDACTED:password]" in out


def test_a_record_with_a_bad_format_string_still_logs_redacted() -> None:
    install_log_redaction()
    record = logging.getLogger("memflow.test").makeRecord(
        "memflow.test", logging.WARNING, __file__, 1, "%d " + SECRETS[0], ("x",), None
    )
    _assert_clean(record.getMessage())
