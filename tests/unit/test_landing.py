"""The landing-zone reader: layout discovery, JSONL/Parquet parsing, rejects, days, fingerprints."""

from __future__ import annotations

import hashlib
import json
import os
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from memflow.landing import (
    MAX_RECORD_CHARS,
    REJECT_COLUMNS,
    TURN_COLUMNS,
    UPSERT_TOOL,
    FileFingerprint,
    days_in_file,
    discover,
    fingerprint,
    read_landing_file,
    scope_of_file,
)
from schemas.ids import turn_key
from schemas.scope import Scope, ScopeError

TRIPLES = {"triples": [{"subject": "payments-api", "predicate": "USES", "object": "Valkey 8"}]}


def turn(n: int = 1, **changes: Any) -> dict[str, Any]:
    line: dict[str, Any] = {
        "org": "acme",
        "repo": "api",
        "session_id": "s-1",
        "turn_id": f"t-{n}",
        "ts": "2026-11-03T10:00:00Z",
        "role": "user",
        "content": f"turn {n}",
        "client": "claude-code",
    }
    line.update(changes)
    return {k: v for k, v in line.items() if v is not DROP}


DROP = object()


def encode(line: dict[str, Any] | bytes | str) -> bytes:
    if isinstance(line, bytes):
        return line
    if isinstance(line, str):
        return line.encode()
    return json.dumps(line, ensure_ascii=False).encode()


def write(
    root: Path,
    lines: list[Any],
    name: str = "s.jsonl",
    org: str = "acme",
    repo: str = "api",
    sep: bytes = b"\n",
) -> Path:
    folder = root / org / repo
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_bytes(sep.join(encode(line) for line in lines) + sep)
    return path


# ----------------------------------------------------------------------------------- accepted


def test_good_turns_are_read_with_every_column(tmp_path: Path) -> None:
    tool = turn(
        2, role="tool", content="saved", tool_name="upsert_graph_triples", tool_input=TRIPLES
    )
    path = write(tmp_path, [turn(1), tool])
    read = read_landing_file(path, tmp_path)

    assert read.scope == Scope("acme", "api")
    assert read.source_file == "acme/api/s.jsonl"
    assert dict(read.turns.schema) == TURN_COLUMNS
    assert dict(read.rejects.schema) == REJECT_COLUMNS
    assert read.rejects.height == 0
    assert read.records == 2
    rows = read.turns.to_dicts()
    assert rows[0] | {"ts": None} == {
        "turn_key": turn_key("acme", "api", "s-1", "t-1"),
        "tenant_id": "acme",
        "ns": "api",
        "day": "2026-11-03",
        "session_id": "s-1",
        "turn_id": "t-1",
        "ts": None,
        "role": "user",
        "client": "claude-code",
        "content": "turn 1",
        "tool_name": None,
        "tool_input_json": None,
        "source_file": "acme/api/s.jsonl",
        "line_no": 1,
    }
    assert rows[0]["ts"] == datetime(2026, 11, 3, 10, tzinfo=UTC)
    assert rows[1]["tool_name"] == "upsert_graph_triples"
    assert json.loads(rows[1]["tool_input_json"]) == TRIPLES


def test_day_is_the_utc_date_whatever_the_offset(tmp_path: Path) -> None:
    lines = [
        turn(1, ts="2026-11-03T23:30:00-08:00"),  # 07:30 UTC the next day
        turn(2, ts="2026-11-04T01:00:00+05:30"),  # 19:30 UTC the day before
        turn(3, ts="2026-11-03T12:00:00.123456Z"),
        turn(4, ts="2026-11-03 12:00:00+00:00"),
    ]
    path = write(tmp_path, lines)
    read = read_landing_file(path, tmp_path)
    assert read.turns["day"].to_list() == ["2026-11-04", "2026-11-03", "2026-11-03", "2026-11-03"]
    assert read.turns["ts"].to_list() == [
        datetime(2026, 11, 4, 7, 30, tzinfo=UTC),
        datetime(2026, 11, 3, 19, 30, tzinfo=UTC),
        datetime(2026, 11, 3, 12, 0, 0, 123456, tzinfo=UTC),
        datetime(2026, 11, 3, 12, tzinfo=UTC),
    ]
    assert read.days == ["2026-11-03", "2026-11-04"]
    assert days_in_file(path, tmp_path) == ["2026-11-03", "2026-11-04"]


def test_days_in_file_ignores_rejected_lines(tmp_path: Path) -> None:
    path = write(tmp_path, [turn(1), turn(2, ts="2026-11-09T10:00:00Z", role="system")])
    assert days_in_file(path, tmp_path) == ["2026-11-03"]


