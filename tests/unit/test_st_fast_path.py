"""The in-process provider's query path: the same vectors as `SentenceTransformer.encode`,
computed without its overhead, and called inline by the recall service."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np
import pytest

from recall.vector_leg import VectorLeg
from resources.models.base import EmbeddingProvider
from tests.support.embeddings_server import hash_vector

TEXTS = [
    "What martial arts has John done?",
    "  leading and trailing spaces  ",
    "",
    "ünïcødé ✓ naïve café — Zürich",
    "PostgreSQL16 uses pgBouncer in transaction mode",
    "word " * 400,  # longer than the model's 256 tokens: truncated like encode truncates
]


@pytest.fixture(scope="module")
def st():  # type: ignore[no-untyped-def]
    pytest.importorskip("sentence_transformers")
    from resources.models.st_embeddings import (
        SentenceTransformerEmbeddingProvider,
        bundled_model_path,
    )

    try:
        bundled_model_path()
    except Exception:
        pytest.skip("the bundled model is not installed")
    provider = SentenceTransformerEmbeddingProvider(None)
    yield provider
    provider.close()


@pytest.mark.slow
def test_fast_path_vectors_equal_encode(st) -> None:  # type: ignore[no-untyped-def]
    st.embed(["load"])
    assert st._fast is not None  # the bundled model is the plain kind
    ref = st._model.encode(TEXTS, normalize_embeddings=True, convert_to_numpy=True)
    one_by_one = np.array([st.embed([t])[0] for t in TEXTS])
    assert st._fast.traced is not None  # a single text was traced and checked
    assert np.abs(one_by_one - ref).max() < 1e-5
    batched = np.array(st.embed(TEXTS))  # several texts: the eager path with a mask
    assert np.abs(batched - ref).max() < 1e-5
    big = [f"entity name {i}" for i in range(70)]  # beyond the fast path: encode
    ref_big = st._model.encode(big, normalize_embeddings=True, convert_to_numpy=True)
    assert np.abs(np.array(st.embed(big)) - ref_big).max() < 1e-5
    assert st.in_process


@pytest.mark.slow
def test_concurrent_queries_agree(st) -> None:  # type: ignore[no-untyped-def]
    from concurrent.futures import ThreadPoolExecutor

    expected = {t: st.embed([t])[0] for t in TEXTS}
    with ThreadPoolExecutor(max_workers=4) as pool:
        got = list(pool.map(lambda t: st.embed([t])[0], TEXTS * 4))
    for text, vec in zip(TEXTS * 4, got, strict=True):
        assert np.allclose(vec, expected[text], atol=1e-6)


def test_threads_must_be_positive() -> None:
    from resources.models.st_embeddings import SentenceTransformerEmbeddingProvider

    with pytest.raises(ValueError):
        SentenceTransformerEmbeddingProvider(None, threads=0)


def test_the_server_builds_its_in_process_provider_with_one_thread() -> None:
    pytest.importorskip("sentence_transformers")
    from recall.server import QUERY_THREADS, embedder
    from resources.settings import Settings

    provider = embedder(Settings({"MEMFLOW_EMBEDDER": "sentence-transformers"}))
    assert provider is not None and provider.threads == QUERY_THREADS == 1  # type: ignore[attr-defined]
    assert embedder(Settings({"MEMFLOW_EMBEDDER": "none"})) is None


class Where(EmbeddingProvider):
    """Records the thread each call ran on."""

    def __init__(self, in_process: bool) -> None:
        self.in_process = in_process
        self.threads: list[int] = []

    @property
    def model(self) -> str:
        return "where"

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.threads.append(threading.get_ident())
        return [hash_vector(t, 8) for t in texts]


def test_the_vector_leg_calls_in_process_providers_inline_and_others_through_its_pool() -> None:
    inline, remote = Where(in_process=True), Where(in_process=False)
    leg = VectorLeg(None, {"where": inline}, "where")
    assert leg.embed("where", "a question") == hash_vector("a question", 8)
    assert inline.threads == [threading.get_ident()]
    pooled = VectorLeg(None, {"where": remote}, "where")
    pooled.embed("where", "a question")
    assert remote.threads and remote.threads[0] != threading.get_ident()
    leg.close()
    pooled.close()
