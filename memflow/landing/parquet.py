"""Parquet: rows into records, bounded before anything is decoded.

Parquet is compressed and dictionary-encoded, so a file of a few hundred kilobytes can stand for
gigabytes of values (one 2 KB value repeated two million times). Reading one goes in steps,
each bounded by the one before (limits in `memflow.landing.format`):

1. the size on disk (``MAX_PARQUET_FILE_BYTES``) and of the footer, before the footer is parsed;
2. the footer: for every column memflow reads, its uncompressed size, its number of values and
   the rows, summed per file, must fit ``MAX_PARQUET_DECODED_BYTES``: what reading the file
   with its dictionaries kept can take;
3. each row group is read so (pyarrow, ``read_dictionary`` on every byte-array column), and the
   decoded size of every row is computed from the arrays (a dictionary value counts once per
   row that uses it) before any row becomes Python objects: the file's total decoded size must
   fit the budget too, and a row over ``MAX_LINE_BYTES`` is one ``row_too_large`` reject.

A file past a bound is one ``file_too_large`` reject (like ``unreadable_file``, one record).
pyarrow, not polars: pyarrow answers with an exception where polars aborts the process (a
failed allocation) or panics with a Rust backtrace (a fixed-offset zone such as ``+05:30``).
Timestamps are read as integers (UTC microseconds), so any zone name and any range are read.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from memflow.landing.files import _Source
from memflow.landing.format import (
    _LONG_LINE_HEAD,
    _PARQUET_FIELDS,
    MAX_LINE_BYTES,
    MAX_PARQUET_DECODED_BYTES,
    MAX_PARQUET_FILE_BYTES,
    PARQUET_ROW_OVERHEAD,
)
from memflow.landing.records import _Collector, _Instant, _Unreadable
from schemas.rules import Reason

# The footer (Thrift) of a file within the bounds is far smaller than this.
_MAX_FOOTER_BYTES = 16 << 20
_SLICE_ROWS = 4096
_SLICE_BYTES = 16 << 20  # rows become Python objects this many decoded bytes at a time
_SLOT = 8  # bytes a value takes beside its data once decoded (offsets, indices, validity)
_WIDTH = {"BOOLEAN": 1, "INT32": 4, "FLOAT": 4, "INT64": 8, "DOUBLE": 8, "INT96": 12}
_US_SCALE = {"s": (1_000_000, 1), "ms": (1000, 1), "us": (1, 1), "ns": (1, 1000)}


@dataclass(frozen=True)
class Limits:
    """The bounds one read applies."""

    file_bytes: int
    decoded_bytes: int
    row_bytes: int

    @classmethod
    def of_format(cls) -> Limits:
        """The landing format's bounds (read when a file is read)."""
        return cls(MAX_PARQUET_FILE_BYTES, MAX_PARQUET_DECODED_BYTES, MAX_LINE_BYTES)


class _TooLarge(Exception):
    """The file is past a bound; the message is the reject's detail."""


class _Unusable(Exception):
    """The file cannot be read as Parquet; the message names the error."""


