"""The order facts are taken in (`recall.ranking._ranked`): the best candidates sorted first
and the rest only when read on, together exactly the full sort (score, confidence, newer
`valid_from`, row), ties at the cut included in the first part."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from recall.ranking import _ranked


@settings(max_examples=300, deadline=None)
@given(
    n=st.integers(1, 60),
    head=st.integers(1, 70),
    levels=st.integers(1, 5),
    seed=st.integers(0, 2**32 - 1),
)
def test_the_parts_in_order_are_the_full_sort(n: int, head: int, levels: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    size = n + 10
    index = SimpleNamespace(
        fact_valid_from=rng.integers(0, 3, size).astype(np.int64),
        fact_confidence=rng.integers(0, 3, size) / 2,
    )
    rows = np.sort(rng.choice(size, n, replace=False))
    score = rng.integers(0, levels, n).astype(np.float32)  # few levels: many ties at the cut
    full = np.lexsort((rows, -index.fact_valid_from[rows], -index.fact_confidence[rows], -score))
    parts = list(_ranked(index, rows, score, head=head))  # type: ignore[arg-type]
    assert len(parts) == (1 if n <= head else 2)
    got_rows = np.concatenate([p for p, _ in parts])
    got_scores = np.concatenate([s for _, s in parts])
    assert got_rows.tolist() == rows[full].tolist()
    assert got_scores.tolist() == score[full].tolist()
    assert parts[0][0].size >= min(n, head)  # the first part holds at least `head` rows


def test_the_first_part_is_the_head_and_the_rest_follows() -> None:
    index = SimpleNamespace(fact_valid_from=np.zeros(100, np.int64), fact_confidence=np.ones(100))
    rows = np.arange(100)
    parts = _ranked(index, rows, np.arange(100, dtype=np.float32), head=10)  # type: ignore[arg-type]
    first_rows, _ = next(parts)
    assert first_rows.tolist() == list(range(99, 89, -1))
    rest, _ = next(parts)
    assert rest.tolist() == list(range(89, -1, -1))
