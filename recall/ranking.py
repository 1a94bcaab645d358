"""Fact selection: which facts of the neighbourhood answer the question, best first.

Storage order never decides. Every candidate fact is ranked by up to three signals, and the
ranks are fused like the entity legs (1 / (k + rank), k = 60):

- structure: how close the fact sits to the entry entities: dense rank of (hop, position of
  the best entry entity it is reached through). All facts of one hub share one rank here, so
  what separates them is the next two signals.
- lexical: BM25 of the question against the fact's own text ("subject PREDICATE object", plus
  the endpoints' aliases), with IDF over the whole scope, so a word that only one of a hub's
  thousands of facts carries lifts exactly that fact.
- vector: the best cosine of the fact's subject or object among the vector leg's hits (entity
  names are what is embedded; facts are not).

Ties on the fused score go to higher confidence, then the newer fact, then the fact id.
Optionally (`fact_leg`), the lexical leg over the scope's fact texts also proposes candidates
outside the neighbourhood; they carry no structure rank and no hop.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from recall.cache import FunctionalPredicates, Neighbourhood, ScopeIndex
from recall.fusion import RRF_K


@dataclass(frozen=True, slots=True)
class Selected:
    row: int
    score: float
    hop: int | None
    contradicts: tuple[int, ...] = ()


def competition_rank(values: np.ndarray) -> np.ndarray:
    """1-based rank by value, descending; equal values share the best rank ("1224")."""
    if values.size == 0:
        return values.astype(np.int64)
    order = np.sort(-values)
    return np.searchsorted(order, -values, side="left") + 1


def select_facts(
    index: ScopeIndex,
    hood: Neighbourhood,
    valid: np.ndarray,
    *,
    lexical: np.ndarray,
    entity_cosine: np.ndarray | None,
    limit: int,
    functional: FunctionalPredicates,
    fact_leg: int = 0,
    k: int = RRF_K,
    structure_weight: float = 1.0,
    vector_weight: float = 1.0,
) -> list[Selected]:
    """Up to `limit` facts, best first, contradicting facts kept next to each other.

    `lexical` is the fact BM25 score per fact row; `entity_cosine` the vector leg's cosine per
    entity row (0 where the entity was not a hit), or None without a vector leg.
    """
    candidates = hood.hop > 0
    if fact_leg > 0:
        scored = np.flatnonzero(valid & (lexical > 0))
        if scored.size:
            best = scored[np.argsort(-lexical[scored], kind="stable")[:fact_leg]]
            candidates = candidates.copy()
            candidates[best] = True
    rows = np.flatnonzero(candidates)
    if rows.size == 0 or limit <= 0:
        return []

    score = np.zeros(rows.size, dtype=np.float64)
    hop = hood.hop[rows].astype(np.int64)
    if structure_weight > 0:
        # Facts the fact leg found outside the neighbourhood rank after every hop.
        score += structure_weight / (k + np.where(hop > 0, hop, 3))

    lex = lexical[rows]
    matched = lex > 0
    if matched.any():
        score[matched] += 1.0 / (k + competition_rank(lex[matched]))

    if entity_cosine is not None and vector_weight > 0:
        cos = np.maximum(
            entity_cosine[index.fact_subject[rows]], entity_cosine[index.fact_object[rows]]
        )
        near = cos > 0
        if near.any():
            score[near] += vector_weight / (k + competition_rank(cos[near]))

    order = np.lexsort(
        (
            rows,  # fact rows are sorted by fact_id
            -index.fact_valid_from[rows],
            -index.fact_confidence[rows],
            -score,
        )
    )
    ranked = rows[order]
    scores = dict(zip(rows.tolist(), score.tolist(), strict=True))
    return _with_contradictions(index, hood, valid, ranked, scores, limit, functional)


def _with_contradictions(
    index: ScopeIndex,
    hood: Neighbourhood,
    valid: np.ndarray,
    ranked: np.ndarray,
    scores: dict[int, float],
    limit: int,
    functional: FunctionalPredicates,
) -> list[Selected]:
    """Take facts in rank order; a fact with contradicting facts brings them along, right after
    it, or is left out when the whole group does not fit in `limit`."""
    head = ranked[: limit * 2].tolist()
    conflicts = index.contradiction_groups(head, valid, functional)
    taken: dict[int, Selected] = {}
    for row in ranked.tolist():
        if len(taken) >= limit:
            break
        if row in taken:
            continue
        others = conflicts.get(row)
        if others is None and row not in head:
            others = index.contradiction_groups([row], valid, functional).get(row)
        group = [row, *(o for o in (others or ()) if o not in taken)]
        if len(taken) + len(group) > limit:
            continue
        for member in group:
            peers = (row, *(o for o in (others or ()) if o != member)) if others else ()
            taken[member] = Selected(
                row=member,
                score=scores.get(member, 0.0),
                hop=int(hood.hop[member]) or None,
                contradicts=tuple(p for p in peers if p != member),
            )
    return list(taken.values())
