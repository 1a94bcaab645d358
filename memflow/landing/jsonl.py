"""JSON Lines: bounded line splitting and parsing into records."""

from __future__ import annotations

from collections.abc import Iterator

import orjson

from memflow.landing.files import (
    _Source,
)
from memflow.landing.format import (
    _BOM,
    _LONG_LINE_HEAD,
)
from memflow.landing.records import _Collector


def _jsonl_lines(src: _Source, max_line_bytes: int) -> Iterator[tuple[int, bytes, bool]]:
    """(line number, line without its newline, too long?) for every non-blank line, reading the
    file to its end. A too-long line is skipped without being held in memory; only its head is
    returned."""
    buf = b""
    pos = 0
    line_no = 0
    eof = False
    long_head: bytes | None = None  # head of a too-long line whose end is not read yet
    while True:
        nl = buf.find(b"\n", pos)
        if nl < 0 and not eof:
            if long_head is None and len(buf) - pos > max_line_bytes:
                long_head = buf[pos : pos + _LONG_LINE_HEAD]
            if long_head is not None:
                buf, pos = b"", 0
            chunk = src.read()
            if chunk:
                buf = buf[pos:] + chunk
                pos = 0
            else:
                eof = True
            continue
        if nl < 0:  # end of file: the last line has no newline
            if pos >= len(buf) and long_head is None:
                return
            raw, pos = buf[pos:], len(buf)
        else:
            raw, pos = buf[pos:nl], nl + 1
        line_no += 1
        if long_head is not None or len(raw) > max_line_bytes:
            yield line_no, long_head if long_head is not None else raw[:_LONG_LINE_HEAD], True
            long_head = None
            if nl < 0:
                return
            continue
        if line_no == 1 and raw.startswith(_BOM):
            raw = raw[len(_BOM) :]
        line = raw[:-1] if raw.endswith(b"\r") else raw
        if line.strip():
            yield line_no, line, False
        if nl < 0:
            return


def _scan_jsonl(src: _Source, out: _Collector, max_line_bytes: int) -> None:
    for line_no, line, too_long in _jsonl_lines(src, max_line_bytes):
        if too_long:
            out.records += 1
            out.reject(
                line_no, "line_too_long", f"the line is longer than {max_line_bytes} bytes", line
            )
            continue
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            out.records += 1
            try:
                line.decode("utf-8")
            except UnicodeDecodeError as bad:
                detail = f"the line is not valid UTF-8 (byte {bad.start})"
                out.reject(line_no, "bad_encoding", detail, line)
                continue
            out.reject(line_no, "invalid_json", f"the line is not valid JSON: {exc}", line)
            continue
        out.record(line_no, obj, line)