def test_blank_lines_are_skipped_and_line_numbers_stay_physical(tmp_path: Path) -> None:
    path = write(tmp_path, [turn(1), b"", b"   \t", turn(2)])
    read = read_landing_file(path, tmp_path)
    assert read.turns["line_no"].to_list() == [1, 4]
    assert read.rejects.height == 0
    assert read.records == 2


def test_crlf_line_endings_and_a_byte_order_mark_are_accepted(tmp_path: Path) -> None:
    first = b"\xef\xbb\xbf" + encode(turn(1))
    path = write(tmp_path, [first, turn(2)], sep=b"\r\n")
    read = read_landing_file(path, tmp_path)
    assert read.turns["turn_id"].to_list() == ["t-1", "t-2"]
    assert read.turns["content"].to_list() == ["turn 1", "turn 2"]


def test_null_content_reads_as_empty_text(tmp_path: Path) -> None:
    path = write(tmp_path, [turn(1, role="tool", content=None, tool_name="Bash")])
    assert read_landing_file(path, tmp_path).turns["content"].to_list() == [""]


@pytest.mark.parametrize(
    ("tool_input", "expected"),
    [
        (json.dumps(TRIPLES), TRIPLES),  # a JSON string holding an object is decoded
        ({**TRIPLES, "note": {"any": [1, 2]}}, TRIPLES),  # only the triples are kept
    ],
)
def test_an_upsert_keeps_its_triples_as_json(
    tmp_path: Path, tool_input: Any, expected: Any
) -> None:
    path = write(tmp_path, [turn(1, role="tool", tool_name=UPSERT_TOOL, tool_input=tool_input)])
    value = read_landing_file(path, tmp_path).turns["tool_input_json"][0]
    assert json.loads(value) == expected


@pytest.mark.parametrize("tool_input", ["ls -la", ["a", 1], {"command": "ls"}, None])
def test_another_tools_input_is_neither_checked_nor_kept(tmp_path: Path, tool_input: Any) -> None:
    path = write(tmp_path, [turn(1, role="tool", tool_name="Bash", tool_input=tool_input)])
    read = read_landing_file(path, tmp_path)
    assert read.turns.select("tool_name", "tool_input_json").rows() == [("Bash", None)]


def test_unknown_fields_are_ignored(tmp_path: Path) -> None:
    path = write(tmp_path, [turn(1, model="claude-opus", cwd="/src/api")])
    read = read_landing_file(path, tmp_path)
    assert read.turns.height == 1
    assert read.rejects.height == 0


# ------------------------------------------------------------------------------------ rejects

BAD_LINES: list[tuple[str, Any]] = [
    ("invalid_json", b'{"org": "acme", "repo": '),
    ("invalid_json", b'{"org": "acme", "content": "\\ud800"}'),  # lone surrogate
    ("invalid_json", b'{"confidence": NaN}'),
    ("not_an_object", b'["acme", "api"]'),
    ("not_an_object", b'"just a string"'),
    ("missing_field:session_id", turn(2, session_id=DROP)),
    ("missing_field:turn_id", turn(2, turn_id="  ")),
    ("missing_field:ts", turn(2, ts=None)),
    ("missing_field:org", turn(2, org=DROP)),
    ("missing_field:client", turn(2, client="")),
    ("missing_field:content", turn(2, content=DROP)),
    ("bad_type:turn_id", turn(2, turn_id=7)),
    ("bad_type:ts", turn(2, ts=1793700000)),
    ("bad_type:role", turn(2, role=["user"])),
    ("bad_type:content", turn(2, content={"text": "hi"})),
    ("bad_type:tool_name", turn(2, tool_name=5)),
    ("bad_timestamp", turn(2, ts="2026-11-03T10:00:00")),
    ("bad_timestamp", turn(2, ts="2026-11-03")),
    ("bad_timestamp", turn(2, ts="yesterday at noon")),
    ("bad_timestamp", turn(2, ts="2026-11-03T24:00:00Z")),
    ("bad_role", turn(2, role="system")),
    ("bad_role", turn(2, role="User")),
    ("scope_mismatch", turn(2, org="globex")),
    ("scope_mismatch", turn(2, repo="web-console")),
    ("bad_tool_input", turn(2, role="tool", tool_name="upsert_graph_triples")),
    (
        "bad_tool_input",
        turn(2, role="tool", tool_name="upsert_graph_triples", tool_input={"triple": []}),
    ),
    (
        "bad_tool_input",
        turn(2, role="tool", tool_name="upsert_graph_triples", tool_input={"triples": "a USES b"}),
    ),
    (
        "bad_tool_input",
        turn(2, role="tool", tool_name="upsert_graph_triples", tool_input="not json"),
    ),
    ("bad_encoding", b'{"org": "acme", "content": "caf\xe9"}'),
]


