"""A model switched in the settings file reaches a running code location at its next run.

Under `dagster dev` the code location's environment is what `.env` held when it started; the
model resources re-read `MEMFLOW_SETTINGS_FILE` whenever a run starts (an observation is a run).
Here the process environment plays the started code location (it keeps the old model) while the
file changes: the next observation records the new model, entity_embeddings turns unsynced, a
materialization re-embeds under the new model's name, and recall keeps answering with the old
model until the new one covers the tenant.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from dagster import AssetKey, DagsterInstance
from dagster._core.definitions.data_version import CachingStaleStatusResolver, StaleStatus
from dagster._core.loader import LoadingContextForTest

from pipelines import location
from pipelines.batches import range_tags
from pipelines.cli import main
from pipelines.definitions import defs
from pipelines.runner import run_all
from pipelines.settings import resolve
from pipelines.vector_prune import NOT_COVERED
from recall.server import build_service
from resources.settings import DEFAULTS, SETTINGS_FILE, Settings
from resources.vector.ledger import EmbeddingLedger
from schemas.scope import Scope
from tests.pipeline.landing_fixtures import small_landing
from tests.support.embeddings_server import EmbeddingsServer
from tests.support.leftovers import assert_no_process_left

pytestmark = pytest.mark.slow
TENANTS = ["acme/api", "globex/ml"]
EMBEDDINGS = AssetKey("entity_embeddings")


def write_settings(
    path: Path, url: str, model: str, previous: str = "", extraction: str = ""
) -> None:
    extractor = (
        "MEMFLOW_EXTRACTOR=openai\nMEMFLOW_EXTRACTION_URL=http://127.0.0.1:9\n"
        f"MEMFLOW_EXTRACTION_MODEL={extraction}\n"
        if extraction
        else "MEMFLOW_EXTRACTOR=none\n"
    )
    path.write_text(
        "# the code location's .env\n"
        f"{extractor}"
        "MEMFLOW_EMBEDDER=openai\n"
        f"MEMFLOW_EMBEDDING_URL={url}\n"
        f"MEMFLOW_EMBEDDING_MODEL={model}\n"
        f"MEMFLOW_PREVIOUS_EMBEDDING_MODEL={previous}\n"
    )


def observed(instance: DagsterInstance, source: str):
    (record,) = instance.fetch_observations(AssetKey(source), limit=1).records
    return record.asset_observation


def stale(instance: DagsterInstance, asset: AssetKey = EMBEDDINGS) -> dict[str, StaleStatus]:
    # What the UI shows as "Unsynced" on a partition.
    resolver = CachingStaleStatusResolver(
        instance, defs.resolve_asset_graph(), LoadingContextForTest(instance)
    )
    return {t: resolver.get_status(asset, t) for t in TENANTS}


@pytest.fixture
def code_location(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    landing, data = small_landing(tmp_path / "landing"), tmp_path / "data"
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    for name in DEFAULTS:
        monkeypatch.delenv(name, raising=False)
    with EmbeddingsServer(dim=8) as server:
        settings = tmp_path / ".env"
        write_settings(settings, server.url, "hash-a")
        # What `dagster dev` holds after loading .env at start ...
        resolve({"MEMFLOW_LANDING_DIR": str(landing), "MEMFLOW_DATA_DIR": str(data)}, settings)
        # ... and the file its model resources re-read.
        monkeypatch.setenv(SETTINGS_FILE, str(settings))
        yield settings, server, landing, data
    assert_no_process_left(data)


def prune(
    monkeypatch: pytest.MonkeyPatch, capsys, data: Path, url: str, previous: str, *flags: str
) -> str:
    """`memflow vectors prune` as a user runs it after the switch: hash-b and `previous` in the
    settings file, which the prune reads too (it keeps the models the file names), and in the
    environment."""
    location_file = os.environ[SETTINGS_FILE]
    write_settings(Path(location_file), url, "hash-b", previous=previous, extraction="llama-b")
    monkeypatch.setenv("MEMFLOW_EMBEDDING_MODEL", "hash-b")
    monkeypatch.setenv("MEMFLOW_PREVIOUS_EMBEDDING_MODEL", previous)
    capsys.readouterr()
    assert main(["vectors", "prune", "--data", str(data), *flags]) == 0
    # The CLI's settings resolution empties MEMFLOW_SETTINGS_FILE in its process; this process
    # also plays the code location, which goes on re-reading its file.
    monkeypatch.setenv(SETTINGS_FILE, location_file)
    return capsys.readouterr().out


def test_a_model_switched_in_the_settings_file_is_observed_and_re_embedded(
    code_location, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    settings, server, landing, data = code_location
    assert not run_all(str(landing), str(data)).failures
    instance = DagsterInstance.get()
    first = observed(instance, "embedding_model")
    assert first.data_version == "hash-a"
    assert first.metadata["model"].value == "hash-a"
    assert set(stale(instance).values()) == {StaleStatus.FRESH}
    assert observed(instance, "extraction_model").data_version == "none"

    # The switch: the file changes, the code location's environment does not.
    write_settings(settings, server.url, "hash-b", previous="hash-a", extraction="llama-b")
    assert os.environ["MEMFLOW_EMBEDDING_MODEL"] == "hash-a"
    assert os.environ["MEMFLOW_EXTRACTOR"] == "none"
    location.execute("survey_job", instance)  # what "Observe" does from the UI

    second = observed(instance, "embedding_model")
    assert second.data_version == "hash-b"
    assert str(settings) in second.metadata["settings_from"].value
    assert set(stale(instance).values()) == {StaleStatus.STALE}
    assert observed(instance, "extraction_model").data_version == "openai-compatible:llama-b"
    triples = AssetKey("extracted_triples")
    assert set(stale(instance, triples).values()) == {StaleStatus.STALE}

    # Recall (settings as `memflow serve` reads them now) keeps the old model until the new
    # one covers the tenant.
    cfg = Settings.from_env().with_values(
        MEMFLOW_EMBEDDING_MODEL="hash-b", MEMFLOW_PREVIOUS_EMBEDDING_MODEL="hash-a"
    )
    built = build_service(cfg, warm_up=False)
    # Coverage is cached for a few seconds per scope (recall.vector_leg); a fast re-embed
    # finishes inside that window, so this test reads coverage fresh on every query.
    built.service.vector_leg.coverage_ttl_s = 0.0
    try:
        answer = built.service.recall(Scope("acme", "api"), "which database does the api use?")
        assert answer.embedding_model == "hash-a"
        assert "previous_model" in [w.code for w in answer.warnings]

        # Pruning before the new model covers the tenants deletes nothing.
        out = prune(monkeypatch, capsys, data, server.url, "", "--apply")
        assert out.count(NOT_COVERED) == 4 and "0 vectors deleted" in out
        assert set(cfg.open_vectors().models(Scope("acme", "api"))) == {"hash-a", "facts:hash-a"}

        server.requests.clear()
        result = location.execute("tenant_job", instance, tags=range_tags(*TENANTS))
        assert result.success
        assert {r.model for r in server.requests} == {"hash-b"}  # re-embedded, new model
        assert set(stale(instance).values()) == {StaleStatus.FRESH}
        for tenant in TENANTS:
            held = cfg.open_vectors().models(Scope.parse(tenant))
            # kept per model, never mixed: entity-name vectors and fact vectors of each
            assert set(held) == {"hash-a", "hash-b", "facts:hash-a", "facts:hash-b"}
            assert held["hash-b"][1] == held["hash-a"][1] > 0
            assert held["facts:hash-b"][1] == held["facts:hash-a"][1] > 0

        answer = built.service.recall(Scope("acme", "api"), "which database does the api use?")
        assert answer.embedding_model == "hash-b"
        assert "previous_model" not in [w.code for w in answer.warnings]

        # Once covered: the previous model is kept while it is configured, then pruned.
        kept = prune(monkeypatch, capsys, data, server.url, "hash-a", "--apply")
        assert "nothing to prune" in kept
        before = {t: cfg.open_vectors().models(Scope.parse(t)) for t in TENANTS}
        dry = prune(monkeypatch, capsys, data, server.url, "")
        assert dry.count("would delete") == 4 and "run again with --apply" in dry
        assert {t: cfg.open_vectors().models(Scope.parse(t)) for t in TENANTS} == before
        done = prune(monkeypatch, capsys, data, server.url, "", "--apply")
        removed = sum(before[t][m][1] for t in TENANTS for m in ("hash-a", "facts:hash-a"))
        assert f"{removed:,} vectors deleted" in done
        for tenant in TENANTS:
            scope = Scope.parse(tenant)
            assert set(cfg.open_vectors().models(scope)) == {"hash-b", "facts:hash-b"}
            assert EmbeddingLedger(data).load("hash-a", scope).height > 0  # the ledger keeps it
        answer = built.service.recall(Scope("acme", "api"), "which database does the api use?")
        assert answer.embedding_model == "hash-b" and answer.facts
        assert not answer.warnings

        # Switching back to the pruned model re-uploads its vectors from the ledger: no model
        # call, the same vectors as before the prune.
        write_settings(settings, server.url, "hash-a")
        location.execute("survey_job", instance)
        server.requests.clear()
        assert location.execute("tenant_job", instance, tags=range_tags(*TENANTS)).success
        assert server.requests == []
        for tenant in TENANTS:
            held = cfg.open_vectors().models(Scope.parse(tenant))
            assert {m: held[m] for m in ("hash-a", "facts:hash-a")} == {
                m: before[tenant][m] for m in ("hash-a", "facts:hash-a")
            }
    finally:
        built.close()


def test_the_cli_resolves_once_and_ignores_the_settings_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`memflow run` keeps flags > environment > .env for its own runs: it empties the file."""
    settings = tmp_path / ".env"
    settings.write_text("MEMFLOW_EMBEDDER=sentence-transformers\nMEMFLOW_SETTINGS_FILE=.env\n")
    monkeypatch.setenv("MEMFLOW_EMBEDDER", "none")
    monkeypatch.setenv(SETTINGS_FILE, str(settings))
    got = resolve({}, settings)
    assert got[SETTINGS_FILE] == "" == os.environ[SETTINGS_FILE]
    assert got["MEMFLOW_EMBEDDER"] == "none"


