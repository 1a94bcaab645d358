"""Recall quality: the project's benchmark set, then the public LoCoMo benchmark.

    python bench/bench_quality.py                # both sets (`make bench-quality`)
    python bench/bench_quality.py --set project  # the project's set only
    python bench/bench_quality.py --set locomo --locomo-data DIR   # LoCoMo, reusing a run
    python bench/bench_quality.py --names-only   # project set, no embedding model needed
    python bench/bench_quality.py --ablation     # also compare recall variants (fact leg, ...)

The public benchmark (LoCoMo conversations through the pipeline, beside flat fact search) is
`bench/bench_locomo.py`; this script runs it after the project's set. What follows is about the
project's set.

The set lives in `bench/quality/`: entities, facts (with supersessions), hub fillers (expanded
deterministically from `hubs.json`) and queries with their relevant facts, over several tenants
including distractor tenants that reuse the same names. It is loaded into fresh stores in a
temp dir (SQLite graph, the embedded vector store); for hybrid, every entity name and every fact
text is embedded, as the pipeline would, by the default model in-process (the ONNX provider,
all-MiniLM-L6-v2-int8; `--embed-model all-MiniLM-L6-v2` for the float model), or with
`--embedder server` through the local embedding server (`resources.models.embed_server`, the
float all-MiniLM-L6-v2, torch) and the OpenAI-compatible provider.

Reports recall@5, recall@10, precision@5 and MRR per mode (names-only, hybrid, and semantic,
reported but not judged; and per query kind), plus two invariants that must be zero, in every
mode: superseded facts answered as current, and facts of another scope.
Results go to `bench/results/quality.json`; a markdown table is printed. Exit status 1 when
hybrid is below names-only on any metric or an invariant is broken.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from itertools import product
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from anywhere: `python bench/bench_quality.py`
    sys.path.insert(0, str(ROOT))

from bench.curve import summary  # noqa: E402
from bench.netutil import free_port, wait_for_http  # noqa: E402
from bench.recall_variants import VARIANTS  # noqa: E402
from recall.service import RecallConfig, RecallService  # noqa: E402
from resources.graph.base import GraphStore  # noqa: E402
from resources.models.base import EmbeddingProvider  # noqa: E402
from resources.vector.base import VectorStore  # noqa: E402
from schemas.ids import entity_id, fact_id, norm_key, sha256_text  # noqa: E402
from schemas.records import EntityRecord, FactRecord  # noqa: E402
from schemas.scope import Scope  # noqa: E402

SET_DIR = ROOT / "bench" / "quality"
RESULTS = ROOT / "bench" / "results" / "quality.json"
METRICS = ("recall@5", "recall@10", "precision@5", "mrr")
EMBED_MODEL = "all-MiniLM-L6-v2"  # the embedding server's (torch) model: the float one


@dataclass(frozen=True, slots=True)
class Query:
    id: str
    scope: Scope
    text: str
    relevant: tuple[str, ...]
    kinds: tuple[str, ...]
    as_of: datetime | None = None


@dataclass(slots=True)
class BenchSet:
    entities: dict[Scope, dict[str, EntityRecord]] = field(default_factory=dict)
    facts: dict[Scope, dict[str, FactRecord]] = field(default_factory=dict)
    supersessions: dict[Scope, list[tuple[str, str, datetime]]] = field(default_factory=dict)
    queries: list[Query] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        return {
            "scopes": len(self.facts),
            "entities": sum(len(v) for v in self.entities.values()),
            "facts": sum(len(v) for v in self.facts.values()),
            "superseded": sum(len(v) for v in self.supersessions.values()),
            "queries": len(self.queries),
            "max_facts_per_scope": max((len(v) for v in self.facts.values()), default=0),
        }


def _ts(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


def _jsonl(path: Path) -> Iterable[dict[str, Any]]:
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                yield json.loads(line)


class _Builder:
    """Turns the set's names into the ids the pipeline would give them."""

    def __init__(self) -> None:
        self.set = BenchSet()
        self.keys: dict[str, tuple[Scope, str]] = {}
        self._turn = 0

    def entity(
        self, scope: Scope, name: str, aliases: Sequence[str] = (), types: Sequence[str] = ()
    ) -> str:
        eid = entity_id(scope.tenant_id, scope.ns, norm_key(name))
        known = self.set.entities.setdefault(scope, {})
        if eid not in known or aliases or types:
            old = known.get(eid)
            known[eid] = EntityRecord(
                eid,
                name,
                tuple(aliases) or (old.aliases if old else ()),
                tuple(types) or (old.types if old else ()),
            )
        return eid

    def fact(
        self,
        scope: Scope,
        subject: str,
        predicate: str,
        obj: str,
        confidence: float,
        valid_from: datetime,
        object_types: Sequence[str] = (),
    ) -> str:
        sid = self.entity(scope, subject)
        oid = self.entity(scope, obj, types=object_types)
        fid = fact_id(scope.tenant_id, scope.ns, sid, predicate, oid)
        self._turn += 1
        self.set.facts.setdefault(scope, {})[fid] = FactRecord(
            fact_id=fid,
            subject_id=sid,
            subject=subject,
            predicate=predicate,
            object_id=oid,
            object=obj,
            confidence=confidence,
            valid_from=valid_from,
            session_id=f"bench-{scope.ns}-{self._turn // 25}",
            turn_id=str(self._turn),
            client="claude-code",
            model="explicit",
            source="explicit",
        )
        return fid


