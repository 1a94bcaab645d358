"""schemas.tables.conform returns a frame already in its layout as it is: that shortcut must
give exactly what selecting and casting gives, for any frame."""

from __future__ import annotations

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas import tables
from schemas.tables import COLUMN_DEFAULTS, QUARANTINE, TABLES, Asset, conform


def reference(df: pl.DataFrame, columns: dict) -> pl.DataFrame:
    out = tables._conform(df, columns)
    defaults = [
        pl.col(c).fill_null(pl.lit(v, dtype=columns[c]))
        for c, v in COLUMN_DEFAULTS.items()
        if c in columns
    ]
    return out.with_columns(defaults) if defaults else out


LAYOUTS = {"quarantine": QUARANTINE, **{a: TABLES[a] for a in (Asset.RAW_TURNS, Asset.ENTITIES)}}


@st.composite
def frames(draw) -> tuple[pl.DataFrame, dict]:
    columns = LAYOUTS[draw(st.sampled_from(sorted(LAYOUTS)))]
    rows = draw(st.integers(0, 3))
    base = conform(pl.DataFrame(), columns)
    base = pl.concat([base] + [conform(pl.DataFrame({"x": [1]}), columns)] * rows)
    if "severity" in columns and rows:
        nulls = draw(st.lists(st.booleans(), min_size=rows, max_size=rows))
        base = base.with_columns(
            pl.Series("severity", [None if n else "warning" for n in nulls], dtype=pl.String)
        )
    change = draw(st.sampled_from(["none", "drop", "swap", "cast_tz", "cast_int", "extra"]))
    names = list(columns)
    if change == "drop":
        base = base.drop(names[draw(st.integers(0, len(names) - 1))])
    elif change == "swap" and len(names) > 1:
        i = draw(st.integers(0, len(names) - 2))
        order = [*names[:i], names[i + 1], names[i], *names[i + 2 :]]
        base = base.select(order)
    elif change == "cast_tz":
        dt = [c for c, t in columns.items() if isinstance(t, pl.Datetime)]
        if dt:
            base = base.with_columns(pl.col(dt[0]).dt.replace_time_zone(None))
    elif change == "cast_int":
        ints = [c for c, t in columns.items() if t in (pl.Int64, pl.Int32)]
        if ints:
            base = base.with_columns(pl.col(ints[0]).cast(pl.Int16))
    elif change == "extra":
        base = base.with_columns(pl.lit("x").alias("zz_extra"))
    return base, columns


@settings(max_examples=200, deadline=None)
@given(frames())
def test_conform_equals_select_and_cast(case) -> None:
    df, columns = case
    got, want = conform(df, columns), reference(df, columns)
    assert got.columns == want.columns
    assert got.dtypes == want.dtypes
    assert got.equals(want)
    again = conform(got, columns)
    assert again.equals(got) and again.dtypes == got.dtypes
