"""The pure parts of the production concurrency design: ranges never cross a block, every run
is tagged with its block, and LocalRunLauncher's view of a worker process."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipelines.batches import BLOCK_TAG, batch_ranges, range_keys, run_tags, split_range
from resources.fs import process_started_at


@given(
    n=st.integers(1, 80),
    picks=st.sets(st.integers(0, 79), min_size=1),
    block=st.integers(1, 12),
    gap=st.integers(0, 10),
)
def test_a_range_never_crosses_a_block(n: int, picks: set[int], block: int, gap: int) -> None:
    ordered = [f"o/t{i:03d}" for i in range(n)]
    wanted = {ordered[i] for i in picks if i < n} or {ordered[0]}
    ranges = batch_ranges(ordered, wanted, max_gap=gap, block_size=block)
    covered = [k for first, last in ranges for k in range_keys(ordered, first, last)]
    assert wanted <= set(covered) and len(covered) == len(set(covered))
    for first, last in ranges:
        tags = run_tags(ordered, first, last, block_size=block)
        assert tags[BLOCK_TAG] == str(ordered.index(last) // block)
        for a, b in split_range(ordered, first, last):  # halves stay in the block
            assert run_tags(ordered, a, b, block_size=block)[BLOCK_TAG] == tags[BLOCK_TAG]


def test_a_range_across_blocks_is_refused() -> None:
    ordered = [f"o/t{i:03d}" for i in range(10)]
    assert run_tags(ordered, "o/t000", "o/t003", block_size=4)[BLOCK_TAG] == "0"
    with pytest.raises(ValueError, match="crosses a block"):
        run_tags(ordered, "o/t002", "o/t005", block_size=4)


def test_the_default_block_is_the_run_size_cap() -> None:
    ordered = [f"o/t{i:04d}" for i in range(450)]
    ranges = batch_ranges(ordered, ordered, max_gap=len(ordered))
    assert [(ordered.index(a), ordered.index(b)) for a, b in ranges] == [
        (0, 199),
        (200, 399),
        (400, 449),
    ]


def test_a_worker_is_alive_until_it_exits() -> None:
    before = time.time()
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        started = process_started_at(proc.pid)
        assert started is not None and before - 2 <= started <= time.time() + 2
    finally:
        proc.kill()
        proc.wait()
    assert process_started_at(proc.pid) is None
    assert process_started_at(os.getpid()) is not None
