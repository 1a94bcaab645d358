"""Per-scope recall indexes, built once per store version and shared by concurrent requests.

A `ScopeIndex` holds what recall needs of one scope in memory: entity and fact BM25 indexes and
the facts as numpy columns (endpoints, validity interval, confidence), so a query never scans the
fact table in Python nor asks the store for more than its version. It is rebuilt only when
`GraphStore.version(scope)` changes; the version is read *before* the content, so a write racing
with a build leaves a stale version behind and the next query rebuilds.

Neighbourhood expansion runs here, vectorised, with the store's semantics (see
`GraphStore.expand`): hop 1 = facts valid at `as_of` touching a seed, hop 2 = facts valid at
`as_of` touching an entity that a hop-1 fact reached. Doing it in memory lets a hub entity with
thousands of facts contribute all of them to ranking instead of the first `limit` by confidence.
`tests/recall/test_expansion.py` checks that it matches the store's own `expand`.
"""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

from recall.lexical import BM25Index, tokenize
from resources.graph.base import GraphStore
from schemas.records import EntityRecord, FactRecord
from schemas.rules import EPOCH
from schemas.scope import Scope

_US = timedelta(microseconds=1)
OPEN_END = np.iinfo(np.int64).max
DEFAULT_MAX_SCOPES = 64
# BM25's length normalisation of the fact-text index; `RankingConfig.fact_bm25_b` defaults to it
# (chosen on LoCoMo's tuning half: BENCHMARKS.md).
FACT_BM25_B = 0.9


def to_us(t: datetime) -> int:
    """Microseconds since the epoch; a naive datetime is taken as UTC."""
    if t.tzinfo is None:
        t = t.replace(tzinfo=UTC)
    return (t - EPOCH) // _US


def _tokens(text: str) -> tuple[str, ...]:
    return tuple(tokenize(text))