class _Plan:
    """A file whose footer is within the bounds: its row groups, read one at a time."""

    def __init__(self, data: bytes, limits: Limits) -> None:
        self.limits = limits
        footer = _footer_size(data)
        if footer > _MAX_FOOTER_BYTES:
            raise _TooLarge(f"its footer takes {footer:,} bytes (at most {_MAX_FOOTER_BYTES:,})")
        try:
            first = pq.ParquetFile(pa.BufferReader(data))
            names = first.schema_arrow.names
            self.fields = [f for f in _PARQUET_FIELDS if f in names]
            twice = sorted({f for f in self.fields if names.count(f) > 1})
            if twice:
                raise _Unusable(f"the column {twice[0]!r} appears more than once")
            self.meta = first.metadata
            self.leaves = [
                i
                for i in range(self.meta.num_columns)
                if first.schema.column(i).path.split(".")[0] in self.fields
            ]
            dictionaries = [
                first.schema.column(i).path
                for i in self.leaves
                if first.schema.column(i).physical_type == "BYTE_ARRAY"
            ]
            self.file = pq.ParquetFile(
                pa.BufferReader(data), metadata=self.meta, read_dictionary=dictionaries
            )
        except (_Unusable, _TooLarge):
            raise
        except Exception as exc:
            raise _Unusable(type(exc).__name__) from exc
        self.rows = sum(self.meta.row_group(g).num_rows for g in range(self.meta.num_row_groups))
        self.bound = self._footer_bound(first)
        if self.bound > limits.decoded_bytes:
            raise _TooLarge(
                f"{self.rows:,} rows, up to {self.bound:,} bytes to read by its footer "
                f"(at most {limits.decoded_bytes:,}; split it into smaller files)"
            )

    def _footer_bound(self, first: pq.ParquetFile) -> int:
        total = self.rows * PARQUET_ROW_OVERHEAD
        for g in range(self.meta.num_row_groups):
            group = self.meta.row_group(g)
            for i in self.leaves:
                chunk = group.column(i)
                column = first.schema.column(i)
                width = _WIDTH.get(column.physical_type, column.length or 0)
                values = max(chunk.num_values, 0)
                total += max(chunk.total_uncompressed_size, 0) + values * (_SLOT + width)
        return total

    def groups(self) -> Iterator[tuple[pa.Table, np.ndarray]]:
        """(row group, decoded bytes of each of its rows), checking the file's running total
        decoded size against the budget before a group is handed out."""
        used = 0
        for g in range(self.meta.num_row_groups):
            try:
                table = self.file.read_row_group(g, columns=self.fields)
                sizes = _row_bytes(table)
            except Exception as exc:
                raise _Unusable(type(exc).__name__) from exc
            used += int(sizes.sum()) + table.num_rows * PARQUET_ROW_OVERHEAD
            if used > self.limits.decoded_bytes:
                raise _TooLarge(
                    f"{self.rows:,} rows that take more than {self.limits.decoded_bytes:,} "
                    "bytes decoded (the budget of one file; split it into smaller files)"
                )
            yield table, sizes


def _footer_size(data: bytes) -> int:
    if len(data) < 12 or data[-4:] != b"PAR1":
        return 0  # not Parquet: pyarrow says so
    return int.from_bytes(data[-8:-4], "little")


# -------------------------------------------------------------------------- decoded sizes


def _row_bytes(table: pa.Table) -> np.ndarray:
    """Decoded bytes of each row of `table` (its values' data plus a slot each)."""
    total = np.zeros(table.num_rows, dtype=np.int64)
    for column in table.columns:
        start = 0
        for chunk in column.chunks:
            total[start : start + len(chunk)] += _value_bytes(chunk)
            start += len(chunk)
    return total


