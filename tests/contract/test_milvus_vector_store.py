"""The Milvus server store's own promises, beyond the contract every backend keeps: values enter
expressions only escaped (checked on the real parser), errors name the server, and the sink
never waits per tenant (a block of tenants costs a fixed number of reads that wait for the
server's time tick; collections, indexes and loads happen once per model)."""

# ruff: noqa: F811

from __future__ import annotations

import socket
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from memflow.fact_embedding import fact_texts
from memflow.vector_sync import sync_tenants
from resources.vector.base import VectorStoreError, fact_vectors_key
from resources.vector.ledger import EmbeddingLedger, with_text_hash
from resources.vector.milvus import (
    MilvusVectorStore,
    collection_name,
    literal,
    scope_filter,
    scopes_filter,
)
from schemas.scope import Scope
from tests.contract.test_vector_store import E1, INJECTIONS
from tests.support.vector_stores import fresh_scope, milvus_server_uri  # noqa: F401

pytestmark = pytest.mark.slow
Scopes = Callable[..., Scope]
WATCHED = ("query", "query_iterator", "get", "search", "create_collection", "create_index",
           "load_collection", "flush", "upsert", "insert", "delete")  # fmt: skip


@pytest.fixture
def milvus(milvus_server_uri: str) -> Iterator[MilvusVectorStore]:
    store = MilvusVectorStore(milvus_server_uri)
    yield store
    store.close()


def count_calls(store: MilvusVectorStore) -> Counter[str]:
    """Count the client calls the store makes from now on; Strong reads as `<name>:Strong`."""
    calls: Counter[str] = Counter()
    client = store._client
    for name in WATCHED:
        original = getattr(client, name)

        def wrapped(*args: Any, _name: str = name, _original: Any = original, **kw: Any) -> Any:
            calls[_name] += 1
            if kw.get("consistency_level") == "Strong":
                calls[f"{_name}:Strong"] += 1
            return _original(*args, **kw)

        setattr(client, name, wrapped)
    return calls


def test_errors_name_the_uri() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    uri = f"http://127.0.0.1:{port}"
    with pytest.raises(VectorStoreError, match=f"127.0.0.1:{port}"):
        MilvusVectorStore(uri, timeout=2.0)
    with pytest.raises(VectorStoreError, match="must be"):
        MilvusVectorStore("vectors.sqlite")
    with pytest.raises(VectorStoreError, match="Milvus Lite files are no longer used"):
        MilvusVectorStore(".memflow/milvus.db")


@pytest.mark.server
def test_literal_round_trips_through_the_milvus_filter_parser(
    milvus: MilvusVectorStore, fresh_scope: Scopes
) -> None:
    """Escaping is the only way a value enters an expression: prove it on the real parser."""
    scope, other = fresh_scope(), fresh_scope("other", tenant="b")
    milvus.upsert("m", 4, scope, [(v, "h", E1) for v in INJECTIONS])
    milvus.upsert("m", 4, other, [(v, "h", E1) for v in INJECTIONS[:2]])
    name = collection_name("m", 4)
    for value in INJECTIONS:
        expr = f"{scope_filter(scope)} and entity_id == {literal(value)}"
        rows = milvus._client.query(
            name, filter=expr, output_fields=["entity_id"], consistency_level="Strong"
        )
        assert [r["entity_id"] for r in rows] == [value]
    both = milvus._client.query(
        name,
        filter=scopes_filter([scope, other]),
        output_fields=["tenant_id", "ns"],
        consistency_level="Strong",
    )
    assert Counter((r["tenant_id"], r["ns"]) for r in both) == {
        (scope.tenant_id, scope.ns): len(INJECTIONS),
        (other.tenant_id, other.ns): 2,
    }


def _tenant(ledger: EmbeddingLedger, model: str, scope: Scope, n: int):  # type: ignore[no-untyped-def]
    """A small tenant: `n` entities and `n` facts, every text embedded in the ledger."""
    entities = pl.DataFrame(
        {"entity_id": [f"e{i}" for i in range(n)], "name": [f"service {i}" for i in range(n)]}
    )
    facts = pl.DataFrame(
        {
            "fact_id": [f"f{i}" for i in range(n)],
            "subject": [f"service {i}" for i in range(n)],
            "predicate": ["USES"] * n,
            "object": [f"database {i}" for i in range(n)],
        }
    )
    for key, texts in ((model, entities), (fact_vectors_key(model), fact_texts(facts))):
        rows = with_text_hash(texts)
        vectors = [[1.0, float(i), 0.0, 0.0] for i in range(rows.height)]
        ledger.append(
            key, scope, list(zip(rows["entity_id"], rows["text_hash"], vectors, strict=True))
        )
    return scope, entities, facts


@pytest.mark.server
def test_a_block_of_tenants_costs_the_reads_of_one(
    milvus: MilvusVectorStore, fresh_scope: Scopes, tmp_path: Path
) -> None:
    ledger = EmbeddingLedger(tmp_path)
    model = f"block-{uuid.uuid4().hex[:8]}"
    few = [_tenant(ledger, model, fresh_scope("one"), 3)]
    many = [_tenant(ledger, model, fresh_scope(f"r{i}"), 3) for i in range(12)]

    first = count_calls(milvus)
    assert all(t.equal for t in sync_tenants(milvus, ledger, model, few))
    assert first["create_collection"] == 2  # the model's two collections, once
    assert first["flush"] == 0

    calls = count_calls(milvus)
    done = list(sync_tenants(milvus, ledger, model, many))
    assert [t.scope for t in done] == [s for s, _, _ in many]
    assert all(t.equal and t.reports["entities"].written == 3 for t in done)
    # Two keys, each read before and after: as many waiting reads as for one tenant.
    assert calls["query:Strong"] == 4 and calls["get:Strong"] == 0
    assert calls["create_collection"] == calls["create_index"] == calls["flush"] == 0
    assert calls["load_collection"] == 0

    again = count_calls(milvus)
    assert all(t.equal and t.reports["facts"].unchanged == 3 for t in sync_tenants(
        milvus, ledger, model, many))  # fmt: skip
    assert again["query:Strong"] == 4
    assert again["upsert"] + again["insert"] + again["delete"] == 0  # nothing changed, no write

    # Every tenant loses an entity and a fact: the block's deletes are looked up together.
    fewer = [(s, ents.head(2), facts.head(2)) for s, ents, facts in many]
    dropped = count_calls(milvus)
    done = list(sync_tenants(milvus, ledger, model, fewer))
    assert all(t.equal for t in done)
    assert all(t.reports[k].deleted == 1 for t in done for k in ("entities", "facts"))
    assert dropped["query:Strong"] == 4 and dropped["get:Strong"] == 2  # one lookup per key
    assert dropped["delete"] == 2 and dropped["upsert"] + dropped["insert"] == 0
