"""Parquet: rows into records."""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

import polars as pl

from memflow.landing.files import (
    _Source,
)
from memflow.landing.format import (
    _PARQUET_FIELDS,
)
from memflow.landing.records import _Collector, _Instant, _Unreadable


def _conversion_error(exc: BaseException) -> bool:
    """An error converting a value to Python (polars raises a Rust panic for some)."""
    return isinstance(exc, Exception) or type(exc).__name__ == "PanicException"


def _scan_parquet(src: _Source, out: _Collector) -> None:
    data = src.read_all()
    try:
        frame = pl.read_parquet(io.BytesIO(data))
    except BaseException as exc:  # any reader error means the file as a whole is unusable
        if not _conversion_error(exc):
            raise
        out.records += 1
        out.reject(
            None, "unreadable_file", f"the Parquet file cannot be read: {type(exc).__name__}", b""
        )
        return
    frame = frame.select(c for c in _PARQUET_FIELDS if c in frame.columns)
    ts_type = frame.schema.get("ts")
    scale = None
    if isinstance(ts_type, pl.Datetime):
        # Kept as integers: a timestamp Python cannot hold must not stop the read.
        scale = {"ns": (1, 1000), "us": (1, 1), "ms": (1000, 1)}[ts_type.time_unit or "us"]
        aware = ts_type.time_zone is not None
        frame = frame.with_columns(pl.col("ts").cast(pl.Int64))
    for row_no, row in _parquet_rows(frame):
        if scale is not None and isinstance(row, dict) and row.get("ts") is not None:
            mul, div = scale
            row["ts"] = _Instant(row["ts"] * mul // div, aware)
        out.record(row_no, row, None, from_struct=True)


def _parquet_rows(frame: pl.DataFrame, step: int = 4096) -> Iterator[tuple[int, Any]]:
    for start in range(0, frame.height, step):
        chunk = frame.slice(start, step)
        try:
            rows: list[Any] = chunk.rows(named=True)
        except BaseException as exc:
            if not _conversion_error(exc):
                raise
            rows = []
            for i in range(chunk.height):
                try:
                    rows.append(chunk.slice(i, 1).rows(named=True)[0])
                except BaseException as row_exc:
                    if not _conversion_error(row_exc):
                        raise
                    rows.append(_Unreadable(type(row_exc).__name__))
        yield from enumerate(rows, start=start + 1)
