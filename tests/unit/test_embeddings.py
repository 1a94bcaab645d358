"""Embedding providers, the embedding ledger and the embedding sweep.

The OpenAI-compatible provider talks to a real HTTP server on loopback
(`tests.support.embeddings_server`) that answers deterministic hash vectors or scripted faults.
"""

from __future__ import annotations

import base64
import pickle
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import polars as pl
import pytest
import uvicorn

from memflow.embedding import embed_missing
from resources.models.base import ModelError
from resources.models.embed_server import create_app
from resources.models.guard import NonLocalEndpointError, display_url
from resources.models.openai_embeddings import OpenAIEmbeddingProvider
from resources.vector.ledger import EmbeddingLedger, vector_table
from schemas.ids import sha256_text
from schemas.scope import Scope
from tests.support.embeddings_server import (
    EmbeddingsServer,
    Fault,
    HashEmbeddingProvider,
    hash_vector,
)

API_KEY = "sk-embed-test-key-0123456789"
SCOPE = Scope("acme", "billing")


@pytest.fixture
def server() -> Iterator[EmbeddingsServer]:
    with EmbeddingsServer(dim=8) as s:
        yield s


def provider_for(server: EmbeddingsServer, **kw: object) -> OpenAIEmbeddingProvider:
    kw.setdefault("backoff", 0.01)
    kw.setdefault("max_backoff", 0.05)
    return OpenAIEmbeddingProvider(server.url, server.model, **kw)  # type: ignore[arg-type]


def names(n: int, prefix: str = "entity") -> list[str]:
    return [f"{prefix}-{i}" for i in range(n)]


# -- OpenAI-compatible provider ---------------------------------------------------------------


def test_batches_of_64_in_order(server: EmbeddingsServer) -> None:
    texts = names(150)
    with provider_for(server) as provider:
        vectors = provider.embed(texts)
    assert [len(r.inputs) for r in server.requests] == [64, 64, 22]
    assert server.texts == texts
    assert vectors == [hash_vector(t, 8) for t in texts]
    assert {r.model for r in server.requests} == {"hash-model"}
    assert provider.dim == 8


def test_empty_input_makes_no_call(server: EmbeddingsServer) -> None:
    with provider_for(server) as provider:
        assert provider.embed([]) == []
    assert server.requests == []


def test_base_url_with_v1_suffix(server: EmbeddingsServer) -> None:
    with OpenAIEmbeddingProvider(server.url + "/v1/", "hash-model") as provider:
        assert provider.embed(["a"]) == [hash_vector("a", 8)]


def test_5xx_is_retried_then_succeeds(server: EmbeddingsServer) -> None:
    server.enqueue(Fault(status=500), Fault(status=503))
    with provider_for(server) as provider:
        assert provider.embed(["x", "y"]) == [hash_vector("x", 8), hash_vector("y", 8)]
    assert len(server.requests) == 3


def test_429_honours_retry_after(server: EmbeddingsServer) -> None:
    server.enqueue(Fault(status=429, headers={"retry-after": "0"}))
    with provider_for(server) as provider:
        assert len(provider.embed(["x"])) == 1
    assert len(server.requests) == 2


def test_exhausted_retries_raise_model_error_naming_the_endpoint(
    server: EmbeddingsServer,
) -> None:
    server.enqueue(*[Fault(status=500)] * 5)
    with provider_for(server, max_attempts=3) as provider, pytest.raises(ModelError) as err:
        provider.embed(["x"])
    assert f"{server.url}/v1/embeddings" in str(err.value)
    assert "3 attempts" in str(err.value)
    assert len(server.requests) == 3


def test_timeout_is_retried(server: EmbeddingsServer) -> None:
    server.enqueue(Fault(delay=1.0))
    with provider_for(server, timeout=0.2) as provider:
        assert provider.embed(["slow"]) == [hash_vector("slow", 8)]
    assert len(server.requests) == 2


def test_client_error_is_not_retried(server: EmbeddingsServer) -> None:
    server.enqueue(Fault(status=400))
    with provider_for(server) as provider, pytest.raises(ModelError, match="HTTP 400"):
        provider.embed(["x"])
    assert len(server.requests) == 1


def test_dimensions_above_the_limit_are_refused() -> None:
    with (
        EmbeddingsServer(dim=16) as big,
        provider_for(big, max_dimensions=8) as provider,
        pytest.raises(ModelError, match="16 dimensions; the limit is 8"),
    ):
        provider.embed(["x"])


def test_dimension_must_not_change_within_a_run(server: EmbeddingsServer) -> None:
    with provider_for(server) as provider:
        provider.embed(["first"])
        server.enqueue(Fault(dim=9))
        with pytest.raises(ModelError, match="9 dimensions after 8"):
            provider.embed(["second"])


def test_wrong_number_of_vectors_is_refused(server: EmbeddingsServer) -> None:
    server.enqueue(Fault(drop_one=True))
    with provider_for(server) as provider, pytest.raises(ModelError, match="1 embeddings for 2"):
        provider.embed(["a", "b"])


