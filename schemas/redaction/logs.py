"""Log lines pass the redactor: every record memflow's processes make, whoever logs it.

`install_log_redaction()` wraps the logging module's record factory, so each record's
message (its arguments merged in), the text of its exception and its stack are redacted as
the record is made: before any handler, formatter or Dagster's log manager sees it. It is
installed once per process where memflow configures logging (the CLI, the API server, the
MCP server, the Dagster code location); installing it again changes nothing.
"""

from __future__ import annotations

import logging
import traceback
from typing import Any

_INSTALLED = "_memflow_redacts"


def redact_record(record: logging.LogRecord) -> logging.LogRecord:
    """The record with its message, exception text and stack redacted (in place)."""
    from schemas.redaction.engine import redact  # loads on the first record, not at install

    try:
        message = record.getMessage()
    except Exception:  # a bad format string: logging reports it later; keep the raw parts
        message = f"{record.msg} {record.args}"
    record.msg, record.args = redact(message), ()
    if record.exc_info and not record.exc_text:
        record.exc_text = "".join(traceback.format_exception(*record.exc_info)).rstrip("\n")
    if record.exc_text:
        record.exc_text = redact(record.exc_text)
    if record.stack_info:
        record.stack_info = redact(record.stack_info)
    return record


def install_log_redaction() -> None:
    """Redact every log record this process makes from now on (idempotent)."""
    factory = logging.getLogRecordFactory()
    if getattr(factory, _INSTALLED, False):
        return

    def make(*args: Any, **kwargs: Any) -> logging.LogRecord:
        return redact_record(factory(*args, **kwargs))

    setattr(make, _INSTALLED, True)
    logging.setLogRecordFactory(make)
