"""An embedding provider that embeds each text once, for the quality benchmarks: the flat
searches and every variant of `--ablation` ask for the same questions again."""

from __future__ import annotations

from collections.abc import Sequence

from resources.models.base import EmbeddingProvider


class MemoProvider(EmbeddingProvider):
    """Embeds each text once: the flat searches and the variants of `--ablation` ask for the
    same questions again (the vectors are the wrapped provider's)."""

    in_process = True

    def __init__(self, inner: EmbeddingProvider) -> None:
        self.inner = inner
        self.kind = inner.kind
        self.memo: dict[str, list[float]] = {}

    @property
    def model(self) -> str:
        return self.inner.model

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        todo = [t for t in dict.fromkeys(texts) if t not in self.memo]
        if todo:
            self.memo.update(zip(todo, self.inner.embed(todo), strict=True))
        return [self.memo[t] for t in texts]
