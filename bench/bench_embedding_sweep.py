"""Embedding sweep throughput against the embedding provider's own, on the same names.

    python bench/bench_embedding_sweep.py [--names 1024] [--rounds 3] [--modes inprocess server]

The target: the sweep (`memflow.embedding.embed_missing`: hashing, the ledger anti-join, one
Parquet part per batch of 64) runs within 10% of the provider alone embedding the same names in
the same batches of 64. Two providers, both with the real all-MiniLM-L6-v2 model:

- `inprocess`: SentenceTransformerEmbeddingProvider in this process;
- `server`: OpenAIEmbeddingProvider against `resources.models.embed_server` on loopback.

Each round times the provider alone, then a sweep into a fresh ledger. On a shared host the
model's speed swings between rounds, so besides the paired ratio the sweep's time inside the
provider is reported: the rest is what the sweep itself costs, whatever the model's speed.
Needs the `st` extra. Writes `bench/results/embedding_sweep.json` and prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import polars as pl

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.netutil import free_port, wait_for_http  # noqa: E402
from memflow.embedding import embed_missing  # noqa: E402
from resources.models.base import EMBED_BATCH, EmbeddingProvider  # noqa: E402
from resources.vector.ledger import EmbeddingLedger  # noqa: E402
from schemas.scope import Scope  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "embedding_sweep.json"
SCOPE = Scope("bench", "sweep")
WORDS = [
    "billing",
    "payments",
    "auth",
    "gateway",
    "search",
    "index",
    "ledger",
    "invoice",
    "user",
    "session",
    "cache",
    "queue",
    "postgres",
    "redis",
    "kafka",
    "terraform",
    "helm",
    "nginx",
    "grafana",
    "worker",
    "scheduler",
    "export",
    "import",
    "token",
    "deploy",
    "staging",
    "production",
    "eu-west-1",
    "us-east-2",
    "api",
    "frontend",
    "backend",
    "mobile",
    "react",
    "django",
    "fastapi",
    "pipeline",
    "dagster",
    "milvus",
    "sqlite",
    "gremlin",
    "embedding",
    "recall",
    "migration",
    "schema",
]


def entity_names(n: int) -> list[str]:
    """Distinct, name-like strings of one to four words."""
    names: list[str] = []
    i = 0
    while len(names) < n:
        a, b, c = WORDS[i % len(WORDS)], WORDS[(i // 7) % len(WORDS)], WORDS[(i // 49) % len(WORDS)]
        shape = i % 4
        name = [a, f"{a}-{b}", f"{a} {b} {c}", f"{b}_{a} v{i % 13}"][shape]
        names.append(f"{name} #{i}" if name in names else name)
        i += 1
    return names


def provider_alone(provider: EmbeddingProvider, names: list[str]) -> float:
    started = time.perf_counter()
    for start in range(0, len(names), EMBED_BATCH):
        provider.embed(names[start : start + EMBED_BATCH])
    return len(names) / (time.perf_counter() - started)


class Timed(EmbeddingProvider):
    """Passes calls through and adds up the time spent inside the provider."""

    def __init__(self, inner: EmbeddingProvider) -> None:
        self.inner = inner
        self.inside = 0.0

    @property
    def model(self) -> str:
        return self.inner.model

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        started = time.perf_counter()
        try:
            return self.inner.embed(texts)
        finally:
            self.inside += time.perf_counter() - started


def sweep(provider: EmbeddingProvider, names: list[str]) -> tuple[float, float]:
    """(names/s of the sweep, share of its time spent inside the provider)."""
    entities = pl.DataFrame({"entity_id": [f"e{i}" for i in range(len(names))], "name": names})
    timed = Timed(provider)
    with tempfile.TemporaryDirectory(prefix="memflow-sweep-") as tmp:
        started = time.perf_counter()
        report = embed_missing(timed, EmbeddingLedger(tmp), SCOPE, entities)
        seconds = time.perf_counter() - started
    assert report.embedded == len(names), report
    return len(names) / seconds, timed.inside / seconds


def measure(
    label: str, provider: EmbeddingProvider, names: list[str], rounds: int
) -> dict[str, Any]:
    provider.embed(names[:EMBED_BATCH])  # warm-up: model load, first-call costs
    alone: list[float] = []
    swept: list[float] = []
    inside: list[float] = []
    for _ in range(rounds):
        alone.append(provider_alone(provider, names))
        rate, share = sweep(provider, names)
        swept.append(rate)
        inside.append(share)
    row = {
        "mode": label,
        "model": provider.model,
        "names": len(names),
        "rounds": rounds,
        "provider_names_per_s": round(statistics.median(alone), 1),
        "sweep_names_per_s": round(statistics.median(swept), 1),
        # Paired per round, since the host's load changes between rounds.
        "ratio": round(statistics.median(s / a for s, a in zip(swept, alone, strict=True)), 3),
        # Independent of load: the share of the sweep's time spent inside the provider; the
        # rest (hashing, the ledger anti-join, Parquet parts) is what the sweep adds.
        "time_in_provider": round(statistics.median(inside), 4),
        "provider_runs": [round(x, 1) for x in alone],
        "sweep_runs": [round(x, 1) for x in swept],
    }
    print(f"  {label}: {row}", flush=True)
    return row


def start_server() -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "resources.models.embed_server",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for_http(f"{url}/health", 300, proc=proc)
    except TimeoutError:
        proc.kill()
        raise RuntimeError("embed server did not start in 300 s") from None
    return proc, url


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--names", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--modes", nargs="+", default=["inprocess", "server"])
    args = parser.parse_args(argv)
    names = entity_names(args.names)
    rows: list[dict[str, Any]] = []
    if "inprocess" in args.modes:
        from resources.models.st_embeddings import SentenceTransformerEmbeddingProvider

        st = SentenceTransformerEmbeddingProvider()
        rows.append(measure("inprocess", st, names, args.rounds))
        st.close()
    if "server" in args.modes:
        from resources.models.openai_embeddings import OpenAIEmbeddingProvider

        proc, url = start_server()
        try:
            with OpenAIEmbeddingProvider(url, "all-MiniLM-L6-v2") as remote:
                rows.append(measure("server", remote, names, args.rounds))
        finally:
            proc.terminate()
            proc.wait(30)
    result = {
        "target_ratio": 0.9,
        "cpus": os.cpu_count(),
        "loadavg_at_end": [round(x, 2) for x in os.getloadavg()],
        "results": rows,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print()
    print("| provider | names | alone names/s | sweep names/s | sweep / alone | time in provider |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['mode']} ({r['model']}) | {r['names']} | {r['provider_names_per_s']} | "
            f"{r['sweep_names_per_s']} | {r['ratio']:.1%} | {r['time_in_provider']:.1%} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
