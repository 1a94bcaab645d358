"""`memflow vectors prune` on every vector backend: only the old models' vectors of the scope
asked go, and only once the current model covers the scope's entities."""

# ruff: noqa: F811

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memflow.fact_embedding import fact_texts
from pipelines.vector_prune import FAILED, NO_TABLE, NOT_COVERED, kept_keys, prune_scope
from resources.vector.base import VectorStore, fact_vectors_key
from resources.vector.factory import open_vector_store
from resources.vector.ledger import with_text_hash
from schemas.scope import Scope
from tests.support.vector_stores import (  # noqa: F401
    fresh_scope,
    milvus_server_uri,
    vector_store,
)

pytestmark = pytest.mark.slow
Scopes = Callable[..., Scope]
E1 = [1.0, 0.0, 0.0, 0.0]
ENTITIES = pl.DataFrame({"entity_id": ["a", "b"], "name": ["payments-service", "PostgreSQL"]})
FACTS = pl.DataFrame(
    {
        "fact_id": ["f1", "f2"],
        "subject": ["payments-service", "payments-service"],
        "predicate": ["USES", "DEPENDS_ON"],
        "object": ["PostgreSQL", "Redis"],
    }
)


def fill(store: VectorStore, scope: Scope, model: str, entities: pl.DataFrame) -> None:
    rows = with_text_hash(entities).select("entity_id", "text_hash").iter_rows()
    store.upsert(model, 4, scope, [(eid, h, E1) for eid, h in rows])
    store.upsert(fact_vectors_key(model), 4, scope, [("f1", "hf", E1)])


def test_prune_deletes_only_old_models_of_the_scope_once_covered(
    vector_store: VectorStore, fresh_scope: Scopes
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
    vector_store: VectorStore, fresh_scope: Scopes
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


def fill_facts(store: VectorStore, scope: Scope, model: str, facts: pl.DataFrame) -> None:
    rows = with_text_hash(fact_texts(facts)).select("entity_id", "text_hash").iter_rows()
    store.upsert(fact_vectors_key(model), 4, scope, [(fid, h, E1) for fid, h in rows])


def test_a_tenant_whose_facts_the_current_model_lacks_keeps_every_model(
    vector_store: VectorStore, fresh_scope: Scopes
) -> None:
    # Recall serves a model that covers the names *and* the facts before one that covers the
    # names only (recall/vector_leg.py): pruning on names alone took away the model recall
    # still answered with while the new model's fact vectors were being made.
    scope = fresh_scope()
    fill(vector_store, scope, "old", ENTITIES)
    fill_facts(vector_store, scope, "old", FACTS)
    fill(vector_store, scope, "new", ENTITIES)
    fill_facts(vector_store, scope, "new", FACTS.head(1))  # f2 has no vector of "new" yet
    args = {"current": "new", "keep": (), "entities": ENTITIES, "apply": True}
    rows = prune_scope(vector_store, scope, facts=FACTS, **args)
    assert {r.outcome for r in rows} == {NOT_COVERED}
    assert vector_store.models(scope)["old"] == (4, 2)
    fill_facts(vector_store, scope, "new", FACTS)
    rows = prune_scope(vector_store, scope, facts=FACTS, **args)
    assert {(r.model, r.outcome) for r in rows} == {("old", "deleted"), ("facts:old", "deleted")}


def test_a_failed_delete_is_reported_with_what_was_deleted_before_it(
    vector_store: VectorStore, fresh_scope: Scopes, monkeypatch: pytest.MonkeyPatch
) -> None:
    scope = fresh_scope()
    for model in ("a-old", "b-old", "new"):
        fill(vector_store, scope, model, ENTITIES)
    delete = vector_store.delete

    def failing(model: str, *args: object) -> int:
        if model == "b-old":
            raise OSError("the store went away")
        return delete(model, *args)

    monkeypatch.setattr(vector_store, "delete", failing)
    rows = prune_scope(vector_store, scope, current="new", keep=(), entities=ENTITIES, apply=True)
    assert [(r.model, r.outcome.split(":")[0]) for r in rows] == [
        ("a-old", "deleted"),
        ("b-old", FAILED),
    ]


@given(models=st.lists(st.text(min_size=1, max_size=12), min_size=1, max_size=5))
@settings(max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_kept_keys_are_each_model_and_its_fact_vectors(models: list[str]) -> None:
    keys = kept_keys(models)
    assert keys == set(models) | {fact_vectors_key(m) for m in models}
    assert all(k in keys for m in models for k in (m, "facts:" + m))


def test_the_cli_keeps_what_the_settings_file_names_and_reports_every_tenant(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from pipelines.cli import main
    from resources.settings import DEFAULTS
    from resources.tables import TableStore
    from schemas.tables import Asset

    data = tmp_path / "data"
    for name in DEFAULTS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MEMFLOW_EMBEDDER", "openai")
    monkeypatch.setenv("MEMFLOW_EMBEDDING_URL", "http://127.0.0.1:9")
    tables = TableStore(data)
    good, bad = Scope("acme", "api"), Scope("acme", "web")
    for scope in (good, bad):
        tables.write(
            ENTITIES.with_columns(tenant_id=pl.lit(scope.tenant_id), ns=pl.lit(scope.ns)),
            Asset.ENTITIES,
            scope,
        )
    store = open_vector_store(None, data)
    for scope in (good, bad):
        for model in ("old", "new"):
            fill(store, scope, model, ENTITIES)
    store.close()

    def prune(*argv: str) -> tuple[int, str]:
        code = main(["vectors", "prune", "--data", str(data), *argv])
        return code, capsys.readouterr().out

    # A previous model written with a space is the one `memflow serve` serves (it strips it).
    monkeypatch.setenv("MEMFLOW_EMBEDDING_MODEL", "new")
    monkeypatch.setenv("MEMFLOW_PREVIOUS_EMBEDDING_MODEL", "old ")
    assert "nothing to prune" in prune("--apply")[1]
    monkeypatch.delenv("MEMFLOW_PREVIOUS_EMBEDDING_MODEL")
    # A tenant named twice is counted once.
    code, out = prune("--tenant", "acme/api", "--tenant", "acme/api")
    assert code == 0 and "3 vectors would be deleted" in out
    # The environment names a stale model; the settings file (what the code location and a
    # reloaded server read) names the model they use: both are kept.
    (tmp_path / ".env").write_text("MEMFLOW_EMBEDDING_MODEL=new\n")
    monkeypatch.setenv("MEMFLOW_EMBEDDING_MODEL", "old")
    code, out = prune("--apply")
    assert code == 0 and "also kept: new" in out and "nothing to prune" in out
    (tmp_path / ".env").unlink()
    # A tenant that fails is reported; the others are pruned; the exit status says so.
    tables.write(
        pl.DataFrame({"entity_id": ["a"], "tenant_id": [bad.tenant_id], "ns": [bad.ns]}),
        Asset.ENTITIES,
        bad,
    )  # no name column
    monkeypatch.setenv("MEMFLOW_EMBEDDING_MODEL", "new")
    code, out = prune("--apply")
    assert code == 1
    assert "acme/web  -" in out and "failed: " in out and "3 vectors deleted" in out
    store = open_vector_store(None, data)
    try:
        assert set(store.models(good)) == {"new", "facts:new"}
        assert set(store.models(bad)) == {"old", "new", "facts:old", "facts:new"}
    finally:
        store.close()
