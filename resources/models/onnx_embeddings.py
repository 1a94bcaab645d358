"""In-process embeddings through ONNX Runtime: the same all-MiniLM-L6-v2 weights, no torch at
query time (the `st` extra brings `onnxruntime` and `onnx`).

    provider = OnnxEmbeddingProvider()          # the default: all-MiniLM-L6-v2-int8
    provider = OnnxEmbeddingProvider("all-MiniLM-L6-v2")   # the float model
    provider.embed(["which database do we use?"])

The ONNX graph is exported from the sentence-transformers model's own transformer
(`torch.onnx.export`, opset 17) once, into a cache folder, named by the digest of the
weights and of this exporter (`EXPORT_VERSION`), so a changed model or exporter never meets
an old file; `make .venv/.installed` exports the bundled model at install time
(`python -m resources.models.onnx_embeddings --export`: the float graph and the default's
quantised one), and a provider that finds no file exports it on first use (torch is needed
then, not afterwards). The file is written to a temporary name and renamed, so concurrent
exporters never leave half a file.

Around the graph, what sentence-transformers does for this model: the Rust tokenizer of the
model folder (truncation at the model's `max_seq_length`), masked mean pooling and L2
normalisation, in numpy. `tests/unit/test_onnx_embeddings.py` checks the float model's vectors
against the torch provider's (cosine > 0.99999, each component within 1e-4), so the two share the
model name `all-MiniLM-L6-v2` and its stored vectors: switching providers on that model needs no
re-embed.

Why it is faster: one ONNX Runtime session (graph optimisations on, `threads` intra-op threads,
1 by default: one query per request, steadier on a shared host) does less per call than torch's
eager or traced module, and a query needs no tensor conversions.

The quantised variant, named by the suffix `-int8` (`all-MiniLM-L6-v2-int8`, the default since
issue 20, or a folder path with it): the same export, then ONNX Runtime's dynamic quantisation
of the weight matrices (`quantize_weights`: signed 8-bit, one scale per output channel; the
attention products and everything else stay float), cached beside the float graph under a name
of its own. A query reads a quarter of the weight bytes: on a host whose caches other processes
share, the float model's ~42 MB of encoder weights come from memory at every query, and that,
not the arithmetic, is most of its time (BENCHMARKS.md). Its vectors are close to the float
model's (cosine ~0.995) but not equal, so it is another model: vectors are stored and recorded
in the embedding ledger under the `-int8` name, never mixed with the float model's. Dynamic
quantisation scales the activations of a whole batch together, so a text's vector would depend
on the texts batched with it; the quantised provider embeds one text per run (`batch_size` 1),
and a text always gets the same vector.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from resources.fs import atomic_write
from resources.models.base import DEFAULT_MAX_DIMENSIONS, EMBED_BATCH, EmbeddingProvider, ModelError

FLOAT_MODEL = "all-MiniLM-L6-v2"
EXPORT_VERSION = "1"  # bump when `export` changes what it writes
QUANTISED_SUFFIX = "-int8"
# The default since issue 20: the float model's weights quantised to 8 bits. Measured side by
# side with the float model on LoCoMo's held-out half, conv-30 and the project's set before it
# was chosen (BENCHMARKS.md, "The default embedding model"); the float model stays selectable.
DEFAULT_MODEL = FLOAT_MODEL + QUANTISED_SUFFIX
# The default before it: a data directory embedded with the default then holds its vectors, and
# recall keeps serving them while the new default re-embeds (`Settings.previous_embedding_model`).
FORMER_DEFAULT_MODEL = FLOAT_MODEL
QUANTISE_VERSION = "1"  # bump when `quantize_weights` changes what it writes
OPSET = 17
_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def default_cache_dir() -> Path:
    """Where exported graphs live: `$XDG_CACHE_HOME/memflow/onnx` (`~/.cache/...`)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "memflow" / "onnx"


