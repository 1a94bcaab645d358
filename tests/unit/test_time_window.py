"""F1 (domain part): the start of history is a setting, the future has a tolerance, and no
timestamp stops a read: turns outside the window, and instants Python or polars cannot hold,
are quarantined with a reason that names the setting."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import polars as pl
import pytest
from dotenv import dotenv_values
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memflow.landing import read_landing_file, read_tenant_files
from resources.settings import DEFAULTS, Settings
from schemas import rules
from schemas.rules import DEFAULT_TIME_WINDOW, EPOCH, TimeWindow
from schemas.scope import Scope

ROOT = Path(__file__).resolve().parents[2]
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
SCOPE = Scope("a", "b")


def line(ts: object, n: int = 1) -> dict:
    return {
        "org": "a",
        "repo": "b",
        "session_id": "s",
        "turn_id": f"t{n}",
        "ts": ts,
        "role": "user",
        "content": "x",
        "client": "c",
    }


def land(root: Path, lines: list[dict], name: str = "x.jsonl") -> Path:
    folder = root / "a" / "b"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


# ------------------------------------------------------------------------------ the setting


def test_the_window_is_a_documented_setting_with_a_default() -> None:
    assert DEFAULTS[rules.HISTORY_START_SETTING] == "2000-01-01"
    assert DEFAULTS[rules.FUTURE_TOLERANCE_SETTING] == "24"
    env = (ROOT / ".env").read_text()
    assert "MEMFLOW_HISTORY_START=2000-01-01" in env and "ts_before_history_start" in env
    assert dotenv_values(ROOT / ".env") == DEFAULTS
    assert "MEMFLOW_HISTORY_START" in (TimeWindow.__doc__ or "")
    window = TimeWindow.from_settings(Settings())
    assert window == DEFAULT_TIME_WINDOW
    assert window.start == datetime(2000, 1, 1, tzinfo=UTC)
    assert window.future_tolerance == timedelta(hours=24)


@pytest.mark.parametrize(
    ("value", "start"),
    [
        ("1960", datetime(1960, 1, 1, tzinfo=UTC)),
        ("1999-07", datetime(1999, 7, 1, tzinfo=UTC)),
        ("2025-01-01", datetime(2025, 1, 1, tzinfo=UTC)),
        ("2025-01-01T06:00:00+02:00", datetime(2025, 1, 1, 4, tzinfo=UTC)),
        ("0001-01-02", datetime(1, 1, 2, tzinfo=UTC)),
    ],
)
def test_the_start_of_history_accepts_dates_people_write(value: str, start: datetime) -> None:
    assert TimeWindow.from_settings({"MEMFLOW_HISTORY_START": value}).start == start


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("MEMFLOW_HISTORY_START", "yesterday"),
        ("MEMFLOW_HISTORY_START", "2025-13-01"),
        ("MEMFLOW_FUTURE_TOLERANCE_HOURS", "-1"),
        ("MEMFLOW_FUTURE_TOLERANCE_HOURS", "a day"),
    ],
)
def test_a_bad_setting_is_an_error_naming_the_setting(name: str, value: str) -> None:
    with pytest.raises(ValueError, match=name):
        TimeWindow.from_settings({name: value})


# ------------------------------------------------------------- the red team's reproduction


def test_f1_turns_outside_the_window_are_quarantined_naming_the_setting(tmp_path: Path) -> None:
    """F1: one turn at 1970-01-01 or 2027-06-01 made `memflow run` exit 1 for every tenant."""
    path = land(
        tmp_path,
        [
            line("2026-11-20T00:00:00Z", 1),
            line("1970-01-01T00:00:00Z", 2),
            line("2027-06-01T00:00:00Z", 3),
            line("2026-12-02T11:59:59Z", 4),  # inside the 24 h tolerance
            line("2026-12-02T12:00:01Z", 5),  # just past it
        ],
    )
    read = read_landing_file(path, tmp_path, now=NOW)
    assert read.turns["turn_id"].to_list() == ["t1", "t4"]
    rejects = {r["turn_id"]: r for r in read.rejects.to_dicts()}
    assert rejects["t2"]["reason"] == "ts_before_history_start"
    assert "MEMFLOW_HISTORY_START" in rejects["t2"]["detail"]
    assert rejects["t3"]["reason"] == rejects["t5"]["reason"] == "ts_in_future"
    assert "MEMFLOW_FUTURE_TOLERANCE_HOURS" in rejects["t3"]["detail"]
    assert read.records == read.turns.height + read.rejects.height == 5

    older = TimeWindow.from_settings({"MEMFLOW_HISTORY_START": "1960"})
    again = read_landing_file(path, tmp_path, window=older, now=NOW)
    assert again.turns["turn_id"].to_list() == ["t1", "t2", "t4"]


def test_the_tenant_reader_applies_one_window_at_one_instant(tmp_path: Path) -> None:
    land(tmp_path, [line("1999-12-31T23:59:59Z", 1), line("2000-01-01T00:00:00Z", 2)])
    land(tmp_path, [line("2026-12-02T12:00:00Z", 3)], name="y.jsonl")
    read = read_tenant_files(tmp_path, SCOPE, now=NOW)
    assert sorted(read.turns["turn_id"].to_list()) == ["t2", "t3"]
    assert read.rejects_by_reason() == {"ts_before_history_start": 1}


# ------------------------------------------------------------------ unrepresentable instants


@pytest.mark.parametrize(
    ("ts", "reason"),
    [
        ("0001-01-01T00:00:00+14:00", "ts_before_history_start"),  # year 0 in UTC
        ("9999-12-31T23:59:59-14:00", "ts_in_future"),  # year 10000 in UTC
        ("0001-01-01T00:00:00Z", "ts_before_history_start"),
        ("9999-12-31T23:59:59.999999Z", "ts_in_future"),
        ("10000-01-01T00:00:00Z", "bad_timestamp"),
        ("-0001-01-01T00:00:00Z", "bad_timestamp"),
        ("2026-11-03T10:00:00+25:00", "bad_timestamp"),
        ("2026-02-30T10:00:00Z", "bad_timestamp"),
        ("now", "bad_timestamp"),
        ("", "bad_timestamp"),
        ("2026-11-03T10:00:00", "bad_timestamp"),
        ("1e308", "bad_timestamp"),
    ],
)
def test_any_instant_string_is_accounted_for(tmp_path: Path, ts: str, reason: str) -> None:
    path = land(tmp_path, [line("2026-11-20T00:00:00Z", 1), line(ts, 2)])
    window = TimeWindow.from_settings({"MEMFLOW_HISTORY_START": "0001-01-02"})
    read = read_landing_file(path, tmp_path, window=window, now=NOW)
    assert read.turns["turn_id"].to_list() == ["t1"]
    assert read.rejects["reason"].to_list() == [reason]


def _parquet(tmp_path: Path, frame: pl.DataFrame) -> Path:
    folder = tmp_path / "a" / "b"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "x.parquet"
    frame.write_parquet(path)
    return path


def _rows(ts: pl.Series, n: int) -> pl.DataFrame:
    base = {k: [v] * n for k, v in line(None).items() if k != "ts"}
    base["turn_id"] = [f"t{i}" for i in range(n)]
    return pl.DataFrame(base).with_columns(ts.alias("ts"))


@pytest.mark.parametrize("unit", ["ms", "us", "ns"])
def test_parquet_timestamps_python_cannot_hold_are_rejected_not_a_crash(
    tmp_path: Path, unit: str
) -> None:
    """polars panics (a BaseException) converting a year-146 million timestamp to Python."""
    big = 2**62 if unit == "ms" else 2**63 - 1
    raw = pl.Series([1_790_000_000_000 * {"ms": 1, "us": 1000, "ns": 1_000_000}[unit], big, -big])
    ts = raw.cast(pl.Datetime(unit, "UTC"))
    path = _parquet(tmp_path, _rows(ts, 3))
    read = read_landing_file(path, tmp_path, now=NOW)
    assert read.turns["turn_id"].to_list() == ["t0"]
    assert read.turns["ts"][0] == EPOCH + timedelta(milliseconds=1_790_000_000_000)
    assert read.rejects["reason"].to_list() == ["ts_in_future", "ts_before_history_start"]
    assert all(r for r in read.rejects["record"].to_list())


def test_a_parquet_value_that_cannot_be_converted_rejects_its_row_only(tmp_path: Path) -> None:
    frame = _rows(pl.Series(["2026-11-20T00:00:00Z"] * 3), 3).with_columns(
        pl.struct(
            pl.Series("when", [0, 2**62, 0]).cast(pl.Datetime("ms", "UTC")),
        ).alias("tool_input"),
        pl.lit("Bash").alias("tool_name"),
        pl.lit("tool").alias("role"),
    )
    path = _parquet(tmp_path, frame)
    read = read_landing_file(path, tmp_path, now=NOW)
    assert read.turns["turn_id"].to_list() == ["t0", "t2"]
    assert read.rejects.select("reason", "line_no").rows() == [("bad_value", 2)]


def test_parquet_naive_and_zoned_timestamps(tmp_path: Path) -> None:
    zone = timezone(timedelta(hours=-8))
    aware = pl.Series([datetime(2026, 11, 3, 23, 30, tzinfo=zone)]).dt.convert_time_zone("UTC")
    read = read_landing_file(_parquet(tmp_path, _rows(aware, 1)), tmp_path, now=NOW)
    assert read.turns["ts"].to_list() == [datetime(2026, 11, 4, 7, 30, tzinfo=UTC)]
    naive = pl.Series([datetime(2026, 11, 3, 23, 30)])
    read = read_landing_file(_parquet(tmp_path, _rows(naive, 1)), tmp_path, now=NOW)
    assert read.rejects["reason"].to_list() == ["bad_timestamp"]


# ------------------------------------------------------------------------------- properties

instants = st.integers(min_value=-(2**70), max_value=2**70)


@given(ts=instants, now=st.integers(min_value=0, max_value=2**55), start=st.datetimes())
def test_check_us_agrees_with_the_window_for_any_integer(ts: int, now: int, start) -> None:
    try:
        window = TimeWindow(start.replace(tzinfo=UTC))
    except ValueError:
        return  # outside the years a window may start in
    problem = window.check_us(ts, now)
    if ts < window.start_us:
        assert problem is not None and problem.reason == "ts_before_history_start"
    elif ts > min(now + 86_400_000_000, rules.MAX_EPOCH_US):
        assert problem is not None and problem.reason == "ts_in_future"
    else:
        assert problem is None


@given(ts=st.datetimes(timezones=st.timezones()))
def test_check_of_an_aware_datetime_matches_check_us(ts: datetime) -> None:
    try:
        us = (ts - EPOCH) // timedelta(microseconds=1)
    except OverflowError:
        return
    now_dt = NOW
    assert DEFAULT_TIME_WINDOW.check(ts, now_dt) == DEFAULT_TIME_WINDOW.check_us(
        us, (now_dt - EPOCH) // timedelta(microseconds=1)
    )


@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ts=st.one_of(st.text(max_size=40), st.datetimes(timezones=st.timezones()).map(str)))
def test_no_ts_string_stops_a_read_and_every_line_is_accounted_for(tmp_path: Path, ts: str) -> None:
    path = land(tmp_path, [line(ts, 1), line("2026-11-20T00:00:00Z", 2)])
    read = read_landing_file(path, tmp_path, now=NOW)
    assert read.records == read.turns.height + read.rejects.height == 2
    assert "t2" in read.turns["turn_id"].to_list()
    for t in read.turns["ts"].to_list():
        assert DEFAULT_TIME_WINDOW.check(t, NOW) is None
