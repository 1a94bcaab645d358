"""The fact sweep (`memflow.fact_embedding`): fact texts into the embedding ledger under the
fact-vector key, the fact-vector table, and the vector sink's fact step."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from memflow.embedding import embed_missing
from memflow.fact_embedding import (
    embed_missing_facts,
    fact_text,
    fact_texts,
    fact_vector_table,
)
from resources.models.base import EmbeddingProvider
from resources.vector.base import fact_vectors_key, is_fact_vectors_key
from resources.vector.ledger import EmbeddingLedger
from resources.vector.sync import sync_vectors, vectors_equal_table
from schemas.ids import sha256_text
from schemas.scope import Scope
from tests.support.embeddings_server import HashEmbeddingProvider, hash_vector

SCOPE = Scope("acme", "billing")


class Recording(EmbeddingProvider):
    """Hash vectors, and every text it was asked to embed."""

    def __init__(self) -> None:
        self.inner = HashEmbeddingProvider()
        self.texts: list[str] = []

    @property
    def model(self) -> str:
        return self.inner.model

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.texts.extend(texts)
        return self.inner.embed(texts)


def facts(rows: Sequence[tuple[str, str, str, str]], scope: Scope = SCOPE) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "fact_id": [r[0] for r in rows],
            "tenant_id": [scope.tenant_id] * len(rows),
            "ns": [scope.ns] * len(rows),
            "subject": [r[1] for r in rows],
            "predicate": [r[2] for r in rows],
            "object": [r[3] for r in rows],
        },
        schema_overrides={c: pl.String for c in ("fact_id", "tenant_id", "ns")},
    )


ROWS = [
    ("f1", "Maria", "VOLUNTEERS_AT", "homeless shelter"),
    ("f2", "payments-api", "USES_DATABASE", "PostgreSQL"),
    ("f3", "John", "DOES", "kickboxing"),
]


def test_fact_text_reads_the_predicate_as_words() -> None:
    assert fact_text("Maria", "VOLUNTEERS_AT", "homeless shelter") == (
        "Maria volunteers at homeless shelter"
    )
    assert fact_text("a", "IS", "b") == "a is b"
    assert fact_texts(facts(ROWS[:1]))["name"].to_list() == ["Maria volunteers at homeless shelter"]


def test_fact_vectors_key_is_apart_from_every_model_name() -> None:
    key = fact_vectors_key("all-MiniLM-L6-v2")
    assert key != "all-MiniLM-L6-v2" and is_fact_vectors_key(key)
    assert not is_fact_vectors_key("all-MiniLM-L6-v2")
    with pytest.raises(ValueError):
        fact_vectors_key("")


def test_sweep_is_incremental_and_keyed_apart_from_entity_vectors(tmp_path: Path) -> None:
    ledger, provider = EmbeddingLedger(tmp_path), Recording()
    first = embed_missing_facts(provider, ledger, SCOPE, facts(ROWS))
    assert (first.embedded, first.skipped, first.batches) == (3, 0, 1)
    assert first.model == fact_vectors_key("hash-model")
    assert provider.texts == [fact_text(s, p, o) for _, s, p, o in ROWS]
    again = embed_missing_facts(provider, ledger, SCOPE, facts(ROWS))
    assert (again.embedded, again.skipped) == (0, 3)
    # Entity-name vectors of the same model live elsewhere in the ledger.
    names = pl.DataFrame({"entity_id": ["e1"], "name": ["Maria"]})
    assert embed_missing(provider, ledger, SCOPE, names).embedded == 1
    assert ledger.load("hash-model", SCOPE)["entity_id"].to_list() == ["e1"]
    assert sorted(ledger.load(fact_vectors_key("hash-model"), SCOPE)["entity_id"]) == [
        "f1",
        "f2",
        "f3",
    ]


def test_table_holds_exactly_the_current_facts(tmp_path: Path) -> None:
    ledger, provider = EmbeddingLedger(tmp_path), Recording()
    embed_missing_facts(provider, ledger, SCOPE, facts(ROWS))
    # f3 gone, f2's object changed: its new text is embedded, its old vector not served.
    changed = [ROWS[0], ("f2", "payments-api", "USES_DATABASE", "MySQL")]
    assert embed_missing_facts(provider, ledger, SCOPE, facts(changed)).embedded == 1
    table = fact_vector_table(ledger, "hash-model", SCOPE, facts(changed))
    assert table.columns == ["tenant_id", "ns", "fact_id", "model", "dim", "text_hash", "vector"]
    assert sorted(table["fact_id"]) == ["f1", "f2"]
    row = table.filter(pl.col("fact_id") == "f2").row(0, named=True)
    text = "payments-api uses database MySQL"
    assert row["text_hash"] == sha256_text(text)
    assert np.allclose(row["vector"], hash_vector(text, 8))
    assert row["model"] == fact_vectors_key("hash-model")
    assert fact_vector_table(ledger, "hash-model", SCOPE, facts([])).height == 0


def test_sweep_refuses_facts_of_another_scope(tmp_path: Path) -> None:
    provider = Recording()
    with pytest.raises(ValueError, match="another tenant_id"):
        embed_missing_facts(
            provider, EmbeddingLedger(tmp_path), SCOPE, facts(ROWS, Scope("other", "billing"))
        )
    assert provider.texts == []


class MemoryStore:
    """The part of the VectorStore interface the sink uses, in memory."""

    def __init__(self) -> None:
        self.rows: dict[str, dict[str, str]] = {}
        self.upserts = 0

    def ids(self, model: str, scope: Scope) -> dict[str, str]:
        return dict(self.rows.get(model, {}))

    def ids_many(self, model: str, scopes: Sequence[Scope]) -> dict[Scope, dict[str, str]]:
        return {scope: self.ids(model, scope) for scope in scopes}

    def upsert(self, model: str, dim: int, scope: Scope, items) -> int:  # type: ignore[no-untyped-def]
        self.upserts += 1
        held = self.rows.setdefault(model, {})
        for rid, text_hash, vector in items:
            assert len(vector) == dim
            held[rid] = text_hash
        return len(items)

    def delete(self, model: str, scope: Scope, ids: Sequence[str]) -> int:
        held = self.rows.get(model, {})
        return sum(held.pop(i, None) is not None for i in ids)


def test_sink_makes_the_store_equal_the_fact_table(tmp_path: Path) -> None:
    ledger, provider, store = EmbeddingLedger(tmp_path), Recording(), MemoryStore()
    key = fact_vectors_key("hash-model")
    store.rows["hash-model"] = {"e1": "h"}  # entity-name vectors are not the sink's business
    embed_missing_facts(provider, ledger, SCOPE, facts(ROWS))
    table = fact_vector_table(ledger, "hash-model", SCOPE, facts(ROWS))
    first = sync_vectors(store, key, SCOPE, table)  # type: ignore[arg-type]
    assert (first.written, first.deleted, first.unchanged) == (3, 0, 0)
    assert vectors_equal_table(store, key, SCOPE, table)[0]  # type: ignore[arg-type]
    again = sync_vectors(store, key, SCOPE, table)  # type: ignore[arg-type]
    assert (again.written, again.deleted, store.upserts) == (0, 0, 1)
    fewer = fact_vector_table(ledger, "hash-model", SCOPE, facts(ROWS[:2]))
    third = sync_vectors(store, key, SCOPE, fewer)  # type: ignore[arg-type]
    assert (third.written, third.deleted) == (0, 1)
    assert sorted(store.rows[key]) == ["f1", "f2"] and store.rows["hash-model"] == {"e1": "h"}
