"""Building the recall service over the configured stores and embedding model.

Kept apart from `recall.server` (FastAPI, uvicorn, the write path) so that an in-process
`memflow recall` imports only what answering needs: `--ranking lexical` then loads neither a
model nor the API's web stack.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from recall.service import RecallService
from resources.models.base import EmbeddingProvider, ModelError
from resources.settings import Settings
from resources.vector.base import VectorStore

log = logging.getLogger("recall.server")


QUERY_THREADS = 1


def embedder(cfg: Settings, model: str | None = None) -> EmbeddingProvider | None:
    """The configured embedding provider (None for `none`), built exactly as the pipeline
    builds it, so query vectors and entity vectors come from the same model. `model` builds
    the same kind of provider for another model name (the previous one, during a re-embed).

    An in-process model embeds one query per request here: it runs on `QUERY_THREADS` torch
    threads (steadier and, on a shared host, faster than a team per query; concurrent requests
    use the other cores), where the pipeline's sweep keeps torch's default for its batches."""
    provider = cfg.embedder(model)
    if provider is not None and hasattr(provider, "threads") and provider.threads is None:
        provider.threads = QUERY_THREADS
    return provider


@dataclass
class Built:
    """A service and what must be closed with it."""

    service: RecallService
    closers: list[Callable[[], None]] = field(default_factory=list)

    def close(self) -> None:
        self.service.close()
        for close in reversed(self.closers):
            try:
                close()
            except Exception as exc:  # closing must go on for the rest
                log.warning("closing failed: %s", type(exc).__name__)


def build_service(
    cfg: Settings, *, warm_up: bool = True, require_model: bool = False, names_only: bool = False
) -> Built:
    """A `RecallService` over the configured graph store, vector store and embedding model (and
    the listwise reranker, when one is configured).
    With no embedder configured the service answers by names (and `auto` says so).
    `require_model`: a model that does not answer the warm-up fails the build (a reload).
    `names_only`: the graph alone, no model or vector store is loaded (lexical recall)."""
    closers: list[Callable[[], None]] = []
    graph = cfg.open_graph()
    closers.append(graph.close)
    try:
        provider = None if names_only else embedder(cfg)
        vectors: VectorStore | None = None
        providers: dict[str, EmbeddingProvider] = {}
        if provider is not None:
            providers[provider.model] = provider
            closers.append(provider.close)
            previous = cfg.previous_embedding_model
            if previous and previous != provider.model:
                # Serves the scopes the new model does not cover yet (see recall/vector_leg.py).
                old = embedder(cfg, previous)
                if old is not None:
                    providers[old.model] = old
                    closers.append(old.close)
            vectors = cfg.open_vectors()
            closers.append(vectors.close)
            if warm_up:
                _warm_up(provider, strict=require_model)
        # The optional listwise rerank (MEMFLOW_RERANKER): built only when configured; a bad
        # configuration (no URL, a non-local host not allowed) fails the build.
        reranker = None if names_only else cfg.rerank().build()
        if reranker is not None:
            closers.append(reranker.close)
        service = RecallService(
            graph,
            vectors,
            providers or None,
            current_model=provider.model if provider is not None else None,
            reranker=reranker,
        )
    except BaseException:
        for close in reversed(closers):
            with contextlib.suppress(Exception):
                close()
        raise
    return Built(service, closers)


def _warm_up(provider: EmbeddingProvider, *, strict: bool = False) -> None:
    """Load the model now: a first query would otherwise wait for it (and time out)."""
    try:
        provider.embed(["warm up"])
    except (ModelError, OSError, ValueError) as exc:
        if strict:
            raise ModelError(
                f"embedding model {provider.model} does not answer ({type(exc).__name__})"
            ) from None
        log.warning("embedding model %s not ready: %s", provider.model, type(exc).__name__)
