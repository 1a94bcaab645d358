"""Parquet files that stand for far more data than they hold (the red team's H3, and its
relatives), written with pyarrow as any writer would. Each returns the file's bytes; `BOMBS`
names them with the outcome the landing format promises.

A dictionary-encoded column stores one value once and an index per row, so two million rows of
one 2 KB value take a few hundred kilobytes; zstd shrinks a run of one byte a thousandfold; a
list column's repetition levels compress to nothing. The reader must see this from the footer
or from the arrays it reads with their dictionaries kept, never by decoding the values.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ORG, REPO = "acme", "api"
TS = "2026-11-03T10:00:00Z"


def _repeat(value: Any, n: int, kind: pa.DataType | None = None) -> pa.DictionaryArray:
    """`value` n times, dictionary-encoded (one value stored, n indices)."""
    indices = pa.array(np.zeros(n, dtype=np.int32))
    return pa.DictionaryArray.from_arrays(indices, pa.array([value], kind))


def _write(table: pa.Table, **options: Any) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink, compression=options.pop("compression", "zstd"), **options)
    return sink.getvalue()


def turn_columns(
    n: int, content: pa.Array | None = None, org: str = ORG, repo: str = REPO
) -> dict[str, pa.Array]:
    """The columns of `n` valid turns (distinct turn ids), dictionary-encoded where constant."""
    return {
        "org": _repeat(org, n),
        "repo": _repeat(repo, n),
        "session_id": _repeat("s-1", n),
        "turn_id": pa.array([f"t-{i}" for i in range(n)]),
        "ts": _repeat(TS, n),
        "role": _repeat("user", n),
        "client": _repeat("claude-code", n),
        "content": content if content is not None else pa.array([f"turn {i}" for i in range(n)]),
    }


def dictionary_bomb(
    rows: int = 2_000_000, value_bytes: int = 2048, org: str = ORG, repo: str = REPO
) -> bytes:
    """H3 as reported: `rows` rows of one `value_bytes` value (about 470 KB on disk for 2 M
    rows, 4 GB once decoded): past the footer's bound."""
    columns = turn_columns(1, org=org, repo=repo)
    columns = {k: _repeat(v[0].as_py(), rows) for k, v in columns.items()}
    columns["content"] = _repeat("x" * value_bytes, rows)
    return _write(pa.table(columns))


def decoded_bomb(rows: int = 140_000, value_bytes: int = 2048) -> bytes:
    """Within the footer's bound (its dictionaries are small), past the decoded budget once
    the rows' sizes are counted from the arrays: 140,000 rows x 2 KB = 287 MB decoded."""
    return _write(pa.table(turn_columns(rows, _repeat("y" * value_bytes, rows))))


def huge_row(value_bytes: int = 20_500_000, org: str = ORG, repo: str = REPO) -> bytes:
    """H3's second file: a few kilobytes carrying one turn of 20.5 MB between two good ones."""
    content = pa.array(["before", "z" * value_bytes, "after"])
    return _write(pa.table(turn_columns(3, content, org, repo)), use_dictionary=False)


def compressed_bomb(rows: int = 280, value_bytes: int = (1 << 20) - 64) -> bytes:
    """Plain (not dictionary) values just under the row limit, zstd-compressed to almost
    nothing: every row is within MAX_LINE_BYTES, the file is past the decoded budget by its
    footer's uncompressed sizes."""
    content = pa.array([chr(97 + i % 26) * value_bytes for i in range(rows)])
    return _write(pa.table(turn_columns(rows, content)), use_dictionary=False)


def list_bomb(values: int = 60_000_000) -> bytes:
    """One upsert turn whose tool_input holds `values` empty strings in a list (repetition
    levels and one dictionary value): past the footer's bound by its value count."""
    columns = turn_columns(1)
    columns["tool_name"] = pa.array(["upsert_graph_triples"])
    strings = _repeat("", values)
    offsets = pa.array([0, values], pa.int32())
    columns["tool_input"] = pa.ListArray.from_arrays(offsets, strings.dictionary_decode())
    return _write(pa.table(columns))


def forged_footer_length() -> bytes:
    """A small valid file whose footer-length field claims 2 GB: refused before parsing."""
    data = bytearray(_write(pa.table(turn_columns(2))))
    data[-8:-4] = (2_000_000_000).to_bytes(4, "little")
    return bytes(data)


# name -> (bytes, records the reader counts, reasons of its rejects)
BOMBS: dict[str, tuple[Callable[[], bytes], int, dict[str, int]]] = {
    "dictionary_bomb": (dictionary_bomb, 1, {"file_too_large": 1}),
    "decoded_bomb": (decoded_bomb, 1, {"file_too_large": 1}),
    "huge_row": (huge_row, 3, {"row_too_large": 1}),
    "compressed_bomb": (compressed_bomb, 1, {"file_too_large": 1}),
    "list_bomb": (list_bomb, 1, {"file_too_large": 1}),
    "forged_footer_length": (forged_footer_length, 1, {"file_too_large": 1}),
}
