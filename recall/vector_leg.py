"""The vector leg: embed the query with the model the scope's vectors were made with, then ask
the vector store for the nearest entity names (cosine >= 0.4) and, where the model has fact
vectors (`resources.vector.base.fact_vectors_key`), the nearest facts (the fact-vector leg).

A model *covers* a scope when its entity-name vectors cover the entities (vectors held >=
entities); it covers it *fully* when its fact vectors cover the facts as well (a scope without
facts needs none). Which model serves a scope (vectors of two models never mix; one query
vector feeds both legs, so both come from the same model):

1. The current model, when it covers the scope fully and a provider for it is configured.
2. Otherwise the first other model, in the order the providers were given, that covers the
   scope fully and has a provider: recall keeps serving the previous model, entity and fact
   vectors alike, while a re-embed to the new one is under way.
3. Otherwise the current model if it covers the entities (its fact vectors are still being
   made, or were never made: the fact leg uses what there is), then the first other model with
   a provider that does.
4. Otherwise, if a previous model covers the scope but no provider for it is configured, there
   are no usable vectors ("provider_unavailable"): partial vectors of the new model are not
   used while complete ones of an old model exist.
5. Otherwise, when the current model holds some vectors, they are used (a first embedding of the
   scope is under way) and the answer carries a `partial_coverage` warning.
6. Otherwise there are no vectors for this scope ("not_embedded").

Coverage comes from `VectorStore.models(scope)`; it is cached for a few seconds per scope so a
query does not pay for a count, and re-read at once when the scope's entity or fact count
changes.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass

from resources.models.base import EmbeddingProvider
from resources.vector.base import (
    DEFAULT_MIN_COSINE,
    VectorStore,
    VectorStoreError,
    fact_vectors_key,
    is_fact_vectors_key,
)
from schemas.records import VectorHit
from schemas.scope import Scope

DEFAULT_EMBED_TIMEOUT_S = 5.0
DEFAULT_COVERAGE_TTL_S = 5.0
QUERY_VECTOR_CACHE = 512
COVERAGE_SCOPES = 4096  # scopes whose coverage is kept: the API's memory stays bounded


class VectorUnavailable(Exception):
    """No vectors for this query; `code` says why (never the query itself)."""

    def __init__(self, code: str, detail: str = "") -> None:
        super().__init__(f"{code}: {detail}" if detail else code)
        self.code = code
        self.detail = detail


@dataclass(frozen=True, slots=True)
class ModelChoice:
    model: str
    partial: bool = False  # the model's vectors do not cover every entity yet


class VectorLeg:
    """Thread-safe; one per service. Owns a small thread pool so an embedding call can be given
    up on after `embed_timeout_s` (the provider's own retries may take much longer)."""

    def __init__(
        self,
        vectors: VectorStore | None,
        providers: Mapping[str, EmbeddingProvider],
        current_model: str | None,
        *,
        embed_timeout_s: float = DEFAULT_EMBED_TIMEOUT_S,
        coverage_ttl_s: float = DEFAULT_COVERAGE_TTL_S,
        executor: Executor | None = None,
    ) -> None:
        self.vectors = vectors
        self.providers = dict(providers)
        self.current_model = current_model
        self.embed_timeout_s = embed_timeout_s
        self.coverage_ttl_s = coverage_ttl_s
        self._own_executor = executor is None
        self._executor = executor or ThreadPoolExecutor(
            max_workers=4, thread_name_prefix="recall-embed"
        )
        self._lock = threading.Lock()
        self._coverage: OrderedDict[
            Scope, tuple[float, tuple[int, int], dict[str, tuple[int, int]]]
        ] = OrderedDict()
        self._query_vectors: OrderedDict[tuple[str, str], list[float]] = OrderedDict()

    def choose_model(self, scope: Scope, entity_count: int, fact_count: int = 0) -> ModelChoice:
        """The model whose vectors answer for `scope` now (rules in the module docstring)."""
        if self.vectors is None:
            raise VectorUnavailable("no_vector_store")
        if not self.providers or self.current_model is None:
            raise VectorUnavailable("no_embedder")
        stored = self._models(scope, entity_count, fact_count)
        held = {m: v for m, v in stored.items() if not is_fact_vectors_key(m)}

        def covers(model: str) -> bool:
            return model in held and held[model][1] >= entity_count

        def covers_fully(model: str) -> bool:
            facts = stored.get(fact_vectors_key(model))
            return covers(model) and (
                fact_count == 0 or (facts is not None and facts[1] >= fact_count)
            )

        current = self.current_model
        others = [m for m in self.providers if m != current]
        for test in (covers_fully, covers):
            if test(current) and current in self.providers:
                return ModelChoice(current)
            for model in others:
                if test(model):
                    return ModelChoice(model)
        if any(covers(m) for m in held if m != current):
            raise VectorUnavailable("provider_unavailable", "no provider for the covering model")
        if current in held and held[current][1] > 0 and current in self.providers:
            return ModelChoice(current, partial=True)
        raise VectorUnavailable("not_embedded")

    def _models(
        self, scope: Scope, entity_count: int, fact_count: int = 0
    ) -> dict[str, tuple[int, int]]:
        now = time.monotonic()
        counts = (entity_count, fact_count)
        with self._lock:
            cached = self._coverage.get(scope)
        if cached and cached[1] == counts and now - cached[0] < self.coverage_ttl_s:
            return cached[2]
        assert self.vectors is not None
        try:
            held = self.vectors.models(scope)
        except (VectorStoreError, OSError) as err:
            raise VectorUnavailable("vector_store_failed", type(err).__name__) from err
        with self._lock:
            self._coverage[scope] = (now, counts, held)
            self._coverage.move_to_end(scope)
            while len(self._coverage) > COVERAGE_SCOPES:
                self._coverage.popitem(last=False)
        return held

    def fact_vectors(self, scope: Scope, model: str, entity_count: int, fact_count: int = 0) -> int:
        """How many fact vectors of `model` the scope holds (0: no fact leg)."""
        held = self._models(scope, entity_count, fact_count).get(fact_vectors_key(model))
        return held[1] if held else 0

    def embed(self, model: str, query: str) -> list[float]:
        """The query's vector under `model`; raises VectorUnavailable on failure or timeout."""
        key = (model, query)
        with self._lock:
            hit = self._query_vectors.get(key)
            if hit is not None:
                self._query_vectors.move_to_end(key)
                return hit
        provider = self.providers.get(model)
        if provider is None:
            raise VectorUnavailable("provider_unavailable", "no provider for the model")
        try:
            if provider.in_process:
                # Inline: handing a ~10 ms model call to a pool thread and waiting for it costs
                # two wake-ups, milliseconds on a busy host, and an in-process model has no
                # server to hang on (a thread given up on would keep computing anyway).
                vectors = provider.embed([query])
            else:
                future = self._executor.submit(provider.embed, [query])
                try:
                    vectors = future.result(timeout=self.embed_timeout_s)
                except FutureTimeout as err:
                    future.cancel()
                    raise VectorUnavailable(
                        "embedding_timeout", f"after {self.embed_timeout_s:g} s"
                    ) from err
        except VectorUnavailable:
            raise
        except Exception as err:
            # Any provider failure degrades recall, never fails it. Name the type only: a
            # message may quote the server's answer, which can echo the input.
            raise VectorUnavailable("embedding_failed", type(err).__name__) from err
        if len(vectors) != 1 or not vectors[0]:
            raise VectorUnavailable("embedding_failed", "provider returned no vector")
        vector = [float(x) for x in vectors[0]]
        with self._lock:
            self._query_vectors[key] = vector
            while len(self._query_vectors) > QUERY_VECTOR_CACHE:
                self._query_vectors.popitem(last=False)
        return vector

    def nearest(
        self,
        model: str,
        scope: Scope,
        vector: Sequence[float],
        *,
        k: int,
        min_cosine: float = DEFAULT_MIN_COSINE,
    ) -> list[VectorHit]:
        assert self.vectors is not None
        try:
            hits = self.vectors.nearest(model, scope, vector, k=k, min_cosine=min_cosine)
        except (VectorStoreError, ValueError, OSError) as err:
            raise VectorUnavailable("vector_store_failed", type(err).__name__) from err
        return [h for h in hits if h.score >= min_cosine]

    def close(self) -> None:
        if self._own_executor and isinstance(self._executor, ThreadPoolExecutor):
            self._executor.shutdown(wait=False, cancel_futures=True)
