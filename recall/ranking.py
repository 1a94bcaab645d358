"""Fact selection: which candidate facts answer the question, best first.

Storage order never decides. Candidates are the facts valid at `as_of` within `hops` of the
entry entities, plus (`fact_leg`) the best facts of the whole scope by the fact-text BM25, plus
every fact the fact-vector leg returned (its top k by cosine of the fact's own text). Each
candidate gets one value per signal, fused by `fusion`:

- `cc` (default): a weighted sum of each signal scaled to [0, 1] by its best value among the
  candidates. Scores, not ranks: a fact that is far ahead on one signal (the only fact whose
  text has the question's rare word, BM25 5.7 against 2.0) stays ahead of many facts that are
  a little good on two (RRF would rank them above it).
- `rrf`: weight / (k + competition rank) per signal, k = 60 (the entity legs' fusion).

Signals (weights from `RankingConfig`, which `recall.service.RecallConfig.ranking` holds):

- lexical (1.0): the question's BM25 (`fact_bm25_b`, 0.9) against the fact's text ("subject
  PREDICATE object" plus both endpoints' aliases and types), IDF over the whole scope, with
  pseudo-relevance feedback (`recall.lexical.BM25Index.feedback_scores`): the rarest words of
  the facts that match most of the question are searched too, so "which support group did
  Caroline attend" also finds the facts about her counseling. Candidates come from the
  first-pass scores.
- fact cosine (`fact_cosine_weight`, 0.75): the cosine of the question and the fact's own
  text (the fact-vector leg), above `fact_min_cosine` (0.3), scaled by the best cosine among the
  candidates.
- graph distance (`structure_weight`, off; 0.1 before issue 20): hop 1 = 1, hop 2 = 0.5
  (rrf: hop 1 before hop 2 before the facts found outside the neighbourhood). A soft prior,
  counted from the entry entities the question names (`prior_hops`: those the name leg found,
  alone or with the vector leg). An entry entity found by vector alone is the nearest name by
  cosine, a guess: its neighbourhood gives candidates, not a prior (so `semantic`, which has no
  name leg, has no graph-distance prior; the facts' own cosines rank them).
- spread (`spread_weight`, 0.25; the graph as a re-ranker): the best `spread_seeds` facts by
  the signals above activate their endpoints, each entity diluted by its degree
  (`spread_beta`), and every candidate gets the activation of its two endpoints. A fact about
  the same specific entity as the best facts ("Pepper BREED Lab mix" after "Audrey ADOPTED
  Pepper") rises; facts that share only a hub ("Audrey") barely move.
- temporal (`temporal_weight`, 1.0): when the question names a day or a month
  (`recall.temporal`), closeness of `valid_from` to it, 1 / (1 + days / 7); the `fact_leg`
  facts closest to that date are candidates too.
- entity cosine (`entity_cosine_weight`, off): the best cosine of the fact's endpoints' names
  among the vector leg's entity hits.
- focus (`focus_weight`, 0.1): facts touching an entity the question names in full (the most
  specific name: "Caroline's dog", not "Caroline") get weight / sqrt(degree), so they come
  before facts about a neighbour they nearly tie with (issue 20 item 3).

Ties go to higher confidence, then the newer fact, then the fact id. Then the top of the
answer: near-duplicates of a fact ranked above move below the first ten (`distinct_top`), and
facts that cite no source turn the facts above them do not already cite below the first twenty
(`new_sources_top`).
`bench/bench_quality.py --ablation` and `bench/bench_locomo.py` (tuned on conv-41..44 only)
measure each choice.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields
from typing import NamedTuple

import numpy as np

from recall.cache import FACT_BM25_B, FunctionalPredicates, ScopeIndex
from recall.fusion import RRF_K
from recall.lexical import tokenize

FUSIONS = ("cc", "rrf")


@dataclass(frozen=True, slots=True)
class RankingConfig:
    """How candidate facts are gathered and scored; weights are relative to lexical = 1.
    The defaults are what the quality benchmarks chose (bench/bench_quality.py)."""

    fusion: str = "cc"  # "cc": weighted sum of scaled scores; "rrf": reciprocal ranks
    rrf_k: int = RRF_K  # the k of `fusion="rrf"`
    fact_leg: int = 20  # facts the scope-wide fact BM25 (and a named date) may add
    # Graph distance from the entry entities the question names (0: off since issue 20; 0.1
    # before: without it LoCoMo's tuning half gained 0.003 at 10 in the final set, the
    # project set's hybrid recall@5 0.957 -> 0.962, BENCHMARKS.md).
    structure_weight: float = 0.0
    fact_cosine_weight: float = 0.75  # the fact's own text's cosine with the question
    fact_min_cosine: float = 0.3  # the fact-vector leg's floor (worth nothing in `cc`)
    entity_cosine_weight: float = 0.0  # the best cosine of the fact's endpoints' names
    # Closeness of valid_from to a day or month the question names (the date window; 0.5
    # before issue 20: 1.0 raised LoCoMo's tuning half at 20 and its MRR).
    temporal_weight: float = 1.0
    # BM25's length normalisation `b` of the fact-text index (0: none, 1: full); 0.75 before
    # issue 20: 0.9 gained LoCoMo's tuning half 0.005-0.008 at 10 (BENCHMARKS.md).
    fact_bm25_b: float = FACT_BM25_B
    spread_weight: float = 0.25  # activation spread from the best facts through their entities
    spread_seeds: int = 10
    spread_beta: float = 1.0  # an entity's activation is divided by its degree ** beta
    # The question's own entities (named in full, the most specific ones): facts touching one
    # come before facts about a neighbour (issue 20 item 3); 1 / sqrt(degree) of the weight.
    # 0.1 orders near-ties; on LoCoMo, hybrid, it costs up to 0.002 on the held-out half (no
    # interval away from zero) and 0.004 of the tuning half's MRR, and gains names-only MRR
    # 0.008 on the held-out half; 0.25 and above cost more (BENCHMARKS.md). On because the
    # issue asks for the order, not because LoCoMo gains.
    focus_weight: float = 0.1
    # Near-duplicates (the same statement in other words) of a fact ranked above them are moved
    # below the first `distinct_top` places (0: off).
    distinct_top: int = 10
    # Facts whose every source turn is already cited by a fact ranked above them are moved
    # below the first `new_sources_top` places (0: off): the top of the answer cites as many
    # distinct statements as it can. Chosen on LoCoMo's tuning half (10: +0.005 at 10; 20 instead
    # of 10: +0.003 at 20 in the final set), accepted on the held-out half.
    new_sources_top: int = 20

    def __post_init__(self) -> None:
        if self.fusion not in FUSIONS:
            raise ValueError(f"fusion must be one of {', '.join(FUSIONS)}")
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name != "fusion" and not (
                isinstance(value, int | float) and 0 <= value < math.inf
            ):
                raise ValueError(f"{f.name} must be a finite number >= 0")
        if self.fact_bm25_b > 1:
            raise ValueError("fact_bm25_b must be between 0 and 1")


@dataclass(frozen=True, slots=True)
class Signals:
    """One query's values per fact row (entity row for `entity_cosine`).

    `hops`: the hop from the entry entities (0 = outside the neighbourhood); `valid`: valid at
    `as_of`; `lexical`: the fact BM25 score (feedback included); `lexical_seed`: the scores the
    `fact_leg` candidates are chosen by (None: `lexical`; the service passes the first-pass
    scores, so feedback re-ranks facts but brings in no candidates of its own); `prior_hops`:
    the hop from the entry entities the question names (the graph-distance prior; None:
    `hops`); `fact_cosine`: the fact-vector leg's cosine (0 = not a hit; None without the leg);
    `temporal`: days from valid_from to a date the question names (inf = far; None when it
    names none); `entity_cosine`: per entity row, the vector leg's cosine (0 = not a hit)."""

    hops: np.ndarray
    valid: np.ndarray
    lexical: np.ndarray
    lexical_seed: np.ndarray | None = None
    prior_hops: np.ndarray | None = None
    fact_cosine: np.ndarray | None = None
    temporal: np.ndarray | None = None
    entity_cosine: np.ndarray | None = None
    focus: np.ndarray | None = None  # per entity row: the question names it (most specific)


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


