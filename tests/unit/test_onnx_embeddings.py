"""The ONNX Runtime provider: the bundled all-MiniLM-L6-v2 exported once, the float model's
vectors the same as the torch provider's (so both share that model name and its stored vectors),
its 8-bit variant the default, and clear errors."""

from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest

from resources.models.base import ModelError
from resources.models.onnx_embeddings import FLOAT_MODEL, OnnxEmbeddingProvider, export
from resources.models.st_embeddings import SentenceTransformerEmbeddingProvider, bundled_model_path

TEXTS = [
    "What martial arts has John done?",
    "  leading and trailing spaces  ",
    "",
    "ünïcødé ✓ naïve café — Zürich 密码",
    "PostgreSQL16 uses pgBouncer in transaction mode",
    "word " * 400,  # longer than the model's 256 tokens: truncated like encode truncates
]


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("onnx-cache")


@pytest.fixture(scope="module")
def onnx(cache: Path):  # type: ignore[no-untyped-def]
    provider = OnnxEmbeddingProvider(FLOAT_MODEL, cache_dir=cache, threads=1)
    yield provider
    provider.close()


@pytest.fixture(scope="module")
def torch_vectors() -> np.ndarray:
    st = SentenceTransformerEmbeddingProvider(None, fast_path=False)
    try:
        return np.asarray(st.embed(TEXTS), dtype=np.float64)
    finally:
        st.close()


def test_the_same_vectors_as_the_torch_provider(onnx, torch_vectors) -> None:
    one_by_one = np.asarray([onnx.embed([t])[0] for t in TEXTS], dtype=np.float64)
    batched = np.asarray(onnx.embed(TEXTS), dtype=np.float64)
    for got in (one_by_one, batched):
        assert got.shape == torch_vectors.shape == (len(TEXTS), 384)
        assert np.abs(got - torch_vectors).max() < 1e-4
        cosines = (got * torch_vectors).sum(axis=1)
        assert cosines.min() > 0.99999
        assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    assert onnx.model == "all-MiniLM-L6-v2" and onnx.dim == 384
    # Batches are cut at batch_size without changing a vector.
    small = OnnxEmbeddingProvider(FLOAT_MODEL, cache_dir=onnx.graph_path().parent, batch_size=2)
    assert np.abs(np.asarray(small.embed(TEXTS)) - batched).max() < 1e-5


def test_the_graph_is_exported_once_under_a_name_its_weights_decide(onnx, cache) -> None:
    onnx.embed(["warm"])
    files = sorted(cache.glob("*.onnx"))
    assert files == [onnx.graph_path()]
    assert not list(cache.glob(".*"))  # no temporary file left behind
    before = files[0].stat().st_mtime_ns
    again = OnnxEmbeddingProvider(FLOAT_MODEL, cache_dir=cache)
    again.embed(["reuses the file"])
    assert files[0].stat().st_mtime_ns == before


def test_concurrent_queries_get_their_own_vectors(onnx) -> None:
    expected = {t: onnx.embed([t])[0] for t in TEXTS[:4]}
    errors: list[str] = []

    def worker(text: str) -> None:
        for _ in range(10):
            if np.abs(np.asarray(onnx.embed([text])[0]) - expected[text]).max() > 1e-6:
                errors.append(text)

    threads = [threading.Thread(target=worker, args=(t,)) for t in expected for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_a_model_that_is_not_a_local_mean_pooling_folder_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="local model folder"):
        OnnxEmbeddingProvider("some/hub-name", cache_dir=tmp_path).embed(["x"])
    folder = tmp_path / "cls-model"
    shutil.copytree(bundled_model_path(), folder)
    pooling = folder / "1_Pooling" / "config.json"
    config = json.loads(pooling.read_text())
    config.update(pooling_mode_mean_tokens=False, pooling_mode_cls_token=True)
    pooling.write_text(json.dumps(config))
    with pytest.raises(ModelError, match="mean pooling"):
        OnnxEmbeddingProvider(str(folder), cache_dir=tmp_path).embed(["x"])
    (folder / "modules.json").write_text("not json")
    with pytest.raises(ModelError, match="not a sentence-transformers model folder"):
        OnnxEmbeddingProvider(str(folder), cache_dir=tmp_path).embed(["x"])


