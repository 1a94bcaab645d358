"""Fixtures for the recall tests: the real SQLite graph store, the embedded vector store, and a
small builder that names entities and facts the way the pipeline ids them."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pytest

from resources.graph.base import GraphStore
from resources.graph.sqlite import SqliteGraphStore
from resources.models.base import EmbeddingProvider
from resources.vector.base import VectorStore
from resources.vector.local import LocalVectorStore
from schemas.ids import entity_id, fact_id, norm_key, sha256_text
from schemas.records import EntityRecord, FactRecord
from schemas.scope import Scope
from tests.support.embeddings_server import hash_vector

T0 = datetime(2024, 1, 1, tzinfo=UTC)
DIM = 256  # random unit vectors this long are nearly orthogonal: no accidental cosine >= 0.4


@dataclass
class Memory:
    """Entities and facts of one scope, named in plain words."""

    scope: Scope
    entities: dict[str, EntityRecord] = field(default_factory=dict)
    facts: dict[str, FactRecord] = field(default_factory=dict)
    _turn: int = 0

    def eid(self, name: str) -> str:
        return entity_id(self.scope.tenant_id, self.scope.ns, norm_key(name))

    def entity(
        self, name: str, aliases: Sequence[str] = (), types: Sequence[str] = ()
    ) -> EntityRecord:
        old = self.entities.get(name)
        record = EntityRecord(
            self.eid(name),
            name,
            tuple(aliases) or (old.aliases if old else ()),
            tuple(types) or (old.types if old else ()),
        )
        self.entities[name] = record
        return record

    def fact(
        self,
        subject: str,
        predicate: str,
        obj: str,
        *,
        confidence: float = 0.9,
        valid_from: datetime = T0,
        valid_to: datetime | None = None,
    ) -> FactRecord:
        for name in (subject, obj):
            if name not in self.entities:
                self.entity(name)
        self._turn += 1
        sid, oid = self.eid(subject), self.eid(obj)
        record = FactRecord(
            fact_id=fact_id(self.scope.tenant_id, self.scope.ns, sid, predicate, oid),
            subject_id=sid,
            subject=subject,
            predicate=predicate,
            object_id=oid,
            object=obj,
            confidence=confidence,
            valid_from=valid_from,
            valid_to=valid_to,
            session_id="s-1",
            turn_id=f"t-{self._turn}",
            client="claude-code",
            model="explicit",
            source="explicit",
        )
        self.facts[record.fact_id] = record
        return record

    def load(self, graph: GraphStore) -> None:
        graph.upsert_entities(self.scope, list(self.entities.values()))
        graph.upsert_facts(self.scope, list(self.facts.values()))

    def embed(self, vectors: VectorStore, provider: EmbeddingProvider) -> None:
        """Vectors of every entity name, as the pipeline's embedding sweep writes them."""
        names = [e.name for e in self.entities.values()]
        vecs = provider.embed(names)
        items = [
            (e.entity_id, sha256_text(e.name), v)
            for e, v in zip(self.entities.values(), vecs, strict=True)
        ]
        vectors.upsert(provider.model, len(vecs[0]), self.scope, items)


class TableEmbedder(EmbeddingProvider):
    """Deterministic in-process embeddings: texts listed in `same` share one direction (they
    "mean" the same), every other text gets its own hash direction. The model under test is
    never this; it only feeds the vector leg known geometry."""

    kind = "table"

    def __init__(self, model: str = "table-model", same: Mapping[str, str] | None = None) -> None:
        self._model = model
        self.same = {k.casefold(): v for k, v in (same or {}).items()}
        self.calls = 0

    @property
    def model(self) -> str:
        return self._model

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls += 1
        return [hash_vector(self.same.get(t.casefold(), t), DIM) for t in texts]


@pytest.fixture
def graph(tmp_path: Path) -> Iterator[SqliteGraphStore]:
    store = SqliteGraphStore(tmp_path / "graph.db")
    yield store
    store.close()


@pytest.fixture
def vectors(tmp_path: Path) -> Iterator[VectorStore]:
    store = LocalVectorStore(tmp_path / "vectors")
    yield store
    store.close()


@pytest.fixture
def acme() -> Memory:
    return Memory(Scope("acme", "payments"))