class ScopeIndex:
    """Immutable snapshot of one scope for recall. Entity rows: the scope's entities sorted by
    id, then ids that facts name but no entity record has; fact rows: facts sorted by id."""

    def __init__(
        self,
        scope: Scope,
        version: str,
        entities: Sequence[EntityRecord],
        facts: Sequence[FactRecord],
        *,
        fact_bm25_b: float = FACT_BM25_B,
    ) -> None:
        self.scope = scope
        self.version = version
        self.entities: list[EntityRecord] = sorted(entities, key=lambda e: e.entity_id)
        self.entity_ids: list[str] = [e.entity_id for e in self.entities]
        self.entity_names: list[str] = [e.name for e in self.entities]
        self.entity_row: dict[str, int] = {eid: i for i, eid in enumerate(self.entity_ids)}
        self.known_entities = len(self.entities)

        self.facts: list[FactRecord] = sorted(facts, key=lambda f: f.fact_id)
        # Answer-side provenance models, built on first use per fact row (recall.service).
        self.provenance: dict[int, Any] = {}
        # Near-duplicate keys (`recall.ranking.Statement`), likewise built on first use per row.
        self.statements: dict[int, Any] = {}
        # Entity row -> the word sets of its name and aliases (`recall.service._focus`), built on
        # first use per row: a named entity's names are not tokenised again at every query.
        self.name_spans: dict[int, tuple[frozenset[str], ...]] = {}
        self.fact_row: dict[str, int] = {f.fact_id: i for i, f in enumerate(self.facts)}
        n = len(self.facts)
        subj = np.empty(n, dtype=np.int32)
        obj = np.empty(n, dtype=np.int32)
        valid_from = np.empty(n, dtype=np.int64)
        valid_to = np.empty(n, dtype=np.int64)
        confidence = np.empty(n, dtype=np.float32)
        groups: dict[tuple[str, str], list[int]] = {}
        for i, f in enumerate(self.facts):
            subj[i] = self._row_for(f.subject_id, f.subject)
            obj[i] = self._row_for(f.object_id, f.object)
            valid_from[i] = to_us(f.valid_from)
            valid_to[i] = OPEN_END if f.valid_to is None else to_us(f.valid_to)
            confidence[i] = f.confidence
            groups.setdefault((f.subject_id, f.predicate), []).append(i)
        self.fact_subject = subj
        self.fact_object = obj
        self.fact_valid_from = valid_from
        self.fact_valid_to = valid_to
        self.fact_confidence = confidence
        # Facts per entity row (both ends), closed facts included: how much of a hub it is.
        n_ent = len(self.entity_ids)
        self.entity_degree = np.bincount(subj, minlength=n_ent) + np.bincount(obj, minlength=n_ent)
        # Only (subject, predicate) pairs with several facts can hold a contradiction.
        self.fact_groups: dict[tuple[str, str], tuple[int, ...]] = {
            k: tuple(v) for k, v in groups.items() if len(v) > 1
        }

        # Names, predicates and types repeat across thousands of facts: tokenize each once.
        tok = functools.lru_cache(maxsize=None)(_tokens)
        # An entity's aliases and types travel with every fact it is an endpoint of, so
        # "k8s" reaches "deploys to Kubernetes" and "which database" reaches
        # "payments-api USES PostgreSQL" (a database).
        extras = [
            tuple(t for text in (*e.aliases, *e.types) for t in tok(text)) for e in self.entities
        ]
        self.entity_bm25 = BM25Index([tok(e.name) + extras[i] for i, e in enumerate(self.entities)])
        extras.extend(() for _ in range(len(self.entities), len(self.entity_ids)))
        self.fact_bm25 = BM25Index(
            [
                tok(f.subject) + tok(f.predicate) + tok(f.object) + extras[s] + extras[o]
                for f, s, o in zip(self.facts, subj.tolist(), obj.tolist(), strict=True)
            ],
            b=fact_bm25_b,
        )

    def _row_for(self, entity_id: str, name: str) -> int:
        row = self.entity_row.get(entity_id)
        if row is None:
            row = len(self.entity_ids)
            self.entity_row[entity_id] = row
            self.entity_ids.append(entity_id)
            self.entity_names.append(name)
        return row

    @property
    def entity_count(self) -> int:
        return self.known_entities

    def valid_at(self, as_of: datetime) -> np.ndarray:
        """Boolean mask of facts valid at `as_of`: valid_from <= t < valid_to."""
        t = to_us(as_of)
        return (self.fact_valid_from <= t) & (t < self.fact_valid_to)

    def unknown_at(self, valid: np.ndarray) -> np.ndarray:
        """Entity rows with facts none of which is valid (`valid_at`): forgotten, retracted or
        wholly superseded by then, or not stated yet. Recall enters through none of them (README
        "Retracting and forgetting"); an entity without any fact is left alone."""
        n = len(self.entity_ids)
        live = np.bincount(self.fact_subject[valid], minlength=n)
        live += np.bincount(self.fact_object[valid], minlength=n)
        return (self.entity_degree > 0) & (live == 0)

    def neighbourhood(self, seeds: Sequence[str], hops: int, valid: np.ndarray) -> np.ndarray:
        """Hop per fact row (0 = not reached, 1 or 2) from the seeds, through valid facts only."""
        hop = np.zeros(len(self.facts), dtype=np.int8)
        is_seed = np.zeros(len(self.entity_ids), dtype=bool)
        for eid in seeds:
            row = self.entity_row.get(eid)
            if row is not None:
                is_seed[row] = True
        if not self.facts or not is_seed.any():
            return hop
        subj, obj = self.fact_subject, self.fact_object
        hop1 = valid & (is_seed[subj] | is_seed[obj])
        hop[hop1] = 1
        if hops >= 2 and hop1.any():
            reached = is_seed.copy()
            reached[subj[hop1]] = True
            reached[obj[hop1]] = True
            hop[valid & ~hop1 & (reached[subj] | reached[obj])] = 2
        return hop

    def contradiction_groups(
        self, rows: Sequence[int], valid: np.ndarray, functional: FunctionalPredicates
    ) -> dict[int, tuple[int, ...]]:
        """For each fact row in `rows` whose predicate is single-valued: the other facts valid
        at the same time with the same subject and predicate but another object."""
        out: dict[int, tuple[int, ...]] = {}
        for row in rows:
            f = self.facts[row]
            group = self.fact_groups.get((f.subject_id, f.predicate))
            if not group or not functional(f.predicate):
                continue
            others = tuple(
                g for g in group if g != row and valid[g] and self.facts[g].object_id != f.object_id
            )
            if others:
                out[row] = others
        return out