def candidates_of(signals: Signals, config: RankingConfig) -> np.ndarray:
    """The candidate fact rows, sorted: the neighbourhood, the best `fact_leg` facts by the
    fact BM25, every fact-vector hit, and the `fact_leg` facts closest to a named date."""
    valid, fact_leg = signals.valid, config.fact_leg
    candidates = signals.hops > 0
    if fact_leg > 0:
        seed = signals.lexical if signals.lexical_seed is None else signals.lexical_seed
        scored = np.flatnonzero(valid & (seed > 0))
        if scored.size:
            best = scored[np.argsort(-seed[scored], kind="stable")[:fact_leg]]
            candidates = candidates.copy()
            candidates[best] = True
    if signals.fact_cosine is not None:
        # Every fact the fact-vector leg returned (the store's top k) is a candidate, wherever
        # it sits in the graph.
        candidates = candidates | (valid & (signals.fact_cosine > 0))
    temporal = signals.temporal
    if temporal is not None and config.temporal_weight > 0 and fact_leg > 0:
        # A question that names a date and little else ("what happened on 16 June, 2023?")
        # still has candidates: the `fact_leg` facts closest to the date.
        near = np.flatnonzero(valid & np.isfinite(temporal))
        if near.size:
            closest = near[np.argsort(temporal[near], kind="stable")[:fact_leg]]
            candidates = candidates.copy()
            candidates[closest] = True
    return np.flatnonzero(candidates)


