"""Recall quality on the public LoCoMo benchmark, beside flat fact search over the same facts.

    python bench/bench_locomo.py                  # pipeline into a temp dir, then evaluate
    python bench/bench_locomo.py --data DIR       # keep the pipeline's output and reuse it
    python bench/bench_locomo.py --ablation       # + recall variants on the tuned half

Steps (see `bench/locomo.py` for the data and the landing):

1. the eight conversations' triples are landed as `upsert_graph_triples` tool turns and run
   through `pipelines.runner.run_all` with the in-process all-MiniLM-L6-v2 embedder: facts (with
   `sources`), entities, entity-name and fact embeddings (`fact_embeddings`), graph and vector
   sinks;
2. each question goes to `RecallService.recall` (limit 40) in every ranking mode, and to three
   flat searches over the same facts' texts ("subject predicate object"), top 40: BM25 (the
   recall tokenizer), MiniLM cosine over the fact vectors the pipeline stored (read from the
   embedding ledger, checked equal to the vector store), and RRF (k = 60) of the two.

Metrics per question, averaged (per category and per split too): evidence recall (the share of
the question's evidence turns covered by the provenance of the ≤ 40 facts), hit rate (any
evidence turn covered), recall@5 / @10 (the same over the first 5 / 10 facts) and MRR (first
fact whose provenance is an evidence turn). Provenance is read three ways: `stored`, what the
stored fact names (its first statement and its `sources`: what recall answers cite);
`statements`, every turn whose triples state the fact, read from the extracted_triples tables
(an independent check of `sources`); `first`, the earliest stating turn alone (what a fact
without `sources` would name). The ceiling is the share of evidence turns that any fact's
provenance holds.

Splits: recall was tuned on conv-41..44 (`tune`); conv-47..50 (`held_out`) were only run for
the report. Results go to `bench/results/quality_locomo.json`.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from bench import locomo  # noqa: E402
from bench.locomo import CONVS, HELD_OUT, TUNE, Question, mean  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "quality_locomo.json"
LIMIT = 40
FLAT_DEPTH = 100  # how deep each flat leg goes into the flat RRF
MODES = ("auto", "hybrid", "lexical", "semantic")
FLAT = ("flat_bm25", "flat_minilm", "flat_rrf")
CATEGORIES = {1: "multi-hop", 2: "temporal", 4: "single-hop"}
SPLITS = {"tune": TUNE, "held_out": HELD_OUT, "all": CONVS}
TARGETS = {"hybrid": 0.85, "lexical": 0.78}
VECTOR_MODES = ("auto", "hybrid", "semantic")


class FlatIndex:
    """Flat search over one scope's facts valid now: BM25 and cosine over the fact texts."""

    def __init__(self, facts: Sequence[Any], vectors: dict[str, np.ndarray]) -> None:
        from memflow.fact_embedding import fact_text
        from recall.lexical import BM25Index, tokenize

        now = datetime.now(UTC)
        self.facts = [f for f in facts if f.valid_at(now)]
        self.ids = [f.fact_id for f in self.facts]
        self.bm25 = BM25Index(
            [tokenize(fact_text(f.subject, f.predicate, f.object)) for f in self.facts]
        )
        have = [i for i, fid in enumerate(self.ids) if fid in vectors]
        self.vec_rows = np.asarray(have, dtype=np.int64)
        matrix = np.asarray([vectors[self.ids[i]] for i in have], dtype=np.float32)
        if matrix.size:
            matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
        self.matrix = matrix

    def bm25_top(self, query: str, n: int) -> list[str]:
        from recall.lexical import query_tokens

        scores = self.bm25.scores(query_tokens(query))
        hits = np.flatnonzero(scores > 0)
        order = hits[np.lexsort((hits, -scores[hits]))][:n]
        return [self.ids[i] for i in order]

    def vector_top(self, qvec: np.ndarray, n: int) -> list[str]:
        if not self.matrix.size:
            return []
        scores = self.matrix @ (qvec / np.linalg.norm(qvec))
        order = np.lexsort((self.vec_rows, -scores))[:n]
        return [self.ids[self.vec_rows[i]] for i in order]

    def rrf_top(self, query: str, qvec: np.ndarray, n: int) -> list[str]:
        from recall.fusion import positions, rrf

        legs = {
            "bm25": positions(self.bm25_top(query, FLAT_DEPTH)),
            "vector": positions(self.vector_top(qvec, FLAT_DEPTH)),
        }
        return [f.item for f in rrf(legs, limit=n)]