def _expand_hub_row(row: dict[str, Any]) -> list[str]:
    slots: dict[str, list[str]] = {k: list(v) for k, v in row.get("slots", {}).items()}
    for name, (low, high) in row.get("range", {}).items():
        slots[name] = [str(n) for n in range(low, high + 1)]
    names = sorted(slots)
    values = [row["template"].format(**dict(zip(names, combo, strict=True)))
              for combo in product(*(slots[n] for n in names))]  # fmt: skip
    return list(dict.fromkeys(values))


def load_set(root: Path = SET_DIR) -> BenchSet:
    """Read the set, expand the hub fillers (seeded, so every run sees the same facts)."""
    b = _Builder()
    for row in _jsonl(root / "entities.jsonl"):
        b.entity(Scope.parse(row["tenant"]), row["name"], row["aliases"], row["types"])
    for row in _jsonl(root / "facts.jsonl"):
        scope = Scope.parse(row["tenant"])
        fid = b.fact(
            scope,
            row["subject"],
            row["predicate"],
            row["object"],
            row["confidence"],
            _ts(row["valid_from"]),
        )
        b.keys[row["key"]] = (scope, fid)
    for row in _jsonl(root / "facts.jsonl"):
        if "supersedes" in row:
            scope, new = b.keys[row["key"]]
            _, old = b.keys[row["supersedes"]]
            b.set.supersessions.setdefault(scope, []).append((old, new, _ts(row["valid_from"])))

    spec = json.loads((root / "hubs.json").read_text(encoding="utf-8"))
    start, end = (_ts(d + "T00:00:00Z").timestamp() for d in spec["valid_from_range"])
    low, high = spec["confidence_range"]
    for hub in spec["hubs"]:
        scope = Scope.parse(hub["tenant"])
        for row in hub["rows"]:
            rng = random.Random(
                f"{spec['seed']}|{hub['tenant']}|{hub['subject']}|{row['predicate']}"
            )
            objects = _expand_hub_row(row)
            rng.shuffle(objects)
            for obj in sorted(objects[: row["count"]]):
                b.fact(
                    scope,
                    hub["subject"],
                    row["predicate"],
                    obj,
                    round(rng.uniform(low, high), 2),
                    datetime.fromtimestamp(rng.uniform(start, end), UTC).replace(microsecond=0),
                    object_types=row.get("types", ()),
                )

    for row in _jsonl(root / "queries.jsonl"):
        scope = Scope.parse(row["tenant"])
        relevant = []
        for key in row["relevant"]:
            if "|" in key:  # "subject|PREDICATE|object" names a generated hub fact
                s, p, o = key.split("|")
                sid = entity_id(scope.tenant_id, scope.ns, norm_key(s))
                oid = entity_id(scope.tenant_id, scope.ns, norm_key(o))
                fid = fact_id(scope.tenant_id, scope.ns, sid, p, oid)
                if fid not in b.set.facts[scope]:
                    raise ValueError(f"{row['id']}: no generated fact {key!r}")
                relevant.append(fid)
            else:
                fact_scope, fid = b.keys[key]
                if fact_scope != scope:
                    raise ValueError(f"{row['id']}: {key} belongs to {fact_scope}")
                relevant.append(fid)
        b.set.queries.append(
            Query(
                row["id"],
                scope,
                row["query"],
                tuple(relevant),
                tuple(row["kinds"]),
                _ts(row["as_of"]) if row.get("as_of") else None,
            )
        )
    return b.set


