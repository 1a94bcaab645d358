"""The graph store interface. Every backend passes tests/contract/test_graph_store.py."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from schemas.records import EntityRecord, ExpandedFact, FactRecord
from schemas.scope import Scope

MAX_HOPS = 2


class GraphStoreError(RuntimeError):
    """A store operation failed; the message names the backend and its endpoint."""


class GraphStore(ABC):
    """Entities and facts of many scopes. Every call takes the scope first; no call crosses it."""

    backend: str = "abstract"

    @abstractmethod
    def upsert_entities(self, scope: Scope, entities: Sequence[EntityRecord]) -> int:
        """Insert or replace entities by `entity_id`; returns how many were written."""

    @abstractmethod
    def upsert_facts(self, scope: Scope, facts: Sequence[FactRecord]) -> int:
        """Insert or replace facts by `fact_id`, linking subject and object entities."""

    @abstractmethod
    def supersede(self, scope: Scope, old_fact_id: str, new_fact_id: str, at: datetime) -> None:
        """Close `old_fact_id` at `at` and link it to `new_fact_id`; content is not edited."""

    @abstractmethod
    def delete_entities(self, scope: Scope, entity_ids: Iterable[str]) -> int: ...

    @abstractmethod
    def delete_facts(self, scope: Scope, fact_ids: Iterable[str]) -> int: ...

    @abstractmethod
    def entities(self, scope: Scope) -> list[EntityRecord]:
        """Every entity of the scope (names, aliases, types): the lexical leg's corpus."""

    @abstractmethod
    def get_entities(self, scope: Scope, entity_ids: Iterable[str]) -> list[EntityRecord]: ...

    @abstractmethod
    def facts(self, scope: Scope) -> list[FactRecord]:
        """Every fact of the scope, closed ones included."""

    @abstractmethod
    def expand(
        self,
        scope: Scope,
        seeds: Sequence[str],
        *,
        hops: int = 1,
        limit: int = 40,
        as_of: datetime,
    ) -> list[ExpandedFact]:
        """Facts valid at `as_of` touching the seeds (hop 1) or their neighbours (hop 2).

        Superseded facts (closed before `as_of`) are never returned. Results are ordered by
        hop, then confidence (descending), then fact_id, and cut at `limit`.
        """

    def content_rows(self, scope: Scope) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
        """The scope's entities and facts as the store returns them, as the content a row
        hash covers (`common.entity_content`, `common.fact_row`), ordered by id: what the graph
        check re-hashes (never the hashes the store keeps). A backend that can read its rows
        without building records overrides it with the same tuples (the contract suite
        compares the two)."""
        from resources.graph.common import entity_content, fact_row

        return (
            [entity_content(e) for e in sorted(self.entities(scope), key=lambda e: e.entity_id)],
            [fact_row(f) for f in sorted(self.facts(scope), key=lambda f: f.fact_id)],
        )

    @abstractmethod
    def row_hashes(self, scope: Scope) -> tuple[dict[str, str], dict[str, str]]:
        """(entity_id -> row_hash, fact_id -> row_hash): what a sink compares with its table."""

    @abstractmethod
    def counts(self, scope: Scope) -> dict[str, int]:
        """{"entities": n, "facts": n}."""

    def counts_many(self, scopes: Sequence[Scope]) -> dict[Scope, dict[str, int]]:
        """`counts` of each of `scopes` (every one asked, zeros where it holds nothing, no other
        scope). A backend answers in grouped reads (what `memflow status` asks for every
        tenant); the default asks scope by scope."""
        return {scope: self.counts(scope) for scope in dict.fromkeys(scopes)}

    @abstractmethod
    def version(self, scope: Scope) -> str:
        """A token that changes whenever the scope's content changes (cache key for recall)."""

    @abstractmethod
    def scopes(self) -> list[Scope]: ...

    @abstractmethod
    def delete_scope(self, scope: Scope) -> None: ...

    @abstractmethod
    def close(self) -> None: ...

    def __enter__(self) -> GraphStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
