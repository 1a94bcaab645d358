"""Model provider interfaces: extraction (turn text -> candidate triples) and embedding."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

EMBED_BATCH = 64
DEFAULT_MAX_DIMENSIONS = 4096


class ModelError(RuntimeError):
    """A model call failed for good (after retries); the message names the endpoint.

    The message is redacted when the error is made: it quotes what a model endpoint or an
    extractor program answered (an HTTP body, the tail of stderr), and it reaches the Dagster
    event log, compute logs and the terminal."""

    def __init__(self, *args: object) -> None:
        from schemas.redaction import redact  # the engine loads on the first error only

        super().__init__(*(redact(a) if isinstance(a, str) else a for a in args))


@dataclass(frozen=True, slots=True)
class TurnText:
    session_id: str
    turn_id: str
    role: str
    content: str  # already redacted


@dataclass(slots=True)
class ExtractionBatch:
    """What one provider call returned.

    `items` are untrusted dicts as the model wrote them (validated later, in one place:
    `schemas.triples`). `rejects` are (reason, detail) pairs for what could not even be
    parsed as an item. Each item names the turn it came from when the model said so.
    """

    items: list[dict[str, Any]] = field(default_factory=list)
    rejects: list[tuple[str, str]] = field(default_factory=list)
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0


class ExtractionProvider(ABC):
    """Turns redacted text turns of one scope into candidate triples."""

    kind: str = "abstract"

    @property
    @abstractmethod
    def model(self) -> str:
        """The model identity recorded on every triple, e.g. ``openai:qwen2.5:7b``."""

    @abstractmethod
    def extract(
        self, turns: Sequence[TurnText], known_entities: Sequence[str]
    ) -> ExtractionBatch: ...

    def close(self) -> None:  # noqa: B027 - optional hook
        pass


class EmbeddingProvider(ABC):
    """Embeds redacted entity names. Implementations batch by EMBED_BATCH themselves."""

    kind: str = "abstract"
    # True when `embed` computes in this process (no server that could hang): the recall
    # service then calls it inline instead of through a thread it could give up on.
    in_process: bool = False

    @property
    @abstractmethod
    def model(self) -> str:
        """The model name vectors are stored under."""

    @abstractmethod
    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text, in order; raises ModelError when the provider fails."""

    def close(self) -> None:  # noqa: B027 - optional hook
        pass
