"""JSON Lines: lines (bounded: a too-long line is never held whole) and their records.

A line ends at LF, CRLF or a lone CR (JSON never holds a raw CR, so a CR can only end a line;
old Mac tools write CR alone). A UTF-8 byte-order mark opening any line is dropped (files
joined with ``cat`` carry one per part). U+2028, U+2029 and U+0085 are valid inside JSON
strings, so they split a line only when the line as a whole is not JSON, only where they stand
outside a string, and only if a piece between them is JSON: each piece is then a line of its
own (and takes a line number). A line holding more than 100,000 quotes and backslashes is not
split. A line longer than
the limit, not counting its line ending, is one ``line_too_long`` record of which only the head
is kept. Blank lines take a line number and are no record.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, NamedTuple

import orjson

from memflow.landing.files import _Source
from memflow.landing.format import _BOM, _LONG_LINE_HEAD
from memflow.landing.records import _Collector

_ENDING = re.compile(rb"\r\n?|\n")
# What changes the state of a scan for separators outside strings (linear in the line).
_SPECIAL = re.compile(rb'["\\]|\xe2\x80[\xa8\xa9]|\xc2\x85')
_SEPARATORS = (b"\xe2\x80\xa8", b"\xe2\x80\xa9", b"\xc2\x85")
_NOT_PARSED = object()
# A line with more quotes and backslashes than this is not split (the scan is linear, but in
# Python: a hostile 1 MiB line of them would take seconds).
_MAX_SPLIT_TOKENS = 100_000


class Line(NamedTuple):
    """A non-blank line: its number, its bytes (no ending, no BOM; the head of a too-long
    line), whether it was too long, and its JSON value when it was parsed already."""

    line_no: int
    raw: bytes
    too_long: bool
    value: Any = _NOT_PARSED


def _physical_lines(src: _Source, max_line_bytes: int) -> Iterator[tuple[bytes, bool]]:
    """(line, too long?) for every line, blank ones included, reading the file to its end."""
    buf = b""
    pos = 0
    eof = False
    head: bytes | None = None  # head of a too-long line whose end is not read yet
    while True:
        end = _ENDING.search(buf, pos)
        if end is not None and not eof and end.end() == len(buf) and end.group() == b"\r":
            end = None  # a CR last in the buffer may be the first half of a CRLF
        if end is None and not eof:
            cr = 1 if buf.endswith(b"\r") else 0
            if head is None and len(buf) - pos - cr > max_line_bytes:
                head = buf[pos : pos + _LONG_LINE_HEAD]
            if head is not None:  # skip the body; keep a CR that may end it
                buf, pos = buf[len(buf) - cr :], 0
            chunk = src.read()
            if chunk:
                buf = buf[pos:] + chunk
                pos = 0
            else:
                eof = True
            continue
        if end is None:  # end of file: the last line has no ending
            if pos >= len(buf) and head is None:
                return
            raw, pos = buf[pos:], len(buf)
        else:
            raw, pos = buf[pos : end.start()], end.end()
        if head is not None or len(raw) > max_line_bytes:
            yield (head if head is not None else raw[:_LONG_LINE_HEAD]), True
            head = None
        else:
            yield raw, False
        if end is None:
            return


def _lines(src: _Source, max_line_bytes: int) -> Iterator[Line]:
    """Every non-blank line of a JSONL file, as the format defines lines (module doc)."""
    line_no = 0
    for raw, too_long in _physical_lines(src, max_line_bytes):
        line_no += 1
        if too_long:
            yield Line(line_no, raw, True)
            continue
        if raw.startswith(_BOM):
            raw = raw[len(_BOM) :]
        if not raw.strip():
            continue
        if not any(sep in raw for sep in _SEPARATORS):
            yield Line(line_no, raw, False)
            continue
        pieces = _pieces(raw)
        for i, (piece, value) in enumerate(pieces):
            if piece.strip():
                yield Line(line_no + i, piece, False, value)
        line_no += len(pieces) - 1


def _pieces(raw: bytes) -> list[tuple[bytes, Any]]:
    """A line holding U+2028/U+2029/U+0085: itself if it is JSON (or if no piece is), else
    its pieces between them, each with its value if it parses."""
    try:
        return [(raw, orjson.loads(raw))]
    except orjson.JSONDecodeError:
        pass
    if raw.count(b'"') + raw.count(b"\\") > _MAX_SPLIT_TOKENS:
        return [(raw, _NOT_PARSED)]  # not records joined on a line: no scan in Python
    pieces: list[tuple[bytes, Any]] = []
    for piece in _outside_strings(raw):
        try:
            pieces.append((piece, orjson.loads(piece)))
        except orjson.JSONDecodeError:
            pieces.append((piece, _NOT_PARSED))
    if all(value is _NOT_PARSED for _, value in pieces):
        return [(raw, _NOT_PARSED)]
    return pieces


def _outside_strings(raw: bytes) -> list[bytes]:
    """`raw` cut at the separators that stand outside JSON strings."""
    out, start = [], 0
    in_string, escaped_at = False, -1
    for match in _SPECIAL.finditer(raw):
        at, token = match.start(), match.group()
        if at == escaped_at:
            continue  # the character after a backslash in a string
        if token == b"\\":
            if in_string:
                escaped_at = at + 1
        elif token == b'"':
            in_string = not in_string
        elif not in_string:
            out.append(raw[start:at])
            start = match.end()
    return [*out, raw[start:]]


def count_lines(src: _Source, max_line_bytes: int) -> int:
    """The records of a JSONL file: its non-blank lines."""
    return sum(1 for _ in _lines(src, max_line_bytes))


def _scan_jsonl(src: _Source, out: _Collector, max_line_bytes: int) -> None:
    for line in _lines(src, max_line_bytes):
        if line.too_long:
            out.records += 1
            detail = f"the line is longer than {max_line_bytes} bytes (not counting its ending)"
            out.reject(line.line_no, "line_too_long", detail, line.raw)
            continue
        value = line.value
        if value is _NOT_PARSED:
            try:
                value = orjson.loads(line.raw)
            except orjson.JSONDecodeError as exc:
                out.records += 1
                try:
                    line.raw.decode("utf-8")
                except UnicodeDecodeError as bad:
                    detail = f"the line is not valid UTF-8 (byte {bad.start})"
                    out.reject(line.line_no, "bad_encoding", detail, line.raw)
                    continue
                detail = f"the line is not valid JSON: {exc}"
                out.reject(line.line_no, "invalid_json", detail, line.raw)
                continue
        out.record(line.line_no, value, line.raw)
