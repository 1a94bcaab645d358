"""memflow's hybrid recall beside Mem0's search, side by side, the query embedding included.

    python bench/bench_vs_mem0.py                 # conv-41 through the pipeline into a temp dir
    python bench/bench_vs_mem0.py --data DIR      # reuse bench_locomo's (or an earlier) output
    python bench/bench_vs_mem0.py --data DIR --model all-MiniLM-L6-v2   # memflow's ONNX worker
                                                  # on another model than the default

Three worker processes answer the same queries, one at a time, in rotating order, each timing
its own call (so pipes and JSON are not in the figures):

- memflow: `RecallService.recall(..., ranking="hybrid", limit=40)` over the embedded stores
  (SQLite + the embedded vector store, entity-name and fact vectors), its provider built the
  way `memflow serve` builds it (`recall.server.embedder`) with `MEMFLOW_EMBEDDER=onnx` and its
  default model (the MiniLM weights quantised to 8 bits, `all-MiniLM-L6-v2-int8`, through ONNX
  Runtime, `resources/models/onnx_embeddings.py`), or with `--model` another model of that
  provider (`MEMFLOW_EMBEDDING_MODEL`, e.g. the float `all-MiniLM-L6-v2`), over vectors the
  pipeline made with that model;
- memflow with the torch provider (`MEMFLOW_EMBEDDER=sentence-transformers`, the frozen
  TorchScript trace of issue 11): the same service, the same vectors;
- Mem0 open source (`mem0ai`, FAISS, the Hugging Face embedder on the same all-MiniLM-L6-v2
  files, `add(..., infer=False)`, `search(limit=40)`), in its own virtual environment
  (`bench/.venv-mem0`, created here on first use with the same torch / sentence-transformers /
  transformers versions as memflow's), offline.

Both hold one tenant's facts (LoCoMo conv-41, as the pipeline stored them; Mem0 gets each
fact's text as one memory). Queries are LoCoMo question texts, each used once (no query cache
answers). Then the embedding alone, the same way. Results: `bench/results/vs_mem0.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from bench import locomo  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "vs_mem0.json"
MEM0_VENV = ROOT / "bench" / ".venv-mem0"
MEM0_VERSION = "2.2.1"
SHARED = ("torch", "sentence-transformers", "transformers", "tokenizers", "faiss-cpu")
CONV = "conv-41"
LIMIT = 40
SYSTEMS = ("memflow", "memflow_torch", "mem0")
GOAL = 0.6  # issue 20: memflow at most 0.6x of Mem0 at p50 and p95


# -- Mem0's environment -----------------------------------------------------------------------


def mem0_python(log: Any = print) -> Path:
    """bench/.venv-mem0's python, creating the environment (PyPI) on first use."""
    python = MEM0_VENV / "bin" / "python"
    stamp = MEM0_VENV / ".installed"
    pins = [f"mem0ai=={MEM0_VERSION}", *(f"{n}=={version(n)}" for n in SHARED)]
    if stamp.exists() and stamp.read_text() == "\n".join(pins):
        return python
    log(f"creating {MEM0_VENV.relative_to(ROOT)}: {' '.join(pins)}")
    uv = Path(sys.executable).with_name("uv")
    steps = (
        [[str(uv), "venv", "-q", "--python", sys.executable, str(MEM0_VENV)]]
        if uv.exists()
        else [[sys.executable, "-m", "venv", str(MEM0_VENV)]]
    )
    install = (
        [str(uv), "pip", "install", "-q", "--python", str(python), *pins]
        if uv.exists()
        else [str(python), "-m", "pip", "install", "-q", *pins]
    )
    for cmd in [*steps, install]:
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(
                f"could not build Mem0's environment: {' '.join(cmd[:4])}... exited "
                f"{done.returncode}: {(done.stderr or done.stdout).strip()[-800:]}"
            )
    stamp.write_text("\n".join(pins))
    return python


# -- workers ----------------------------------------------------------------------------------