def load_into(graph: GraphStore, bench: BenchSet) -> None:
    for scope, entities in bench.entities.items():
        graph.upsert_entities(scope, list(entities.values()))
    for scope, facts in bench.facts.items():
        graph.upsert_facts(scope, list(facts.values()))
        for old, new, at in bench.supersessions.get(scope, []):
            graph.supersede(scope, old, new, at)


def embed_into(
    vectors: VectorStore, provider: EmbeddingProvider, bench: BenchSet, batch: int = 256
) -> int:
    """Embed every entity name and every fact text of every scope under the provider's model
    (fact vectors under `fact_vectors_key`, as the fact sweep stores them); returns vectors."""
    from memflow.fact_embedding import fact_text
    from resources.vector.base import fact_vectors_key

    written = 0
    for scope, entities in bench.entities.items():
        rows = [(e.entity_id, e.name) for e in entities.values()]
        written += _embed_rows(vectors, provider, provider.model, scope, rows, batch)
    for scope, facts in bench.facts.items():
        rows = [(f.fact_id, fact_text(f.subject, f.predicate, f.object)) for f in facts.values()]
        key = fact_vectors_key(provider.model)
        written += _embed_rows(vectors, provider, key, scope, rows, batch)
    return written


def _embed_rows(
    vectors: VectorStore,
    provider: EmbeddingProvider,
    key: str,
    scope: Scope,
    rows: Sequence[tuple[str, str]],
    batch: int,
) -> int:
    written = 0
    for i in range(0, len(rows), batch):
        chunk = rows[i : i + batch]
        vecs = provider.embed([text for _, text in chunk])
        items = [(rid, sha256_text(text), v) for (rid, text), v in zip(chunk, vecs, strict=True)]
        written += vectors.upsert(key, len(vecs[0]), scope, items)
    return written


def _superseded_at(bench: BenchSet, scope: Scope, as_of: datetime) -> set[str]:
    return {old for old, _new, at in bench.supersessions.get(scope, []) if at <= as_of}


