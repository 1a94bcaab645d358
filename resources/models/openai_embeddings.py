"""Embeddings from a local server speaking the OpenAI `/v1/embeddings` API.

Ollama, llama.cpp's server, vLLM, LocalAI, text-embeddings-inference and
`resources.models.embed_server` all answer it. The endpoint must be local unless the operator
allow-lists its host. Texts go in batches of EMBED_BATCH; transport errors, timeouts, 429 and
5xx are retried with backoff (`retry.py`). Every vector is checked: one per text, numbers only,
at most `max_dimensions`, and the same dimension for the provider's whole life (a server that
switched models mid-run must not mix vectors under one model name).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import httpx

from resources.models.base import (
    DEFAULT_MAX_DIMENSIONS,
    EMBED_BATCH,
    EmbeddingProvider,
    ModelError,
)
from resources.models.guard import check_local_endpoint
from resources.models.openai_chat import api_root, endpoint_name
from resources.models.retry import post_json


class OpenAIEmbeddingProvider(EmbeddingProvider):
    """Entity-name vectors from an OpenAI-compatible embeddings endpoint."""

    kind = "openai"

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        allow_hosts: Iterable[str] = (),
        timeout: float = 60.0,
        max_dimensions: int = DEFAULT_MAX_DIMENSIONS,
        *,
        max_attempts: int = 4,
        backoff: float = 0.5,
        max_backoff: float = 8.0,
        batch_size: int = EMBED_BATCH,
    ) -> None:
        if not model:
            raise ValueError("an embedding model name is required")
        if max_dimensions < 1 or batch_size < 1:
            raise ValueError("max_dimensions and batch_size must be positive")
        check_local_endpoint(base_url, allow_hosts)
        self._model = model
        self._url = f"{api_root(base_url)}/v1/embeddings"
        self.endpoint = endpoint_name(self._url)
        self.max_dimensions = max_dimensions
        self.batch_size = batch_size
        self._attempts = max_attempts
        self._backoff = backoff
        self._max_backoff = max_backoff
        self._dim: int | None = None
        self.calls = 0
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        # trust_env=False: a proxy from the environment must never see local model traffic.
        self._client = httpx.Client(
            timeout=httpx.Timeout(timeout), headers=headers, trust_env=False
        )

    @property
    def model(self) -> str:
        return self._model

    @property
    def dim(self) -> int | None:
        """The dimension seen so far (None before the first call)."""
        return self._dim

    def __repr__(self) -> str:  # never the API key
        return f"OpenAIEmbeddingProvider({self.endpoint!r}, model={self._model!r})"

    def __reduce__(self) -> Any:
        raise TypeError("an embedding provider holds a live client and credentials; not picklable")

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        out: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            out.extend(self._embed_batch(list(texts[start : start + self.batch_size])))
        return out

    def _embed_batch(self, texts: list[str]) -> list[list[float]]:
        payload = {"model": self._model, "input": texts, "encoding_format": "float"}
        self.calls += 1
        data = post_json(
            self._client,
            self._url,
            payload,
            max_attempts=self._attempts,
            base_delay=self._backoff,
            max_delay=self._max_backoff,
        )
        rows = data.get("data") if isinstance(data, dict) else None
        if not isinstance(rows, list) or len(rows) != len(texts):
            got = len(rows) if isinstance(rows, list) else "no"
            raise ModelError(
                f"model endpoint {self.endpoint} returned {got} embeddings for {len(texts)} texts"
            )
        ordered = sorted(rows, key=lambda r: r.get("index", 0) if isinstance(r, dict) else 0)
        return [self._vector(row) for row in ordered]

    def _vector(self, row: Any) -> list[float]:
        values = row.get("embedding") if isinstance(row, dict) else None
        if not isinstance(values, list) or not values:
            raise ModelError(f"model endpoint {self.endpoint} returned an empty embedding")
        dim = len(values)
        if dim > self.max_dimensions:
            raise ModelError(
                f"model endpoint {self.endpoint} returned {dim} dimensions; "
                f"the limit is {self.max_dimensions}"
            )
        if self._dim is None:
            self._dim = dim
        elif dim != self._dim:
            raise ModelError(
                f"model endpoint {self.endpoint} returned {dim} dimensions after {self._dim}; "
                f"one model name must keep one dimension"
            )
        try:
            vector = [float(v) for v in values]
        except (TypeError, ValueError) as err:
            raise ModelError(
                f"model endpoint {self.endpoint} returned a non-numeric vector"
            ) from err
        if not all(math.isfinite(v) for v in vector):
            raise ModelError(f"model endpoint {self.endpoint} returned a non-finite vector")
        return vector

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> OpenAIEmbeddingProvider:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
