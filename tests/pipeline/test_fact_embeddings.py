"""fact_embeddings[tenant]: every fact's text gets a vector of the current model, the vector
sink syncs them under `facts:<model>`, a rerun embeds nothing, a model change replays under a
new key while the old one stays."""

from __future__ import annotations

from pathlib import Path

import pytest
from dagster import AssetKey, AssetSelection, materialize

from memflow.fact_embedding import fact_text
from pipelines.definitions import ALL_ASSETS
from resources.configurable import EmbeddingModelResource
from resources.tables import TableStore
from resources.vector.base import fact_vectors_key
from resources.vector.factory import open_vector_store
from schemas.scope import Scope
from schemas.tables import Asset
from tests.pipeline.conftest import EVERYTHING, make_resources, run_assets
from tests.support.embeddings_server import EmbeddingsServer
from tests.support.leftovers import assert_no_process_left

pytestmark = pytest.mark.slow
TENANTS = ["acme/api", "globex/ml"]
SCOPES = [Scope("acme", "api"), Scope("globex", "ml")]
MODELS = AssetSelection.assets("extraction_model", "embedding_model")


def embedder(server: EmbeddingsServer, model: str) -> EmbeddingModelResource:
    return EmbeddingModelResource(provider="openai", base_url=server.url, model=model)


@pytest.fixture
def stores(data_dir: Path):
    yield data_dir
    assert_no_process_left(data_dir)


def _meta(result, asset: str) -> dict[str, dict]:
    """Per-tenant metadata of `asset`'s materializations in `result`."""
    return {
        m.partition: {k: v.value for k, v in m.metadata.items()}
        for m in result.asset_materializations_for_node(asset)
        if m.asset_key == AssetKey(asset)
    }


def _checks(result) -> dict[str, bool]:
    return {c.check_name: c.passed for c in result.get_asset_check_evaluations()}


def _fact_texts(data_dir: Path) -> dict[str, set[str]]:
    tables = TableStore(data_dir)
    out = {}
    for scope in SCOPES:
        facts = tables.read(Asset.VALIDATED_FACTS, scope)
        assert facts is not None and facts.height
        out[scope.key] = {
            fact_text(s, p, o) for s, p, o in facts.select("subject", "predicate", "object").rows()
        }
    return out


def _held(data_dir: Path) -> dict[str, dict[str, tuple[int, int]]]:
    store = open_vector_store(None, str(data_dir))
    try:
        return {scope.key: store.models(scope) for scope in SCOPES}
    finally:
        store.close()


def test_fact_vectors_cover_every_fact_rerun_embeds_nothing_model_change_replays(
    instance, landing: Path, stores: Path
) -> None:
    data_dir = stores
    with EmbeddingsServer(dim=8, model="hash-a") as server:
        res = make_resources(landing, data_dir, embedding=embedder(server, "hash-a"))
        assert materialize(ALL_ASSETS, selection=MODELS, instance=instance, resources=res).success
        result = run_assets(instance, res, EVERYTHING, TENANTS)
        assert result.success
        checks = _checks(result)
        assert checks["fact_embedding_coverage"] and checks["vectors_equal_table"]
        texts = _fact_texts(data_dir)
        asked = set(server.texts)
        assert set().union(*texts.values()) <= asked  # every fact's text went to the model
        meta = _meta(result, "fact_embeddings")
        for key, fact_set in texts.items():
            assert meta[key]["model"] == "hash-a" and meta[key]["key"] == "facts:hash-a"
            assert meta[key]["facts"] == meta[key]["embedded"] == len(fact_set)
            table = TableStore(data_dir).read(Asset.FACT_EMBEDDINGS, Scope(*key.split("/")))
            assert table is not None and table.height == len(fact_set)
            assert set(table["model"]) == {fact_vectors_key("hash-a")}
        held = _held(data_dir)
        for key, fact_set in texts.items():
            assert held[key][fact_vectors_key("hash-a")] == (8, len(fact_set))
            assert held[key]["hash-a"][0] == 8  # entity-name vectors beside them
        sink = _meta(result, "vector_sink")
        assert all(sink[k]["fact_rows_written"] == len(texts[k]) for k in TENANTS)

        # A rerun with nothing new embeds nothing and writes nothing.
        calls = len(server.texts)
        again = run_assets(instance, res, ["fact_embeddings", "vector_sink"], TENANTS)
        assert again.success and len(server.texts) == calls
        meta = _meta(again, "fact_embeddings")
        assert all(
            meta[k]["embedded"] == 0 and meta[k]["skipped"] == len(texts[k]) for k in TENANTS
        )
        assert all(m["rows_written"] == 0 for m in _meta(again, "vector_sink").values())
        assert _checks(again)["fact_embedding_coverage"]

    # A model change: Dagster sees it, the facts are embedded again under the new key, once,
    # and the previous model's fact vectors stay for recall to serve meanwhile.
    with EmbeddingsServer(dim=16, model="hash-b") as server:
        res = make_resources(landing, data_dir, embedding=embedder(server, "hash-b"))
        assert materialize(ALL_ASSETS, selection=MODELS, instance=instance, resources=res).success
        replay = run_assets(instance, res, ["fact_embeddings", "vector_sink"], TENANTS)
        assert replay.success and _checks(replay)["fact_embedding_coverage"]
        assert sorted(server.texts) == sorted(t for ts in texts.values() for t in ts)
        tags = next(
            r.asset_materialization.tags
            for r in instance.fetch_materializations(AssetKey("fact_embeddings"), limit=1).records
        )
        assert tags["dagster/input_data_version/embedding_model"] == "hash-b"
    held = _held(data_dir)
    for key, fact_set in texts.items():
        assert held[key][fact_vectors_key("hash-a")] == (8, len(fact_set))
        assert held[key][fact_vectors_key("hash-b")] == (16, len(fact_set))


def test_without_an_embedder_fact_coverage_warns_and_the_sink_has_nothing_to_do(
    instance, landing: Path, stores: Path
) -> None:
    res = make_resources(landing, stores)  # embedding provider "none"
    result = run_assets(instance, res, EVERYTHING, TENANTS)
    assert result.success
    checks = {c.check_name: c for c in result.get_asset_check_evaluations()}
    coverage = checks["fact_embedding_coverage"]
    assert not coverage.passed and coverage.severity.value == "WARN"
    assert checks["vectors_equal_table"].passed
    meta = _meta(result, "fact_embeddings")
    assert all(
        m["model"] == "none" and m["embedded"] == 0 and m["facts"] > 0 for m in meta.values()
    )