@pytest.mark.parametrize(
    ("reason", "bad"), BAD_LINES, ids=[f"{r}-{i}" for i, (r, _) in enumerate(BAD_LINES)]
)
def test_a_bad_line_is_quarantined_and_the_rest_is_read(
    tmp_path: Path, reason: str, bad: Any
) -> None:
    path = write(tmp_path, [turn(1), bad, turn(3)])
    read = read_landing_file(path, tmp_path)

    assert read.turns["line_no"].to_list() == [1, 3]
    assert read.turns["turn_id"].to_list() == ["t-1", "t-3"]
    assert read.records == 3
    assert read.rejects.height == 1
    rej = read.rejects.row(0, named=True)
    assert rej["reason"] == reason
    assert rej["line_no"] == 2
    assert rej["stage"] == "landing"
    assert (rej["tenant_id"], rej["ns"], rej["source_file"]) == ("acme", "api", "acme/api/s.jsonl")
    assert rej["detail"]
    assert rej["record"] == encode(bad).decode("utf-8", errors="replace")
    assert read.rejects_by_reason() == {reason: 1}


def test_rejects_carry_the_session_and_turn_when_known(tmp_path: Path) -> None:
    path = write(tmp_path, [turn(1, role="system"), b"{oops"])
    rejects = read_landing_file(path, tmp_path).rejects
    assert rejects.select("session_id", "turn_id").rows() == [("s-1", "t-1"), (None, None)]


def test_a_duplicate_turn_keeps_the_first(tmp_path: Path) -> None:
    path = write(tmp_path, [turn(1, content="first"), turn(2), turn(1, content="second")])
    read = read_landing_file(path, tmp_path)
    assert read.turns.select("turn_id", "content").rows() == [("t-1", "first"), ("t-2", "turn 2")]
    rej = read.rejects.row(0, named=True)
    assert (rej["reason"], rej["line_no"], rej["turn_id"]) == ("duplicate_turn", 3, "t-1")


def test_a_rejected_line_does_not_claim_its_turn_id(tmp_path: Path) -> None:
    path = write(tmp_path, [turn(1, role="system"), turn(1)])
    read = read_landing_file(path, tmp_path)
    assert read.turns["line_no"].to_list() == [2]
    assert read.rejects["reason"].to_list() == ["bad_role"]


def test_a_too_long_line_is_skipped_without_losing_the_next(tmp_path: Path) -> None:
    long_line = turn(2, content="x" * 5_000)
    path = write(tmp_path, [turn(1), long_line, turn(3)])
    read = read_landing_file(path, tmp_path, max_line_bytes=1_000)
    assert read.turns["line_no"].to_list() == [1, 3]
    rej = read.rejects.row(0, named=True)
    assert (rej["reason"], rej["line_no"]) == ("line_too_long", 2)
    assert len(rej["record"]) <= MAX_RECORD_CHARS
    at_bound = read_landing_file(path, tmp_path, max_line_bytes=len(encode(turn(1))))
    assert at_bound.turns["line_no"].to_list() == [1, 3]


def test_a_too_long_last_line_without_newline(tmp_path: Path) -> None:
    path = tmp_path / "acme" / "api" / "s.jsonl"
    path.parent.mkdir(parents=True)
    path.write_bytes(encode(turn(1)) + b"\n" + b"y" * 3_000)
    read = read_landing_file(path, tmp_path, max_line_bytes=1_000)
    assert read.turns.height == 1
    assert read.rejects.select("reason", "line_no").rows() == [("line_too_long", 2)]


