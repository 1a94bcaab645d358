"""Edges of the landing format the second red team found (L4, L5, L6, M6) and the retraction
format shared with the facts stage (`RETRACT_TOOL`): each as it arrives from a writer."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from memflow.extract import ExtractionTables, extract_tenant
from memflow.landing import (
    MAX_LINE_BYTES,
    RETRACT_TOOL,
    UPSERT_TOOL,
    canonical_tool,
    discover,
    landing_problems,
    printable,
    problem_line,
    read_landing_file,
)
from memflow.turns import TurnTables, ingest_turns
from schemas.scope import Scope

NOW = datetime(2026, 11, 5, tzinfo=UTC)
TRIPLE = {"subject": "payments-api", "predicate": "USES", "object": "Valkey 8"}


def turn(n: int, **changes: Any) -> dict[str, Any]:
    line = {
        "org": "acme",
        "repo": "api",
        "session_id": "s",
        "turn_id": f"t{n}",
        "ts": "2026-11-03T10:00:00Z",
        "role": "user",
        "content": f"turn {n}",
        "client": "claude-code",
    }
    return {**line, **changes}


def line(n: int, **changes: Any) -> bytes:
    return json.dumps(turn(n, **changes), ensure_ascii=False).encode()


def land(root: Path, data: bytes, name: str = "a.jsonl") -> Path:
    path = root / "acme" / "api" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def read(tmp_path: Path, data: bytes):
    return read_landing_file(land(tmp_path, data), tmp_path, now=NOW)


# ------------------------------------------------------------------------------- L4: lines


def test_a_byte_order_mark_on_a_later_line_is_dropped(tmp_path: Path) -> None:
    """Two files joined with cat: each part opens with a BOM."""
    bom = b"\xef\xbb\xbf"
    got = read(tmp_path, bom + line(1) + b"\n" + bom + line(2) + b"\n")
    assert got.turns["turn_id"].to_list() == ["t1", "t2"] and got.rejects.is_empty()


def test_cr_only_line_endings_end_lines(tmp_path: Path) -> None:
    data = b"\r".join(line(i) for i in range(10)) + b"\r"
    got = read(tmp_path, data)
    assert got.records == 10 and got.rejects.is_empty()
    assert got.turns["line_no"].to_list() == list(range(1, 11))


def test_mixed_endings_number_lines_as_an_editor_shows_them(tmp_path: Path) -> None:
    data = line(1) + b"\r\n" + line(2) + b"\r" + line(3) + b"\n\r\n" + line(4)
    got = read(tmp_path, data)
    assert got.turns.select("turn_id", "line_no").rows() == [
        ("t1", 1),
        ("t2", 2),
        ("t3", 3),
        ("t4", 5),
    ]


@pytest.mark.parametrize("sep", ["\u2028", "\u2029", "\u0085"])
def test_unicode_line_separators_between_records_split_them(tmp_path: Path, sep: str) -> None:
    data = sep.encode().join(line(i) for i in range(3)) + b"\n" + line(9) + b"\n"
    got = read(tmp_path, data)
    assert got.records == 4 and got.rejects.is_empty()
    assert got.turns.select("turn_id", "line_no").rows() == [
        ("t0", 1),
        ("t1", 2),
        ("t2", 3),
        ("t9", 4),
    ]


def test_a_unicode_separator_inside_a_string_stays_in_it(tmp_path: Path) -> None:
    content = "first\u2028second\u0085third"
    got = read(tmp_path, line(1, content=content) + b"\n")
    assert got.turns["content"].to_list() == [content] and got.records == 1


def test_a_broken_line_with_separators_and_no_json_piece_is_one_reject(tmp_path: Path) -> None:
    got = read(tmp_path, "{broken\u2028also broken".encode() + b"\n" + line(2) + b"\n")
    assert got.rejects.select("reason", "line_no").rows() == [("invalid_json", 1)]
    assert got.turns["line_no"].to_list() == [2]


def test_a_split_line_with_a_bad_piece_rejects_that_piece_only(tmp_path: Path) -> None:
    data = line(1) + "\u2028".encode() + b"{oops" + "\u2028".encode() + line(3) + b"\n"
    got = read(tmp_path, data)
    assert got.turns.select("turn_id", "line_no").rows() == [("t1", 1), ("t3", 3)]
    assert got.rejects.select("reason", "line_no").rows() == [("invalid_json", 2)]


def test_a_line_of_mostly_quotes_is_not_split(tmp_path: Path) -> None:
    """Past 100,000 quotes and backslashes a broken line is one reject, never scanned."""
    hostile = b'\\"' * 60_000 + "\u2028".encode() + line(1)
    got = read(tmp_path, hostile + b"\n" + line(2) + b"\n")
    assert got.rejects.select("reason", "line_no").rows() == [("invalid_json", 1)]
    assert got.turns["turn_id"].to_list() == ["t2"]


@pytest.mark.parametrize("ending", [b"\n", b"\r\n", b"\r"])
def test_a_line_of_exactly_the_limit_is_read_with_any_ending(tmp_path: Path, ending: bytes) -> None:
    base = line(1, content="")
    filler = MAX_LINE_BYTES - len(base)
    exact = line(1, content="x" * filler)
    assert len(exact) == MAX_LINE_BYTES
    over = line(2, content="x" * (filler + 1))
    got = read(tmp_path, exact + ending + over + ending + line(3) + ending)
    assert got.turns["turn_id"].to_list() == ["t1", "t3"]
    assert got.rejects.select("reason", "line_no").rows() == [("line_too_long", 2)]


def test_a_deeply_nested_input_of_another_tool_is_not_kept_and_does_not_reject(
    tmp_path: Path,
) -> None:
    deep: Any = "leaf"
    for _ in range(400):  # 800 levels: past orjson's 254 for writing, within its 1024 for reading
        deep = {"k": [deep]}
    got = read(tmp_path, line(1, role="tool", tool_name="Read", tool_input=deep) + b"\n")
    assert got.rejects.is_empty()
    assert got.turns.select("tool_name", "tool_input_json").rows() == [("Read", None)]


def test_a_deeply_nested_upsert_is_bad_tool_input_with_a_detail(tmp_path: Path) -> None:
    deep: Any = "leaf"
    for _ in range(300):
        deep = [deep]
    triple = {**TRIPLE, "object": deep}
    data = line(1, role="tool", tool_name=UPSERT_TOOL, tool_input={"triples": [triple]})
    got = read(tmp_path, data + b"\n")
    (rej,) = got.rejects.to_dicts()
    assert rej["reason"] == "bad_tool_input" and "JSON" in rej["detail"]


@pytest.mark.parametrize(
    "ts", ["2026-11-03T10:00:00Z ", " 2026-11-03T10:00:00Z", "\t2026-11-03T10:00:00+00:00\n"]
)
def test_a_timestamp_with_surrounding_space_is_read(tmp_path: Path, ts: str) -> None:
    got = read(tmp_path, line(1, ts=ts) + b"\n")
    assert got.rejects.is_empty() and got.turns["day"].to_list() == ["2026-11-03"]


# ------------------------------------------------------------------------ M6: tool names


@pytest.mark.parametrize(
    "name",
    [
        "upsert_graph_triples",
        "mcp__memflow__upsert_graph_triples",
        "UPSERT_GRAPH_TRIPLES",
        "Upsert_Graph_Triples",
        "upsertGraphTriples",
        "upsert-graph-triples",
        "memflow.upsert_graph_triples",
        "memflow/upsert_graph_triples",
        "memflow:upsert_graph_triples",
        "memflow_upsert_graph_triples",
        "mcp__memflow-server__upsert_graph_triples",
        " upsert_graph_triples ",
    ],
)
def test_every_spelling_of_the_upsert_tool_reaches_extraction(tmp_path: Path, name: str) -> None:
    data = line(1, role="tool", tool_name=name, tool_input={"triples": [TRIPLE]}) + b"\n"
    path = land(tmp_path, data)
    scope = Scope("acme", "api")
    update = ingest_turns(tmp_path, scope, [path], TurnTables.empty(), NOW)
    turns = update.tables.turns
    assert turns["tool_name"].to_list() == [UPSERT_TOOL]
    done = extract_tenant(scope, turns, ExtractionTables.of(None, None, None), None, "none")
    triples = done.tables.triples
    assert triples.select("subject", "predicate", "object").rows() == [
        ("payments-api", "USES", "Valkey 8")
    ]


@pytest.mark.parametrize("name", ["upsert_graph_triples", "mcp__memflow__UPSERT_GRAPH_TRIPLES"])
def test_a_malformed_upsert_under_any_spelling_is_quarantined(tmp_path: Path, name: str) -> None:
    got = read(tmp_path, line(1, role="tool", tool_name=name, tool_input={"facts": []}) + b"\n")
    assert got.rejects_by_reason() == {"bad_tool_input": 1} and got.turns.is_empty()


@pytest.mark.parametrize(
    "name", ["upsert_graph_triple", "recall", "mcp__memflow__recall", "Bash", "x" * 300]
)
def test_other_tools_are_other_tools(name: str) -> None:
    assert canonical_tool(name) is None


# ----------------------------------------------------------------------- retractions


@pytest.mark.parametrize(
    ("tool_input", "kept"),
    [
        ({"retract": [{"fact_id": "f_1"}]}, {"retract": [{"fact_id": "f_1"}]}),
        (
            {"retract": [TRIPLE, {"entity": "Valkey"}], "reason": "wrong", "by": "key:ci"},
            {"retract": [TRIPLE, {"entity": "Valkey"}], "reason": "wrong", "by": "key:ci"},
        ),
        (  # keys outside the item's form are dropped
            {"retract": [{"fact_id": "f_2", "note": "x"}], "extra": 1},
            {"retract": [{"fact_id": "f_2"}]},
        ),
        (json.dumps({"retract": [{"entity": "e"}]}), {"retract": [{"entity": "e"}]}),
    ],
)
def test_a_retraction_is_read_and_kept_as_checked(
    tmp_path: Path, tool_input: Any, kept: Any
) -> None:
    data = line(
        1, role="tool", content="", tool_name="mcp__memflow__retract_facts", tool_input=tool_input
    )
    path = land(tmp_path, data + b"\n")
    got = read_landing_file(path, tmp_path, now=NOW)
    assert got.rejects.is_empty()
    assert got.turns["tool_name"].to_list() == [RETRACT_TOOL]
    assert json.loads(got.turns["tool_input_json"][0]) == kept
    update = ingest_turns(tmp_path, Scope("acme", "api"), [path], TurnTables.empty(), NOW)
    assert json.loads(update.tables.turns["tool_triples"][0]) == kept


@pytest.mark.parametrize(
    ("tool_input", "detail"),
    [
        (None, "tool_input.retract as a list"),
        ({"retract": {"fact_id": "f"}}, "tool_input.retract as a list"),
        ({"retract": []}, "is empty"),
        ({"retract": ["f_1"]}, "retract[0] must be an object, not a string"),
        ({"retract": [{}]}, "retract[0] must name exactly one"),
        ({"retract": [{"fact_id": "f", "entity": "e"}]}, "retract[0] must name exactly one"),
        ({"retract": [{"subject": "a", "predicate": "USES"}]}, "retract[0].object"),
        ({"retract": [{"fact_id": "  "}]}, "retract[0].fact_id must be a non-empty string"),
        ({"retract": [{"entity": 7}]}, "retract[0].entity must be a non-empty string"),
        ({"retract": [{"fact_id": "f"}], "reason": ["x"]}, "tool_input.reason must be a string"),
        ({"retract": [{"fact_id": "f"}], "by": 3}, "tool_input.by must be a string"),
    ],
)
def test_a_malformed_retraction_is_bad_tool_input_with_a_detail(
    tmp_path: Path, tool_input: Any, detail: str
) -> None:
    data = line(1, role="tool", content="", tool_name=RETRACT_TOOL, tool_input=tool_input)
    got = read(tmp_path, data + b"\n")
    (rej,) = got.rejects.to_dicts()
    assert rej["reason"] == "bad_tool_input" and detail in rej["detail"], rej["detail"]


# ------------------------------------------------------------- L5: hidden directories


def test_hidden_directories_holding_landing_files_are_listed_with_their_lines(
    tmp_path: Path,
) -> None:
    land(tmp_path, line(1) + b"\n")
    places = {
        ".staging/acme/api/a.jsonl": 2,  # the root
        "acme/.old/a.jsonl": 1,  # an org
        "acme/api/.hidden/a.jsonl": 3,  # a tenant (the red team's rb/.hidden)
        "acme/api/.deep/x/.y/b.parquet.jsonl": 1,  # a landing name, deep down
    }
    for rel, n in places.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"".join(line(i) + b"\n" for i in range(n)))
    (tmp_path / "acme/api/.tmp.jsonl").write_bytes(line(9) + b"\n")  # a writer's temp file
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git/config").write_text("[core]\n")  # no landing file: not listed
    rows = landing_problems(tmp_path).select("path", "reason", "lines").rows()
    assert sorted(rows) == [
        (".staging", "hidden_directory", 2),
        ("acme/.old", "hidden_directory", 1),
        ("acme/api/.deep", "hidden_directory", 1),
        ("acme/api/.hidden", "hidden_directory", 3),
    ]
    assert list(discover(tmp_path)) == [Scope("acme", "api")]


# ---------------------------------------------------------------- L6: printed paths


@pytest.mark.parametrize(
    "name",
    [
        "evil\nFAILED raw_turns [acme/api]: forged",
        "a\rb",
        "\x1b[2J\x1b[Hcleared",
        "line\u2028sep",
        "bidi\u202eexe.jsonl",
        "nul\x00byte",
        "del\x7f",
        "c1\x9bcsi",
    ],
)
def test_a_printed_problem_is_one_line_whatever_the_name(name: str) -> None:
    row = {"path": f"my org/{name}", "reason": "invalid_scope", "detail": f"{name} x", "lines": 2}
    shown = problem_line(row)
    assert shown.isprintable() and len(shown.splitlines()) == 1
    assert "2 lines not read" in shown


def test_printable_keeps_ordinary_names_as_they_are() -> None:
    for name in ["acme/api/2026-11-03.jsonl", "équipe/ü/日本.jsonl", "a b/c\\d.jsonl"]:
        assert printable(name) == name
    assert printable("a\nb") == "a\\x0ab"
