"""The recall service: gate -> lexical and vector legs -> RRF -> expansion -> fact selection.

Usage (what an HTTP layer builds on)::

    service = RecallService(graph, vectors, embedder, current_model="all-MiniLM-L6-v2")
    answer = service.recall(Scope("acme", "payments"), "which database do we use?")
    answer.facts, answer.entities, answer.mode, answer.warnings, answer.timings_ms

- `recall()` returns a `RecallAnswer`; a gated query comes back with `skipped=True` and a
  `skip_reason`. `ranking="semantic"` or `"hybrid"` raises `SemanticUnavailable` (code
  `semantic_unavailable`) when no query vector can be had; `"auto"` then answers by names and
  says why in `warnings`. Bad arguments raise `RecallError` (a ValueError, code
  `invalid_request`).
- `search_entities()` and `subgraph()` serve the entity-search and subgraph endpoints.
- A scope the stores do not know answers empty, exactly like a scope without matches.
- Thread-safe: one instance serves concurrent requests; per-scope indexes are built once per
  store version (see `recall.cache`). The service never closes the stores it was given.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Protocol

import numpy as np

from recall.answers import (
    RANKINGS,
    EntityCard,
    EntityMatch,
    EntitySearchAnswer,
    EntryEntity,
    Mode,
    Provenance,
    Ranking,
    RecallAnswer,
    RecalledFact,
    RecallError,
    RecallWarning,
    RerankNote,
    SemanticUnavailable,
    Source,
    SubgraphAnswer,
    Timings,
    assemble,
)
from recall.cache import DEFAULT_MAX_SCOPES, FunctionalPredicates, ScopeIndex, ScopeIndexCache
from recall.fusion import NAME_LEG, RRF_K, VECTOR_LEG, Fused, Ranked, positions, rrf
from recall.gate import SkipReason, gate
from recall.lexical import query_tokens, tokenize
from recall.ranking import RankingConfig, Selected, Signals, select_facts
from recall.temporal import distance_days, question_window
from recall.vector_leg import (
    DEFAULT_COVERAGE_TTL_S,
    DEFAULT_EMBED_TIMEOUT_S,
    VectorLeg,
    VectorUnavailable,
)
from resources.graph.base import MAX_HOPS, GraphStore
from resources.models.base import EmbeddingProvider
from resources.vector.base import DEFAULT_MIN_COSINE, VectorStore, fact_vectors_key
from schemas.records import EntityRecord, FactRecord, VectorHit
from schemas.scope import Scope

__all__ = ["RankingConfig", "RecallConfig", "RecallError", "RecallService", "SemanticUnavailable"]

MAX_QUERY_CHARS = 4096
MAX_LIMIT = 200
MAX_ENTITIES = 50


@dataclass(frozen=True, slots=True)
class RecallConfig:
    """Tuning knobs; the defaults are the ones the quality benchmark measured."""

    fuse_depth: int = 50  # how deep each entity leg's list goes into fusion
    vector_candidates: int = 50  # k asked of the vector store
    min_cosine: float = DEFAULT_MIN_COSINE
    rrf_k: int = RRF_K  # the k of the entity legs' reciprocal rank fusion
    # Pseudo-relevance feedback on the fact BM25 (`BM25Index.feedback_scores`): the words that
    # weigh most in the best `feedback_docs` facts, `feedback_terms` of them, searched too at
    # `feedback_weight` (0: off). Chosen on LoCoMo's tuned half (bench_locomo.py); 0.75 there
    # cost the project set's lexical MRR 0.025 (bench_quality.py), 0.5 keeps it within 0.02.
    feedback_docs: int = 15
    feedback_terms: int = 30
    feedback_weight: float = 0.5
    fact_vectors: int = 100  # k asked of the fact-vector leg (0: no fact-vector leg)
    # Fact selection (`recall.ranking`): candidates, signals, their weights and fusion.
    ranking: RankingConfig = field(default_factory=RankingConfig)
    rerank_candidates: int = 20  # how many of the first facts an asked-for rerank reorders
    embed_timeout_s: float = DEFAULT_EMBED_TIMEOUT_S
    coverage_ttl_s: float = DEFAULT_COVERAGE_TTL_S
    max_cached_scopes: int = DEFAULT_MAX_SCOPES
    functional: FunctionalPredicates = field(default_factory=FunctionalPredicates)

    def __post_init__(self) -> None:
        if not 0 <= self.feedback_weight < math.inf:
            raise ValueError("feedback_weight must be a finite number >= 0")


class Reranker(Protocol):
    """A listwise reranker (`resources.models.rerank.ListwiseReranker`): the candidates' order,
    best first, or their own order with the reason; it never raises for the model's sake."""

    def rerank(self, query: str, candidates: Sequence[str]) -> RerankOutcomeLike: ...


