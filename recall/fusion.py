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


def rrf(
    legs: Mapping[str, Sequence[str]], *, k: int = RRF_K, limit: int | None = None
) -> list[Fused]:
    """Fuse ranked lists (best first, one list per leg) into one list, best first.

    Duplicates within a leg keep their first (best) rank. Ties in the fused score are
    broken by the best single rank, then by the item itself, so the order never depends
    on dict or store iteration order.
    """
    if k <= 0:
        raise ValueError("k must be positive")
    ranks: dict[str, dict[str, int]] = {}
    for leg, items in legs.items():
        for position, item in enumerate(items, start=1):
            ranks.setdefault(item, {}).setdefault(leg, position)
    fused = [
        Fused(item, sum(1.0 / (k + r) for r in leg_ranks.values()), leg_ranks)
        for item, leg_ranks in ranks.items()
    ]
    fused.sort(key=lambda f: (-f.score, min(f.ranks.values()), f.item))
    return fused if limit is None else fused[:limit]