def _value_bytes(arr: pa.Array) -> np.ndarray:
    """Decoded bytes of each value of `arr`, nested values summed into their parent, a
    dictionary value counted once per use; nothing is decoded to do it."""
    n = len(arr)
    kind = arr.type
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    if pa.types.is_dictionary(kind):
        sizes = _value_bytes(arr.dictionary)
        indices = pc.fill_null(arr.indices, 0).to_numpy(zero_copy_only=False).astype(np.int64)
        out = sizes[indices] if len(sizes) else np.zeros(n, dtype=np.int64)
        return np.where(_valid(arr), out, 0) + _SLOT
    if (
        pa.types.is_string(kind)
        or pa.types.is_large_string(kind)
        or pa.types.is_binary(kind)
        or pa.types.is_large_binary(kind)
    ):
        lengths = pc.fill_null(pc.binary_length(arr), 0)
        return lengths.to_numpy(zero_copy_only=False).astype(np.int64) + _SLOT
    if pa.types.is_struct(kind):
        out = np.full(n, _SLOT, dtype=np.int64)
        for child in arr.flatten():
            out += _value_bytes(child)
        return out
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_map(kind):
        return _nested(arr)
    if pa.types.is_fixed_size_list(kind):
        size = kind.list_size
        child = _value_bytes(arr.values.slice(arr.offset * size, n * size))
        sums = child.reshape(n, size).sum(axis=1) if size else np.zeros(n, dtype=np.int64)
        return np.where(_valid(arr), sums, 0) + _SLOT
    width = getattr(kind, "bit_width", 0) // 8 if pa.types.is_primitive(kind) else 0
    if pa.types.is_fixed_size_binary(kind) or pa.types.is_decimal(kind):
        width = kind.byte_width
    if width or pa.types.is_null(kind) or pa.types.is_boolean(kind):
        return np.full(n, width + _SLOT, dtype=np.int64)
    # Anything else (unions, extension types): its buffers, shared out over its values.
    return np.full(n, arr.get_total_buffer_size() // n + _SLOT, dtype=np.int64)


def _nested(parent: pa.Array) -> np.ndarray:
    """A list's or map's values summed per parent value, from its offsets (null slots count
    nothing, whatever range they span)."""
    offsets = parent.offsets.to_numpy(zero_copy_only=False).astype(np.int64)
    first, last = int(offsets[0]), int(offsets[-1])
    if last <= first:
        return _slots(len(parent))
    sizes = _value_bytes(parent.values.slice(first, last - first))
    running = np.concatenate(([0], np.cumsum(sizes)))
    sums = running[offsets[1:] - first] - running[offsets[:-1] - first]
    return np.where(_valid(parent), sums, 0) + _SLOT


def _slots(n: int) -> np.ndarray:
    return np.full(n, _SLOT, dtype=np.int64)


def _valid(arr: pa.Array) -> np.ndarray:
    if arr.null_count == 0:
        return np.ones(len(arr), dtype=bool)
    return pc.is_valid(arr).to_numpy(zero_copy_only=False)


# --------------------------------------------------------------------------------- reading


def _conversion_error(exc: BaseException) -> bool:
    """An error converting a value to Python (not an interrupt)."""
    return isinstance(exc, Exception)


def _scan_parquet(src: _Source, out: _Collector, size: int, limits: Limits | None = None) -> None:
    """The rows of a Parquet file of `size` bytes (by fstat) as records; a file past a bound
    or unreadable is one record."""
    limits = limits or Limits.of_format()
    if size > limits.file_bytes:
        while src.read():  # hashed, so the landing index knows this version was seen
            pass
        detail = f"it takes {size:,} bytes (at most {limits.file_bytes:,}); split it"
        return _whole_file(out, Reason.FILE_TOO_LARGE, f"the Parquet file is too large: {detail}")
    try:
        plan = _Plan(src.read_all(), limits)
        start = 0
        for table, sizes in plan.groups():
            _group_records(table, sizes, start, out, limits)
            start += table.num_rows
    except _TooLarge as exc:
        _whole_file(out, Reason.FILE_TOO_LARGE, f"the Parquet file is too large: {exc}")
    except _Unusable as exc:
        _whole_file(out, "unreadable_file", f"the Parquet file cannot be read: {exc}")


def count_rows(src: _Source, size: int, limits: Limits | None = None) -> int:
    """The records `_scan_parquet` would find: the rows, or 1 for a file it reads as one."""
    limits = limits or Limits.of_format()
    if size > limits.file_bytes:
        return 1
    try:
        plan = _Plan(src.read_all(), limits)
        for _ in plan.groups():
            pass
    except (_TooLarge, _Unusable):
        return 1
    return plan.rows


def _whole_file(out: _Collector, reason: str, detail: str) -> None:
    out.clear()
    out.records = 1
    out.reject(None, reason, detail, b"")


def _group_records(
    table: pa.Table, sizes: np.ndarray, start: int, out: _Collector, limits: Limits
) -> None:
    """One row group's rows as records (1-based row numbers from ``start + 1``)."""
    table, ts_us, aware = _timestamps(table)
    for lo, hi in _slices(sizes, limits.row_bytes):
        if hi - lo == 1 and sizes[lo] > limits.row_bytes:
            row = _clipped_row(table.slice(lo, 1))
            if ts_us is not None and ts_us[lo] is not None:
                row["ts"] = _Instant(ts_us[lo], aware)
            out.records += 1
            detail = f"the row holds {int(sizes[lo]):,} bytes (at most {limits.row_bytes:,})"
            out.reject(start + lo + 1, Reason.ROW_TOO_LARGE, detail, None, row)
            continue
        for i, row in enumerate(_python_rows(table.slice(lo, hi - lo)), start=lo):
            if ts_us is not None and isinstance(row, dict):
                row["ts"] = None if ts_us[i] is None else _Instant(ts_us[i], aware)
            out.record(start + i + 1, row, None, from_struct=True)


def _slices(sizes: np.ndarray, row_bytes: int) -> Iterator[tuple[int, int]]:
    """[lo, hi) row ranges of at most `_SLICE_ROWS` rows and `_SLICE_BYTES` decoded bytes; a
    row over `row_bytes` is a range of its own."""
    lo, used = 0, 0
    for i, size in enumerate(sizes.tolist()):
        if size > row_bytes:
            if i > lo:
                yield lo, i
            yield i, i + 1
            lo, used = i + 1, 0
            continue
        if i > lo and (i - lo >= _SLICE_ROWS or used + size > _SLICE_BYTES):
            yield lo, i
            lo, used = i, 0
        used += size
    if lo < len(sizes):
        yield lo, len(sizes)


def _timestamps(table: pa.Table) -> tuple[pa.Table, list[int | None] | None, bool]:
    """A timestamp ``ts`` column taken out of `table` as UTC microseconds (Python ints: any
    range), with whether it had a zone; (table, None, False) when ``ts`` is not a timestamp."""
    if "ts" not in table.column_names:
        return table, None, False
    column = table.column("ts")
    dictionary = pa.types.is_dictionary(column.type)
    kind = column.type.value_type if dictionary else column.type
    if not pa.types.is_timestamp(kind):
        return table, None, False
    if dictionary:
        column = pa.chunked_array([c.dictionary_decode() for c in column.chunks], kind)
    mul, div = _US_SCALE[kind.unit]
    values = pc.cast(column, pa.int64()).to_pylist()
    us = [None if v is None else v * mul // div for v in values]
    return table.drop_columns(["ts"]), us, kind.tz is not None


def _python_rows(table: pa.Table) -> list[Any]:
    """The rows as dicts; a row whose values Python cannot hold is `_Unreadable`."""
    try:
        return table.to_pylist()
    except Exception:
        pass
    rows: list[Any] = []
    for i in range(table.num_rows):
        try:
            rows.append(table.slice(i, 1).to_pylist()[0])
        except Exception as exc:
            rows.append(_Unreadable(type(exc).__name__))
    return rows


def _clipped_row(table: pa.Table) -> dict[str, Any]:
    """A too-large row for its reject record: text values cut to their head, nested values
    named by their size only, so the record never holds the row."""
    row: dict[str, Any] = {}
    for name, column in zip(table.column_names, table.columns, strict=True):
        arr = column.combine_chunks()
        kind = arr.type.value_type if pa.types.is_dictionary(arr.type) else arr.type
        if pa.types.is_dictionary(arr.type):
            arr = arr.dictionary.take(arr.indices)
        if pa.types.is_string(kind) or pa.types.is_large_string(kind):
            row[name] = pc.utf8_slice_codeunits(arr, 0, _LONG_LINE_HEAD).to_pylist()[0]
        elif pa.types.is_nested(kind) or pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
            row[name] = f"<{int(_value_bytes(arr)[0]):,} bytes, not shown>"
        else:
            try:
                row[name] = arr.to_pylist()[0]
            except Exception as exc:
                row[name] = f"<{type(exc).__name__}>"
    return row
