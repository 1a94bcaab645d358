"""How many tenants one run covers: the pure part, shared by the sensor, the failure sensor
and `memflow run`.

A run covers a *range* of the `tenants` partitions (Dagster runs a partition range in one run;
a set with holes would be several runs). Tenants inside a range that have nothing new cost a
table read each, so a range is cut where the tenants with work lie far apart (`max_gap`) and
never holds more than `max_tenants`. A failed range is split in two and rerun, down to single
tenants, so one tenant's failure never holds back the others.

Blocks: the partitions are cut into fixed blocks of `BLOCK_SIZE` consecutive tenants (by their
position in the partitions' order, which only grows at the end) and a range never crosses a
block. Every run memflow launches carries its block in the `memflow/block` tag, and the
production instance (deploy/dagster.yaml) admits one run per block at a time: two runs that
could write the same tenant's tables always share a block, so they never run at once, whatever
ranges the sensor, the failure sensor and the CLI cut.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

RANGE_START_TAG = "dagster/asset_partition_range_start"
RANGE_END_TAG = "dagster/asset_partition_range_end"
SOURCE_TAG = "memflow/source"
BLOCK_TAG = "memflow/block"
BLOCK_SIZE = 200
MAX_TENANTS = BLOCK_SIZE
MAX_GAP = 16


def batch_ranges(
    ordered: Sequence[str],
    wanted: Iterable[str],
    *,
    max_tenants: int = MAX_TENANTS,
    max_gap: int = MAX_GAP,
    block_size: int = BLOCK_SIZE,
) -> list[tuple[str, str]]:
    """Contiguous ranges of `ordered` (the partition order) covering every key of `wanted`,
    none crossing a block of `block_size` partitions."""
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
        if (
            i - prev - 1 > max_gap
            or i - start + 1 > max_tenants
            or i // block_size != start // block_size
        ):
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


def block_of(ordered: Sequence[str], key: str, block_size: int = BLOCK_SIZE) -> int:
    return ordered.index(key) // block_size


def run_tags(
    ordered: Sequence[str], first: str, last: str, block_size: int = BLOCK_SIZE
) -> dict[str, str]:
    """The tags of a run over [first, last]: the partition range and its block."""
    block = block_of(ordered, first, block_size)
    if block != block_of(ordered, last, block_size):
        raise ValueError(f"the range {first}..{last} crosses a block of {block_size} tenants")
    return {**range_tags(first, last), BLOCK_TAG: str(block)}
