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
from resources.vector.local import LocalVectorStore
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


def test_sink_makes_the_store_equal_the_fact_table(tmp_path: Path) -> None:
    ledger, provider = EmbeddingLedger(tmp_path), Recording()
    store = LocalVectorStore(tmp_path / "vectors")
    key = fact_vectors_key("hash-model")
    # Entity-name vectors are not the fact sink's business.
    store.upsert("hash-model", 8, SCOPE, [("e1", "h", [1.0] * 8)])
    embed_missing_facts(provider, ledger, SCOPE, facts(ROWS))
    table = fact_vector_table(ledger, "hash-model", SCOPE, facts(ROWS))
    first = sync_vectors(store, key, SCOPE, table)
    assert (first.written, first.deleted, first.unchanged) == (3, 0, 0)
    assert vectors_equal_table(store, key, SCOPE, table)[0]
    path = store.path(key, SCOPE)
    written = path.stat().st_ino
    again = sync_vectors(store, key, SCOPE, table)
    assert (again.written, again.deleted, again.unchanged) == (0, 0, 3)
    assert path.stat().st_ino == written  # nothing changed: the file was not rewritten
    fewer = fact_vector_table(ledger, "hash-model", SCOPE, facts(ROWS[:2]))
    third = sync_vectors(store, key, SCOPE, fewer)
    assert (third.written, third.deleted) == (0, 1)
    assert sorted(store.ids(key, SCOPE)) == ["f1", "f2"]
    assert store.ids("hash-model", SCOPE) == {"e1": "h"}
