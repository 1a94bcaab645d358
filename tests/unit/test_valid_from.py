"""Issue 7 item 5: dates people write are dates. `valid_from` accepts ISO dates, zone-less
date-times, YYYY-MM and YYYY; a value that cannot be read keeps the fact (with the turn's time)
and leaves a quarantine row of severity `warning`."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta, timezone

import polars as pl
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from memflow.extract import extract_day
from memflow.facts import build_facts
from schemas.contracts import FactContract, QuarantineContract
from schemas.rules import SEVERITY_ERROR, SEVERITY_WARNING, Reason, parse_date_or_datetime
from schemas.scope import Scope
from schemas.tables import QUARANTINE, conform
from schemas.triples import TurnContext, items_to_triples, rejects_frame, triples_frame

TS = datetime(2026, 11, 3, 9, 0, tzinfo=UTC)
CTX = TurnContext(
    "acme", "api", "2026-11-03", "s1", "t1", TS, "claude-code", "explicit", "explicit"
)


def item(valid_from: object) -> dict:
    return {"subject": "api", "predicate": "USES", "object": "Postgres", "valid_from": valid_from}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2023-05-08", datetime(2023, 5, 8, tzinfo=UTC)),  # what people and models write
        ("2023-05-08T10:15", datetime(2023, 5, 8, 10, 15, tzinfo=UTC)),  # no zone: UTC
        ("2023-05-08 10:15:30", datetime(2023, 5, 8, 10, 15, 30, tzinfo=UTC)),
        ("2023-05", datetime(2023, 5, 1, tzinfo=UTC)),
        ("2023", datetime(2023, 1, 1, tzinfo=UTC)),
        ("2023-05-08T10:15:00Z", datetime(2023, 5, 8, 10, 15, tzinfo=UTC)),
        ("2023-05-08T10:15:00+02:00", datetime(2023, 5, 8, 8, 15, tzinfo=UTC)),
        ("2023-05-08t10:15:00z", datetime(2023, 5, 8, 10, 15, tzinfo=UTC)),
        ("20230508", datetime(2023, 5, 8, tzinfo=UTC)),
        ("20230508T101500Z", datetime(2023, 5, 8, 10, 15, tzinfo=UTC)),
        ("2023-05-08T10:15:00.123456789Z", datetime(2023, 5, 8, 10, 15, 0, 123456, tzinfo=UTC)),
        ("  2023-05-08  ", datetime(2023, 5, 8, tzinfo=UTC)),
        ("2023-W19-1", datetime(2023, 5, 8, tzinfo=UTC)),
        # the ends of the range (review L7: "not a date")
        ("0001-01-01", datetime(1, 1, 1, tzinfo=UTC)),
        ("0001-01-01T00:00:00Z", datetime(1, 1, 1, tzinfo=UTC)),
        ("0001", datetime(1, 1, 1, tzinfo=UTC)),
        ("9999-12-31", datetime(9999, 12, 31, tzinfo=UTC)),
        ("9999-12-31T23:59:59Z", datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC)),
        ("9999-12-31T23:59:59-00:00", datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC)),
        ("9999-12", datetime(9999, 12, 1, tzinfo=UTC)),
        ("0001-01-01T01:00:00+01:00", datetime(1, 1, 1, tzinfo=UTC)),
    ],
)
def test_valid_from_as_people_write_it(text: str, expected: datetime) -> None:
    rows, rejects = items_to_triples([item(text)], CTX)
    assert rejects == []
    assert rows[0]["valid_from"] == expected


@pytest.mark.parametrize(
    "value",
    [
        "next tuesday",
        "2023-13-01",
        "2023-02-30",
        "05/08/2023",
        "0000",
        "9999-12-31T23:00:00-14:00",  # past year 9999 in UTC
        "2023-05-08T24:00:01Z",
        "x" * 10_000,
        "2023-05-08\x00",
        1683504000,
        12.5,
        True,
        ["2023"],
        {"date": "2023"},
    ],
)
def test_an_unreadable_valid_from_never_costs_the_fact(value: object) -> None:
    rows, rejects = items_to_triples([item(value)], CTX)
    assert len(rows) == 1 and rows[0]["valid_from"] == TS  # the turn's time
    (warning,) = rejects
    assert warning["severity"] == SEVERITY_WARNING
    assert warning["reason"] == Reason.VALID_FROM_UNPARSED
    assert "kept with the turn's time" in warning["detail"]
    assert TS.isoformat() in warning["detail"]
    frame = rejects_frame(rejects)
    QuarantineContract.validate(frame)


def test_a_rejected_item_gets_one_error_row_and_no_warning() -> None:
    bad = {**item("garbage"), "predicate": "not a predicate!"}
    rows, rejects = items_to_triples([bad], CTX)
    assert rows == []
    assert [(r["reason"], r["severity"]) for r in rejects] == [
        (Reason.PREDICATE_INVALID, SEVERITY_ERROR)
    ]


def test_warnings_are_counted_apart_from_rejects_through_extraction_and_facts() -> None:
    turns = pl.DataFrame(
        {
            "tenant_id": ["acme"],
            "ns": ["api"],
            "day": ["2026-11-03"],
            "session_id": ["s1"],
            "turn_id": ["t1"],
            "ts": [TS],
            "role": ["tool"],
            "client": ["codex"],
            "content": [""],
            "tool_name": ["upsert_graph_triples"],
            "tool_triples": [
                '[{"subject":"a","predicate":"USES","object":"b","valid_from":"2023-05-08"},'
                '{"subject":"a","predicate":"USES","object":"c","valid_from":"soon"},'
                '{"subject":"a","predicate":"bad one!","object":"d"}]'
            ],
            "source_file": ["acme/api/x.jsonl"],
            "line_no": [1],
        }
    )
    report = extract_day(Scope("acme", "api"), turns, None)
    assert report.triples.height == 2
    assert report.rejects_by_reason == {Reason.PREDICATE_INVALID: 1}
    assert report.warnings_by_reason == {Reason.VALID_FROM_UNPARSED: 1}
    by_object = dict(zip(report.triples["object"], report.triples["valid_from"], strict=True))
    assert by_object == {"b": datetime(2023, 5, 8, tzinfo=UTC), "c": TS}
    built = build_facts(Scope("acme", "api"), report.triples)
    assert built.facts.height == 2 and built.balanced
    FactContract.validate(built.facts)


def test_quarantine_rows_without_a_severity_are_errors() -> None:
    """Tables written before the column existed, and rows built without it, read as errors."""
    old = pl.DataFrame({"reject_id": ["q_1"], "tenant_id": ["a"], "ns": ["b"], "reason": ["x"]})
    assert conform(old, QUARANTINE)["severity"].to_list() == [SEVERITY_ERROR]
    nulls = old.with_columns(pl.lit(None, dtype=pl.String).alias("severity"))
    assert conform(nulls, QUARANTINE)["severity"].to_list() == [SEVERITY_ERROR]
    assert conform(pl.DataFrame(), QUARANTINE).columns[-1] == "severity"


def test_the_contract_refuses_an_unknown_severity() -> None:
    rows, rejects = items_to_triples([item("soon")], CTX)
    frame = rejects_frame(rejects).with_columns(pl.lit("info").alias("severity"))
    with pytest.raises(Exception, match="isin"):
        QuarantineContract.validate(frame)
    assert triples_frame(rows).height == 1


# ------------------------------------------------------------------------------- properties

# Instants whose every rendering stays within years 1-9999 in UTC and local time.
moments = st.datetimes(
    min_value=datetime(2, 1, 1), max_value=datetime(9998, 12, 31), timezones=st.just(UTC)
)
offsets = st.integers(min_value=-14 * 60, max_value=14 * 60).map(
    lambda m: timezone(timedelta(minutes=m))
)


def _renderings(t: datetime, zone: timezone) -> list[tuple[str, datetime]]:
    """(text, the instant it means) in every accepted format."""
    local = t.astimezone(zone)
    naive = t.replace(tzinfo=None)
    day = datetime.combine(t.date(), datetime.min.time(), UTC)
    basic_day = f"{t.year:04d}{t.month:02d}{t.day:02d}"  # strftime's %Y does not pad
    basic_time = f"T{t.hour:02d}{t.minute:02d}{t.second:02d}Z"
    return [
        (local.isoformat(), t),
        (local.isoformat(sep=" "), t),
        (t.isoformat().replace("+00:00", "Z"), t),
        (naive.isoformat(), t),
        (naive.isoformat(sep=" ", timespec="seconds"), t.replace(microsecond=0)),
        (basic_day + basic_time, t.replace(microsecond=0)),
        (t.date().isoformat(), day),
        (basic_day, day),
        (f"{t.year:04d}-{t.month:02d}", datetime(t.year, t.month, 1, tzinfo=UTC)),
        (f"{t.year:04d}", datetime(t.year, 1, 1, tzinfo=UTC)),
        (f"{local.isoformat().upper().replace('T', 't')}", t),
    ]


@given(t=moments, zone=offsets)
def test_any_date_in_any_accepted_format_parses_to_its_instant(t: datetime, zone: timezone) -> None:
    for text, instant in _renderings(t, zone):
        assert parse_date_or_datetime(text) == instant, text
        assert parse_date_or_datetime(f" {text} ") == instant, text


@given(d=st.dates(min_value=date(1, 1, 1), max_value=date(9999, 12, 31)))
@example(d=date(1, 1, 1))
@example(d=date(9999, 12, 31))
def test_any_iso_date_is_that_day_at_midnight_utc(d: date) -> None:
    assert parse_date_or_datetime(d.isoformat()) == datetime(d.year, d.month, d.day, tzinfo=UTC)


@given(
    value=st.one_of(
        st.text(),
        st.text(alphabet="0123456789-:TZtz+., W", max_size=40),
        st.integers(),
        st.floats(),
        st.none(),
        st.binary(),
        st.lists(st.integers(), max_size=3),
    )
)
def test_garbage_never_raises_and_never_costs_the_fact(value: object) -> None:
    parsed = parse_date_or_datetime(value)
    assert parsed is None or (parsed.tzinfo is UTC and 1 <= parsed.year <= 9999)
    rows, rejects = items_to_triples([item(value)], CTX)
    assert len(rows) == 1
    assert all(r["severity"] == SEVERITY_WARNING for r in rejects)
    assert rows[0]["valid_from"] == (parsed or TS) if value not in (None, "") else TS


def test_facts_at_the_ends_of_the_range_are_stored_and_recalled(tmp_path) -> None:
    """L7 through the facts stage, the contract and the graph store: the first and the last
    instant a date can name are kept as written and answer an as-of query."""
    from resources.graph.sqlite import SqliteGraphStore
    from resources.graph.sync import graph_equals_table, sync_graph

    first, last = "0001-01-01", "9999-12-31T23:59:59Z"
    items = [
        {
            "subject": "calendar",
            "predicate": "STARTS_AT",
            "object": "year one",
            "valid_from": first,
        },
        {"subject": "calendar", "predicate": "ENDS_AT", "object": "year 9999", "valid_from": last},
    ]
    rows, rejects = items_to_triples(items, CTX)
    assert rejects == []
    built = build_facts(Scope("acme", "api"), triples_frame(rows))
    FactContract.validate(built.facts)
    assert sorted(built.facts["valid_from"].to_list()) == [
        datetime(1, 1, 1, tzinfo=UTC),
        datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC),
    ]
    scope = Scope("acme", "api")
    with SqliteGraphStore(tmp_path / "graph.sqlite") as store:
        sync_graph(store, scope, built.entities, built.facts)
        assert graph_equals_table(store, scope, built.entities, built.facts)[0]
        seeds = built.entities.filter(pl.col("name") == "calendar")["entity_id"].to_list()
        at = {
            t: {e.fact.object for e in store.expand(scope, seeds, as_of=t)}
            for t in (datetime(1, 1, 1, tzinfo=UTC), datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC))
        }
        assert at == {
            datetime(1, 1, 1, tzinfo=UTC): {"year one"},
            datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC): {"year one", "year 9999"},
        }