def test_garbage_body_is_refused(server: EmbeddingsServer) -> None:
    server.enqueue(Fault(body=b"<html>oops</html>"))
    with provider_for(server) as provider, pytest.raises(ModelError, match="not JSON"):
        provider.embed(["a"])


def test_non_local_endpoint_is_refused() -> None:
    with pytest.raises(NonLocalEndpointError):
        OpenAIEmbeddingProvider("http://93.184.216.34:8080/v1", "m")


def test_allow_listed_host_is_accepted() -> None:
    provider = OpenAIEmbeddingProvider(
        "http://embeddings.example.com:9000", "m", allow_hosts=["embeddings.example.com"]
    )
    assert provider.endpoint == "http://embeddings.example.com:9000/v1/embeddings"
    provider.close()


def test_api_key_is_sent_but_never_shown(server: EmbeddingsServer) -> None:
    server.enqueue(*[Fault(status=500)] * 2)
    provider = provider_for(server, api_key=API_KEY, max_attempts=2)
    with pytest.raises(ModelError) as err:
        provider.embed(["x"])
    assert server.requests[0].headers["authorization"] == f"Bearer {API_KEY}"
    assert API_KEY not in str(err.value)
    assert API_KEY not in repr(provider)
    with pytest.raises(TypeError):
        pickle.dumps(provider)
    provider.close()


# -- the OpenAI-compatible server -------------------------------------------------------------


@pytest.fixture
def embed_server_url() -> Iterator[str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    app = create_app(HashEmbeddingProvider("hash-model", dim=8))
    userver = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=userver.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not userver.started and time.monotonic() < deadline:
        time.sleep(0.02)
    yield f"http://127.0.0.1:{port}"
    userver.should_exit = True
    thread.join(10)


def test_embed_server_speaks_the_openai_api(embed_server_url: str) -> None:
    texts = names(70)
    with OpenAIEmbeddingProvider(embed_server_url, "hash-model") as provider:
        assert provider.embed(texts) == [hash_vector(t, 8) for t in texts]
    raw = httpx.post(
        f"{embed_server_url}/v1/embeddings",
        json={"input": "one", "model": "hash-model", "encoding_format": "base64"},
    ).json()
    decoded = np.frombuffer(base64.b64decode(raw["data"][0]["embedding"]), dtype="<f4")
    assert np.allclose(decoded, hash_vector("one", 8))
    assert httpx.get(f"{embed_server_url}/health").json()["model"] == "hash-model"


def test_embed_server_refuses_another_model_name(embed_server_url: str) -> None:
    with (
        OpenAIEmbeddingProvider(embed_server_url, "other-model") as provider,
        pytest.raises(ModelError, match="HTTP 404"),
    ):
        provider.embed(["x"])


# -- ledger and sweep --------------------------------------------------------------------------


def entities(texts: list[str], scope: Scope = SCOPE) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "entity_id": [f"e{i}" for i in range(len(texts))],
            "tenant_id": [scope.tenant_id] * len(texts),
            "ns": [scope.ns] * len(texts),
            "name": texts,
            "aliases": [["secret-alias"]] * len(texts),
            "types": [["Service"]] * len(texts),
        }
    )


def test_ledger_appends_parts_and_checks_dimensions(tmp_path: Path) -> None:
    ledger = EmbeddingLedger(tmp_path)
    ledger.append("m", SCOPE, [("e1", "h1", [1.0, 0.0]), ("e2", "h2", [0.0, 1.0])])
    ledger.append("m", SCOPE, [("e1", "h1b", [0.5, 0.5])])
    frame = ledger.load("m", SCOPE)
    assert frame.height == 3
    assert ledger.dims("m") == {2}
    assert EmbeddingLedger(tmp_path).dims("m") == {2}
    with pytest.raises(ValueError, match="2"):
        ledger.append("m", SCOPE, [("e3", "h3", [1.0, 0.0, 0.0])])
    assert ledger.dims("other") == set()
    assert ledger.load("m", Scope("acme", "other")).is_empty()
    files = sorted(p.name for p in ledger.scope_dir("m", SCOPE).iterdir())
    assert len([f for f in files if f.startswith("part-")]) == 2
    assert not [f for f in files if f.startswith(".tmp")]


def test_ledger_compaction_keeps_every_vector(tmp_path: Path) -> None:
    ledger = EmbeddingLedger(tmp_path)
    for i in range(5):
        ledger.append("m", SCOPE, [(f"e{i}", f"h{i}", [float(i), 1.0])])
    before = ledger.load("m", SCOPE)
    assert ledger.compact("m", SCOPE) == 5
    assert len(ledger.parts("m", SCOPE)) == 1
    assert ledger.load("m", SCOPE).sort("entity_id").equals(before.sort("entity_id"))


