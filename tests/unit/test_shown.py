"""What the commands print of values from outside (landing paths, tenant data, reasons) cannot
forge or hide a line; and `facts` / `rejects` say how many rows they leave out."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipelines.cli import main
from pipelines.shown import shown
from resources.tables import TableStore
from schemas.scope import Scope
from schemas.tables import TABLES, Asset, conform

LINE_BREAKS = ["\n", "\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]


@given(st.text())
def test_nothing_shown_breaks_a_line_or_holds_a_control_character(text: str) -> None:
    out = shown(text)
    assert out.splitlines() == [out] or out == ""
    assert not any(ch in out for ch in LINE_BREAKS)
    assert not any(ord(ch) < 0x20 or 0x7F <= ord(ch) <= 0x9F for ch in out)


def test_escapes_are_readable_and_ordinary_text_is_kept() -> None:
    assert shown("acme/api\nFAILED x") == "acme/api\\nFAILED x"
    assert shown("\x1b[2J") == "\\x1b[2J"
    assert shown("evil\u202etxt.exe") == "evil\\u202etxt.exe"  # a bidi override
    assert shown("Zürich/数据 ok") == "Zürich/数据 ok"


@pytest.fixture
def facts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MEMFLOW_HOME", str(tmp_path / "home"))
    data = tmp_path / "data"
    rows = [
        {
            "subject": f"service-{i}",
            "predicate": "USES",
            "object": "line one\nFAILED acme/api: forged" if i == 0 else f"db-{i}",
            "tenant_id": "acme",
            "ns": "api",
        }
        for i in range(60)
    ]
    frame = conform(pl.DataFrame(rows), TABLES[Asset.VALIDATED_FACTS])
    TableStore(data).write(frame, Asset.VALIDATED_FACTS, Scope("acme", "api"))
    return data


def test_facts_say_how_many_rows_they_leave_out(facts: Path, capsys) -> None:
    assert main(["facts", "--data", str(facts), "--tenant", "acme/api"]) == 0
    out, err = capsys.readouterr()
    assert "60 rows" in out
    assert "50 of 60 rows shown, 10 left out" in err
    assert "FAILED acme/api: forged" not in out.splitlines()  # never a line of its own
    assert main(["facts", "--data", str(facts), "--tenant", "acme/api", "--limit", "0"]) == 0
    out, err = capsys.readouterr()
    assert "left out" not in err
    assert main(["facts", "--data", str(facts), "--tenant", "acme/api", "--json",
                 "--limit", "5"]) == 0  # fmt: skip
    out, err = capsys.readouterr()
    assert len(json.loads(out)) == 5 and "5 of 60 rows shown, 55 left out" in err


def test_a_read_only_command_refuses_a_data_directory_that_does_not_exist(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.setenv("MEMFLOW_HOME", str(tmp_path / "home"))
    for command in (
        ["facts", "--tenant", "acme/api"],
        ["rejects", "--tenant", "acme/api"],
        ["erase", "--tenant", "acme/api"],
        ["recall", "--tenant", "acme/api", "q"],
        ["serve"],
        ["up"],
        ["dev"],
    ):
        with pytest.raises(SystemExit, match="does not exist"):
            main([*command, "--data", str(tmp_path / "typo")])
    # nothing created for the other path either (the state home's landing zone)
    assert not (tmp_path / "typo").exists() and not (tmp_path / "home").exists()


def test_up_and_dev_refuse_a_named_landing_zone_that_does_not_exist(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMFLOW_HOME", str(tmp_path / "home"))
    (tmp_path / "data").mkdir()
    for command in (["up"], ["dev"]):
        with pytest.raises(SystemExit, match=r"typo \(from the flag\) does not exist"):
            main([*command, "--data", str(tmp_path / "data"), "--landing", str(tmp_path / "typo")])
    assert not (tmp_path / "typo").exists() and not (tmp_path / "home").exists()
