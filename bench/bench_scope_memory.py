"""The recall service's memory as more and more tenants are asked for (issue 19 item 4).

    python bench/bench_scope_memory.py [--tenants 100,1000,10000] [--model onnx|hash]

For each size, a data directory of N tenants (20 entities and 20 facts each, in the SQLite
graph store, with entity and fact vectors in the embedded vector store) is written, then a new
process builds a `RecallService` over it (as the API does) and asks every tenant one hybrid
question, twice over. It samples its RSS (psutil) as it goes and reports the peak, the RSS
after the first 100 tenants and at the end, the scope cache's footprint and the vector cache's
bytes. Bounded memory means the RSS at the end does not grow with N once the caches are full
(64 scopes, the vector cache's byte budget).

`--model onnx` (default) embeds each question with the bundled model, as served; the stored
vectors are then written by the same model. `--model hash` uses a deterministic hash embedder
(no model runtime in the process) to isolate the caches. Results:
`bench/results/scope_memory-<model>.json`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from resources.models.base import EmbeddingProvider  # noqa: E402

RESULTS = ROOT / "bench" / "results"
ENTITIES, FACTS, DIM = 20, 20, 384


class HashEmbedder(EmbeddingProvider):
    """Unit vectors that depend only on the text: no model runtime in the process."""

    kind = "hash"

    @property
    def model(self) -> str:
        return "hash-384"

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        out = []
        for text in texts:
            seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
            v = np.random.default_rng(seed).standard_normal(DIM)
            out.append((v / np.linalg.norm(v)).tolist())
        return out


def embedder(kind: str):
    if kind == "hash":
        return HashEmbedder()
    from recall.build import embedder as build_embedder
    from resources.settings import Settings

    return build_embedder(Settings({"MEMFLOW_EMBEDDER": "onnx"}))


def scopes(n: int):
    from schemas.scope import Scope

    return [Scope(f"org{i // 50}", f"repo{i}") for i in range(n)]


def write(data: Path, n: int, kind: str) -> float:
    """N tenants into the graph and vector stores; returns the seconds it took."""
    from memflow.fact_embedding import fact_text
    from resources.graph.sqlite import SqliteGraphStore
    from resources.vector.base import fact_vectors_key
    from resources.vector.local import LocalVectorStore
    from schemas.ids import entity_id, fact_id, norm_key, sha256_text
    from schemas.records import EntityRecord, FactRecord

    started = time.perf_counter()
    model = embedder(kind)
    graph = SqliteGraphStore(data / "graph.sqlite")
    vectors = LocalVectorStore(data / "vectors")
    t0 = datetime(2026, 11, 1, tzinfo=UTC)
    for i, scope in enumerate(scopes(n)):
        names = [f"service-{i}-{j}" for j in range(ENTITIES)]
        ids = [entity_id(scope.tenant_id, scope.ns, norm_key(name)) for name in names]
        entities = [EntityRecord(e, name, (), ()) for e, name in zip(ids, names, strict=True)]
        facts = []
        for j in range(FACTS):
            s, o = j % ENTITIES, (j * 7 + 1) % ENTITIES
            facts.append(
                FactRecord(
                    fact_id=fact_id(scope.tenant_id, scope.ns, ids[s], "DEPENDS_ON", ids[o]),
                    subject_id=ids[s],
                    subject=names[s],
                    predicate="DEPENDS_ON",
                    object_id=ids[o],
                    object=names[o],
                    confidence=0.9,
                    valid_from=t0,
                    valid_to=None,
                    session_id="s",
                    turn_id=f"t{j}",
                    client="bench",
                    model="explicit",
                    source="explicit",
                )
            )
        graph.upsert_entities(scope, entities)
        graph.upsert_facts(scope, facts)
        vecs = model.embed(names)
        vectors.upsert(
            model.model,
            DIM,
            scope,
            [(e, sha256_text(nm), v) for e, nm, v in zip(ids, names, vecs, strict=True)],
        )
        texts = [fact_text(f.subject, f.predicate, f.object) for f in facts]
        fvecs = model.embed(texts)
        vectors.upsert(
            fact_vectors_key(model.model),
            DIM,
            scope,
            [(f.fact_id, sha256_text(t), v) for f, t, v in zip(facts, texts, fvecs, strict=True)],
        )
    graph.close()
    vectors.close()
    return time.perf_counter() - started


def serve(data: Path, n: int, kind: str) -> dict:
    """In a fresh process: every tenant asked twice, RSS sampled along the way."""
    import psutil

    from recall.service import RecallService
    from resources.graph.sqlite import SqliteGraphStore
    from resources.vector.local import LocalVectorStore

    me = psutil.Process()
    model = embedder(kind)
    graph = SqliteGraphStore(data / "graph.sqlite")
    vectors = LocalVectorStore(data / "vectors")
    service = RecallService(graph, vectors=vectors, embedder=model, current_model=model.model)
    base = me.memory_info().rss
    samples: list[tuple[int, int]] = []
    latencies: list[float] = []
    every = max(1, n // 20)
    asked = 0
    for _round in range(2):
        for i, scope in enumerate(scopes(n)):
            t = time.perf_counter()
            answer = service.recall(scope, f"what does service-{i}-3 depend on?", ranking="hybrid")
            latencies.append(time.perf_counter() - t)
            assert answer.facts, scope.key
            asked += 1
            if asked % every == 0 or asked == 100:
                samples.append((asked, me.memory_info().rss))
    after_100 = next(rss for k, rss in samples if k >= 100)
    end = samples[-1][1]
    entries, locks = service.indexes.footprint()
    out = {
        "tenants": n,
        "questions": asked,
        "rss_after_build_mib": round(base / 2**20, 1),
        "rss_after_100_mib": round(after_100 / 2**20, 1),
        "rss_end_mib": round(end / 2**20, 1),
        "rss_peak_sampled_mib": round(max(r for _, r in samples) / 2**20, 1),
        "growth_after_100_mib": round((end - after_100) / 2**20, 1),
        "scope_cache": {"indexes": entries, "build_locks": locks},
        "vector_cache_mib": round(vectors.cache.bytes / 2**20, 2),
        "p50_ms": round(statistics.median(latencies) * 1000, 2),
        "samples": [(k, round(r / 2**20, 1)) for k, r in samples],
    }
    service.close()
    graph.close()
    vectors.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tenants", default="100,1000,10000")
    parser.add_argument("--model", choices=("onnx", "hash"), default="onnx")
    parser.add_argument("--serve", nargs=2, metavar=("DATA", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        print(json.dumps(serve(Path(args.serve[0]), int(args.serve[1]), args.model)))
        return
    results = []
    for n in (int(x) for x in args.tenants.split(",")):
        with tempfile.TemporaryDirectory(prefix="memflow-scope-memory-") as tmp:
            data = Path(tmp)
            seconds = write(data, n, args.model)
            child = subprocess.run(
                [sys.executable, __file__, "--model", args.model, "--serve", tmp, str(n)],
                capture_output=True,
                text=True,
                check=True,
                env={**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")},
            )
            result = json.loads(child.stdout.strip().splitlines()[-1])
            result["write_s"] = round(seconds, 1)
            results.append(result)
            print(json.dumps({k: v for k, v in result.items() if k != "samples"}), flush=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"scope_memory-{args.model}.json").write_text(
        json.dumps(
            {
                "when": datetime.now(UTC).isoformat(timespec="seconds"),
                "machine": f"{platform.machine()} {os.cpu_count()} CPUs",
                "model": args.model,
                "results": results,
            },
            indent=2,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
