"""Generated classes of the second red team's landing findings, through the domain functions:

- JSONL written with any mix of line endings (LF, CRLF, CR), byte-order marks opening any
  line, records joined by U+2028 / U+2029 / U+0085, timestamps with spaces around them, and
  the memflow tools under the spellings agents record (L4, M6): every line is accounted for as
  `tests.fuzz.zones.expected_records` says, no valid record is lost, every tool is named
  canonically;
- Parquet files of random shapes (rows, row groups, dictionaries, compression, rows past the
  line limit): every row is a turn or a reject, a too-large row is ``row_too_large`` (H3);
- rewrites of files that share turns: after each step the incremental turns stage stores the
  turns a clean read of the same files stores (M4).
"""

from __future__ import annotations

import io
import json
import os
import shutil
import tempfile
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import given
from hypothesis import strategies as st

from memflow.landing import MAX_LINE_BYTES, UPSERT_TOOL, read_landing_file
from memflow.turns import TurnTables, ingest_turns
from schemas.scope import Scope
from tests.fuzz.bombs import turn_columns
from tests.fuzz.invariants import Counts
from tests.fuzz.profile import DOMAIN, TALLY
from tests.fuzz.zones import expected_records

NOW = datetime(2026, 11, 5, tzinfo=UTC)
SCOPE = Scope("acme", "api")
TRIPLE = {"subject": "svc", "predicate": "USES", "object": "store"}


def _turn(n: int, ts: str, tool: str | None) -> dict:
    out = {
        "org": "acme",
        "repo": "api",
        "session_id": "s",
        "turn_id": f"t{n}",
        "ts": ts,
        "role": "tool" if tool else "user",
        "content": f"turn {n} \u2028 with a separator inside" if n % 5 == 0 else f"turn {n}",
        "client": "claude-code",
    }
    if tool:
        out |= {"tool_name": tool, "tool_input": {"triples": [TRIPLE]}}
    return out


_QUALIFIERS = ["", "mcp__memflow__", "memflow.", "memflow/", "memflow:", "mcp__mem-flow__"]
_CASES = [str, str.upper, str.title, lambda s: s.replace("_", "-"),
          lambda s: "".join(w.title() if i else w for i, w in enumerate(s.split("_")))]  # fmt: skip

TIMESTAMPS = ["2026-11-03T10:00:00Z", " 2026-11-03T10:00:00Z ", "2026-11-03T10:00:00+05:30\t"]
spellings = st.builds(
    lambda q, case, pad: pad + q + case(UPSERT_TOOL) + pad,
    st.sampled_from(_QUALIFIERS),
    st.sampled_from(_CASES),
    st.sampled_from(["", " "]),
)
records = st.lists(
    st.one_of(
        st.tuples(
            st.just("turn"),
            st.sampled_from(
                ["2026-11-03T10:00:00Z", " 2026-11-03T10:00:00Z ", "2026-11-03T10:00:00+05:30\t"]
            ),
            st.one_of(st.none(), spellings),
        ),
        st.tuples(st.just("junk"), st.sampled_from([b"{oops", b"[1,", b"\xff\xfe", b"   "])),
    ),
    min_size=1,
    max_size=40,
)


def _jsonl(
    draw_records: list, endings: list[bytes], boms: list[bool], joins: list[bytes]
) -> tuple[bytes, dict[str, str | None]]:
    """The file, and the valid turns it holds (turn id -> tool spelling)."""
    lines: list[bytes] = []
    valid: dict[str, str | None] = {}
    for n, rec in enumerate(draw_records):
        if rec[0] == "turn":
            _, ts, tool = rec
            body = json.dumps(_turn(n, ts, tool), ensure_ascii=False).encode()
            valid[f"t{n}"] = tool
        else:
            body = rec[1]
        lines.append(body)
    out = b""
    for i, body in enumerate(lines):
        join = joins[i % len(joins)]
        if join and i and lines[i - 1] not in (b"   ",) and body.strip():
            out += join + body  # joined to the previous record on one physical line
            continue
        if i:
            out += endings[i % len(endings)]
        out += (b"\xef\xbb\xbf" if boms[i % len(boms)] else b"") + body
    return out + endings[0], valid