def test_sweep_is_incremental(server: EmbeddingsServer, tmp_path: Path) -> None:
    ledger = EmbeddingLedger(tmp_path)
    texts = names(150)
    with provider_for(server) as provider:
        first = embed_missing(provider, ledger, SCOPE, entities(texts))
        assert (first.embedded, first.skipped, first.batches, first.dim) == (150, 0, 3, 8)
        assert first.model == "hash-model"
        assert server.texts == texts  # only the name column, never aliases
        second = embed_missing(provider, ledger, SCOPE, entities(texts))
        assert (second.embedded, second.skipped, second.batches) == (0, 150, 0)
        assert len(server.requests) == 3
        renamed = [*texts[:-1], "entity-renamed"]
        third = embed_missing(provider, ledger, SCOPE, entities(renamed))
        assert (third.embedded, third.skipped) == (1, 149)
        assert server.texts[-1] == "entity-renamed"
    table = vector_table(ledger, "hash-model", SCOPE, entities(renamed))
    assert table.height == 150
    assert set(table.columns) >= {"tenant_id", "ns", "entity_id", "model", "dim", "text_hash"}
    row = table.filter(pl.col("entity_id") == "e149").row(0, named=True)
    assert row["text_hash"] == sha256_text("entity-renamed")
    assert np.allclose(row["vector"], hash_vector("entity-renamed", 8))


def test_crash_mid_sweep_then_rerun_embeds_only_what_is_missing(
    server: EmbeddingsServer, tmp_path: Path
) -> None:
    ledger = EmbeddingLedger(tmp_path)
    texts = names(300)
    server.fail_after = 2  # the third call fails for good: the run dies mid-sweep
    progress: list[tuple[int, int]] = []
    with provider_for(server) as provider, pytest.raises(ModelError):
        embed_missing(
            provider, ledger, SCOPE, entities(texts), progress=lambda d, t: progress.append((d, t))
        )
    assert progress == [(64, 300), (128, 300)]
    assert ledger.load("hash-model", SCOPE).height == 128
    server.fail_after = None
    answered = len(server.requests) - 1
    with provider_for(server) as provider:
        report = embed_missing(provider, ledger, SCOPE, entities(texts))
    assert (report.embedded, report.skipped) == (172, 128)
    succeeded = [t for i, r in enumerate(server.requests) if i != answered for t in r.inputs]
    assert sorted(succeeded) == sorted(texts)  # every name embedded exactly once
    table = vector_table(ledger, "hash-model", SCOPE, entities(texts))
    assert table.height == 300
    for row in table.head(3).iter_rows(named=True):
        name = texts[int(row["entity_id"][1:])]
        assert np.allclose(row["vector"], hash_vector(name, 8))


def test_sweep_refuses_rows_of_another_scope(server: EmbeddingsServer, tmp_path: Path) -> None:
    with provider_for(server) as provider, pytest.raises(ValueError, match="another tenant_id"):
        embed_missing(
            provider, EmbeddingLedger(tmp_path), SCOPE, entities(["x"], Scope("other", "billing"))
        )
    assert server.requests == []


def test_vector_table_reuses_an_earlier_name_vector(
    server: EmbeddingsServer, tmp_path: Path
) -> None:
    ledger = EmbeddingLedger(tmp_path)
    with provider_for(server) as provider:
        embed_missing(provider, ledger, SCOPE, entities(["alpha"]))
        embed_missing(provider, ledger, SCOPE, entities(["beta"]))
        back = embed_missing(provider, ledger, SCOPE, entities(["alpha"]))
    assert back.embedded == 0
    table = vector_table(ledger, "hash-model", SCOPE, entities(["alpha"]))
    assert table["text_hash"].to_list() == [sha256_text("alpha")]
    assert vector_table(ledger, "hash-model", SCOPE)["text_hash"].to_list() == [sha256_text("beta")]


# -- the real model (optional `st` extra) -------------------------------------------------------


@pytest.mark.slow
def test_minilm_places_paraphrases_closer_than_unrelated_names() -> None:
    from resources.models.st_embeddings import SentenceTransformerEmbeddingProvider

    provider = SentenceTransformerEmbeddingProvider()
    a, b, c = np.asarray(
        provider.embed(["PostgreSQL database", "Postgres DB server", "CSS button colour"])
    )
    assert provider.model == "all-MiniLM-L6-v2"
    assert a.shape == (384,)
    assert float(a @ b) > float(a @ c) + 0.2
    provider.close()


@pytest.mark.parametrize(
    "url",
    [
        "https://alice:s3cret-pw@models.example.invalid/v1",  # user info
        "https://models.example.invalid/v1?api-key=s3cret-pw#s3cret-pw",  # query, fragment
        "htps://bob:s3cret-pw@localhost/v1",  # a typo in the scheme
        "s3cret-pw",  # a key pasted into the URL setting
        "http://localhost:s3cret-pw/v1",  # a port that is not a number
        "http://key:s3cret-pw",  # ... nor here (no "@": the key reads as the port)
    ],
)
def test_a_refused_endpoint_never_shows_its_credentials(url: str) -> None:
    # The message reaches logs: `memflow serve` prints why a reload failed.
    with pytest.raises(NonLocalEndpointError) as refused:
        OpenAIEmbeddingProvider(url, "m")
    assert "s3cret" not in str(refused.value)
    assert "s3cret" not in display_url(url)
    assert display_url("https://u:p@example.com:8443/v1?k=v") == "https://example.com:8443/v1"