class _ModelFolder:
    """A sentence-transformers model folder this provider can run: a BERT-like transformer,
    mean pooling, optionally Normalize, a `tokenizer.json`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._digest: str | None = None
        try:
            modules = json.loads((path / "modules.json").read_text(encoding="utf-8"))
            kinds = [m["type"].rsplit(".", 1)[-1] for m in modules]
            pooling_dir = next(m["path"] for m in modules if m["type"].endswith("Pooling"))
            pooling = json.loads((path / pooling_dir / "config.json").read_text(encoding="utf-8"))
            st_config = json.loads((path / "sentence_bert_config.json").read_text(encoding="utf-8"))
        except (OSError, ValueError, KeyError, StopIteration) as err:
            raise ModelError(f"{path} is not a sentence-transformers model folder: {err}") from err
        if kinds not in (["Transformer", "Pooling"], ["Transformer", "Pooling", "Normalize"]):
            raise ModelError(f"{path}: the ONNX provider runs Transformer + Pooling models only")
        if not pooling.get("pooling_mode_mean_tokens"):
            raise ModelError(f"{path}: the ONNX provider needs mean pooling")
        if not (path / "tokenizer.json").is_file():
            raise ModelError(f"{path}: no tokenizer.json")
        self.normalize = kinds[-1] == "Normalize"
        self.max_length = int(st_config.get("max_seq_length") or 256)
        self.weights = next(
            (path / n for n in ("model.safetensors", "pytorch_model.bin") if (path / n).is_file()),
            None,
        )
        if self.weights is None:
            raise ModelError(f"{path}: no model weights")

    def digest(self) -> str:
        if self._digest is None:
            self._digest = self._read_digest()
        return self._digest

    def _read_digest(self) -> str:
        h = hashlib.sha256(EXPORT_VERSION.encode())
        with self.weights.open("rb") as fh:  # type: ignore[union-attr]
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
        h.update((self.path / "config.json").read_bytes())
        return h.hexdigest()[:16]


def split_quantised(name: str) -> tuple[str, bool]:
    """(the float model's name, whether `name` asks for its quantised variant)."""
    if name.lower().endswith(QUANTISED_SUFFIX):
        return name[: -len(QUANTISED_SUFFIX)], True
    return name, False


def _source(name: str) -> Path:
    name = split_quantised(name)[0]
    if name.lower() in {"all-minilm-l6-v2", "sentence-transformers/all-minilm-l6-v2"}:
        from resources.models.st_embeddings import bundled_model_path

        return Path(bundled_model_path())
    path = Path(name).expanduser()
    if not path.is_dir():
        raise ModelError(f"the ONNX provider needs a local model folder; {name!r} is none")
    return path


def export(folder: Path, target: Path) -> Path:
    """Export the folder's transformer (last hidden state) to `target`, atomically."""
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    try:
        import torch
        import transformers
        from transformers import AutoModel

        transformers.logging.disable_progress_bar()
    except ImportError as err:
        raise ModelError(
            "exporting to ONNX needs the optional extra: pip install 'memflow[st]'"
        ) from err
    import warnings

    try:
        inner = AutoModel.from_pretrained(str(folder), local_files_only=True).eval()
    except Exception as err:
        raise ModelError(f"could not export {folder} to ONNX: {err}") from err

    class Hidden(torch.nn.Module):
        # BertModel.forward's positional order changes across transformers versions: keywords.
        def __init__(self) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            out = self.inner(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            )
            return out.last_hidden_state

    ids = torch.tensor([[101, 2054, 2003, 1037, 3231, 102]])
    axes = {n: {0: "batch", 1: "tokens"} for n in (*_INPUTS, "last_hidden_state")}

    def write(tmp: Path) -> None:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                Hidden().eval(),
                (ids, torch.ones_like(ids), torch.zeros_like(ids)),
                str(tmp),
                input_names=list(_INPUTS),
                output_names=["last_hidden_state"],
                dynamic_axes=axes,
                opset_version=OPSET,
                dynamo=False,
            )

    try:
        atomic_write(target, write)
    except Exception as err:
        raise ModelError(f"could not export {folder} to ONNX: {err}") from err
    return target


def quantize_weights(source: Path, target: Path) -> Path:
    """The float graph `source` with its weight matrices quantised (ONNX Runtime's dynamic
    quantisation: signed 8-bit weights, a scale per output channel, every MatMul with a
    constant weight input; the activations are quantised per run), written to `target`
    atomically. Keeping the feed-forward down-projections float brought the vectors closer to
    the float model's (cosine 0.9972 against 0.9947) but not the recall: LoCoMo's held-out
    recall@10 fell 0.006 with it, and rose 0.002 with this (BENCHMARKS.md)."""
    try:
        from onnxruntime.quantization import QuantType, quantize_dynamic
    except ImportError as err:
        raise ModelError(
            "quantising an ONNX graph needs the optional extra: pip install 'memflow[st]'"
        ) from err
    import logging

    def write(tmp: Path) -> None:
        root = logging.getLogger()
        level = root.level
        root.setLevel(logging.ERROR)  # its "consider pre-processing" warning: not needed here
        try:
            quantize_dynamic(
                str(source),
                str(tmp),
                weight_type=QuantType.QInt8,
                per_channel=True,
                op_types_to_quantize=["MatMul"],
                extra_options={"MatMulConstBOnly": True},
            )
        finally:
            root.setLevel(level)

    try:
        atomic_write(target, write)
    except Exception as err:
        raise ModelError(f"could not quantise {source}: {err}") from err
    return target


