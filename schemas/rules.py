"""The domain rules, each written once. Contracts (`contracts.py`) and triage (`triples.py`,
`memflow.facts`) both build on these constants and expressions."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from typing import TYPE_CHECKING, Literal, NamedTuple, get_args

if TYPE_CHECKING:  # polars loads only where a rule is applied to a frame (hooks stay light)
    import polars as pl

MAX_NAME_CHARS = 120
MAX_PREDICATE_CHARS = 64
MAX_FACTS_PER_REPO = 10_000
MAX_ENTITIES_PER_REPO = 5_000
MIN_CONFIDENCE = 0.6
MAX_CONFIDENCE = 1.0
EXPLICIT_CONFIDENCE = 1.0
# A fact keeps the turns that stated it (`sources`), first statement first, up to this many:
# a fact restated more often keeps its first ones (the list only grows, so it settles).
MAX_FACT_SOURCES = 32
# A retraction's reason and requester are kept (redacted) up to these many characters.
MAX_RETRACT_REASON_CHARS = 500
MAX_RETRACT_BY_CHARS = 200

PREDICATE_PATTERN = r"^[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)*$"
# An org or repo name. Python checks it with `fullmatch` (its `$` would accept a trailing
# newline); polars with the anchored form. ".." is refused as well (a path step).
SCOPE_PART = r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}"
SCOPE_PATTERN = rf"^{SCOPE_PART}$"
Role = Literal["user", "assistant", "tool"]
ROLES: tuple[str, ...] = get_args(Role)
TEXT_ROLES = ("user", "assistant")  # roles whose text goes to the extraction model
# A rejected record is kept (redacted) up to this many characters.
MAX_RECORD_CHARS = 2_000
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# Quarantine severities: an `error` row stands for input that was not stored; a `warning` row
# says what was changed on input that was stored anyway (e.g. a valid_from that could not be read).
SEVERITY_ERROR = "error"
SEVERITY_WARNING = "warning"
SEVERITIES = (SEVERITY_ERROR, SEVERITY_WARNING)

_PREDICATE_RE = re.compile(PREDICATE_PATTERN)
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_SEPARATORS = re.compile(r"[\s\-./]+")


class Reason:
    """Reject reason codes, as they appear in the quarantine table and in run metadata."""

    MISSING_SCOPE = "missing_scope"
    NAME_EMPTY = "name_empty"
    NAME_TOO_LONG = "name_too_long"
    NAME_REDACTED_ENTIRELY = "name_redacted_entirely"
    SECRET_IN_NAME = "secret_in_name"
    PREDICATE_INVALID = "predicate_not_upper_snake_case"
    CONFIDENCE_INVALID = "confidence_not_a_number"
    CONFIDENCE_OUT_OF_RANGE = "confidence_out_of_range"
    LOW_CONFIDENCE = "confidence_below_0.6"
    BAD_VALID_FROM = "bad_valid_from"
    BAD_SUPERSEDES = "bad_supersedes"
    VALIDITY_INVERTED = "valid_from_after_valid_to"
    FACT_CAP = "fact_cap_exceeded"
    ENTITY_CAP = "entity_cap_exceeded"
    SUPERSEDES_UNKNOWN = "supersedes_unknown_fact"
    SUPERSEDES_OUT_OF_ORDER = "supersedes_out_of_order"
    AWAITING_EXTRACTION = "awaiting_extraction"
    VALID_FROM_UNPARSED = "valid_from_unparsed"  # a warning: the fact keeps the turn's time
    TS_BEFORE_HISTORY_START = "ts_before_history_start"
    TS_IN_FUTURE = "ts_in_future"
    DUPLICATE_TURN = "duplicate_turn"
    BAD_RETRACTION = "bad_retraction"  # a retract_facts item memflow cannot read
    RETRACT_UNKNOWN = "retract_unknown"  # a retraction that matched no open fact
    # A Parquet row whose values, decoded, take more than a JSONL line may (`MAX_LINE_BYTES`).
    ROW_TOO_LARGE = "row_too_large"
    # A Parquet file past the reader's bounds (size on disk, rows, decoded size): one record.
    FILE_TOO_LARGE = "file_too_large"


# ------------------------------------------------------------------------------ time window

HISTORY_START_SETTING = "MEMFLOW_HISTORY_START"
FUTURE_TOLERANCE_SETTING = "MEMFLOW_FUTURE_TOLERANCE_HOURS"
DEFAULT_HISTORY_START = "2000-01-01"
_DEFAULT_START = datetime(2000, 1, 1, tzinfo=UTC)  # DEFAULT_HISTORY_START, parsed
DEFAULT_FUTURE_TOLERANCE_HOURS = 24
_US = timedelta(microseconds=1)
# What Python can hold (and so polars, whose microsecond range is wider): years 1 to 9999.
MIN_EPOCH_US = (datetime(1, 1, 2, tzinfo=UTC) - EPOCH) // _US
MAX_EPOCH_US = (datetime(9999, 12, 30, tzinfo=UTC) - EPOCH) // _US


class TimeProblem(NamedTuple):
    reason: str
    detail: str


@dataclass(frozen=True, slots=True)
class TimeWindow:
    """The instants a turn may carry: from the start of history (setting
    ``MEMFLOW_HISTORY_START``, default 2000-01-01 UTC; a date or an ISO date-time, no zone
    meaning UTC) up to ``now`` plus a tolerance for clock skew (setting
    ``MEMFLOW_FUTURE_TOLERANCE_HOURS``, default 24).

    Ingestion and ``POST /v1/turns`` both check turns with `check`; a turn outside the window
    is quarantined (``ts_before_history_start`` / ``ts_in_future``, the detail naming the
    setting to change), never a crash. Every instant Python cannot represent lies outside any
    window, so a turn that passes can be stored and partitioned.
    """

    start: datetime = _DEFAULT_START
    future_tolerance: timedelta = timedelta(hours=DEFAULT_FUTURE_TOLERANCE_HOURS)
    start_us: int = field(init=False, repr=False, compare=False)  # microseconds since 1970
    tolerance_us: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.start.tzinfo is None or self.start.utcoffset() is None:
            raise ValueError("the start of history needs a time zone")
        start_us = (self.start - EPOCH) // _US
        if not MIN_EPOCH_US <= start_us <= MAX_EPOCH_US:
            raise ValueError("the start of history must lie between years 1 and 9999")
        if self.future_tolerance < timedelta(0):
            raise ValueError("the future tolerance cannot be negative")
        object.__setattr__(self, "start", self.start.astimezone(UTC))
        object.__setattr__(self, "start_us", start_us)
        object.__setattr__(self, "tolerance_us", self.future_tolerance // _US)

    @classmethod
    def from_settings(cls, settings: Mapping[str, str]) -> TimeWindow:
        """The window the settings describe (absent names take their defaults). Raises
        ValueError naming the setting when a value cannot be read."""
        start_text = (settings.get(HISTORY_START_SETTING) or DEFAULT_HISTORY_START).strip()
        hours_text = str(
            settings.get(FUTURE_TOLERANCE_SETTING) or DEFAULT_FUTURE_TOLERANCE_HOURS
        ).strip()
        start = parse_date_or_datetime(start_text)
        if start is None:
            raise ValueError(
                f"{HISTORY_START_SETTING}={start_text!r} is not a date (YYYY-MM-DD, YYYY-MM, "
                "YYYY or an ISO-8601 date-time)"
            )
        try:
            hours = float(hours_text)
        except ValueError:
            hours = -1.0
        if not 0 <= hours <= 24 * 366 * 100:
            raise ValueError(f"{FUTURE_TOLERANCE_SETTING}={hours_text!r} is not a number of hours")
        try:
            return cls(start, timedelta(hours=hours))
        except ValueError as exc:
            raise ValueError(f"{HISTORY_START_SETTING}={start_text!r}: {exc}") from None

    def end(self, now: datetime) -> datetime:
        """The latest instant accepted at `now`."""
        return now.astimezone(UTC) + self.future_tolerance

    def end_us(self, now_us: int) -> int:
        """The latest instant accepted at `now_us` (never past what Python can hold)."""
        return min(now_us + self.tolerance_us, MAX_EPOCH_US)

    def check(self, ts: datetime, now: datetime | None = None) -> TimeProblem | None:
        """None when `ts` (aware) lies in the window at `now` (default: the current time)."""
        if ts.tzinfo is None or ts.utcoffset() is None:
            raise ValueError("check needs an aware datetime")
        now = now or datetime.now(UTC)
        return self.check_us((ts - EPOCH) // _US, (now - EPOCH) // _US)

    def check_us(self, ts_us: int, now_us: int) -> TimeProblem | None:
        """`check` on microseconds since the epoch (any int, also ones Python cannot hold)."""
        if ts_us < self.start_us:
            return TimeProblem(
                Reason.TS_BEFORE_HISTORY_START,
                f"'ts' is before the start of history {self.start.isoformat()} "
                f"(setting {HISTORY_START_SETTING}); set it earlier to ingest older turns",
            )
        if ts_us > self.end_us(now_us):
            hours = self.future_tolerance / timedelta(hours=1)
            return TimeProblem(
                Reason.TS_IN_FUTURE,
                f"'ts' is more than {hours:g} h after the time it was read "
                f"(setting {FUTURE_TOLERANCE_SETTING}); check the client's clock",
            )
        return None


DEFAULT_TIME_WINDOW = TimeWindow()

_YEAR = re.compile(r"(\d{4})")
_YEAR_MONTH = re.compile(r"(\d{4})-(\d{2})")


def parse_date_or_datetime(value: object) -> datetime | None:
    """A date or date-time as people and models write it, as an aware UTC datetime; None when
    it cannot be read (never raises).

    Accepted: ISO-8601 date-times with a zone (``2023-05-08T10:00:00+02:00``, ``...Z``, a
    space for ``T``, fractional seconds, basic format ``20230508T100000Z``); date-times
    without a zone (taken as UTC); dates ``2023-05-08`` / ``20230508`` / ``2023-W19-1`` (that
    day, 00:00 UTC); ``YYYY-MM`` (the month's first day) and ``YYYY`` (January 1st).
    Leading and trailing spaces are ignored; a lower-case ``t`` or ``z`` is accepted.
    """
    if not isinstance(value, str) or len(value) > 64:
        return None
    text = value.strip()
    try:
        if m := _YEAR.fullmatch(text):
            parsed = datetime.combine(date(int(m[1]), 1, 1), time(), UTC)
        elif m := _YEAR_MONTH.fullmatch(text):
            parsed = datetime.combine(date(int(m[1]), int(m[2]), 1), time(), UTC)
        else:
            parsed = datetime.fromisoformat(text.upper())
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=UTC)
        # An instant outside years 1-9999 in UTC ("0001-01-01T00:00+14:00") cannot be held:
        # the conversion overflows. Every other one is a date, the range's ends included
        # (review L7: 0001-01-01 and 9999-12-31T23:59:59Z were "not a date").
        parsed = parsed.astimezone(UTC)
    except (ValueError, OverflowError):
        return None
    return parsed


def normalize_predicate(raw: object) -> str | None:
    """Fix the trivially fixable ("uses" -> USES, "depends on" / "dependsOn" -> DEPENDS_ON).

    Returns None when the result is still not UPPER_SNAKE_CASE: the caller rejects it.
    """
    if not isinstance(raw, str):
        return None
    text = _CAMEL.sub("_", raw.strip())
    text = _SEPARATORS.sub("_", text).upper()
    if len(text) > MAX_PREDICATE_CHARS or not _PREDICATE_RE.match(text):
        return None
    return text


def predicate_ok(col: str = "predicate") -> pl.Expr:
    import polars as pl

    c = pl.col(col)
    return (
        c.is_not_null()
        & c.str.contains(PREDICATE_PATTERN)
        & (c.str.len_chars() <= MAX_PREDICATE_CHARS)
    )


def name_ok(col: str) -> pl.Expr:
    import polars as pl

    c = pl.col(col)
    return c.is_not_null() & (c.str.len_chars() > 0) & (c.str.len_chars() <= MAX_NAME_CHARS)


def scope_ok() -> pl.Expr:
    import polars as pl

    return (
        pl.col("tenant_id").is_not_null()
        & pl.col("ns").is_not_null()
        & pl.col("tenant_id").str.contains(SCOPE_PATTERN)
        & pl.col("ns").str.contains(SCOPE_PATTERN)
        & ~pl.col("tenant_id").str.contains("..", literal=True)
        & ~pl.col("ns").str.contains("..", literal=True)
    )


def confidence_ok(col: str = "confidence") -> pl.Expr:
    import polars as pl

    c = pl.col(col)
    return c.is_not_null() & c.is_between(MIN_CONFIDENCE, MAX_CONFIDENCE)


def validity_ok() -> pl.Expr:
    import polars as pl

    return pl.col("valid_to").is_null() | (pl.col("valid_from") <= pl.col("valid_to"))