class Worker:
    """A process answering JSON lines (bench/mem0_worker.py, or this file's `worker`)."""

    def __init__(self, name: str, cmd: Sequence[str], env: dict[str, str]) -> None:
        self.name = name
        self.proc = subprocess.Popen(
            list(cmd),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
            cwd=ROOT,
        )

    def ask(self, **req: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.name} worker exited ({self.proc.wait()})")
        reply = json.loads(line)
        if not reply.get("ok"):
            raise RuntimeError(f"{self.name}: {reply.get('error')}")
        return reply

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


# What each step of the provider change is worth (`--ablation`): embedding through the
# service's query path, each variant in its own process (torch's threads are per process).
VARIANTS = {
    "before": "encode(), torch's default threads, through the service's thread pool",
    "inline": "+ called inline (no thread hand-off)",
    "one_thread": "+ one torch thread",
    "fast_path": "+ the provider's own tokenizer/transformer/pooling path (eager)",
    "traced": "+ the frozen TorchScript trace for one text (= memflow with torch)",
    "onnx": "the same weights through ONNX Runtime, one thread (MEMFLOW_EMBEDDER=onnx)",
}


def _provider(variant: str, model: str = "") -> Any:
    from recall.server import embedder
    from resources.models.st_embeddings import SentenceTransformerEmbeddingProvider
    from resources.settings import Settings

    if variant == "traced":
        return embedder(Settings({"MEMFLOW_EMBEDDER": "sentence-transformers"}))
    if variant == "onnx":
        return embedder(Settings({"MEMFLOW_EMBEDDER": "onnx", "MEMFLOW_EMBEDDING_MODEL": model}))

    class Before(SentenceTransformerEmbeddingProvider):
        in_process = False  # through the service's thread pool, as every provider was

    kind = Before if variant == "before" else SentenceTransformerEmbeddingProvider
    return kind(
        None,
        threads=None if variant in ("before", "inline") else 1,
        fast_path=variant == "fast_path",
        trace=False,
    )


def memflow_worker(data: Path, variant: str, model: str = "") -> int:
    """This file's worker mode: memflow's recall over `data`, JSON lines on stdin/stdout."""
    from recall.service import RecallService
    from resources.graph.sqlite import SqliteGraphStore
    from resources.settings import graph_path
    from resources.vector.factory import open_vector_store

    out = sys.stdout
    sys.stdout = sys.stderr
    provider = _provider(variant, model)
    provider.embed(["warm up"])
    graph = SqliteGraphStore(graph_path(data))
    vectors = open_vector_store(None, data)
    service = RecallService(graph, vectors, provider)
    scope = locomo.scope_of(CONV)
    for line in sys.stdin:
        req = json.loads(line)
        if req["op"] == "search":
            t = time.perf_counter()
            answer = service.recall(scope, req["query"], ranking="hybrid", limit=LIMIT)
            ms = (time.perf_counter() - t) * 1000.0
            reply = {"ok": True, "ms": ms, "embed_ms": answer.timings_ms.embed}
            reply["n"] = len(answer.facts)
            reply["mode"] = answer.mode
        else:  # the query path: the vector leg's embed (a new text: its cache never answers)
            t = time.perf_counter()
            service.vector_leg.embed(provider.model, req["query"])
            reply = {"ok": True, "ms": (time.perf_counter() - t) * 1000.0}
        out.write(json.dumps(reply) + "\n")
        out.flush()
    service.close()
    vectors.close()
    graph.close()
    return 0


# -- the run ----------------------------------------------------------------------------------


def pct(values: Sequence[float]) -> dict[str, float]:
    a = np.asarray(values)
    return {
        "n": int(a.size),
        "p50_ms": round(float(np.percentile(a, 50)), 2),
        "p95_ms": round(float(np.percentile(a, 95)), 2),
        "mean_ms": round(float(a.mean()), 2),
    }


