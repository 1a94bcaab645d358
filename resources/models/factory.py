"""Which provider a configuration names, built in one place for the pipeline and the server.

`resources.configurable` (the Dagster resources) and `resources.settings` (the CLI, the API and
`memflow status`) both come here, so a query vector and an entity vector always come from the
same provider and model name. Each provider module owns its default model; provider modules are
imported only when chosen (sentence-transformers pulls in torch).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING

from resources.models.base import DEFAULT_MAX_DIMENSIONS, EmbeddingProvider, ExtractionProvider

if TYPE_CHECKING:
    from resources.models.rerank import ListwiseReranker

EXTRACTORS = ("none", "openai", "command")
EMBEDDERS = ("none", "openai", "command", "sentence-transformers", "onnx")


def _kind(provider: str) -> str:
    return (provider or "").strip().lower() or "none"


def hosts(text: str) -> tuple[str, ...]:
    """`MEMFLOW_ALLOW_MODEL_HOSTS`: comma-separated non-local hosts the operator allows."""
    return tuple(h.strip() for h in (text or "").split(",") if h.strip())


@dataclass(frozen=True, slots=True)
class ExtractionConfig:
    provider: str = "none"
    base_url: str = ""
    model: str = ""
    api_key: str = ""
    command: str = ""
    allow_hosts: str = ""
    timeout_s: float = 60.0
    max_retries: int = 3

    @property
    def kind(self) -> str:
        return _kind(self.provider)

    def identity(self) -> str:
        """What triples record as `model`, and the data version downstream assets see."""
        if self.kind == "none":
            return "none"
        if self.kind == "command":
            from resources.models.command import program_name

            return f"command:{self.model or program_name(shlex.split(self.command))}"
        return f"openai-compatible:{self.model}"

    def build(self) -> ExtractionProvider | None:
        if self.kind == "none":
            return None
        if self.kind == "openai":
            from resources.models.openai_chat import OpenAIChatExtractionProvider

            if not self.base_url or not self.model:
                raise ValueError("extraction provider 'openai' needs base_url and model")
            return OpenAIChatExtractionProvider(
                self.base_url,
                self.model,
                api_key=self.api_key or None,
                allow_hosts=hosts(self.allow_hosts),
                timeout=self.timeout_s,
                max_retries=self.max_retries,
            )
        if self.kind == "command":
            from resources.models.command import CommandExtractionProvider

            if not self.command:
                raise ValueError("extraction provider 'command' needs a command")
            return CommandExtractionProvider(
                shlex.split(self.command), model_name=self.model or None
            )
        raise ValueError(
            f"unknown extraction provider {self.provider!r} ({' | '.join(EXTRACTORS)})"
        )


@dataclass(frozen=True, slots=True)
class EmbeddingConfig:
    provider: str = "none"
    base_url: str = ""
    model: str = ""
    api_key: str = ""
    command: str = ""
    allow_hosts: str = ""
    max_dimensions: int = DEFAULT_MAX_DIMENSIONS
    timeout_s: float = 60.0

    @property
    def kind(self) -> str:
        return _kind(self.provider)

    def model_name(self) -> str:
        """The name vectors are stored under ("" for `none`); the provider's default when the
        configuration names none."""
        if self.kind == "sentence-transformers":
            from resources.models.st_embeddings import DEFAULT_MODEL

            return self.model or DEFAULT_MODEL
        if self.kind == "onnx":
            from resources.models.onnx_embeddings import DEFAULT_MODEL as ONNX_DEFAULT

            return self.model or ONNX_DEFAULT
        return "" if self.kind == "none" else self.model

    def identity(self) -> str:
        return "none" if self.kind == "none" else self.model_name()

    def build(self) -> EmbeddingProvider | None:
        if self.kind == "none":
            return None
        if self.kind == "openai":
            from resources.models.openai_embeddings import OpenAIEmbeddingProvider

            if not self.base_url or not self.model:
                raise ValueError("embedding provider 'openai' needs base_url and model")
            return OpenAIEmbeddingProvider(
                self.base_url,
                self.model,
                api_key=self.api_key or None,
                allow_hosts=hosts(self.allow_hosts),
                timeout=self.timeout_s,
                max_dimensions=self.max_dimensions,
            )
        if self.kind == "command":
            from resources.models.command import CommandEmbeddingProvider

            if not self.command or not self.model:
                raise ValueError("embedding provider 'command' needs a command and a model name")
            return CommandEmbeddingProvider(
                shlex.split(self.command),
                self.model,
                timeout=self.timeout_s,
                max_dimensions=self.max_dimensions,
            )
        if self.kind == "sentence-transformers":
            from resources.models.st_embeddings import SentenceTransformerEmbeddingProvider

            return SentenceTransformerEmbeddingProvider(self.model or None)
        if self.kind == "onnx":
            from resources.models.onnx_embeddings import OnnxEmbeddingProvider

            return OnnxEmbeddingProvider(self.model or None, max_dimensions=self.max_dimensions)
        raise ValueError(f"unknown embedding provider {self.provider!r} ({' | '.join(EMBEDDERS)})")


RERANKERS = ("none", "openai")


@dataclass(frozen=True, slots=True)
class RerankConfig:
    """The optional listwise rerank (`resources.models.rerank`): off (`none`) by default;
    `openai` is a local chat model speaking the OpenAI API, behind the local-only guard."""

    provider: str = "none"
    base_url: str = ""
    model: str = ""
    api_key: str = ""
    allow_hosts: str = ""
    budget_s: float = 2.0

    @property
    def kind(self) -> str:
        return _kind(self.provider)

    def build(self) -> ListwiseReranker | None:
        if self.kind == "none":
            return None
        if self.kind != "openai":
            raise ValueError(f"unknown rerank provider {self.provider!r} ({' | '.join(RERANKERS)})")
        if not self.base_url or not self.model:
            raise ValueError("rerank provider 'openai' needs base_url and model")
        from resources.models.rerank import ListwiseReranker

        return ListwiseReranker(
            self.base_url,
            self.model,
            api_key=self.api_key or None,
            allow_hosts=hosts(self.allow_hosts),
            budget_s=self.budget_s,
        )
