"""`memflow vectors prune` on every vector backend: only the old models' vectors of the scope
asked go, and only once the current model covers the scope's entities."""

# ruff: noqa: F811

from __future__ import annotations

from collections.abc import Callable

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipelines.vector_prune import NO_TABLE, NOT_COVERED, kept_keys, prune_scope
from resources.vector.base import fact_vectors_key
from resources.vector.ledger import with_text_hash
from resources.vector.milvus import MilvusVectorStore
from schemas.scope import Scope
from tests.support.milvus import (  # noqa: F401
    fresh_scope,
    lite_server_dir,
    milvus_server_uri,
    vector_store,
)

pytestmark = pytest.mark.slow
Scopes = Callable[..., Scope]
E1 = [1.0, 0.0, 0.0, 0.0]
ENTITIES = pl.DataFrame({"entity_id": ["a", "b"], "name": ["payments-service", "PostgreSQL"]})


def fill(store: MilvusVectorStore, scope: Scope, model: str, entities: pl.DataFrame) -> None:
    rows = with_text_hash(entities).select("entity_id", "text_hash").iter_rows()
    store.upsert(model, 4, scope, [(eid, h, E1) for eid, h in rows])
    store.upsert(fact_vectors_key(model), 4, scope, [("f1", "hf", E1)])


def test_prune_deletes_only_old_models_of_the_scope_once_covered(
    vector_store: MilvusVectorStore, fresh_scope: Scopes
) -> None:
    scope, other = fresh_scope(), fresh_scope(tenant="b")
    for model in ("old", "new"):
        fill(vector_store, scope, model, ENTITIES)
    fill(vector_store, other, "old", ENTITIES)

    dry = prune_scope(vector_store, scope, current="new", keep=(), entities=ENTITIES, apply=False)
    assert {(r.model, r.vectors, r.outcome) for r in dry} == {
        ("old", 2, "would delete"),
        ("facts:old", 1, "would delete"),
    }
    assert set(vector_store.models(scope)) == {"old", "new", "facts:old", "facts:new"}

    done = prune_scope(vector_store, scope, current="new", keep=(), entities=ENTITIES, apply=True)
    assert {(r.model, r.vectors, r.outcome) for r in done} == {
        ("old", 2, "deleted"),
        ("facts:old", 1, "deleted"),
    }
    assert {m for m, (_, n) in vector_store.models(scope).items() if n} == {"new", "facts:new"}
    assert vector_store.models(other) == {"old": (4, 2), "facts:old": (4, 1)}  # another tenant
    again = prune_scope(vector_store, scope, current="new", keep=(), entities=ENTITIES, apply=True)
    assert again == []


def test_prune_keeps_everything_while_the_current_model_lags(
    vector_store: MilvusVectorStore, fresh_scope: Scopes
) -> None:
    scope = fresh_scope()
    fill(vector_store, scope, "old", ENTITIES)
    fill(vector_store, scope, "new", ENTITIES.head(1))  # "b" has no vector of "new" yet
    rows = prune_scope(vector_store, scope, current="new", keep=(), entities=ENTITIES, apply=True)
    assert {r.outcome for r in rows} == {NOT_COVERED}
    # a renamed entity (new name, new text hash) is not covered either
    fill(vector_store, scope, "new", ENTITIES)
    renamed = ENTITIES.with_columns(pl.Series("name", ["payments-svc", "PostgreSQL"]))
    rows = prune_scope(vector_store, scope, current="new", keep=(), entities=renamed, apply=True)
    assert {r.outcome for r in rows} == {NOT_COVERED}
    rows = prune_scope(vector_store, scope, current="new", keep=(), entities=None, apply=True)
    assert {r.outcome for r in rows} == {NO_TABLE}
    assert vector_store.models(scope)["old"] == (4, 2)
    # --keep and the previous model are kept with their fact vectors
    kept = prune_scope(
        vector_store, scope, current="new", keep=("old",), entities=ENTITIES, apply=True
    )
    assert kept == [] and vector_store.models(scope)["facts:old"] == (4, 1)


@given(models=st.lists(st.text(min_size=1, max_size=12), min_size=1, max_size=5))
@settings(max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_kept_keys_are_each_model_and_its_fact_vectors(models: list[str]) -> None:
    keys = kept_keys(models)
    assert keys == set(models) | {fact_vectors_key(m) for m in models}
    assert all(k in keys for m in models for k in (m, "facts:" + m))
