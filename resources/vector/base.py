"""The vector store interface. Every backend passes tests/contract/test_vector_store.py:
`resources.vector.local` (the embedded default) and `resources.vector.milvus` (servers)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence

import numpy as np

from schemas.records import VectorHit
from schemas.scope import Scope, ScopeError

DEFAULT_MIN_COSINE = 0.4
MAX_ENTITY_ID_BYTES = 1024
MAX_TEXT_HASH_BYTES = 128
# Fact vectors live in the same stores as entity-name vectors, under their own model key, so
# the interface stays one: `upsert(fact_vectors_key(model), dim, scope, [(fact_id, ...)])`.
# Keys never mix (a backend keeps every model key apart), and `models(scope)` reports both.
FACT_VECTORS_PREFIX = "facts:"


def fact_vectors_key(model: str) -> str:
    """The model key under which `model`'s fact vectors are stored (ids are fact ids)."""
    if not model:
        raise ValueError("model is required")
    return FACT_VECTORS_PREFIX + model


def is_fact_vectors_key(key: str) -> bool:
    """True for a key made by `fact_vectors_key` (not an entity-name model)."""
    return key.startswith(FACT_VECTORS_PREFIX)


def check_scope(scope: object) -> Scope:
    if not isinstance(scope, Scope):
        raise ScopeError("a vector store call needs a tenant scope (Scope(tenant_id, ns))")
    return scope


def check_rows(
    model: str, dim: int, items: Sequence[tuple[str, str, Sequence[float]]]
) -> dict[str, tuple[str, np.ndarray]]:
    """entity_id -> (text_hash, float32 vector) of an upsert, every row checked (the same id
    twice: the last one wins); a ValueError names the first bad row."""
    if not model:
        raise ValueError("model is required")
    if not isinstance(dim, int) or isinstance(dim, bool) or dim <= 0:
        raise ValueError(f"dim must be a positive integer, got {dim!r}")
    rows: dict[str, tuple[str, np.ndarray]] = {}
    for entity_id, text_hash, vector in items:
        if not isinstance(entity_id, str) or not isinstance(text_hash, str):
            raise ValueError(f"entity id and text hash must be strings, got {entity_id!r}")
        if not entity_id or _utf8_len(entity_id) > MAX_ENTITY_ID_BYTES:
            raise ValueError(f"entity id must be 1..{MAX_ENTITY_ID_BYTES} bytes of UTF-8")
        if _utf8_len(text_hash) > MAX_TEXT_HASH_BYTES:
            raise ValueError(
                f"text hash of {entity_id!r} must be at most {MAX_TEXT_HASH_BYTES} bytes of UTF-8"
            )
        vec = np.asarray(vector, dtype=np.float32)
        if vec.shape != (dim,):
            raise ValueError(f"vector of {entity_id!r} has {vec.size} dimensions, expected {dim}")
        if not np.isfinite(vec).all():
            raise ValueError(f"vector of {entity_id!r} holds a NaN or an infinity")
        rows.pop(entity_id, None)
        rows[entity_id] = (text_hash, vec)
    return rows


def _utf8_len(text: str) -> int:
    """UTF-8 length; a string no store can keep (a lone surrogate) counts as too long."""
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError:
        return MAX_ENTITY_ID_BYTES + MAX_TEXT_HASH_BYTES + 1


def check_query(vector: Sequence[float]) -> np.ndarray:
    query = np.asarray(vector, dtype=np.float32)
    if query.ndim != 1 or query.size == 0:
        raise ValueError("the query vector must be a non-empty list of numbers")
    return query


class VectorStoreError(RuntimeError):
    """A store operation failed; the message names the backend and its endpoint."""


class VectorStore(ABC):
    """Entity-name vectors, kept per embedding model: two models never share a collection."""

    backend: str = "abstract"

    @abstractmethod
    def upsert(
        self,
        model: str,
        dim: int,
        scope: Scope,
        items: Sequence[tuple[str, str, Sequence[float]]],
    ) -> int:
        """Write (entity_id, text_hash, vector) rows for `model`; returns rows written.

        Raises ValueError if `dim` differs from the model's earlier vectors.
        """

    @abstractmethod
    def nearest(
        self,
        model: str,
        scope: Scope,
        vector: Sequence[float],
        *,
        k: int = 8,
        min_cosine: float = DEFAULT_MIN_COSINE,
    ) -> list[VectorHit]:
        """Up to `k` entities of the scope by cosine, best first, none below `min_cosine`.

        Hits of any other org or repo (`tenant_id`, `ns`) are dropped after the search too.
        """

    @abstractmethod
    def missing(self, model: str, scope: Scope, wanted: Mapping[str, str]) -> list[str]:
        """Ids in `wanted` (entity_id -> text_hash) with no vector for `model` or a stale hash."""

    @abstractmethod
    def ids(self, model: str, scope: Scope) -> dict[str, str]:
        """entity_id -> text_hash of every vector the scope holds for `model`."""

    def ids_many(self, model: str, scopes: Sequence[Scope]) -> dict[Scope, dict[str, str]]:
        """`ids` of several scopes at once. A server answers a block of scopes in one read
        (what a sink of many tenants asks); the default asks scope by scope."""
        return {scope: self.ids(model, scope) for scope in dict.fromkeys(scopes)}

    @abstractmethod
    def delete(self, model: str, scope: Scope, entity_ids: Sequence[str]) -> int:
        """Remove the scope's vectors of `entity_ids` under `model`; returns how many it held."""

    def delete_many(self, model: str, doomed: Mapping[Scope, Sequence[str]]) -> dict[Scope, int]:
        """`delete` for several scopes at once (a server looks them up in one read); returns
        how many each scope held."""
        return {scope: self.delete(model, scope, ids) for scope, ids in doomed.items()}

    @abstractmethod
    def models(self, scope: Scope) -> dict[str, tuple[int, int]]:
        """model -> (dimension, vectors held for the scope)."""

    def models_many(self, scopes: Sequence[Scope]) -> dict[Scope, dict[str, tuple[int, int]]]:
        """`models` of each of `scopes` (every one asked, empty where it holds nothing, no
        other scope): what `memflow status` asks for every tenant. A backend counts without
        reading the vectors where it can; the default asks scope by scope."""
        return {scope: self.models(scope) for scope in dict.fromkeys(scopes)}

    def record_counts(self, scopes: Sequence[Scope]) -> int:
        """Record what `models_many` reads for `scopes` where it is missing (a store that keeps
        counts beside its data; a server counts itself: nothing to do). Returns how many."""
        return 0

    @abstractmethod
    def delete_scope(self, scope: Scope) -> None:
        """Remove the scope's vectors of every model."""

    @abstractmethod
    def close(self) -> None: ...

    def __enter__(self) -> VectorStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