def test_a_broken_graph_file_is_a_model_error_not_a_crash(tmp_path: Path, onnx) -> None:
    provider = OnnxEmbeddingProvider(cache_dir=tmp_path)
    provider.graph_path().write_bytes(b"\x00not an onnx graph")
    with pytest.raises(ModelError, match="could not load the ONNX graph"):
        provider.embed(["x"])
    with pytest.raises(ValueError, match="threads"):
        OnnxEmbeddingProvider(threads=0)


def test_an_export_that_fails_leaves_no_file(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="could not export"):
        export(tmp_path / "missing-folder", tmp_path / "out" / "m.onnx")
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())


def test_the_factory_builds_it_and_the_server_gives_it_one_thread() -> None:
    from recall.server import embedder
    from resources.models.factory import EmbeddingConfig
    from resources.settings import Settings

    # The default (issue 20): the 8-bit variant; the torch provider's stays the float model.
    config = EmbeddingConfig(provider="onnx")
    assert config.model_name() == "all-MiniLM-L6-v2-int8" == config.identity()
    built = config.build()
    assert isinstance(built, OnnxEmbeddingProvider) and built.threads is None
    assert built.model == "all-MiniLM-L6-v2-int8" and built.quantised
    assert EmbeddingConfig(provider="sentence-transformers").model_name() == "all-MiniLM-L6-v2"
    float_config = EmbeddingConfig(provider="onnx", model="all-MiniLM-L6-v2")
    assert float_config.model_name() == "all-MiniLM-L6-v2" == float_config.identity()
    served = embedder(Settings({"MEMFLOW_EMBEDDER": "onnx"}))
    assert isinstance(served, OnnxEmbeddingProvider) and served.threads == 1
    assert served.model == "all-MiniLM-L6-v2-int8"


def test_the_quantised_variant_is_a_model_of_its_own_with_steady_vectors(onnx, cache) -> None:
    from resources.models.factory import EmbeddingConfig

    q8 = OnnxEmbeddingProvider("all-MiniLM-L6-v2-int8", cache_dir=cache, threads=1)
    try:
        assert q8.quantised and q8.batch_size == 1
        # Its own name: the ledger and the stores never mix its vectors with the float model's.
        assert q8.model == "all-MiniLM-L6-v2-int8" != onnx.model
        assert EmbeddingConfig(provider="onnx", model=q8.model).model_name() == q8.model
        batched = np.asarray(q8.embed(TEXTS), dtype=np.float64)
        path = q8.graph_path()
        assert path.name.endswith("-int8.onnx") and path != onnx.graph_path()
        assert path.is_file() and onnx.graph_path().is_file()
        assert path.stat().st_size < onnx.graph_path().stat().st_size
        assert not list(cache.glob(".*"))  # no temporary file left behind
        # One text per run: a text's vector never depends on the texts embedded with it.
        one_by_one = np.asarray([q8.embed([t])[0] for t in TEXTS], dtype=np.float64)
        assert np.array_equal(batched, one_by_one)
        assert np.allclose(np.linalg.norm(batched, axis=1), 1.0, atol=1e-5)
        # Close to the float model's vectors, not equal (hence the name of its own).
        floats = np.asarray(onnx.embed(TEXTS), dtype=np.float64)
        cosines = (batched * floats).sum(axis=1)
        assert cosines.min() > 0.95 and cosines.mean() > 0.98
        assert np.abs(batched - floats).max() > 1e-4
        # Quantised once: a second provider reuses the file.
        before = path.stat().st_mtime_ns
        again = OnnxEmbeddingProvider("all-MiniLM-L6-v2-int8", cache_dir=cache)
        assert np.array_equal(np.asarray(again.embed([TEXTS[0]])[0]), one_by_one[0])
        assert path.stat().st_mtime_ns == before
    finally:
        q8.close()
