"""A turn held by two files survives a rewrite of the one it was stored from, as a clean run
keeps it (red team M4): the unchanged files holding its duplicate are read again."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path

from memflow.turns import TurnTables, ingest_turns
from schemas.scope import Scope

SCOPE = Scope("acme", "r")
NOW = datetime(2026, 12, 1, tzinfo=UTC)


def turn(tid: str, minute: int = 0) -> dict:
    return {
        "org": "acme",
        "repo": "r",
        "session_id": "s",
        "turn_id": tid,
        "ts": f"2026-11-20T10:{minute:02d}:00Z",
        "role": "user",
        "content": f"turn {tid}",
        "client": "claude-code",
    }


def write(root: Path, name: str, turns: list[dict], stamp: int) -> Path:
    path = root / "acme" / "r" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(t) + "\n" for t in turns))
    os.utime(path, ns=(stamp, stamp))  # a new version even within one mtime tick
    return path


def files(root: Path) -> list[Path]:
    return sorted((root / "acme" / "r").iterdir())


def stored(tables: TurnTables) -> list[tuple[str, str]]:
    return sorted(tables.turns.select("turn_id", "source_file").rows())


def clean(root: Path) -> TurnTables:
    return ingest_turns(root, SCOPE, files(root), TurnTables.empty(), NOW).tables


def test_a_turn_in_two_files_survives_a_rewrite_of_the_winner(tmp_path: Path) -> None:
    write(tmp_path, "a.jsonl", [turn("x", 1), turn("y", 2)], 1)
    write(tmp_path, "b.jsonl", [turn("x", 3), turn("z", 4)], 1)
    first = ingest_turns(tmp_path, SCOPE, files(tmp_path), TurnTables.empty(), NOW)
    assert stored(first.tables) == [
        ("x", "acme/r/a.jsonl"),
        ("y", "acme/r/a.jsonl"),
        ("z", "acme/r/b.jsonl"),
    ]
    write(tmp_path, "a.jsonl", [turn("y", 2)], 2)  # x is no longer in a.jsonl
    again = ingest_turns(tmp_path, SCOPE, files(tmp_path), first.tables, NOW)
    assert (
        stored(again.tables)
        == stored(clean(tmp_path))
        == [
            ("x", "acme/r/b.jsonl"),
            ("y", "acme/r/a.jsonl"),
            ("z", "acme/r/b.jsonl"),
        ]
    )
    assert sorted(again.read_files) == ["acme/r/a.jsonl", "acme/r/b.jsonl"]
    # b.jsonl's stale "already appeared in a.jsonl" reject is gone with it
    assert again.tables.rejects.filter(
        again.tables.rejects["reason"] == "duplicate_turn"
    ).is_empty()
    assert (
        again.tables.files["records"] == again.tables.files["turns"] + again.tables.files["rejects"]
    ).all()


def test_a_chain_of_holders_is_followed(tmp_path: Path) -> None:
    """x in a and b, y in b and c: rewriting a re-reads b (x), whose turns c duplicates."""
    write(tmp_path, "a.jsonl", [turn("x", 1)], 1)
    write(tmp_path, "b.jsonl", [turn("x", 2), turn("y", 3)], 1)
    write(tmp_path, "c.jsonl", [turn("y", 4)], 1)
    first = ingest_turns(tmp_path, SCOPE, files(tmp_path), TurnTables.empty(), NOW)
    write(tmp_path, "a.jsonl", [], 2)
    again = ingest_turns(tmp_path, SCOPE, files(tmp_path), first.tables, NOW)
    assert stored(again.tables) == stored(clean(tmp_path))
    assert "acme/r/b.jsonl" in again.read_files


def test_an_unrelated_rewrite_reads_only_its_file(tmp_path: Path) -> None:
    write(tmp_path, "a.jsonl", [turn("x", 1)], 1)
    write(tmp_path, "b.jsonl", [turn("x", 2)], 1)
    write(tmp_path, "c.jsonl", [turn("q", 3)], 1)
    first = ingest_turns(tmp_path, SCOPE, files(tmp_path), TurnTables.empty(), NOW)
    write(tmp_path, "c.jsonl", [turn("q", 3), turn("w", 5)], 2)
    again = ingest_turns(tmp_path, SCOPE, files(tmp_path), first.tables, NOW)
    assert again.read_files == ["acme/r/c.jsonl"]
    assert stored(again.tables) == stored(clean(tmp_path))


def test_listing_the_tenant_itself_reads_the_same(tmp_path: Path) -> None:
    """`files=None`: the turns stage lists the tenant's own directory (raw_turns does)."""
    write(tmp_path, "a.jsonl", [turn("x", 1)], 1)
    write(tmp_path, "b.jsonl", [turn("y", 2)], 1)
    (tmp_path / "acme" / "r" / "sub").mkdir()
    listed = ingest_turns(tmp_path, SCOPE, None, TurnTables.empty(), NOW)
    assert stored(listed.tables) == stored(clean(tmp_path))
    assert [p.reason for p in listed.problems] == ["nested_directory"]
    assert listed.files_seen == 2
