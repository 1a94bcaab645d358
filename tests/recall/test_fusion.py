from __future__ import annotations

import pytest

from recall.fusion import RRF_K, positions, rrf


def test_scores_are_reciprocal_ranks_summed_over_legs() -> None:
    fused = rrf({"name": positions(["a", "b", "c"]), "vector": positions(["c", "a"])})
    scores = {f.item: f.score for f in fused}
    assert RRF_K == 60
    assert scores["a"] == pytest.approx(1 / 61 + 1 / 62)
    assert scores["b"] == pytest.approx(1 / 62)
    assert scores["c"] == pytest.approx(1 / 63 + 1 / 61)
    assert [f.item for f in fused] == ["a", "c", "b"]


def test_only_ranks_count_not_how_far_apart_the_scores_were() -> None:
    # Whatever BM25 value or cosine put "x" first, first place is worth 1/61 in each leg;
    # an item second in both legs beats one first in a single leg.
    fused = rrf({"name": positions(["x", "y"]), "vector": positions(["z", "y"])})
    assert fused[0].item == "y"
    assert fused[0].score == pytest.approx(2 / 62)


def test_via_marks_how_each_entity_was_found() -> None:
    fused = rrf({"name": positions(["a", "b"]), "vector": positions(["b", "c"])})
    via = {f.item: f.via for f in fused}
    assert via == {"a": "name", "b": "both", "c": "vector"}
    assert next(f for f in fused if f.item == "b").ranks == {"name": 2, "vector": 1}


def test_tied_ranks_contribute_equally_and_order_is_deterministic() -> None:
    fused = rrf({"name": [("q", 1), ("p", 1), ("r", 3)]})
    assert [f.item for f in fused] == ["p", "q", "r"]
    assert fused[0].score == fused[1].score


def test_duplicates_keep_their_best_rank_and_limit_cuts() -> None:
    fused = rrf({"name": [("a", 3), ("a", 1), ("b", 2)]}, limit=1)
    assert len(fused) == 1
    assert fused[0].item == "a" and fused[0].ranks == {"name": 1}


def test_bad_arguments() -> None:
    with pytest.raises(ValueError):
        rrf({"name": [("a", 0)]})
    with pytest.raises(ValueError):
        rrf({"name": positions(["a"])}, k=0)