@DOMAIN
@given(
    recs=records,
    endings=st.lists(st.sampled_from([b"\n", b"\r\n", b"\r"]), min_size=1, max_size=4),
    boms=st.lists(st.booleans(), min_size=1, max_size=4),
    joins=st.lists(
        st.sampled_from([b"", b"", "\u2028".encode(), "\u2029".encode(), "\u0085".encode()]),
        min_size=1,
        max_size=4,
    ),
)
def test_generated_jsonl_edges_lose_no_record(
    recs: list, endings: list[bytes], boms: list[bool], joins: list[bytes]
) -> None:
    data, valid = _jsonl(recs, endings, boms, joins)
    base = Path(tempfile.mkdtemp(prefix="memflow-edges-"))
    try:
        path = base / "acme" / "api" / "a.jsonl"
        path.parent.mkdir(parents=True)
        path.write_bytes(data)
        read = read_landing_file(path, base, now=NOW)
        TALLY.add("domain", Counts(inputs=1, lines=read.records, accounted=read.records))
        assert read.records == expected_records("a.jsonl", data), data
        assert read.records == read.turns.height + read.rejects.height
        got = dict(read.turns.select("turn_id", "tool_name").iter_rows())
        assert set(got) == set(valid), (data, read.rejects.to_dicts())
        for tid, tool in valid.items():
            assert got[tid] == (UPSERT_TOOL if tool else None)
    finally:
        shutil.rmtree(base, ignore_errors=True)


# ------------------------------------------------------------------------------- Parquet


@DOMAIN
@given(
    rows=st.integers(0, 2_000),
    big=st.sets(st.integers(0, 1_999), max_size=3),
    value=st.integers(0, 4_000),
    dictionary=st.booleans(),
    compression=st.sampled_from(["zstd", "snappy", "gzip", "none"]),
    group=st.integers(1, 2_500),
)
def test_generated_parquet_shapes_account_for_every_row(
    rows: int, big: set[int], value: int, dictionary: bool, compression: str, group: int
) -> None:
    big = {i for i in big if i < rows}
    texts = [
        ("B" * (MAX_LINE_BYTES + 10)) if i in big else f"{i}:" + "v" * value for i in range(rows)
    ]
    content = pa.array(texts)
    sink = io.BytesIO()
    pq.write_table(
        pa.table(turn_columns(rows, content)),
        sink,
        compression=compression,
        use_dictionary=dictionary,
        row_group_size=group,
    )
    base = Path(tempfile.mkdtemp(prefix="memflow-edges-"))
    try:
        path = base / "acme" / "api" / "a.parquet"
        path.parent.mkdir(parents=True)
        path.write_bytes(sink.getvalue())
        read = read_landing_file(path, base, now=NOW)
        assert read.records == rows == expected_records("a.parquet", sink.getvalue())
        assert read.rejects_by_reason() == ({"row_too_large": len(big)} if big else {})
        assert sorted(read.rejects["line_no"].to_list()) == sorted(i + 1 for i in big)
        assert read.turns["line_no"].to_list() == [i + 1 for i in range(rows) if i not in big]
    finally:
        shutil.rmtree(base, ignore_errors=True)


# ------------------------------------------------------------------------------ rewrites

step = st.tuples(
    st.sampled_from(["a.jsonl", "b.jsonl", "c.jsonl"]),
    st.lists(st.tuples(st.sampled_from("uvwxyz"), st.integers(0, 5)), max_size=5),
)


@DOMAIN
@given(steps=st.lists(step, min_size=1, max_size=7))
def test_incremental_reads_store_the_turns_a_clean_read_stores(steps: list) -> None:
    base = Path(tempfile.mkdtemp(prefix="memflow-rewrites-"))
    folder = base / "acme" / "api"
    folder.mkdir(parents=True)
    try:
        tables = TurnTables.empty()
        for stamp, (name, turns) in enumerate(steps, start=1):
            lines = [
                json.dumps(_turn(0, f"2026-11-03T10:0{minute}:00Z", None) | {"turn_id": tid})
                for tid, minute in turns
            ]
            path = folder / name
            path.write_text("".join(x + "\n" for x in lines))
            os.utime(path, ns=(stamp, stamp))
            files = sorted(folder.iterdir())
            tables = ingest_turns(base, SCOPE, files, tables, NOW).tables
            clean = ingest_turns(base, SCOPE, files, TurnTables.empty(), NOW).tables
            assert sorted(tables.turns["turn_key"]) == sorted(clean.turns["turn_key"]), steps
            index = tables.files
            assert (index["records"] == index["turns"] + index["rejects"]).all()
    finally:
        shutil.rmtree(base, ignore_errors=True)