def fact_vectors(data: Path, model: str, scope: Any, store: Any) -> dict[str, np.ndarray]:
    """fact_id -> vector: the pipeline's fact vectors, read from its embedding ledger for the
    facts of the stored `validated_facts` table, the table the vector sink made `store` equal
    to (checked here: the flat baselines use exactly the vectors recall serves)."""
    from memflow.fact_embedding import fact_vector_table
    from resources.tables import TableStore
    from resources.vector.base import fact_vectors_key
    from resources.vector.ledger import EmbeddingLedger
    from resources.vector.sync import diff_vectors
    from schemas.tables import Asset

    facts = TableStore(data).read(Asset.VALIDATED_FACTS, scope)
    if facts is None:
        return {}
    table = fact_vector_table(EmbeddingLedger(data), model, scope, facts)
    diff = diff_vectors(store, fact_vectors_key(model), scope, table)
    if not diff.empty or table.height != facts.height:
        raise RuntimeError(
            f"{scope.key}: the pipeline's fact vectors do not cover the facts or differ from "
            f"the store ({table.height} of {facts.height} facts; {diff.summary()})"
        )
    return {
        fid: np.asarray(vec, dtype=np.float32)
        for fid, vec in zip(table["fact_id"].to_list(), table["vector"].to_list(), strict=True)
    }


PROVENANCE = ("stored", "statements", "first")


