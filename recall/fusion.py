"""Reciprocal rank fusion of ranked entity lists: ranks, never scores.

BM25 values and cosine similarities live on different scales, so each leg contributes
1 / (k + rank) for every item it ranked (rank starts at 1); an item ranked by several legs
sums its contributions and so beats one ranked equally by a single leg.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

RRF_K = 60
NAME_LEG = "name"
VECTOR_LEG = "vector"

Ranked = tuple[str, int]  # (item, 1-based rank); tied items share a rank


@dataclass(frozen=True, slots=True)
class Fused:
    item: str
    score: float
    ranks: dict[str, int] = field(default_factory=dict)  # leg -> 1-based rank in that leg

    @property
    def via(self) -> str:
        """ "both" when the name and vector legs each ranked it, else the one leg that did."""
        legs = [leg for leg in (NAME_LEG, VECTOR_LEG) if leg in self.ranks]
        if len(legs) == 2:
            return "both"
        return legs[0] if legs else next(iter(self.ranks), "")


def positions(items: Sequence[str]) -> list[Ranked]:
    """Rank a list by position (1, 2, 3, ...): for legs without ties."""
    return [(item, i) for i, item in enumerate(items, start=1)]


def rrf(
    legs: Mapping[str, Sequence[Ranked]], *, k: int = RRF_K, limit: int | None = None
) -> list[Fused]:
    """Fuse ranked lists (one per leg, each item with its rank in that leg), best first.

    An item listed twice in one leg keeps its best rank. Ties in the fused score are broken by
    the best single rank, then by the item itself, so the order never depends on dict or store
    iteration order.
    """
    if k <= 0:
        raise ValueError("k must be positive")
    ranks: dict[str, dict[str, int]] = {}
    for leg, ranked in legs.items():
        for item, rank in ranked:
            if rank < 1:
                raise ValueError("ranks start at 1")
            held = ranks.setdefault(item, {})
            held[leg] = min(rank, held.get(leg, rank))
    fused = [
        Fused(item, sum(1.0 / (k + r) for r in leg_ranks.values()), leg_ranks)
        for item, leg_ranks in ranks.items()
    ]
    fused.sort(key=lambda f: (-f.score, min(f.ranks.values()), f.item))
    return fused if limit is None else fused[:limit]