def score_candidates(
    index: ScopeIndex, rows: np.ndarray, signals: Signals, config: RankingConfig
) -> np.ndarray:
    """Each candidate row's fused score (higher is better)."""
    score = np.zeros(rows.size, dtype=np.float64)
    cc = config.fusion == "cc"
    k = config.rrf_k

    def add(mask: np.ndarray, values: np.ndarray, weight: float, top: float = 0.0) -> None:
        """One signal, `values` (higher is better) where `mask`: RRF adds weight / (k + rank),
        CC adds weight * value / `top` (default: the best value)."""
        if weight <= 0 or not mask.any():
            return
        v = values[mask]
        if not cc:
            score[mask] += weight / (k + competition_rank(v))
            return
        top = top or float(v.max())
        score[mask] += weight * (v / top) if top > 0 else weight

    prior = signals.hops if signals.prior_hops is None else signals.prior_hops
    hop = prior[rows].astype(np.int64)
    if config.structure_weight > 0:
        if cc:
            score += config.structure_weight * np.select([hop == 1, hop == 2], [1.0, 0.5], 0.0)
        else:
            # Facts the fact leg found outside the neighbourhood rank after every hop.
            score += config.structure_weight / (k + np.where(hop > 0, hop, 3))

    lex = signals.lexical[rows]
    add(lex > 0, lex, 1.0)

    if signals.focus is not None and config.focus_weight > 0:
        # Diluted by the entity's degree, as the spread is: a hub the question names (a
        # speaker, "user") tells its thousand facts apart no better than a neighbour's.
        weight = signals.focus / np.sqrt(np.maximum(index.entity_degree, 1))
        own = np.maximum(weight[index.fact_subject[rows]], weight[index.fact_object[rows]])
        add(own > 0, own, config.focus_weight, 1.0)

    if signals.fact_cosine is not None:
        cos = signals.fact_cosine[rows]
        near = cos > 0
        if cc:
            # Cosines above the floor, scaled by the best one: the floor is worth nothing.
            cos = np.where(near, np.maximum(cos - config.fact_min_cosine, 1e-6), 0.0)
        add(near, cos, config.fact_cosine_weight)

    if signals.entity_cosine is not None and config.entity_cosine_weight > 0:
        ent = signals.entity_cosine
        cos = np.maximum(ent[index.fact_subject[rows]], ent[index.fact_object[rows]])
        add(cos > 0, cos, config.entity_cosine_weight)

    if signals.temporal is not None and config.temporal_weight > 0:
        dist = signals.temporal[rows]
        inside = np.isfinite(dist)
        closeness = 1.0 / (1.0 + np.where(inside, dist, 0.0) / 7.0)
        add(inside, closeness, config.temporal_weight, 1.0)

    if config.spread_weight > 0 and config.spread_seeds > 0:
        seeds = np.argsort(-score, kind="stable")[: config.spread_seeds]
        seeds = seeds[score[seeds] > 0]
        if seeds.size:
            subj, obj = index.fact_subject, index.fact_object
            act = np.zeros(len(index.entity_ids), dtype=np.float64)
            np.add.at(act, subj[rows[seeds]], score[seeds])
            np.add.at(act, obj[rows[seeds]], score[seeds])
            act /= np.maximum(index.entity_degree, 1) ** config.spread_beta
            reach = act[subj[rows]] + act[obj[rows]]
            add(reach > 0, reach, config.spread_weight)
    return score


