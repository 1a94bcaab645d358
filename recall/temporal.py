"""Dates named in a question, as a window on the facts' `valid_from`.

"What did Maria share on 16 June, 2023?", "... in December 2022", "on May 3, 2023": the question
names a day or a month, and the facts that answer it became true then or shortly before (a fact
told on 16 June may have started "last week"). `question_window` finds the first absolute date
in the question (day-month-year, month-day-year, ISO, or month-year; a bare year says too little
and is ignored); `distance_days` scores each fact by how far its `valid_from` lies from that
window, and leaves facts far outside it unscored (inf). Fact selection turns the distances into
one more ranked signal (`recall.ranking`).

Which facts are *valid* is still decided by `as_of` alone; the window only ranks.
"""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import numpy as np

from schemas.rules import EPOCH

_MONTHS = {
    name: i
    for i in range(1, 13)
    for name in {calendar.month_name[i].lower(), calendar.month_abbr[i].lower()}
}
_MONTHS["sept"] = 9
_MONTH = r"(?P<month>" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_DAY = r"(?P<day>\d{1,2})(?:st|nd|rd|th)?"
_YEAR = r"(?P<year>(?:19|20)\d{2})"
_PATTERNS = [
    re.compile(rf"\b(?P<iso>{_YEAR}-(?P<m>\d{{1,2}})-(?P<d>\d{{1,2}}))\b"),
    re.compile(rf"\b{_DAY}\s*(?:of\s+)?{_MONTH},?\s*{_YEAR}\b", re.IGNORECASE),
    re.compile(rf"\b{_MONTH}\s*{_DAY},?\s*{_YEAR}\b", re.IGNORECASE),
    re.compile(rf"\b{_MONTH},?\s*{_YEAR}\b", re.IGNORECASE),
]
# A fact told on day d may have become true up to two weeks earlier ("last week").
LEAD = timedelta(days=14)
TRAIL = timedelta(days=1)
_US_PER_DAY = 86_400_000_000


@dataclass(frozen=True, slots=True)
class Window:
    """Facts whose valid_from lies in [start - LEAD, end + TRAIL) are scored; inside
    [start, end] the distance is 0."""

    start: datetime
    end: datetime  # inclusive: the last instant of the named day or month

    @property
    def span(self) -> tuple[datetime, datetime]:
        return self.start - LEAD, self.end + TRAIL


def _date(year: int, month: int, day: int | None) -> Window | None:
    try:
        if day is None:
            start = datetime(year, month, 1, tzinfo=UTC)
            length = timedelta(days=calendar.monthrange(year, month)[1])
        else:
            start = datetime(year, month, day, tzinfo=UTC)
            length = timedelta(days=1)
        return Window(start, start + length - timedelta(microseconds=1))
    except ValueError:
        return None  # "31 February"


def question_window(text: str) -> Window | None:
    """The day or month the question names first, or None ("31 February, 2023" names only
    February)."""
    best: tuple[int, Window] | None = None
    for pattern in _PATTERNS:
        for m in pattern.finditer(text):
            groups = m.groupdict()
            if groups.get("iso"):
                window = _date(int(groups["year"]), int(groups["m"]), int(groups["d"]))
            else:
                month = _MONTHS[groups["month"].lower().rstrip(".")]
                day = int(groups["day"]) if groups.get("day") else None
                window = _date(int(groups["year"]), month, day)
            if window is not None and (best is None or m.start() < best[0]):
                best = (m.start(), window)
            break  # each pattern's first match; the earliest in the text wins
    return best[1] if best else None


def to_us(t: datetime) -> int:
    return (t - EPOCH) // timedelta(microseconds=1)


def distance_days(valid_from_us: np.ndarray, window: Window) -> np.ndarray:
    """Days between each valid_from and the window (0 inside it); inf outside its span."""
    lo, hi = (to_us(t) for t in window.span)
    start, end = to_us(window.start), to_us(window.end)
    vf = valid_from_us.astype(np.int64)
    dist = np.where(vf < start, start - vf, np.where(vf > end, vf - end, 0)) / _US_PER_DAY
    return np.where((vf >= lo) & (vf < hi), dist, np.inf)