def evaluate(service: RecallService, bench: BenchSet, ranking: str) -> dict[str, Any]:
    """Average metrics over the queries, overall and per kind, plus the two invariants."""
    rows: list[dict[str, Any]] = []
    stale = foreign = 0
    latencies = []
    for q in bench.queries:
        answer = service.recall(q.scope, q.text, ranking=ranking, as_of=q.as_of)  # type: ignore[arg-type]
        latencies.append(answer.timings_ms.total - answer.timings_ms.embed)
        got = [f.fact_id for f in answer.facts]
        rel = set(q.relevant)
        hits5 = len(rel.intersection(got[:5]))
        first = next((i for i, fid in enumerate(got, 1) if fid in rel), None)
        when = q.as_of or datetime.now(UTC)
        stale += bool(_superseded_at(bench, q.scope, when).intersection(got))
        foreign += sum(1 for fid in got if fid not in bench.facts[q.scope])
        rows.append(
            {
                "id": q.id,
                "kinds": q.kinds,
                "mode": answer.mode,
                "recall@5": hits5 / len(rel),
                "recall@10": len(rel.intersection(got[:10])) / len(rel),
                "precision@5": hits5 / 5,
                "mrr": 1.0 / first if first else 0.0,
                "first_relevant": first,
                "warnings": [w.code for w in answer.warnings],
            }
        )
    by_kind: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        for kind in r["kinds"]:
            by_kind[kind].append(r)
    latencies.sort()
    return {
        **_mean(rows),
        "intervals": summary(rows, METRICS),
        "queries": len(rows),
        "modes": sorted({r["mode"] for r in rows}),
        "stale_answers": stale,
        "foreign_facts": foreign,
        "p50_ms_excl_embed": round(latencies[len(latencies) // 2], 3) if latencies else None,
        "by_kind": {k: {**_mean(v), "queries": len(v)} for k, v in sorted(by_kind.items())},
        "misses": [r["id"] for r in rows if r["recall@10"] < 1.0],
    }


def _mean(rows: Sequence[dict[str, Any]]) -> dict[str, float]:
    return {m: round(sum(r[m] for r in rows) / len(rows), 4) if rows else 0.0 for m in METRICS}


def start_embed_server(python: str = sys.executable) -> tuple[subprocess.Popen[bytes], str]:
    """Start memflow's embedding server on loopback; returns (process, base URL) once ready."""
    port = free_port()
    proc = subprocess.Popen(
        [python, "-m", "resources.models.embed_server", "--host", "127.0.0.1", "--port", str(port)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for_http(f"{url}/health", 900, proc=proc)  # a loaded host loads torch slowly
    except TimeoutError:
        proc.kill()
        raise RuntimeError("embedding server did not become ready in 900 s") from None
    return proc, url


def make_stores(workdir: Path) -> tuple[GraphStore, VectorStore]:
    from resources.graph.sqlite import SqliteGraphStore
    from resources.vector.local import LocalVectorStore

    # The embedded default, as `open_vector_store(None, data_dir)` opens it.
    vectors = LocalVectorStore(workdir / "vectors")
    return SqliteGraphStore(workdir / "graph.db"), vectors


def run(
    bench: BenchSet,
    graph: GraphStore,
    vectors: VectorStore | None,
    provider: EmbeddingProvider | None,
    *,
    variants: dict[str, RecallConfig],
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for name, config in variants.items():
        # Quality, not speed: a loaded host must not turn an embedding into a names-only answer.
        patient = replace(config, embed_timeout_s=120.0)
        service = RecallService(graph, vectors, provider, config=patient)
        try:
            modes = {"lexical": evaluate(service, bench, "lexical")}
            if provider is not None:
                modes["hybrid"] = evaluate(service, bench, "hybrid")
                # Vectors alone (reported, not judged against names-only).
                modes["semantic"] = evaluate(service, bench, "semantic")
        finally:
            service.close()
        results[name] = modes
        log(f"{name}: " + ", ".join(f"{m} r@5={v['recall@5']:.3f}" for m, v in modes.items()))
    return results


def table(results: dict[str, Any]) -> str:
    lines = [
        "| variant | mode | recall@5 | recall@10 | precision@5 | MRR | stale | foreign |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for variant, modes in results.items():
        for mode, m in modes.items():
            label = "names-only" if mode == "lexical" else mode
            lines.append(
                f"| {variant} | {label} | {m['recall@5']:.3f} | {m['recall@10']:.3f} | "
                f"{m['precision@5']:.3f} | {m['mrr']:.3f} | {m['stale_answers']} | "
                f"{m['foreign_facts']} |"
            )
    return "\n".join(lines)


def kind_table(modes: dict[str, Any]) -> str:
    """recall@5 and MRR per query kind, one column pair per mode."""
    names = list(modes)
    header = "| kind | queries | " + " | ".join(f"{m} r@5 | {m} MRR" for m in names) + " |"
    lines = [header, "|" + "---|" * (2 + 2 * len(names))]
    for kind, first in modes[names[0]]["by_kind"].items():
        cells = " | ".join(
            f"{modes[m]['by_kind'][kind]['recall@5']:.3f} | {modes[m]['by_kind'][kind]['mrr']:.3f}"
            for m in names
        )
        lines.append(f"| {kind} | {first['queries']} | {cells} |")
    return "\n".join(lines)


# The shipped configuration's figures at two earlier points: no metric may drop by more than
# REGRESSION_TOLERANCE below either. Before issue 11: BENCHMARKS.md of 2026-11-30. Before issue
# 20 (its "today"): main when it was filed, the float model (BENCHMARKS.md, "Re-run with issue
# 20's retune", the run that reproduced them).
BEFORE: dict[str, dict[str, dict[str, float]]] = {
    "before issue 11": {
        "lexical": {"recall@5": 0.935, "recall@10": 0.962, "precision@5": 0.226, "mrr": 0.910},
        "hybrid": {"recall@5": 0.946, "recall@10": 0.962, "precision@5": 0.230, "mrr": 0.910},
    },
    "before issue 20": {
        "lexical": {"recall@5": 0.941, "recall@10": 0.957, "precision@5": 0.228, "mrr": 0.898},
        "hybrid": {"recall@5": 0.957, "recall@10": 0.968, "precision@5": 0.232, "mrr": 0.915},
    },
}
REGRESSION_TOLERANCE = 0.02


def verdict(results: dict[str, Any]) -> list[str]:
    """Broken promises of the shipped configuration (empty when all hold)."""
    problems = []
    shipped = results["shipped"]
    for when, figures in BEFORE.items():
        for mode, before in figures.items():
            for metric, value in before.items():
                if mode in shipped and shipped[mode][metric] < value - REGRESSION_TOLERANCE:
                    problems.append(
                        f"{mode} {metric} more than {REGRESSION_TOLERANCE} below {when} "
                        f"({shipped[mode][metric]:.3f} against {value:.3f})"
                    )
    for mode, m in shipped.items():
        if m["stale_answers"] or m["foreign_facts"]:
            problems.append(f"{mode}: superseded or foreign facts answered")
    if "hybrid" in shipped:
        for metric in METRICS:
            if shipped["hybrid"][metric] < shipped["lexical"][metric]:
                problems.append(f"hybrid {metric} below names-only")
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--names-only", action="store_true", help="skip the hybrid mode")
    parser.add_argument("--ablation", action="store_true", help="also run the recall variants")
    parser.add_argument(
        "--variants", help="with --ablation: only these variants (names separated by |)"
    )
    parser.add_argument(
        "--embedder",
        choices=("onnx", "server"),
        default="onnx",
        help="onnx: the bundled model in-process through ONNX Runtime (default); server: "
        "memflow's embedding server (torch) through the OpenAI-compatible provider",
    )
    parser.add_argument("--embed-url", help="use a running OpenAI-compatible embedding server")
    parser.add_argument(
        "--embed-model",
        default="",
        help="the model (default: with --embedder onnx the provider's, all-MiniLM-L6-v2-int8; "
        "with server the float all-MiniLM-L6-v2), e.g. --embedder onnx --embed-model "
        "all-MiniLM-L6-v2 for the float model in-process",
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--set", choices=("both", "project", "locomo"), default="both")
    parser.add_argument("--locomo-data", type=Path, help="LoCoMo pipeline output to reuse")
    args = parser.parse_args(argv)
    if not args.embed_model:
        from resources.models.onnx_embeddings import DEFAULT_MODEL

        onnx = args.embedder == "onnx" and args.embed_url is None
        args.embed_model = DEFAULT_MODEL if onnx else EMBED_MODEL
    status = 0
    if args.set in ("both", "project"):
        status = project(args)
    if args.set in ("both", "locomo"):
        from bench import bench_locomo

        print("\n== the public benchmark (LoCoMo)")
        extra = ["--data", str(args.locomo_data)] if args.locomo_data else []
        status = bench_locomo.main(extra) or status
    return status


def project(args: argparse.Namespace) -> int:
    bench = load_set()
    print(f"benchmark set: {bench.counts()}")
    variants = VARIANTS if args.ablation else {"shipped": VARIANTS["shipped"]}
    if args.ablation and args.variants:
        wanted = ["shipped", *(v.strip() for v in args.variants.split("|") if v.strip())]
        unknown = [v for v in wanted if v not in VARIANTS]
        if unknown:
            raise SystemExit(f"unknown variants: {unknown}; known: {list(VARIANTS)}")
        variants = {v: VARIANTS[v] for v in dict.fromkeys(wanted)}
    server = None
    provider: EmbeddingProvider | None = None
    with tempfile.TemporaryDirectory(prefix="memflow-bench-") as tmp:
        graph, vectors = make_stores(Path(tmp))
        try:
            started = time.perf_counter()
            load_into(graph, bench)
            print(f"loaded graph in {time.perf_counter() - started:.1f} s")
            if not args.names_only and args.embedder == "onnx" and args.embed_url is None:
                from bench.memo import MemoProvider
                from resources.models.onnx_embeddings import OnnxEmbeddingProvider

                provider = MemoProvider(OnnxEmbeddingProvider(args.embed_model))
            elif not args.names_only:
                from resources.models.openai_embeddings import OpenAIEmbeddingProvider

                url = args.embed_url
                if url is None:
                    server, url = start_embed_server()
                provider = OpenAIEmbeddingProvider(url, args.embed_model)
            if provider is not None:
                # Either provider: every entity name and fact text is embedded into the store.
                started = time.perf_counter()
                n = embed_into(vectors, provider, bench)
                took = time.perf_counter() - started
                print(f"embedded {n} entity names and fact texts in {took:.1f} s")
            results = run(bench, graph, vectors, provider, variants=variants)
        finally:
            if provider is not None:
                provider.close()
            if server is not None:
                server.terminate()
                server.wait(timeout=30)
            vectors.close()
            graph.close()

    problems = verdict(results)
    report = {
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "set": bench.counts(),
        "embedding_model": None if args.names_only else args.embed_model,
        "config": {k: repr(replace(v)) for k, v in variants.items()},
        "results": results,
        "problems": problems,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8")
    print(table(results))
    print()
    print(kind_table(results["shipped"]))
    print(f"\nwritten to {args.out}")
    for p in problems:
        print(f"PROBLEM: {p}")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
