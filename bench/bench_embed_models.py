"""Bulk embedding cost of the default model beside the float one, on the same texts.

    python bench/bench_embed_models.py [--texts 1024] [--rounds 3]

What the pipeline's sweeps pay per text (`entity_embeddings`, `fact_embeddings`: the provider's
`embed` over batches of 64) with each in-process provider, as the code location builds it
(threads left to the runtime): the ONNX default `all-MiniLM-L6-v2-int8` (one text per run:
`resources/models/onnx_embeddings.py` says why), the float model through ONNX Runtime and
through torch (`sentence-transformers`, batches of 64). The texts are LoCoMo fact texts
("subject predicate object", `bench/data/locomo/`), each provider given the same ones in the
same batches; rounds interleave the providers so a shared host's load falls on all of them.
Reported: texts per second of wall time and CPU seconds (this process, all threads) per 1,000
texts, median over rounds. Writes `bench/results/embed_models.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from resources.models.base import EMBED_BATCH, EmbeddingProvider  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "embed_models.json"
PROVIDERS = ("onnx int8 (default)", "onnx float", "torch float")


def texts(n: int) -> list[str]:
    """The first `n` distinct fact texts of the LoCoMo set."""
    from memflow.fact_embedding import fact_text

    out: dict[str, None] = {}
    for path in sorted((ROOT / "bench" / "data" / "locomo").glob("conv-4*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            for t in row.get("triples", [row]):
                if {"subject", "predicate", "object"} <= t.keys():
                    out[fact_text(t["subject"], t["predicate"], t["object"])] = None
            if len(out) >= n:
                return list(out)[:n]
    if len(out) < n:
        raise SystemExit(f"only {len(out)} distinct fact texts in the LoCoMo set")
    return list(out)


def build(name: str) -> EmbeddingProvider:
    from resources.models.onnx_embeddings import DEFAULT_MODEL, FLOAT_MODEL, OnnxEmbeddingProvider
    from resources.models.st_embeddings import SentenceTransformerEmbeddingProvider

    if name == "onnx int8 (default)":
        return OnnxEmbeddingProvider(DEFAULT_MODEL)
    if name == "onnx float":
        return OnnxEmbeddingProvider(FLOAT_MODEL)
    return SentenceTransformerEmbeddingProvider(FLOAT_MODEL)


def timed(provider: EmbeddingProvider, items: Sequence[str]) -> tuple[float, float]:
    """(wall s, CPU s) to embed `items` in the sweeps' batches."""
    wall, cpu = time.perf_counter(), time.process_time()
    for start in range(0, len(items), EMBED_BATCH):
        provider.embed(items[start : start + EMBED_BATCH])
    return time.perf_counter() - wall, time.process_time() - cpu


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--texts", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    items = texts(args.texts)
    providers = {name: build(name) for name in PROVIDERS}
    for p in providers.values():
        p.embed(items[:EMBED_BATCH])  # load and warm up
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in PROVIDERS}
    for r in range(args.rounds):
        order = PROVIDERS[r % 3 :] + PROVIDERS[: r % 3]
        for name in order:
            runs[name].append(timed(providers[name], items))
    for p in providers.values():
        p.close()
    report: dict[str, Any] = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "load_avg_1_5_15_at_end": os.getloadavg(),
        "cpus": os.cpu_count(),
        "texts": len(items),
        "batch": EMBED_BATCH,
        "rounds": args.rounds,
        "providers": {},
    }
    lines = [
        f"{len(items)} LoCoMo fact texts, batches of {EMBED_BATCH}, {args.rounds} rounds "
        f"(median), load {os.getloadavg()[0]:.1f}",
        "| provider | texts/s (wall) | CPU s per 1,000 texts |",
        "|---|---:|---:|",
    ]
    for name in PROVIDERS:
        wall = statistics.median(w for w, _ in runs[name])
        cpu = statistics.median(c for _, c in runs[name])
        report["providers"][name] = {
            "texts_per_s": round(len(items) / wall, 1),
            "cpu_s_per_1000": round(cpu * 1000 / len(items), 2),
            "rounds": [[round(w, 3), round(c, 3)] for w, c in runs[name]],
        }
        lines.append(f"| {name} | {len(items) / wall:.1f} | {cpu * 1000 / len(items):.2f} |")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
