"""The landing format: suffixes, limits, tool names, the columns a read yields, and the
functions through which ids, rejected records and printed paths leave the reader."""

from __future__ import annotations

import functools
import os
import re
import unicodedata
from datetime import timedelta

import polars as pl

from schemas import redaction
from schemas.redaction import redact_id as _redact_id
from schemas.redaction import redact_record as _redact_record
from schemas.rules import (
    MAX_RECORD_CHARS,
)
from schemas.tables import QUARANTINE, RAW_TURNS

JSONL_SUFFIX = ".jsonl"
PARQUET_SUFFIX = ".parquet"
LANDING_SUFFIXES = (JSONL_SUFFIX, PARQUET_SUFFIX)
# A JSONL line (not counting its line ending) or a Parquet row (its values, decoded) holds at
# most this many bytes; a longer one is one reject (``line_too_long`` / ``row_too_large``).
MAX_LINE_BYTES = 1 << 20
# Parquet is compressed and dictionary-encoded, so a small file can stand for a great deal of
# data: a file is read only if it is at most MAX_PARQUET_FILE_BYTES on disk and what memflow
# reads of it, decoded (values plus PARQUET_ROW_OVERHEAD a row), is at most
# MAX_PARQUET_DECODED_BYTES, the size of a JSONL file of the same turns, give or take. Both are
# checked from the file's footer before anything is decoded, the decoded size again from the
# values read with their dictionaries kept; a file past either is one ``file_too_large`` reject.
MAX_PARQUET_FILE_BYTES = 256 << 20
MAX_PARQUET_DECODED_BYTES = 256 << 20
PARQUET_ROW_OVERHEAD = 128
UPSERT_TOOL = "upsert_graph_triples"
# A turn that takes facts out of memory: tool_input {"retract": [{"fact_id"} | {"subject",
# "predicate", "object"} | {"entity"}], "reason"?, "by"?} (applied by the facts stage).
RETRACT_TOOL = "retract_facts"
MEMFLOW_TOOLS = (UPSERT_TOOL, RETRACT_TOOL)
STAGE = "landing"
READ_ATTEMPTS = 3  # reads of a file that changes in place before it is skipped

_FROM_RAW_TURNS = ("tenant_id", "ns", "day", "session_id", "turn_id", "ts", "role", "client")
TURN_COLUMNS: dict[str, pl.DataType] = {
    "turn_key": RAW_TURNS["turn_key"],
    **{c: RAW_TURNS[c] for c in (*_FROM_RAW_TURNS, "content", "tool_name")},
    "tool_input_json": pl.String(),  # the raw tool_input as JSON; RAW_TURNS keeps only triples
    "source_file": RAW_TURNS["source_file"],
    "line_no": RAW_TURNS["line_no"],
}
REJECT_COLUMNS: dict[str, pl.DataType] = {c: t for c, t in QUARANTINE.items() if c != "reject_id"}

_MICROSECOND = timedelta(microseconds=1)
_BOM = b"\xef\xbb\xbf"
_CHUNK = 1 << 20
# A too-long line keeps this much of its head for the record (redacted, then clipped).
_LONG_LINE_HEAD = 1 << 16
_ID_FIELDS = ("org", "repo", "session_id", "turn_id", "ts", "role", "client")
_PARQUET_FIELDS = (*_ID_FIELDS, "content", "tool_name", "tool_input")


# ---------------------------------------------------------------------------------- tool names

# What agents put before a tool's own name: an MCP server (`mcp__memflow__`), a namespace
# (`memflow.`, `memflow/`, `memflow:`), a prefix (`memflow_`).
_QUALIFIED = re.compile(r"__|[./:]")
_CAMEL_STEP = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_SEPARATORS = re.compile(r"[\s\-]+")


def canonical_tool(name: str) -> str | None:
    """The memflow tool (`UPSERT_TOOL`, `RETRACT_TOOL`) a recorded ``tool_name`` names, in any
    spelling agents record: any case, camelCase, hyphens or spaces for underscores, and any
    qualifier before it (``mcp__memflow__upsert_graph_triples``, ``memflow.retract_facts``,
    ``UPSERT_GRAPH_TRIPLES``, ``upsertGraphTriples``). None for any other tool."""
    if len(name) > 200:
        return None
    last = _QUALIFIED.split(name.strip())[-1]
    snake = _SEPARATORS.sub("_", _CAMEL_STEP.sub("_", last).strip()).lower()
    for tool in MEMFLOW_TOOLS:
        if snake == tool or snake.endswith("_" + tool):
            return tool
    return None


# ----------------------------------------------------------------------------- redaction hooks


def _record(raw: str | bytes) -> str:
    """The one way a raw line (row) becomes a quarantine ``record``: redacted, then clipped to
    `MAX_RECORD_CHARS` (`schemas.redaction.redact_record`, which also finds JSON-escaped
    secrets and clips after redacting)."""
    text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else raw
    return _redact_record(text, MAX_RECORD_CHARS)


def _id(value: str) -> str:
    """The one way an id-like field (session_id, turn_id, client, a file name) leaves this
    module: with any secret replaced (`schemas.redaction.redact_id`, which keeps ids unique)."""
    return _redacted_id(value)


@functools.lru_cache(maxsize=1 << 16)
def _redacted_id(value: str) -> str:
    return _redact_id(value)


def _clipped_id(value: str) -> str:
    """An id field, redacted and then clipped to `MAX_RECORD_CHARS` (a secret cut in two is no
    longer recognised)."""
    if len(value) <= MAX_RECORD_CHARS:
        return _id(value)
    return _redacted_clip(_redact_id(value), MAX_RECORD_CHARS)


def _redacted_clip(value: str, limit: int) -> str:
    """A value shown in a detail or an id column, redacted before it is clipped (a secret cut
    in two is no longer recognised); not a record (those go through `_record`)."""
    return redaction.redact_record(value, limit)


def _text(name: str) -> str:
    """A file name as text that any table can hold: bytes that are not UTF-8 (surrogate
    escapes from the file system) become backslash escapes."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return os.fsencode(name).decode("utf-8", errors="backslashreplace")
    return name


# Characters that move the cursor, end a line or reorder text on a terminal.
_UNPRINTABLE = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})


def printable(text: str) -> str:
    """`text` (a landing path, a detail) as one line that cannot forge output: control,
    format and line-separator characters become ``\\xNN`` / ``\\uNNNN`` escapes. For what is
    printed, never for what is stored."""
    if text.isprintable():
        return text
    return "".join(
        ch if unicodedata.category(ch) not in _UNPRINTABLE else _escape(ch) for ch in text
    )


def _escape(ch: str) -> str:
    code = ord(ch)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