def select_facts(
    index: ScopeIndex,
    signals: Signals,
    config: RankingConfig,
    *,
    limit: int,
    functional: FunctionalPredicates,
) -> list[Selected]:
    """Up to `limit` facts, best first, contradicting facts kept next to each other."""
    rows = candidates_of(signals, config)
    if rows.size == 0 or limit <= 0:
        return []
    score = score_candidates(index, rows, signals, config)

    def score_of(row: int) -> float:
        # A contradicting fact taken along: candidate rows are sorted (flatnonzero), so its
        # score is one bisection away (0 when it was no candidate).
        at = int(np.searchsorted(rows, row))
        return float(score[at]) if at < rows.size and rows[at] == row else 0.0

    taken = _with_contradictions(
        index,
        signals.hops,
        signals.valid,
        _ranked(index, rows, score, head=4 * (limit + WINDOW_SLACK)),
        score_of,
        limit,
        functional,
    )
    taken = distinct_first(index, taken, config.distinct_top)
    return new_sources_first(index, taken, config.new_sources_top)


class Statement(NamedTuple):
    """What near-duplicate detection compares of a fact: its entity rows and words."""

    subject: int
    object: int
    predicate: str
    predicate_words: frozenset[str]
    subject_words: frozenset[str]
    object_words: frozenset[str]

    @classmethod
    def of(cls, index: ScopeIndex, row: int) -> Statement:
        known = index.statements.get(row)
        if known is not None:
            return known  # type: ignore[no-any-return]
        f = index.facts[row]
        made = index.statements[row] = cls(
            int(index.fact_subject[row]),
            int(index.fact_object[row]),
            f.predicate,
            frozenset(tokenize(f.predicate)),
            frozenset(tokenize(f.subject)),
            frozenset(tokenize(f.object)),
        )
        return made


def _nested(a: frozenset[str], b: frozenset[str]) -> bool:
    return bool(a and b) and (a <= b or b <= a)


def near_duplicates(a: Statement, b: Statement) -> bool:
    """Two statements say the same in other words: the same two entities and predicates
    sharing a word ("VOLUNTEERS_AT" / "STARTED_VOLUNTEERING_AT"), or the same predicate and
    one end, the other end's words one inside the other ("the homeless shelter" / "homeless
    shelter")."""
    if {a.subject, a.object} == {b.subject, b.object}:
        return bool(a.predicate_words & b.predicate_words)
    if a.predicate != b.predicate:
        return False
    if a.subject == b.subject:
        return _nested(a.object_words, b.object_words)
    return a.object == b.object and _nested(a.subject_words, b.subject_words)


def distinct_first(index: ScopeIndex, taken: list[Selected], top: int) -> list[Selected]:
    """`taken` with every near-duplicate of a fact ranked above it moved just below the first
    `top` places (graph-aware dedup: the superseded are already gone, contradictions are kept
    side by side, never called duplicates). Nothing is dropped."""
    if top <= 0 or len(taken) <= 1:
        return taken
    head: list[Selected] = []
    later: list[Selected] = []
    kept: list[Statement] = []
    for i, s in enumerate(taken):
        if len(head) >= top:
            return [*head, *later, *taken[i:]]
        statement = Statement.of(index, s.row)
        peers = set(s.contradicts)
        if any(
            near_duplicates(statement, k)
            for k, r in zip(kept, head, strict=True)
            if r.row not in peers
        ):
            later.append(s)
            continue
        head.append(s)
        kept.append(statement)
    return [*head, *later]