class RerankOutcomeLike(Protocol):
    order: tuple[int, ...]
    reranked: bool
    reason: str | None
    ms: float


class _Clock:
    def __init__(self) -> None:
        self.start = self.last = time.perf_counter()
        self.laps: dict[str, float] = {}

    def lap(self, stage: str) -> None:
        now = time.perf_counter()
        self.laps[stage] = self.laps.get(stage, 0.0) + (now - self.last) * 1000.0
        self.last = now

    def timings(self) -> Timings:
        total = (time.perf_counter() - self.start) * 1000.0
        return Timings(**{k: round(v, 3) for k, v in self.laps.items()}, total=round(total, 3))


@dataclass(slots=True)
class _Legs:
    mode: Mode
    model: str | None = None
    hits: list[VectorHit] = field(default_factory=list)
    fact_hits: list[VectorHit] = field(default_factory=list)
    warnings: list[RecallWarning] = field(default_factory=list)


class RecallService:
    """Answers recall, entity-search and subgraph requests over a graph and a vector store.

    `embedder` is one provider, or a mapping of model name -> provider when a previous model
    must keep serving during a re-embed (see `recall.vector_leg` for the rule).
    `current_model` defaults to the single provider's model.
    """

    def __init__(
        self,
        graph: GraphStore,
        vectors: VectorStore | None = None,
        embedder: EmbeddingProvider | Mapping[str, EmbeddingProvider] | None = None,
        *,
        current_model: str | None = None,
        config: RecallConfig | None = None,
        reranker: Reranker | None = None,
    ) -> None:
        self.graph = graph
        self.reranker = reranker
        self.config = config or RecallConfig()
        if embedder is None:
            providers: dict[str, EmbeddingProvider] = {}
        elif isinstance(embedder, EmbeddingProvider):
            providers = {embedder.model: embedder}
        else:
            providers = dict(embedder)
        if current_model is None and providers:
            current_model = next(iter(providers))
        self.current_model = current_model
        self.indexes = ScopeIndexCache(
            graph,
            max_scopes=self.config.max_cached_scopes,
            fact_bm25_b=self.config.ranking.fact_bm25_b,
        )
        self.vector_leg = VectorLeg(
            vectors,
            providers,
            current_model,
            embed_timeout_s=self.config.embed_timeout_s,
            coverage_ttl_s=self.config.coverage_ttl_s,
        )

    def close(self) -> None:
        """Stop the embedding thread pool; the stores and providers stay open (not ours)."""
        self.vector_leg.close()

    def __enter__(self) -> RecallService:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- recall ------------------------------------------------------------------------------

    def recall(
        self,
        scope: Scope,
        query: str,
        *,
        ranking: Ranking = "auto",
        as_of: datetime | None = None,
        hops: int = 2,
        limit: int = 40,
        k_entities: int = 8,
        rerank: bool = False,
    ) -> RecallAnswer:
        """Facts of `scope` that answer `query`, valid at `as_of` (default: now, UTC; a naive
        datetime is taken as UTC), from up to `k_entities` entry entities and `hops` hops.
        `rerank`: reorder the first `rerank_candidates` facts through the service's listwise
        reranker (off by default); the answer's `rerank` says whether it happened, and why not."""
        _check_ranking(ranking)
        _check_range("hops", hops, 1, MAX_HOPS)
        _check_range("limit", limit, 1, MAX_LIMIT)
        _check_range("k_entities", k_entities, 1, MAX_ENTITIES)
        when = _as_of(as_of)
        clock = _Clock()
        reason = gate(query)
        clock.lap("gate")
        if reason is not None:
            return RecallAnswer(
                scope=scope.key,
                as_of=when,
                ranking=ranking,
                mode="names",
                skipped=True,
                skip_reason=reason.value,
                timings_ms=clock.timings(),
            )
        warnings: list[RecallWarning] = []
        text = _clip(query, warnings)

        index = self.indexes.get(scope)
        semantic_only = ranking == "semantic"
        tokens = [] if semantic_only else query_tokens(text)
        valid = index.valid_at(when)
        # Entry entities are those known at `as_of`: a forgotten entity is no way in.
        unknown = index.unknown_at(valid)
        names = [] if semantic_only else self._name_leg(index, tokens, unknown)
        fact_seed = index.fact_bm25.scores(tokens)
        # Feedback learns from facts valid at `as_of` only: a superseded fact's words must not
        # steer the ranking of the current ones.
        fact_lexical = index.fact_bm25.feedback_scores(
            tokens,
            docs=self.config.feedback_docs,
            terms=self.config.feedback_terms,
            weight=self.config.feedback_weight,
            base=np.where(valid, fact_seed, 0.0).astype(np.float32),
        )
        clock.lap("lexical")

        legs = self._vector_legs(scope, index, text, ranking, clock)
        warnings.extend(legs.warnings)
        fused = self._fuse(names, legs.hits, k_entities, index, unknown)
        clock.lap("fuse")

        hops_of = index.neighbourhood([f.item for f in fused], hops, valid)
        # The graph-distance prior counts from the entry entities the name leg found; those
        # found by vector alone give candidates only (`recall.ranking`).
        named = [f.item for f in fused if f.via != VECTOR_LEG]
        if len(named) == len(fused):
            prior = hops_of
        elif named:
            prior = index.neighbourhood(named, hops, valid)
        else:
            prior = np.zeros_like(hops_of)
        clock.lap("expand")

        weights = self.config.ranking
        entity_cosine = None
        if legs.mode != "names" and weights.entity_cosine_weight > 0:
            entity_cosine = np.zeros(len(index.entity_ids), dtype=np.float32)
            for hit in legs.hits:
                entity_cosine[index.entity_row[hit.entity_id]] = hit.score
        temporal = None
        if weights.temporal_weight > 0 and (window := question_window(text)) is not None:
            temporal = distance_days(index.fact_valid_from, window)
        fact_cosine = None
        if legs.fact_hits:
            fact_cosine = np.zeros(len(index.facts), dtype=np.float32)
            rows = index.fact_row
            for hit in legs.fact_hits:
                row = rows.get(hit.entity_id)
                if row is not None:
                    fact_cosine[row] = max(hit.score, 1e-6)
        signals = Signals(
            focus=_focus(index, named, tokens),
            hops=hops_of,
            valid=valid,
            lexical=fact_lexical,
            lexical_seed=fact_seed,
            prior_hops=prior,
            fact_cosine=fact_cosine,
            temporal=temporal,
            entity_cosine=entity_cosine,
        )
        selected = select_facts(
            index, signals, weights, limit=limit, functional=self.config.functional
        )
        note = None
        if rerank:  # its own time is in the note; "select" includes it
            selected, note = self._rerank(index, text, selected)
        facts = [_recalled(index, s) for s in selected]
        clock.lap("select")
        return RecallAnswer(
            scope=scope.key,
            as_of=when,
            ranking=ranking,
            mode=legs.mode,
            embedding_model=legs.model,
            entities=[_entry(index, f) for f in fused],
            facts=facts,
            warnings=warnings,
            timings_ms=clock.timings(),
            rerank=note,
        )

    def _rerank(
        self, index: ScopeIndex, query: str, selected: list[Selected]
    ) -> tuple[list[Selected], RerankNote]:
        """The first `rerank_candidates` facts in the reranker's order (a fact and the facts
        contradicting it move together, as one candidate), the rest after them unchanged."""
        if self.reranker is None:
            return selected, RerankNote(reranked=False, reason="no_reranker")
        head = selected[: self.config.rerank_candidates]
        units: list[list[Selected]] = []
        unit_of: dict[int, int] = {}
        for s in head:
            joined = next((unit_of[r] for r in s.contradicts if r in unit_of), None)
            if joined is None:
                joined = len(units)
                units.append([])
            units[joined].append(s)
            unit_of[s.row] = joined
        texts = [_candidate_text(index.facts[u[0].row]) for u in units]
        outcome = self.reranker.rerank(query, texts)
        note = RerankNote(
            reranked=outcome.reranked,
            reason=outcome.reason,
            candidates=len(units),
            ms=outcome.ms,
        )
        if not outcome.reranked:
            return selected, note
        ordered = [s for i in outcome.order for s in units[i]]
        return [*ordered, *selected[len(head) :]], note

    def _name_leg(
        self, index: ScopeIndex, tokens: Sequence[str], unknown: np.ndarray
    ) -> list[Ranked]:
        hits = index.entity_bm25.top(tokens, self.config.fuse_depth, exclude=unknown)
        return [(index.entity_ids[row], rank) for row, _, rank in hits]

    def _fuse(
        self,
        names: Sequence[Ranked],
        hits: Sequence[VectorHit],
        limit: int,
        index: ScopeIndex,
        unknown: np.ndarray,
    ) -> list[Fused]:
        depth = self.config.fuse_depth
        rows = index.entity_row
        kept = [h.entity_id for h in hits if not unknown[rows[h.entity_id]]]
        vector = positions(kept[:depth])
        return rrf({NAME_LEG: names, VECTOR_LEG: vector}, k=self.config.rrf_k, limit=limit)

    def _vector_legs(
        self, scope: Scope, index: ScopeIndex, query: str, ranking: str, clock: _Clock
    ) -> _Legs:
        """The vector leg's hits, or the reason there are none (raised unless `auto`)."""
        names_mode: Mode = "names"
        if ranking == "lexical":
            return _Legs(names_mode)
        try:
            leg = self.vector_leg
            n_facts = len(index.facts)
            choice = leg.choose_model(scope, index.entity_count, n_facts)
            vector = leg.embed(choice.model, query)
            clock.lap("embed")
            hits = leg.nearest(
                choice.model,
                scope,
                vector,
                k=self.config.vector_candidates,
                min_cosine=self.config.min_cosine,
            )
            fact_hits: list[VectorHit] = []
            if self.config.fact_vectors > 0 and leg.fact_vectors(
                scope, choice.model, index.entity_count, n_facts
            ):
                fact_hits = leg.nearest(
                    fact_vectors_key(choice.model),
                    scope,
                    vector,
                    k=self.config.fact_vectors,
                    min_cosine=self.config.ranking.fact_min_cosine,
                )
            clock.lap("vector")
        except VectorUnavailable as err:
            clock.lap("embed")
            if ranking != "auto":
                raise SemanticUnavailable(err.code) from err
            return _Legs(
                names_mode,
                warnings=[
                    RecallWarning(
                        code="names_only",
                        message=f"semantic ranking unavailable ({err}); answered by names",
                    )
                ],
            )
        warnings = []
        if choice.model != self.current_model:
            warnings.append(
                RecallWarning(
                    code="previous_model",
                    message=f"vectors of {choice.model} served: {self.current_model} does not "
                    "cover this scope yet",
                )
            )
        if choice.partial:
            warnings.append(
                RecallWarning(
                    code="partial_coverage",
                    message=f"vectors of {choice.model} do not cover every entity yet",
                )
            )
        # A vector may outlive its entity until the next sweep: keep hits the scope still has.
        rows = index.entity_row
        known = [h for h in hits if rows.get(h.entity_id, index.entity_count) < index.entity_count]
        mode: Mode = "semantic" if ranking == "semantic" else "hybrid"
        return _Legs(mode, choice.model, known, fact_hits, warnings)

    # -- entity search -----------------------------------------------------------------------

    def search_entities(
        self, scope: Scope, q: str, limit: int = 10, *, ranking: Ranking = "auto"
    ) -> EntitySearchAnswer:
        """Entities of `scope` by name, alias, type and (when available) vector similarity."""
        _check_ranking(ranking)
        _check_range("limit", limit, 1, MAX_LIMIT)
        reason = gate(q)
        if reason in (SkipReason.EMPTY, SkipReason.NO_WORDS):
            return EntitySearchAnswer(
                scope=scope.key, ranking=ranking, mode="names", skipped=True,
                skip_reason=reason.value,
            )  # fmt: skip
        warnings: list[RecallWarning] = []
        text = _clip(q, warnings)
        index = self.indexes.get(scope)
        unknown = index.unknown_at(index.valid_at(datetime.now(UTC)))
        names = [] if ranking == "semantic" else self._name_leg(index, query_tokens(text), unknown)
        legs = self._vector_legs(scope, index, text, ranking, _Clock())
        fused = self._fuse(names, legs.hits, limit, index, unknown)
        matches = []
        for f in fused:
            e = index.entities[index.entity_row[f.item]]
            matches.append(
                EntityMatch(
                    **_card(e).model_dump(), via=f.via, ranks=f.ranks, score=round(f.score, 6)
                )
            )
        return EntitySearchAnswer(
            scope=scope.key,
            ranking=ranking,
            mode=legs.mode,
            embedding_model=legs.model,
            entities=matches,
            warnings=warnings + legs.warnings,
        )

    # -- subgraph ----------------------------------------------------------------------------

    def subgraph(
        self,
        scope: Scope,
        entity_ids: Iterable[str],
        hops: int = 1,
        as_of: datetime | None = None,
        limit: int = 40,
    ) -> SubgraphAnswer:
        """Facts within `hops` of the given entities, valid at `as_of`, in the store's order
        (hop, confidence, fact id). Ids the scope does not hold are ignored."""
        _check_range("hops", hops, 1, MAX_HOPS)
        _check_range("limit", limit, 1, MAX_LIMIT)
        when = _as_of(as_of)
        wanted = list(dict.fromkeys(entity_ids))[:MAX_LIMIT]
        seeds = [e.entity_id for e in self.graph.get_entities(scope, wanted)]
        expanded = (
            self.graph.expand(scope, seeds, hops=hops, limit=limit, as_of=when) if seeds else []
        )
        records = [x.fact for x in expanded]
        conflicts = _conflicts_among(records, self.config.functional)
        facts = [
            _fact_model(
                x.fact, hop=x.hop, score=None, contradicts=conflicts.get(x.fact.fact_id, ())
            )
            for x in expanded
        ]
        touched = list(
            dict.fromkeys([*seeds, *(i for f in records for i in (f.subject_id, f.object_id))])
        )
        found = {e.entity_id: e for e in self.graph.get_entities(scope, touched)}
        return SubgraphAnswer(
            scope=scope.key,
            as_of=when,
            hops=hops,
            entities=[_card(found[i]) for i in touched if i in found],
            facts=facts,
        )