def test_a_data_directory_the_float_default_embedded_moves_to_the_8_bit_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 20 made `all-MiniLM-L6-v2-int8` the `onnx` provider's default. An installation the
    float default embedded (no model named anywhere) goes through the model-switch path: the
    observed model changes, entity_embeddings turns unsynced, recall keeps serving the float
    vectors (the former default is the implicit previous model) until a run re-embeds the
    tenant with the 8-bit model. Real ONNX models on both sides."""
    from resources.models.onnx_embeddings import DEFAULT_MODEL, FORMER_DEFAULT_MODEL

    assert (FORMER_DEFAULT_MODEL, DEFAULT_MODEL) == ("all-MiniLM-L6-v2", "all-MiniLM-L6-v2-int8")
    landing, data = small_landing(tmp_path / "landing"), tmp_path / "data"
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    for name in DEFAULTS:
        monkeypatch.delenv(name, raising=False)
    settings = tmp_path / ".env"
    # Before the change an empty MEMFLOW_EMBEDDING_MODEL meant the float model: named here.
    settings.write_text(f"MEMFLOW_EMBEDDER=onnx\nMEMFLOW_EMBEDDING_MODEL={FORMER_DEFAULT_MODEL}\n")
    resolve({"MEMFLOW_LANDING_DIR": str(landing), "MEMFLOW_DATA_DIR": str(data)}, settings)
    monkeypatch.setenv(SETTINGS_FILE, str(settings))
    assert not run_all(str(landing), str(data)).failures
    instance = DagsterInstance.get()
    assert observed(instance, "embedding_model").data_version == FORMER_DEFAULT_MODEL
    scope = Scope("acme", "api")

    # The upgrade: the file names no model any more, so the provider's default applies.
    settings.write_text("MEMFLOW_EMBEDDER=onnx\nMEMFLOW_EMBEDDING_MODEL=\n")
    location.execute("survey_job", instance)
    assert observed(instance, "embedding_model").data_version == DEFAULT_MODEL
    assert set(stale(instance).values()) == {StaleStatus.STALE}

    cfg = Settings.from_env().with_values(MEMFLOW_EMBEDDING_MODEL="")
    assert cfg.embedding_model == DEFAULT_MODEL
    assert cfg.previous_embedding_model == FORMER_DEFAULT_MODEL
    built = build_service(cfg, warm_up=False)
    built.service.vector_leg.coverage_ttl_s = 0.0
    try:
        question = "which database does the payments api use?"
        answer = built.service.recall(scope, question)
        assert answer.mode == "hybrid" and answer.embedding_model == FORMER_DEFAULT_MODEL
        assert "previous_model" in [w.code for w in answer.warnings]
        assert "PostgreSQL" in [f.object for f in answer.facts]

        assert location.execute("tenant_job", instance, tags=range_tags(*TENANTS)).success
        assert set(stale(instance).values()) == {StaleStatus.FRESH}
        held = cfg.open_vectors().models(scope)
        assert set(held) == {
            FORMER_DEFAULT_MODEL,
            f"facts:{FORMER_DEFAULT_MODEL}",
            DEFAULT_MODEL,
            f"facts:{DEFAULT_MODEL}",
        }
        assert held[DEFAULT_MODEL][1] == held[FORMER_DEFAULT_MODEL][1] > 0
        assert held[f"facts:{DEFAULT_MODEL}"][1] == held[f"facts:{FORMER_DEFAULT_MODEL}"][1] > 0

        answer = built.service.recall(scope, question)
        assert answer.mode == "hybrid" and answer.embedding_model == DEFAULT_MODEL
        assert "previous_model" not in [w.code for w in answer.warnings]
        assert "PostgreSQL" in [f.object for f in answer.facts]
    finally:
        built.close()
    assert_no_process_left(data)