def _turns(index: ScopeIndex, row: int) -> frozenset[tuple[str, str]]:
    f = index.facts[row]
    own = (f.session_id, f.turn_id)
    return frozenset([own, *f.sources]) if f.turn_id else frozenset(f.sources)


def new_sources_first(index: ScopeIndex, taken: list[Selected], top: int) -> list[Selected]:
    """`taken` with every fact whose source turns are all cited by the facts above it moved
    just below the first `top` places (contradicting facts stay with theirs). Nothing is
    dropped; facts with no recorded source are never moved."""
    if top <= 0 or len(taken) <= 1:
        return taken
    head: list[Selected] = []
    later: list[Selected] = []
    cited: set[tuple[str, str]] = set()
    for i, s in enumerate(taken):
        if len(head) >= top:
            return [*head, *later, *taken[i:]]
        turns = _turns(index, s.row)
        if turns and turns <= cited and not s.contradicts:
            later.append(s)
            continue
        head.append(s)
        cited |= turns
    return [*head, *later]


WINDOW_SLACK = 16  # rows looked at beyond `limit` in one window of `_with_contradictions`


def _ranked(
    index: ScopeIndex, rows: np.ndarray, score: np.ndarray, *, head: int
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(rows, scores) in rank order: score, then confidence, then the newer `valid_from`,
    then the row (fact rows are sorted by fact_id). The `head` best are sorted first, ties
    at its last score included; the rest only when the caller reads on (it seldom does:
    sorting every candidate cost about a quarter of a millisecond at the caps)."""

    def ordered(picked: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        sub = rows[picked]
        order = np.lexsort(
            (sub, -index.fact_valid_from[sub], -index.fact_confidence[sub], -score[picked])
        )
        return sub[order], score[picked][order]

    if rows.size <= head:
        yield ordered(np.arange(rows.size))
        return
    cut = np.partition(score, rows.size - head)[rows.size - head]
    first = np.flatnonzero(score >= cut)
    yield ordered(first)
    yield ordered(np.flatnonzero(score < cut))


def _with_contradictions(
    index: ScopeIndex,
    hops: np.ndarray,
    valid: np.ndarray,
    ranked: Iterator[tuple[np.ndarray, np.ndarray]],
    score_of: Callable[[int], float],
    limit: int,
    functional: FunctionalPredicates,
) -> list[Selected]:
    """Take facts in rank order (`ranked`: parts of it, best first); a fact with contradicting
    facts brings them along, right after it, or is left out when the whole group does not fit
    in `limit`. Rows are looked at in windows just over `limit`: usually one is enough."""
    taken: dict[int, Selected] = {}
    for chunk, scores in _windows(ranked, limit + WINDOW_SLACK):
        conflicts = index.contradiction_groups(chunk, valid, functional)
        for row, row_score in zip(chunk, scores, strict=True):
            if len(taken) >= limit:
                return list(taken.values())
            if row in taken:
                continue
            others = conflicts.get(row, ())
            group = [row, *(o for o in others if o not in taken)]
            if len(taken) + len(group) > limit:
                continue
            for member in group:
                peers = (row, *others) if others else ()
                taken[member] = Selected(
                    row=member,
                    score=row_score if member == row else score_of(member),
                    hop=int(hops[member]) or None,
                    contradicts=tuple(p for p in peers if p != member),
                )
    return list(taken.values())


def _windows(
    ranked: Iterator[tuple[np.ndarray, np.ndarray]], size: int
) -> Iterator[tuple[list[int], list[float]]]:
    """The ranked rows and their scores, `size` at a time, part after part."""
    for part, part_score in ranked:
        for start in range(0, part.size, size):
            yield part[start : start + size].tolist(), part_score[start : start + size].tolist()