class OnnxEmbeddingProvider(EmbeddingProvider):
    """Loads (exporting when needed) on first use; thread-safe (ONNX Runtime sessions serve
    concurrent runs)."""

    kind = "onnx"
    in_process = True

    def __init__(
        self,
        model_name_or_path: str | None = None,
        *,
        cache_dir: Path | str | None = None,
        threads: int | None = None,
        batch_size: int = EMBED_BATCH,
        max_dimensions: int = DEFAULT_MAX_DIMENSIONS,
    ) -> None:
        if threads is not None and threads < 1:
            raise ValueError("threads must be at least 1")
        self._name = model_name_or_path or DEFAULT_MODEL
        self.quantised = split_quantised(self._name)[1]
        self._cache = Path(cache_dir) if cache_dir is not None else None
        self.threads = threads
        # One text per run when quantised: its activation scales are the batch's (docstring).
        self.batch_size = 1 if self.quantised else batch_size
        self.max_dimensions = max_dimensions
        self._lock = threading.Lock()
        self._session: Any = None
        self._tokenizer: Any = None
        self._folder: _ModelFolder | None = None
        self._feeds: tuple[str, ...] = ()

    @property
    def model(self) -> str:
        return self._name

    def graph_path(self, *, quantised: bool | None = None) -> Path:
        """The exported graph this provider runs (it may not exist yet); `quantised=False`:
        the float graph a quantised one is made from."""
        folder = self._folder or _ModelFolder(_source(self._name))
        cache = self._cache or default_cache_dir()
        digest = folder.digest()
        if self.quantised if quantised is None else quantised:
            digest = hashlib.sha256(f"{digest}:q{QUANTISE_VERSION}".encode()).hexdigest()[:16]
            return cache / f"{folder.path.name}-{digest}{QUANTISED_SUFFIX}.onnx"
        return cache / f"{folder.path.name}-{digest}.onnx"

    def ensure_graph(self) -> Path:
        """The graph this provider runs, exported (and quantised) first where it is missing."""
        folder = self._folder or _ModelFolder(_source(self._name))
        self._folder = folder
        path = self.graph_path()
        if path.is_file():
            return path
        source = self.graph_path(quantised=False)
        if not source.is_file():
            export(folder.path, source)
        if self.quantised:
            quantize_weights(source, path)
        return path

    def _load(self) -> None:
        if self._session is not None:
            return
        try:
            import onnxruntime as ort
            from tokenizers import Tokenizer
        except ImportError as err:
            raise ModelError(
                "the ONNX provider needs the optional extra: pip install 'memflow[st]'"
            ) from err
        path = self.ensure_graph()
        folder = self._folder
        assert folder is not None
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.intra_op_num_threads = self.threads or 0  # 0: ONNX Runtime's default
        options.inter_op_num_threads = 1
        try:
            session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        except Exception as err:
            raise ModelError(f"could not load the ONNX graph {path}: {err}") from err
        dim = session.get_outputs()[0].shape[-1]
        if isinstance(dim, int) and dim > self.max_dimensions:
            raise ModelError(
                f"model {self._name!r} makes {dim}-dimensional vectors; "
                f"the limit is {self.max_dimensions}"
            )
        tokenizer = Tokenizer.from_file(str(folder.path / "tokenizer.json"))
        tokenizer.no_padding()
        tokenizer.enable_truncation(folder.max_length)
        self._feeds = tuple(i.name for i in session.get_inputs())
        self._tokenizer = tokenizer
        self._session = session

    @property
    def dim(self) -> int:
        return len(self.embed(["dimension probe"])[0])

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        if self._session is None:
            with self._lock:
                self._load()
        out: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            out.extend(self._embed_batch(texts[start : start + self.batch_size]))
        return out

    def _embed_batch(self, texts: Sequence[str]) -> list[list[float]]:
        import numpy as np

        session, folder = self._session, self._folder
        if session is None or folder is None:
            raise ModelError(f"ONNX model {self._name!r} is closed")
        encodings = self._tokenizer.encode_batch(list(texts))
        width = max(len(e.ids) for e in encodings)
        ids = np.zeros((len(encodings), width), dtype=np.int64)
        mask = np.zeros_like(ids)
        for i, e in enumerate(encodings):
            ids[i, : len(e.ids)] = e.ids
            mask[i, : len(e.ids)] = 1
        arrays = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        try:
            hidden = session.run(None, {n: arrays[n] for n in self._feeds})[0]
        except Exception as err:
            raise ModelError(f"ONNX model {self._name!r} failed: {err}") from err
        weights = mask[:, :, None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
        if folder.normalize:
            pooled /= np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
        return pooled.astype(np.float32).tolist()

    def close(self) -> None:
        with self._lock:
            self._session = None
            self._tokenizer = None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="export a model for the ONNX provider")
    parser.add_argument("--export", action="store_true", help="export now (if not there yet)")
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--cache-dir", type=Path)
    args = parser.parse_args(argv)
    provider = OnnxEmbeddingProvider(args.model, cache_dir=args.cache_dir)
    path = provider.ensure_graph() if args.export else provider.graph_path()
    print(path if path.is_file() else f"not exported: {path}")
    return 0 if path.is_file() else 1


if __name__ == "__main__":
    raise SystemExit(main())
