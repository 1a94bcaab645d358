"""The recall curve both quality benchmarks report: recall of the first k results for
k = 5, 10, 15, 20, 40 and MRR, per question, averaged with a bootstrap confidence interval
over questions, and paired differences between two rankings of the same questions.

    per_q = curve(ranked, wanted, units)        # one question: {"recall@5": .., "mrr": ..}
    stat = summary([per_q, ...])                 # {"recall@5": {"mean", "lo", "hi"}, ...}
    diff = paired([a_rows], [b_rows])            # a - b, with its interval

`ranked` is a ranking (ids, best first); `units(id)` the relevant units an id covers (the
evidence turns a fact's provenance names, or the fact itself); `wanted` the question's units.
recall@k is the share of `wanted` covered by the first k ids; MRR is 1 / the position of the
first id covering any wanted unit (0 when none does). The interval is the percentile bootstrap
(2,000 resamples of the questions, seeded: the same figures every run).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence

import numpy as np

KS = (5, 10, 15, 20, 40)
METRICS = (*(f"recall@{k}" for k in KS), "mrr")
RESAMPLES = 2000
LEVEL = 0.95
SEED = 20


def curve(
    ranked: Sequence[str], wanted: Collection[str], units: Callable[[str], Iterable[str]]
) -> dict[str, float]:
    """One question's recall@k for every k in `KS`, and its reciprocal rank."""
    goal = set(wanted)
    if not goal:
        raise ValueError("a question needs at least one relevant unit")
    covered: set[str] = set()
    first = 0
    at: dict[int, int] = {}
    for i, item in enumerate(ranked[: max(KS)], 1):
        hit = goal.intersection(units(item))
        if hit and not first:
            first = i
        covered |= hit
        if i in KS:
            at[i] = len(covered)
    out = {f"recall@{k}": at.get(k, len(covered)) / len(goal) for k in KS}
    out["mrr"] = 1.0 / first if first else 0.0
    return out


def _resample_index(n: int, resamples: int = RESAMPLES, seed: int = SEED) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, n, size=(resamples, n))


def _interval(values: np.ndarray, index: np.ndarray) -> dict[str, float]:
    means = values[index].mean(axis=1)
    tail = (1 - LEVEL) / 2 * 100
    lo, hi = np.percentile(means, [tail, 100 - tail])
    return {
        "mean": round(float(values.mean()), 4),
        "lo": round(float(lo), 4),
        "hi": round(float(hi), 4),
    }


def summary(
    rows: Sequence[dict[str, float]], metrics: Sequence[str] = METRICS
) -> dict[str, dict[str, float]]:
    """Mean and bootstrap interval of each metric over the questions' rows."""
    if not rows:
        return {m: {"mean": 0.0, "lo": 0.0, "hi": 0.0} for m in metrics}
    index = _resample_index(len(rows))
    return {
        m: _interval(np.asarray([r[m] for r in rows], dtype=np.float64), index) for m in metrics
    }


def paired(
    a: Sequence[dict[str, float]], b: Sequence[dict[str, float]], metrics: Sequence[str] = METRICS
) -> dict[str, dict[str, float]]:
    """a - b per metric over the same questions (in the same order): mean and interval, the
    questions resampled together, so what both rankings get right or wrong cancels."""
    if len(a) != len(b):
        raise ValueError("paired rows must cover the same questions")
    if not a:
        return {m: {"mean": 0.0, "lo": 0.0, "hi": 0.0} for m in metrics}
    index = _resample_index(len(a))
    out = {}
    for m in metrics:
        diff = np.asarray([x[m] - y[m] for x, y in zip(a, b, strict=True)], dtype=np.float64)
        out[m] = _interval(diff, index)
    return out


def clears(diff: dict[str, float]) -> bool:
    """A paired difference whose whole interval lies above zero."""
    return diff["lo"] > 0


def cell(stat: dict[str, float]) -> str:
    """`0.713 (0.68–0.74)`: a mean and its interval for a markdown table."""
    return f"{stat['mean']:.3f} ({stat['lo']:.2f}–{stat['hi']:.2f})"


def curve_table(title: str, systems: dict[str, dict[str, dict[str, float]]]) -> str:
    """One row per system, one column per metric, each a mean with its interval."""
    head = "| " + title + " | " + " | ".join(METRICS) + " |"
    lines = [head, "|---|" + "---:|" * len(METRICS)]
    for name, stats in systems.items():
        lines.append(f"| {name} | " + " | ".join(cell(stats[m]) for m in METRICS) + " |")
    return "\n".join(lines)
