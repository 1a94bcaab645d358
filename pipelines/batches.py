"""How many tenants one run covers: the pure part, shared by the sensor, the failure sensor
and `memflow run`.

A run covers a *range* of the `tenants` partitions (Dagster runs a partition range in one run;
a set with holes would be several runs). Tenants inside a range that have nothing new cost a
table read each, so a range is cut where the tenants with work lie far apart (`max_gap`) and
never holds more than `max_tenants`. A failed range is split in two and rerun, down to single
tenants, so one tenant's failure never holds back the others.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

RANGE_START_TAG = "dagster/asset_partition_range_start"
RANGE_END_TAG = "dagster/asset_partition_range_end"
SOURCE_TAG = "memflow/source"
MAX_TENANTS = 200
MAX_GAP = 16


def batch_ranges(
    ordered: Sequence[str],
    wanted: Iterable[str],
    *,
    max_tenants: int = MAX_TENANTS,
    max_gap: int = MAX_GAP,
) -> list[tuple[str, str]]:
    """Contiguous ranges of `ordered` (the partition order) covering every key of `wanted`."""
    want = set(wanted)
    position = {k: i for i, k in enumerate(ordered)}
    missing = want - set(position)
    if missing:
        raise ValueError(f"not tenant partitions: {sorted(missing)[:5]}")
    spots = sorted(position[k] for k in want)
    ranges: list[tuple[str, str]] = []
    start = prev = None
    for i in spots:
        if start is None:
            start = prev = i
            continue
        assert prev is not None
        if i - prev - 1 > max_gap or i - start + 1 > max_tenants:
            ranges.append((ordered[start], ordered[prev]))
            start = i
        prev = i
    if start is not None and prev is not None:
        ranges.append((ordered[start], ordered[prev]))
    return ranges


def range_keys(ordered: Sequence[str], first: str, last: str) -> list[str]:
    i, j = ordered.index(first), ordered.index(last)
    return list(ordered[i : j + 1])


def split_range(ordered: Sequence[str], first: str, last: str) -> list[tuple[str, str]]:
    """The two halves of a range (a single tenant cannot be split: [])."""
    keys = range_keys(ordered, first, last)
    if len(keys) < 2:
        return []
    mid = len(keys) // 2
    return [(keys[0], keys[mid - 1]), (keys[mid], keys[-1])]


def range_tags(first: str, last: str) -> dict[str, str]:
    return {RANGE_START_TAG: first, RANGE_END_TAG: last}
