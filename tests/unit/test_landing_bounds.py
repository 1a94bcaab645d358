"""Parquet files are bounded before they are decoded (red team H3): bombs generated here
(`tests.fuzz.bombs`) are read in a child process under a cap on its address space, so a reader
that decoded one fails the test instead of killing the worker; and fixed-offset zones are read
without a Rust backtrace (M5)."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from memflow.landing import (
    MAX_LINE_BYTES,
    count_records,
    landing_problems,
    read_landing_file,
)
from memflow.landing import parquet as landing_parquet
from tests.fuzz import bombs

REPO_ROOT = Path(__file__).resolve().parents[2]
NOW = dt.datetime(2026, 11, 5, tzinfo=dt.UTC)
HEADROOM_MIB = 768  # far below what any bomb decodes to (287 MB to 4 GB)


def child_read(root: Path) -> subprocess.CompletedProcess[str]:
    """`tests.fuzz.read_bounded` over `root` in a child process under the address-space cap."""
    return subprocess.run(
        [sys.executable, "-m", "tests.fuzz.read_bounded", str(root), str(HEADROOM_MIB)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )


def bounded_read(root: Path) -> dict:
    child = child_read(root)
    assert child.returncode == 0, f"rc {child.returncode}: {child.stderr[-3000:]}"
    assert "panicked" not in child.stderr and "backtrace" not in child.stderr.lower()
    return json.loads(child.stdout)


@pytest.fixture(scope="module")
def bomb_zone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("bombs")
    folder = root / bombs.ORG / bombs.REPO
    folder.mkdir(parents=True)
    for name, (make, _, _) in bombs.BOMBS.items():
        (folder / f"{name}.parquet").write_bytes(make())
    return root


def test_the_bombs_are_what_the_report_describes(bomb_zone: Path) -> None:
    folder = bomb_zone / "acme" / "api"
    dictionary = folder / "dictionary_bomb.parquet"
    assert dictionary.stat().st_size < 600_000  # the report's: 454,026 bytes
    meta = pq.ParquetFile(dictionary).metadata
    assert meta.num_rows == 2_000_000
    assert (folder / "huge_row.parquet").stat().st_size < 10_000  # the report's: 4 KB
    assert (folder / "compressed_bomb.parquet").stat().st_size < 1_000_000


@pytest.fixture(scope="module")
def bounded(bomb_zone: Path) -> dict:
    return bounded_read(bomb_zone)


@pytest.mark.parametrize("name", sorted(bombs.BOMBS))
def test_a_bomb_is_quarantined_under_a_memory_cap_never_a_crash(bounded: dict, name: str) -> None:
    result = bounded
    _, records, reasons = bombs.BOMBS[name]
    got = result["files"][f"{name}.parquet"]
    assert (got["records"], got["reasons"]) == (records, reasons), got
    assert got["counted"] == records  # `memflow status` and landing_problems count the same
    assert result["peak_rss_mib"] < result["cap_mib"]


def test_a_huge_row_is_one_reject_and_its_neighbours_are_read(bomb_zone: Path) -> None:
    path = bomb_zone / "acme/api/huge_row.parquet"
    read = read_landing_file(path, bomb_zone, now=NOW)
    assert read.turns["turn_id"].to_list() == ["t-0", "t-2"]
    (rej,) = read.rejects.to_dicts()
    assert (rej["reason"], rej["line_no"], rej["turn_id"]) == ("row_too_large", 2, "t-1")
    assert f"{MAX_LINE_BYTES:,}" in rej["detail"]
    assert len(rej["record"]) <= 2_000 and "zzzz" in rej["record"]


def test_a_row_just_within_the_limit_is_read(tmp_path: Path) -> None:
    content = "w" * (MAX_LINE_BYTES - 400)  # the other values and the slots take the rest
    table = pa.table(bombs.turn_columns(1, pa.array([content])))
    path = tmp_path / "acme/api/a.parquet"
    path.parent.mkdir(parents=True)
    pq.write_table(table, path)
    read = read_landing_file(path, tmp_path, now=NOW)
    assert read.turns["content"].to_list() == [content] and read.rejects.is_empty()


def test_a_file_over_the_size_on_disk_is_hashed_but_not_parsed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "acme/api/a.parquet"
    path.parent.mkdir(parents=True)
    pq.write_table(pa.table(bombs.turn_columns(500)), path)
    monkeypatch.setattr(landing_parquet, "MAX_PARQUET_FILE_BYTES", path.stat().st_size - 1)
    read = read_landing_file(path, tmp_path, now=NOW)
    assert read.rejects_by_reason() == {"file_too_large": 1} and read.records == 1
    assert read.fingerprint is not None and read.fingerprint.size == path.stat().st_size
    assert count_records(tmp_path, "acme/api/a.parquet") == 1


def test_a_bomb_in_a_directory_no_tenant_reads_counts_as_one_record(tmp_path: Path) -> None:
    folder = tmp_path / "my org" / "api"
    folder.mkdir(parents=True)
    (folder / "a.parquet").write_bytes(bombs.dictionary_bomb(rows=300_000))
    (problem,) = landing_problems(tmp_path).to_dicts()
    assert (problem["reason"], problem["lines"]) == ("invalid_scope", 1)


def test_many_row_groups_are_read_one_at_a_time(tmp_path: Path) -> None:
    path = tmp_path / "acme/api/a.parquet"
    path.parent.mkdir(parents=True)
    pq.write_table(pa.table(bombs.turn_columns(3_000)), path, row_group_size=7)
    assert pq.ParquetFile(path).metadata.num_row_groups == 429
    read = read_landing_file(path, tmp_path, now=NOW)
    assert read.turns.height == 3_000 and read.rejects.is_empty()
    assert read.turns["line_no"].to_list() == list(range(1, 3_001))


# ------------------------------------------------------------------------ time zones (M5)


def _pandas_turns(tz: dt.tzinfo | str) -> pd.DataFrame:
    times = [dt.datetime(2026, 11, 3, 10, 0, i, tzinfo=dt.UTC) for i in range(3)]
    return pd.DataFrame(
        {
            "org": ["acme"] * 3,
            "repo": ["api"] * 3,
            "session_id": ["s"] * 3,
            "turn_id": ["1", "2", "3"],
            "ts": pd.to_datetime(times).tz_convert(tz),
            "role": ["user"] * 3,
            "content": ["a", "b", "c"],
            "client": ["pandas"] * 3,
        }
    )


@pytest.mark.parametrize(
    "tz",
    [
        dt.timezone(dt.timedelta(hours=5, minutes=30)),  # pandas' "UTC+05:30"
        dt.timezone(dt.timedelta(hours=-9, minutes=-30)),
        "Asia/Kolkata",
        "UTC",
    ],
)
def test_pandas_timestamps_with_any_zone_are_read_as_the_same_instants(
    tmp_path: Path, tz: dt.tzinfo | str
) -> None:
    path = tmp_path / "acme/api/a.parquet"
    path.parent.mkdir(parents=True)
    _pandas_turns(tz).to_parquet(path)
    read = read_landing_file(path, tmp_path, now=NOW)
    assert read.rejects.is_empty(), read.rejects.to_dicts()
    assert [t.isoformat() for t in read.turns["ts"].to_list()] == [
        f"2026-11-03T10:00:0{i}+00:00" for i in range(3)
    ]


def test_a_fixed_offset_file_prints_nothing(tmp_path: Path) -> None:
    """No Rust backtrace (polars panicked on "+05:30" and printed 50 lines per file)."""
    folder = tmp_path / "acme" / "api"
    folder.mkdir(parents=True)
    _pandas_turns(dt.timezone(dt.timedelta(hours=5, minutes=30))).to_parquet(folder / "a.parquet")
    child = child_read(tmp_path)
    assert child.returncode == 0 and child.stderr == "", child.stderr
    assert json.loads(child.stdout)["files"]["a.parquet"]["turns"] == ["1", "2", "3"]