# -- helpers -------------------------------------------------------------------------------


def _check_ranking(ranking: str) -> None:
    if ranking not in RANKINGS:
        raise RecallError(f"ranking must be one of {', '.join(RANKINGS)}")


def _check_range(name: str, value: int, low: int, high: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise RecallError(f"{name} must be an integer from {low} to {high}")


def _as_of(as_of: datetime | None) -> datetime:
    if as_of is None:
        return datetime.now(UTC)
    return as_of.replace(tzinfo=UTC) if as_of.tzinfo is None else as_of.astimezone(UTC)


def _clip(query: str, warnings: list[RecallWarning]) -> str:
    if len(query) <= MAX_QUERY_CHARS:
        return query
    warnings.append(
        RecallWarning(
            code="query_truncated", message=f"only the first {MAX_QUERY_CHARS} characters used"
        )
    )
    return query[:MAX_QUERY_CHARS]


def _focus(index: ScopeIndex, named: Sequence[str], tokens: Sequence[str]) -> np.ndarray | None:
    """Entity rows the question names in full (every word of the name or of an alias is in it)
    and most specifically: "Melanie" is dropped when "Melanie's daughter" is named too."""
    asked = set(tokens)
    found: dict[int, frozenset[str]] = {}
    for eid in named:
        row = index.entity_row[eid]
        spans = index.name_spans.get(row)
        if spans is None:  # racing builders store equal ones
            e = index.entities[row] if row < index.known_entities else None
            names = [index.entity_names[row], *(e.aliases if e else ())]
            spans = index.name_spans[row] = tuple(frozenset(tokenize(n)) for n in names)
        best = max((w for w in spans if w and w <= asked), key=len, default=None)
        if best is not None:
            found[row] = best
    if not found:
        return None
    mask = np.zeros(len(index.entity_ids), dtype=bool)
    for row, words in found.items():
        if not any(words < other for other in found.values()):
            mask[row] = True
    return mask


def _candidate_text(f: FactRecord) -> str:
    """A fact as a reranker reads it: the statement and since when it holds."""
    return f"{f.subject} {f.predicate} {f.object} (since {f.valid_from.date().isoformat()})"


def _card(e: EntityRecord) -> EntityCard:
    return EntityCard(
        entity_id=e.entity_id, name=e.name, aliases=list(e.aliases), types=list(e.types)
    )


def _entry(index: ScopeIndex, f: Fused) -> EntryEntity:
    return EntryEntity(
        entity_id=f.item,
        name=index.entity_names[index.entity_row[f.item]],
        via=f.via,  # type: ignore[arg-type]
        ranks=f.ranks,
        score=round(f.score, 6),
    )


def _fact_model(
    f: FactRecord, *, hop: int | None, score: float | None, contradicts: Iterable[str]
) -> RecalledFact:
    # Built from typed store records: validation would cost more than the rest of recall.
    return RecalledFact.model_construct(
        fact_id=f.fact_id,
        subject_id=f.subject_id,
        subject=f.subject,
        predicate=f.predicate,
        object_id=f.object_id,
        object=f.object,
        confidence=f.confidence,
        valid_from=f.valid_from,
        valid_to=f.valid_to,
        provenance=_provenance(f),
        hop=hop,
        score=score,
        contradicts=list(contradicts),
    )


def _provenance(f: FactRecord) -> Provenance:
    """The fact's first statement and every turn that stated it (a fact stored before facts
    kept their sources names its first statement only)."""
    turns = f.sources or ((f.session_id, f.turn_id),)
    return Provenance.model_construct(
        session_id=f.session_id,
        turn_id=f.turn_id,
        client=f.client,
        model=f.model,
        sources=[Source.model_construct(session_id=s, turn_id=t) for s, t in turns],
    )


def _recalled(index: ScopeIndex, s: Selected) -> RecalledFact:
    f = index.facts[s.row]
    provenance = index.provenance.get(s.row)
    if provenance is None:  # built once per fact and index; racing builders store equal ones
        provenance = index.provenance[s.row] = _provenance(f)
    return assemble(
        RecalledFact,
        {
            "fact_id": f.fact_id,
            "subject_id": f.subject_id,
            "subject": f.subject,
            "predicate": f.predicate,
            "object_id": f.object_id,
            "object": f.object,
            "confidence": f.confidence,
            "valid_from": f.valid_from,
            "valid_to": f.valid_to,
            "provenance": provenance,
            "hop": s.hop,
            "score": round(s.score, 6),
            "contradicts": [index.facts[r].fact_id for r in s.contradicts],
        },
    )


def _conflicts_among(
    facts: Sequence[FactRecord], functional: FunctionalPredicates
) -> dict[str, tuple[str, ...]]:
    """fact_id -> ids of the other facts in `facts` with the same subject and single-valued
    predicate but another object (all of them valid at the same time by construction)."""
    groups: dict[tuple[str, str], list[FactRecord]] = {}
    for f in facts:
        if functional(f.predicate):
            groups.setdefault((f.subject_id, f.predicate), []).append(f)
    out: dict[str, tuple[str, ...]] = {}
    for members in groups.values():
        for f in members:
            others = tuple(g.fact_id for g in members if g.object_id != f.object_id)
            if others:
                out[f.fact_id] = others
    return out