def test_long_records_are_redacted_then_clipped_without_a_partial_token(tmp_path: Path) -> None:
    prefix = encode(turn(2, role="system", content="")).decode()
    head = prefix[: prefix.index('"content": "') + len('"content": "')]
    filler = "word " * ((MAX_RECORD_CHARS - 10 - len(head)) // 5)
    secret = "AKIAQ3EXAMPLEFAKE7XZ"
    bad = turn(2, role="system", content=filler + secret + " tail" * 400)
    path = write(tmp_path, [bad])
    record = read_landing_file(path, tmp_path).rejects["record"][0]
    assert len(record) <= MAX_RECORD_CHARS
    assert "AKIA" not in record  # the key straddled the cut: redacted first, never halved
    assert record.startswith(head + "word word")
    assert "[REDACTED" not in record or record.rstrip().endswith("]")


# ------------------------------------------------------------------------------------ parquet


def test_parquet_rows_with_struct_tool_input_and_zoned_timestamps(tmp_path: Path) -> None:
    folder = tmp_path / "acme" / "api"
    folder.mkdir(parents=True)
    zone = timezone(timedelta(hours=-8))
    frame = pl.DataFrame(
        {
            "org": ["acme", "acme", "globex", "acme"],
            "repo": ["api"] * 4,
            "session_id": ["s-1"] * 4,
            "turn_id": ["t-1", "t-2", "t-3", "t-4"],
            "ts": [datetime(2026, 11, 3, 23, 30, tzinfo=zone)] * 4,
            "role": ["tool", "user", "user", "user"],
            "content": ["saved", "hello", "other scope", "bye"],
            "client": ["cursor"] * 4,
            "tool_name": ["upsert_graph_triples", None, None, None],
            "tool_input": [
                {
                    "triples": [
                        {"subject": "a", "predicate": "USES", "object": "b", "confidence": None},
                        {"subject": "c", "predicate": "USES", "object": "d", "confidence": 0.9},
                    ]
                },
                None,
                None,
                None,
            ],
        }
    )
    frame.write_parquet(folder / "export.parquet")
    read = read_landing_file(folder / "export.parquet", tmp_path)

    assert read.turns["turn_id"].to_list() == ["t-1", "t-2", "t-4"]
    assert read.turns["line_no"].to_list() == [1, 2, 4]
    assert read.turns["day"].to_list() == ["2026-11-04"] * 3
    assert read.turns["ts"][0] == datetime(2026, 11, 4, 7, 30, tzinfo=UTC)
    assert json.loads(read.turns["tool_input_json"][0]) == {
        "triples": [
            {"subject": "a", "predicate": "USES", "object": "b"},
            {"subject": "c", "predicate": "USES", "object": "d", "confidence": 0.9},
        ]
    }
    assert read.rejects.select("reason", "line_no").rows() == [("scope_mismatch", 3)]
    assert json.loads(read.rejects["record"][0])["org"] == "globex"
    assert read.turns["tool_input_json"].to_list()[1:] == [None, None]


def test_parquet_with_string_columns(tmp_path: Path) -> None:
    folder = tmp_path / "acme" / "api"
    folder.mkdir(parents=True)
    rows = [
        turn(1, role="tool", tool_name="upsert_graph_triples", tool_input=json.dumps(TRIPLES)),
        turn(2, ts="2026-11-03T10:00:00"),
        turn(3, ts="2026-11-04T00:30:00+01:00", tool_name=None, tool_input=None),
    ]
    columns = list(rows[0])
    frame = pl.DataFrame(
        {c: [r.get(c) for r in rows] for c in columns}, schema=dict.fromkeys(columns, pl.String())
    )
    frame.write_parquet(folder / "turns.parquet")
    read = read_landing_file(folder / "turns.parquet", tmp_path)
    assert json.loads(read.turns["tool_input_json"][0]) == TRIPLES
    assert read.turns["day"].to_list() == ["2026-11-03", "2026-11-03"]
    assert read.rejects.select("reason", "line_no").rows() == [("bad_timestamp", 2)]


def test_parquet_naive_timestamps_are_rejected(tmp_path: Path) -> None:
    folder = tmp_path / "acme" / "api"
    folder.mkdir(parents=True)
    frame = pl.DataFrame([turn(1) | {"ts": datetime(2026, 11, 3, 10)}])
    frame.write_parquet(folder / "naive.parquet")
    read = read_landing_file(folder / "naive.parquet", tmp_path)
    assert read.turns.height == 0
    assert read.rejects["reason"].to_list() == ["bad_timestamp"]


def test_an_unreadable_parquet_file_is_one_reject(tmp_path: Path) -> None:
    folder = tmp_path / "acme" / "api"
    folder.mkdir(parents=True)
    (folder / "broken.parquet").write_bytes(b"PAR1 this is not parquet")
    read = read_landing_file(folder / "broken.parquet", tmp_path)
    assert read.turns.height == 0
    assert dict(read.turns.schema) == TURN_COLUMNS
    rej = read.rejects.row(0, named=True)
    assert (rej["reason"], rej["line_no"], rej["source_file"]) == (
        "unreadable_file",
        None,
        "acme/api/broken.parquet",
    )


def test_an_empty_file_gives_empty_typed_tables(tmp_path: Path) -> None:
    folder = tmp_path / "acme" / "api"
    folder.mkdir(parents=True)
    (folder / "empty.jsonl").write_bytes(b"")
    read = read_landing_file(folder / "empty.jsonl", tmp_path)
    assert (read.turns.height, read.rejects.height, read.records) == (0, 0, 0)
    assert dict(read.turns.schema) == TURN_COLUMNS
    assert dict(read.rejects.schema) == REJECT_COLUMNS
    assert read.days == []


# -------------------------------------------------------------------------------- discovery


def test_discover_finds_tenants_and_reports_problems(tmp_path: Path) -> None:
    write(tmp_path, [turn(1)], name="b.jsonl")
    write(tmp_path, [turn(1)], name="a.parquet")
    write(tmp_path, [turn(1)], name="only.jsonl", org="globex", repo="ml-platform")
    write(tmp_path, [turn(1)], name="x.jsonl", org="bad org!", repo="api")
    (tmp_path / "acme" / "api" / ".c.jsonl.tmp").write_text("partial")
    (tmp_path / "acme" / "api" / "notes.md").write_text("not a landing file")
    (tmp_path / "acme" / "api" / "archive").mkdir()
    (tmp_path / "acme" / "docs").mkdir()  # no landing files: not a tenant
    (tmp_path / "acme" / "stray.jsonl").write_text("{}")
    (tmp_path / "top.jsonl").write_text("{}")
    (tmp_path / "README.md").write_text("landing zone")
    (tmp_path / "acme" / "linked").symlink_to(tmp_path / "globex" / "ml-platform")

    found = discover(tmp_path)

    assert list(found) == [Scope("acme", "api"), Scope("globex", "ml-platform")]
    assert [p.name for p in found[Scope("acme", "api")]] == ["a.parquet", "b.jsonl"]
    problems = {(p.path, p.reason) for p in found.problems}
    assert problems == {
        ("bad org!/api", "invalid_scope"),
        ("acme/api/archive", "nested_directory"),
        ("acme/stray.jsonl", "misplaced_file"),
        ("top.jsonl", "misplaced_file"),
        ("acme/linked", "symlink"),
    }


def test_discover_on_a_missing_root_reports_it(tmp_path: Path) -> None:
    found = discover(tmp_path / "nope")
    assert dict(found) == {}
    assert [p.reason for p in found.problems] == ["missing_root"]


def test_files_outside_the_layout_have_no_scope(tmp_path: Path) -> None:
    deep = tmp_path / "acme" / "api" / "archive" / "old.jsonl"
    deep.parent.mkdir(parents=True)
    deep.write_bytes(encode(turn(1)) + b"\n")
    with pytest.raises(ScopeError):
        read_landing_file(deep, tmp_path)
    with pytest.raises(ScopeError):
        scope_of_file(tmp_path.parent / "elsewhere.jsonl", tmp_path)
    bad = write(tmp_path, [turn(1)], org="acme", repo="-api")
    with pytest.raises(ScopeError):
        scope_of_file(bad, tmp_path)


def test_relative_and_absolute_paths_agree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path, [turn(1)])
    monkeypatch.chdir(tmp_path)
    read = read_landing_file(Path("acme/api/s.jsonl"), Path("."))
    assert read.source_file == "acme/api/s.jsonl"
    assert scope_of_file(path, ".") == Scope("acme", "api")


# ------------------------------------------------------------------------------ fingerprints


def test_fingerprint_hashes_content_and_reuses_an_unchanged_stat(tmp_path: Path) -> None:
    path = write(tmp_path, [turn(1)])
    fp = fingerprint(path, tmp_path)
    st = path.stat()
    assert fp == FileFingerprint(
        "acme/api/s.jsonl",
        st.st_size,
        st.st_mtime_ns,
        hashlib.sha256(path.read_bytes()).hexdigest(),
    )
    assert FileFingerprint.from_dict(json.loads(json.dumps(fp.as_dict()))) == fp

    # same path, size and mtime: the recorded hash is trusted, the file is not read again
    stale = FileFingerprint(fp.path, fp.size, fp.mtime_ns, "0" * 64)
    assert fingerprint(path, tmp_path, previous=stale) is stale

    path.write_bytes(encode(turn(2)) + b"\n")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    changed = fingerprint(path, tmp_path, previous=fp)
    assert changed.sha256 == hashlib.sha256(path.read_bytes()).hexdigest() != fp.sha256