class FunctionalPredicates:
    """Decides which predicates hold one value per subject at a time, where two valid facts
    with different objects contradict each other ("user PREFERS_EDITOR vim" vs "... emacs").

    A predicate is single-valued when it is named in `exact`, or when one of its words
    (split at "_") is in `words`. Multi-valued predicates such as USES or DEPENDS_ON are never
    flagged: two objects there are normal, not a conflict.
    """

    DEFAULT_WORDS: frozenset[str] = frozenset(
        {
            "PREFERS", "PREFERRED", "PREFERENCE", "FAVORITE", "FAVOURITE", "DEFAULT", "PRIMARY",
            "CURRENT", "VERSION", "PORT", "OWNER", "OWNED", "LEAD", "LED", "MAINTAINER",
            "LICENSE", "LICENSED", "LOCATED", "TIMEZONE", "DEADLINE", "STATUS", "ROLE",
        }
    )  # fmt: skip
    DEFAULT_EXACT: frozenset[str] = frozenset({"IS", "IS_A", "EQUALS", "HAS_VALUE", "SET_TO"})

    def __init__(
        self, words: frozenset[str] | None = None, exact: frozenset[str] | None = None
    ) -> None:
        self.words = self.DEFAULT_WORDS if words is None else frozenset(words)
        self.exact = self.DEFAULT_EXACT if exact is None else frozenset(exact)
        self._known: dict[str, bool] = {}  # predicates are few; racing writers store equal values

    def __call__(self, predicate: str) -> bool:
        known = self._known.get(predicate)
        if known is None:
            known = predicate in self.exact or any(w in self.words for w in predicate.split("_"))
            if len(self._known) < 65536:
                self._known[predicate] = known
        return known


@dataclass(slots=True)
class _Build:
    lock: threading.Lock = field(default_factory=threading.Lock)
    waiters: int = 0


class ScopeIndexCache:
    """LRU of `ScopeIndex` per scope, checked against `store.version(scope)` on every get.

    Thread-safe: concurrent requests for one scope wait for a single build; requests for other
    scopes are not blocked by it.
    """

    def __init__(
        self,
        store: GraphStore,
        *,
        max_scopes: int = DEFAULT_MAX_SCOPES,
        fact_bm25_b: float = FACT_BM25_B,
    ) -> None:
        if max_scopes < 1:
            raise ValueError("max_scopes must be at least 1")
        self._store = store
        self._fact_bm25_b = fact_bm25_b
        self._max = max_scopes
        self._lock = threading.Lock()
        self._entries: OrderedDict[Scope, ScopeIndex] = OrderedDict()
        # A lock and its waiters per scope being built: there only while a request builds or
        # waits for that scope, so nothing is kept for scopes asked for once.
        self._building: dict[Scope, _Build] = {}
        self.builds = 0  # how many indexes were built (for tests and benchmarks)

    def get(self, scope: Scope) -> ScopeIndex:
        version = self._store.version(scope)
        hit = self._lookup(scope, version)
        if hit is not None:
            return hit
        with self._lock:
            build = self._building.setdefault(scope, _Build())
            build.waiters += 1
        try:
            with build.lock:
                return self._build(scope, version)
        finally:
            with self._lock:
                build.waiters -= 1
                if not build.waiters:
                    self._building.pop(scope, None)

    def _build(self, scope: Scope, version: str) -> ScopeIndex:
        """The index of `scope`, built unless another request built it meanwhile (the scope's
        build lock held)."""
        hit = self._lookup(scope, version)
        if hit is not None:
            return hit
        version = self._store.version(scope)
        index = ScopeIndex(
            scope,
            version,
            self._store.entities(scope),
            self._store.facts(scope),
            fact_bm25_b=self._fact_bm25_b,
        )
        if not index.entities and not index.facts:
            return index  # unknown or empty scopes never evict a real one
        with self._lock:
            self.builds += 1
            self._entries[scope] = index
            self._entries.move_to_end(scope)
            while len(self._entries) > self._max:
                self._entries.popitem(last=False)
        return index

    def _lookup(self, scope: Scope, version: str) -> ScopeIndex | None:
        with self._lock:
            index = self._entries.get(scope)
            if index is None or index.version != version:
                return None
            self._entries.move_to_end(scope)
            return index

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def footprint(self) -> tuple[int, int]:
        """(indexes held, scopes being built): at most `max_scopes` and 0 between requests."""
        with self._lock:
            return len(self._entries), len(self._building)