def evaluate(
    data: Path,
    questions: Sequence[Question],
    provider: Any,
    *,
    config: Any = None,
    modes: Sequence[str] = MODES,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Per-question rankings of every mode and flat search, the provenance maps, latencies."""
    from recall.service import RecallService
    from resources.graph.sqlite import SqliteGraphStore
    from resources.settings import graph_path
    from resources.vector.factory import open_vector_store

    graph = SqliteGraphStore(graph_path(data))
    store = open_vector_store(None, data)
    rows: list[dict[str, Any]] = []
    prov: dict[str, dict[str, dict[str, frozenset[str]]]] = {k: {} for k in PROVENANCE}
    latency: dict[str, list[float]] = defaultdict(list)
    service = RecallService(graph, store, provider, config=config)
    try:
        by_conv: dict[str, list[Question]] = defaultdict(list)
        for q in questions:
            by_conv[q.conv].append(q)
        for conv, qs in by_conv.items():
            scope = locomo.scope_of(conv)
            facts = graph.facts(scope)
            prov["stored"][conv] = locomo.stored_provenance(facts)
            prov["statements"][conv] = locomo.statement_provenance(data, scope)
            prov["first"][conv] = locomo.first_provenance(prov["statements"][conv])
            flat = FlatIndex(facts, fact_vectors(data, provider.model, scope, store))
            t = time.perf_counter()
            for q in qs:
                qvec = np.asarray(provider.embed([q.text])[0], dtype=np.float32)
                ranked = {
                    "flat_bm25": flat.bm25_top(q.text, LIMIT),
                    "flat_minilm": flat.vector_top(qvec, LIMIT),
                    "flat_rrf": flat.rrf_top(q.text, qvec, LIMIT),
                }
                served = {}
                for mode in modes:
                    answer = service.recall(scope, q.text, ranking=mode, limit=LIMIT)  # type: ignore[arg-type]
                    ranked[mode] = [f.fact_id for f in answer.facts]
                    served[mode] = answer.mode
                    if mode != modes[0]:  # the first mode paid for the query embedding
                        latency[mode].append(answer.timings_ms.total - answer.timings_ms.embed)
                rows.append({"q": q, "ranked": ranked, "served": served})
            log(f"  {conv}: {len(qs)} questions in {time.perf_counter() - t:.1f} s")
    finally:
        service.close()
        store.close()
        graph.close()
    return {"rows": rows, "prov": prov, "latency": latency}


def summarize(result: dict[str, Any], systems: Sequence[str]) -> dict[str, Any]:
    """Mean metrics per provenance view, split and system (and evidence recall per category)."""
    rows, prov = result["rows"], result["prov"]
    out: dict[str, Any] = {}
    for kind in PROVENANCE:
        section: dict[str, Any] = {}
        for split, convs in SPLITS.items():
            qs = [r for r in rows if r["q"].conv in convs]
            if not qs:
                continue
            entry: dict[str, Any] = {
                "questions": len(qs),
                "ceiling": locomo.ceiling([r["q"] for r in qs], prov[kind]),
            }
            for system in systems:
                scored = [
                    (
                        r["q"].category,
                        locomo.score_ranking(
                            r["ranked"][system], r["q"].evidence, prov[kind][r["q"].conv]
                        ),
                    )
                    for r in qs
                ]
                entry[system] = mean([s for _, s in scored])
                entry[system]["by_category"] = {
                    CATEGORIES[c]: mean([s for cat, s in scored if cat == c])["evidence_recall"]
                    for c in sorted(CATEGORIES)
                }
            section[split] = entry
        out[kind] = section
    return out


def table(summary: dict[str, Any], systems: Sequence[str], kind: str, split: str) -> str:
    entry = summary[kind][split]
    lines = [
        f"{split} ({entry['questions']} questions), provenance: {kind}, "
        f"ceiling {entry['ceiling']:.3f}",
        "| retrieval (≤ 40 facts) | evidence recall | hit rate | recall@5 | recall@10 | MRR "
        "| multi-hop | temporal | single-hop |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in systems:
        m = entry[s]
        cats = " | ".join(f"{m['by_category'][c]:.3f}" for c in CATEGORIES.values())
        lines.append(
            f"| {s} | {m['evidence_recall']:.3f} | {m['hit_rate']:.3f} | {m['recall@5']:.3f} | "
            f"{m['recall@10']:.3f} | {m['mrr']:.3f} | {cats} |"
        )
    return "\n".join(lines)


def verdict(summary: dict[str, Any]) -> list[str]:
    """The issue's targets: hybrid >= 0.85 and lexical >= 0.78 evidence recall with the stored
    provenance, and no mode below flat RRF (auto, hybrid and semantic; lexical, which has no
    vectors, not below flat BM25), with the stored provenance and the `statements` check. The
    `first` view (one turn per fact) is reported, not judged."""
    problems = []
    for kind in ("stored", "statements"):
        for split in SPLITS:
            entry = summary[kind].get(split)
            if entry is None:
                continue
            if kind == "stored":
                for mode, target in TARGETS.items():
                    if entry[mode]["evidence_recall"] < target:
                        problems.append(f"{split}/{kind}: {mode} evidence recall below {target}")
            for mode, flat in (*((m, "flat_rrf") for m in VECTOR_MODES), ("lexical", "flat_bm25")):
                if entry[mode]["evidence_recall"] < entry[flat]["evidence_recall"]:
                    problems.append(f"{split}/{kind}: {mode} below {flat}")
    return problems


def sources_check(result: dict[str, Any]) -> dict[str, int]:
    """How many facts' stored provenance (first statement and `sources`) equals every turn
    that stated them in the extracted_triples tables, and how many differ."""
    stored, statements = result["prov"]["stored"], result["prov"]["statements"]
    same = differ = 0
    for conv, facts in stored.items():
        for fid, turns in facts.items():
            if statements[conv].get(fid) == turns:
                same += 1
            else:
                differ += 1
    return {"same": same, "differ": differ}


ABLATION_MODES = ("hybrid", "lexical", "semantic")


def ablation(data: Path, provider: Any) -> dict[str, Any]:
    """bench_quality's variants (one change each) on the tuned half: evidence recall, recall@5
    and MRR per mode, stored provenance."""
    from bench.bench_quality import VARIANTS

    questions = locomo.load_questions(TUNE)
    out: dict[str, Any] = {}
    for name, config in VARIANTS.items():
        result = evaluate(
            data, questions, provider, config=config, modes=ABLATION_MODES, log=lambda _: None
        )
        summary = summarize(result, ABLATION_MODES)
        out[name] = {
            mode: {
                m: summary["stored"]["tune"][mode][m]
                for m in ("evidence_recall", "recall@5", "mrr")
            }
            for mode in ABLATION_MODES
        }
        print(f"  ablation {name}: {out[name]}")
    return out


def ablation_table(variants: dict[str, Any]) -> str:
    lines = [
        "tuned half (conv-41..44), one change each; evidence recall / MRR, stored provenance",
        "| variant | " + " | ".join(ABLATION_MODES) + " |",
        "|---|" + "---:|" * len(ABLATION_MODES),
    ]
    for name, v in variants.items():
        cells = [f"{v[m]['evidence_recall']:.3f} / {v[m]['mrr']:.3f}" for m in ABLATION_MODES]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, help="pipeline output to keep and reuse")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument(
        "--ablation",
        action="store_true",
        help="also run bench_quality's recall variants, on the tuned half only",
    )
    args = parser.parse_args(argv)

    tmp = None
    data = args.data
    if data is None:
        tmp = Path(tempfile.mkdtemp(prefix="memflow-locomo-"))
        data = tmp
    data = data.resolve()
    data.mkdir(parents=True, exist_ok=True)
    from resources.models.st_embeddings import SentenceTransformerEmbeddingProvider

    variants = None
    try:
        t = time.perf_counter()
        info = locomo.run_pipeline(data, CONVS)
        pipeline_s = time.perf_counter() - t
        provider = SentenceTransformerEmbeddingProvider(None)
        print(f"pipeline {pipeline_s:.0f} s; assets {info.get('assets')}")
        result = evaluate(data, locomo.load_questions(CONVS), provider)
        variants = ablation(data, provider) if args.ablation else None
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    systems = [*MODES, *FLAT]
    summary = summarize(result, systems)
    problems = verdict(summary)
    served = sorted({m for r in result["rows"] for m in r["served"].values()})
    report = {
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "pipeline": info,
        "sources_match_statements": sources_check(result),
        "limit": LIMIT,
        "splits": {k: list(v) for k, v in SPLITS.items()},
        "tuned_on": list(TUNE),
        "modes_served": served,
        "results": summary,
        "p50_p95_ms_excl_embed": {
            m: [round(float(np.percentile(v, q)), 3) for q in (50, 95)]
            for m, v in result["latency"].items()
        },
        "problems": problems,
    }
    if variants is not None:
        report["ablation_tune_half"] = variants
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    for kind in PROVENANCE:
        for split in SPLITS:
            print(table(summary, systems, kind, split) + "\n")
    if variants is not None:
        print(ablation_table(variants))
    print(f"stored provenance vs statements: {report['sources_match_statements']}")
    print(f"written to {args.out}")
    for p in problems:
        print(f"PROBLEM: {p}")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