def prepare(data: Path, model: str = "") -> list[str]:
    """conv-41 through the pipeline, fact vectors included (unless `data` holds a run of the
    current landing with it), and with `model` (an ONNX provider model, `--model`) too; the
    texts of its facts valid now, for Mem0."""
    from datetime import UTC as utc

    from memflow.fact_embedding import fact_text
    from resources.graph.sqlite import SqliteGraphStore
    from resources.settings import graph_path

    mark = data / locomo.READY_MARK
    info = json.loads(mark.read_text()) if mark.exists() else {}
    current = {locomo.input_digest(convs): convs for convs in (locomo.CONVS, (CONV,))}
    held = info.get("digest") in current and locomo.scope_of(CONV).key in info.get("tenants", [])
    if not held:
        locomo.run_pipeline(data, (CONV,))
    if model and model != locomo.DEFAULT_MODEL:  # the same landing, embedded with `model` too
        locomo.run_pipeline(data, current[info["digest"]] if held else (CONV,), model=model)
    graph = SqliteGraphStore(graph_path(data))
    now = datetime.now(utc)
    facts = [f for f in graph.facts(locomo.scope_of(CONV)) if f.valid_at(now)]
    graph.close()
    return [fact_text(f.subject, f.predicate, f.object) for f in facts]


def run(data: Path, n_queries: int, model: str = "", log: Any = print) -> dict[str, Any]:
    from resources.models.onnx_embeddings import DEFAULT_MODEL
    from resources.models.st_embeddings import bundled_model_path

    model = model or DEFAULT_MODEL
    python = mem0_python(log)
    texts = prepare(data, model)
    queries = [q.text for q in locomo.load_questions()]
    random.Random(11).shuffle(queries)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("MEMFLOW_")},
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    me = [sys.executable, str(Path(__file__).resolve()), "worker", "--data", str(data)]
    workers = {
        "memflow": Worker("memflow", [*me, "--variant", "onnx", "--model", model], env),
        "memflow_torch": Worker("memflow_torch", [*me, "--variant", "traced"], env),
        "mem0": Worker("mem0", [str(python), str(ROOT / "bench" / "mem0_worker.py")], env),
    }
    mem0_dir = Path(tempfile.mkdtemp(prefix="memflow-vs-mem0-"))
    try:
        versions = workers["mem0"].ask(op="versions")["versions"]
        loaded = workers["mem0"].ask(
            op="load", model=bundled_model_path(), facts=texts, user=CONV, dir=str(mem0_dir)
        )
        log(f"Mem0 holds {loaded['added']} memories ({loaded['seconds']:.1f} s to add)")
        warm, timed = queries[:20], queries[20 : 20 + n_queries]
        for q in warm:
            for w in workers.values():
                w.ask(op="search", query=q + " (warm-up)", limit=LIMIT)
        search: dict[str, list[float]] = {s: [] for s in SYSTEMS}
        inner: dict[str, list[float]] = {s: [] for s in SYSTEMS}
        hits: dict[str, list[int]] = {s: [] for s in SYSTEMS}
        modes: set[str] = set()
        for i, q in enumerate(timed):
            order = SYSTEMS[i % 3 :] + SYSTEMS[: i % 3]  # each goes first a third of the time
            for s in order:
                reply = workers[s].ask(op="search", query=q, limit=LIMIT)
                search[s].append(reply["ms"])
                inner[s].append(reply.get("embed_ms", 0.0))
                hits[s].append(reply["n"])
                modes.add(reply.get("mode", "mem0"))
        embed: dict[str, list[float]] = {s: [] for s in SYSTEMS}
        for i, q in enumerate(queries[20 + n_queries :][: n_queries // 2]):
            order = SYSTEMS[i % 3 :] + SYSTEMS[: i % 3]
            for s in order:
                embed[s].append(workers[s].ask(op="embed", query=q)["ms"])
    finally:
        for w in workers.values():
            w.close()
        shutil.rmtree(mem0_dir, ignore_errors=True)
    result = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "load_avg_1_5_15_at_end": os.getloadavg()},
        "tenant": locomo.scope_of(CONV).key,
        "facts": len(texts),
        "memflow_model": model,
        "limit": LIMIT,
        "queries": len(timed),
        "versions": {"memflow_venv": {n: version(n) for n in SHARED}, "mem0_venv": versions},
        "modes_served": sorted(modes),
        "search_incl_embedding": {s: pct(v) for s, v in search.items()},
        "embedding_inside_search": {s: pct(v) for s, v in inner.items()},
        "embedding_alone": {s: pct(v) for s, v in embed.items() if v},
        "hits_mean": {s: round(float(np.mean(v)), 1) for s, v in hits.items()},
    }
    z = result["search_incl_embedding"]["mem0"]
    for name in ("memflow", "memflow_torch"):
        m = result["search_incl_embedding"][name]
        result[f"{name}_over_mem0"] = {
            "p50": round(m["p50_ms"] / z["p50_ms"], 3),
            "p95": round(m["p95_ms"] / z["p95_ms"], 3),
        }
    return result


