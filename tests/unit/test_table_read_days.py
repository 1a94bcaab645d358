"""TableStore.read_days reads a per-day table's files in one multi-file read when they agree,
and must return exactly what reading each file and aligning them by name returns, whatever
columns, orders and types days written by different versions hold."""

from __future__ import annotations

import tempfile
from pathlib import Path

import polars as pl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from resources.tables import TableStore
from schemas.scope import Scope
from schemas.tables import Asset

SCOPE = Scope("acme", "api")
ASSET = Asset.RAW_TURNS

COLUMNS = {
    "a": st.sampled_from([pl.Int64, pl.Float64, pl.String, pl.Null]),
    "b": st.sampled_from([pl.String, pl.Int32]),
    "c": st.sampled_from([pl.Boolean, pl.String]),
}


@st.composite
def day_frame(draw) -> pl.DataFrame:
    names = draw(st.lists(st.sampled_from(sorted(COLUMNS)), unique=True, max_size=3))
    rows = draw(st.integers(0, 3))
    data = {}
    for name in names:
        dtype = draw(COLUMNS[name])
        if dtype == pl.Null:
            data[name] = pl.Series(name, [None] * rows, dtype=pl.Null)
        elif dtype == pl.Boolean:
            data[name] = pl.Series(name, [i % 2 == 0 for i in range(rows)], dtype=dtype)
        elif dtype == pl.String:
            data[name] = pl.Series(name, [f"v{i}" for i in range(rows)], dtype=dtype)
        else:
            data[name] = pl.Series(name, list(range(rows)), dtype=pl.Int64).cast(dtype)
    return pl.DataFrame(list(data.values()))


def stored_days(root: Path, frames: list[pl.DataFrame]) -> TableStore:
    """A store holding each frame as one day file, written as is (as another version would)."""
    store = TableStore(root)
    for i, frame in enumerate(frames):
        path = store.path(ASSET, SCOPE, f"2026-06-{i + 1:02d}")
        path.parent.mkdir(parents=True, exist_ok=True)
        frame.write_parquet(path)
    return store


def reference(frames: list[pl.DataFrame]) -> pl.DataFrame | None:
    kept = [f for f in frames if f.width]
    return pl.concat(kept, how="diagonal_relaxed") if kept else None


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(day_frame(), min_size=1, max_size=4))
def test_read_days_equals_reading_each_day_and_aligning_by_name(frames) -> None:
    try:
        expected = reference(frames)
    except pl.exceptions.PolarsError:
        expected = None  # days no version could combine: both roads must fail alike
        combinable = False
    else:
        combinable = True
    with tempfile.TemporaryDirectory() as tmp:
        store = stored_days(Path(tmp), frames)
        if not combinable:
            try:
                store.read_days(ASSET, SCOPE)
            except pl.exceptions.PolarsError:
                return
            raise AssertionError("read_days combined days that cannot be combined")
        got = store.read_days(ASSET, SCOPE)
        if expected is None:
            assert got is None or (got.width == 0 and got.height == 0)
            return
        assert got is not None
        assert got.columns == expected.columns
        assert got.schema == expected.schema
        assert got.equals(expected)


def test_days_that_agree_are_read_in_day_order(tmp_path: Path) -> None:
    store = TableStore(tmp_path)
    for day, value in (("2026-06-03", 3), ("2026-06-01", 1), ("2026-06-02", 2)):
        path = store.path(ASSET, SCOPE, day)
        path.parent.mkdir(parents=True, exist_ok=True)
        pl.DataFrame({"day": [day], "v": [value]}).write_parquet(path)
    got = store.read_days(ASSET, SCOPE)
    assert got is not None and got["v"].to_list() == [1, 2, 3]
    assert store.read_days(ASSET, SCOPE, ["2026-06-02"])["v"].to_list() == [2]


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(day_frame(), min_size=1, max_size=4))
def test_count_rows_equals_the_height_of_what_read_days_returns(frames) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store = stored_days(Path(tmp), frames)
        try:
            df = store.read_days(ASSET, SCOPE)
        except pl.exceptions.PolarsError:
            return  # days no version could combine: nothing to count against
        assert store.count_rows(ASSET, SCOPE) == (0 if df is None else df.height)
        if df is not None and "b" in df.columns:
            where = pl.col("b").cast(pl.String) == "v1"
            assert store.count_rows(ASSET, SCOPE, where=where) == df.filter(where).height