def ablation(data: Path, n_queries: int) -> dict[str, Any]:
    """Embedding through the service's query path, one process per variant, in turn."""
    queries = [q.text + " (ablation)" for q in locomo.load_questions()]
    random.Random(12).shuffle(queries)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    me = [sys.executable, str(Path(__file__).resolve()), "worker", "--data", str(data)]
    names = list(VARIANTS)
    workers = {v: Worker(v, [*me, "--variant", v], env) for v in names}
    times: dict[str, list[float]] = {v: [] for v in names}
    try:
        for q in queries[:20]:
            for w in workers.values():
                w.ask(op="embed", query=q + " warm")
        for i, q in enumerate(queries[20 : 20 + n_queries]):
            k = i % len(names)
            for v in names[k:] + names[:k]:
                times[v].append(workers[v].ask(op="embed", query=q)["ms"])
    finally:
        for w in workers.values():
            w.close()
    return {v: {"what": VARIANTS[v], **pct(times[v])} for v in names}


def table(r: dict[str, Any]) -> str:
    lines = [
        f"{r['tenant']}: {r['facts']} facts, top {r['limit']}, {r['queries']} queries, "
        f"each system in turn; memflow's ONNX worker on {r.get('memflow_model')}",
        "| system | search p50 ms | p95 | embedding alone p50 | p95 |",
        "|---|---:|---:|---:|---:|",
    ]
    for s in SYSTEMS:
        a, e = r["search_incl_embedding"][s], r["embedding_alone"].get(s, {})
        alone = f"{e.get('p50_ms', '')} | {e.get('p95_ms', '')}"
        lines.append(f"| {s} | {a['p50_ms']} | {a['p95_ms']} | {alone} |")
    for name in ("memflow", "memflow_torch"):
        ratio = r[f"{name}_over_mem0"]
        lines.append(f"{name} / Mem0: p50 {ratio['p50']}, p95 {ratio['p95']}")
    if "ablation" in r:
        lines += ["", "| query embedding, step by step | p50 ms | p95 ms |", "|---|---:|---:|"]
        for v, m in r["ablation"].items():
            lines.append(f"| {v}: {m['what']} | {m['p50_ms']} | {m['p95_ms']} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("mode", nargs="?", choices=("worker",), help=argparse.SUPPRESS)
    parser.add_argument("--data", type=Path, help="pipeline output to keep and reuse")
    parser.add_argument("--queries", type=int, default=600)
    parser.add_argument(
        "--ablation", action="store_true", help="also time each step of the provider change"
    )
    parser.add_argument(
        "--model",
        default="",
        help="memflow's ONNX worker embeds with this model (default: the provider's, "
        "all-MiniLM-L6-v2-int8), e.g. the float all-MiniLM-L6-v2",
    )
    parser.add_argument("--variant", choices=tuple(VARIANTS), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.mode == "worker":
        return memflow_worker(args.data, args.variant, args.model)

    tmp = None
    data = args.data
    if data is None:
        tmp = Path(tempfile.mkdtemp(prefix="memflow-vs-mem0-data-"))
        data = tmp
    data = data.resolve()
    data.mkdir(parents=True, exist_ok=True)
    try:
        result = run(data, args.queries, args.model)
        if args.ablation:
            result["ablation"] = ablation(data, args.queries)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(table(result))
    print(f"written {RESULTS.relative_to(ROOT)}")
    ratio = result["memflow_over_mem0"]
    faster = ratio["p50"] <= GOAL and ratio["p95"] <= GOAL
    if not faster:
        print(f"memflow is not at or below {GOAL}x of Mem0 on both p50 and p95")
    return 0 if faster else 1


if __name__ == "__main__":
    raise SystemExit(main())
