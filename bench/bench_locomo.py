"""Recall quality on the public LoCoMo benchmark, beside flat fact search over the same facts.

    python bench/bench_locomo.py                  # pipeline into a temp dir, then evaluate
    python bench/bench_locomo.py --data DIR       # keep the pipeline's output and reuse it
    python bench/bench_locomo.py --ablation       # + recall variants on the tuned half
    python bench/bench_locomo.py --data DIR --versus all-MiniLM-L6-v2   # the default model
                                                  # minus the float one, paired per question

Steps (see `bench/locomo.py` for the data and the landing):

1. the eight conversations' triples are landed as `upsert_graph_triples` tool turns and run
   through `pipelines.runner.run_all` with the in-process embedder (`--embed-model`, default
   the ONNX provider's all-MiniLM-L6-v2-int8; the float all-MiniLM-L6-v2 through torch): facts (with
   `sources`), entities, entity-name and fact embeddings (`fact_embeddings`), graph and vector
   sinks;
2. each question goes to `RecallService.recall` (limit 40) in every ranking mode, and to three
   flat searches over the same facts' texts ("subject predicate object"), top 40: BM25 (the
   recall tokenizer), MiniLM cosine over the fact vectors the pipeline stored (read from the
   embedding ledger, checked equal to the vector store), and RRF (k = 60) of the two.

The measure is the curve (`bench/curve.py`): evidence recall of the first k facts (the share of
the question's evidence turns that their provenance covers) for k = 5, 10, 15, 20, 40, and MRR
(the first fact whose provenance is an evidence turn), each a mean over questions with a 95%
bootstrap interval, per split and per label set: LoCoMo's published evidence and
locomo-audit's corrected evidence (`bench/locomo.py`). Provenance is what the stored fact names
(its first statement and its `sources`: what recall answers cite); it is checked against every
turn whose triples state the fact, read from the extracted_triples tables. The ceiling is the
share of evidence turns that any fact's provenance holds.

Splits: recall was tuned on conv-41..44 (`tune`); conv-47..50 (`held_out`) are never tuned on,
only used to accept or drop a change (`--ablation` gives each variant's paired difference
against the shipped ranking there, with its interval); `unseen` (conv-30, triples written
blind for this check, never looked at while tuning) re-checks the goals on a conversation
nobody on the project has tuned on. Results go to
`bench/results/quality_locomo.json`; the goals (`GOALS`) are judged on the held-out half.
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
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from bench import locomo  # noqa: E402
from bench.curve import KS, METRICS, clears, curve_table, paired, summary  # noqa: E402
from bench.locomo import CONVS, HELD_OUT, LABELS, TUNE, UNSEEN, Question  # noqa: E402
from bench.memo import MemoProvider  # noqa: E402
from bench.recall_variants import VARIANTS  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "quality_locomo.json"
LIMIT = 40
FLAT_DEPTH = 100  # how deep each flat leg goes into the flat RRF
MODES = ("auto", "hybrid", "lexical", "semantic")
FLAT = ("flat_bm25", "flat_minilm", "flat_rrf")
SPLITS = {"tune": TUNE, "held_out": HELD_OUT, "all": CONVS, "unseen": UNSEEN}
# Issue 20's goals for the served ranking (`auto` = `hybrid` with an embedder), per label set,
# on the held-out half: evidence recall at least this at k, and never below flat RRF or flat
# vectors at any k. `lexical` (no vectors) must not fall below flat BM25 at 40.
GOALS = {"recall@5": 0.70, "recall@10": 0.80, "recall@40": 0.86}
JUDGED_SPLITS = ("held_out", "unseen")
SERVED = ("auto", "hybrid")


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


def evaluate(
    data: Path,
    questions: Sequence[Question],
    provider: Any,
    *,
    config: Any = None,
    modes: Sequence[str] = MODES,
    flat: bool = True,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Per-question rankings of every mode (and flat search), the provenance maps, latencies."""
    from recall.service import RecallConfig, RecallService
    from resources.graph.sqlite import SqliteGraphStore
    from resources.settings import graph_path
    from resources.vector.factory import open_vector_store

    graph = SqliteGraphStore(graph_path(data))
    store = open_vector_store(None, data)
    rows: list[dict[str, Any]] = []
    prov: dict[str, dict[str, frozenset[str]]] = {}
    statements: dict[str, dict[str, frozenset[str]]] = {}
    latency: dict[str, list[float]] = defaultdict(list)
    # Quality, not speed: a loaded host must not turn an embedding into a names-only answer.
    config = replace(config or RecallConfig(), embed_timeout_s=120.0)
    service = RecallService(graph, store, provider, config=config)
    try:
        by_conv: dict[str, list[Question]] = defaultdict(list)
        for q in questions:
            by_conv[q.conv].append(q)
        for conv, qs in by_conv.items():
            scope = locomo.scope_of(conv)
            facts = graph.facts(scope)
            prov[conv] = locomo.stored_provenance(facts)
            flat_index = None
            if flat:
                statements[conv] = locomo.statement_provenance(data, scope)
                flat_index = FlatIndex(facts, fact_vectors(data, provider.model, scope, store))
            t = time.perf_counter()
            for q in qs:
                ranked: dict[str, list[str]] = {}
                if flat_index is not None:
                    qvec = np.asarray(provider.embed([q.text])[0], dtype=np.float32)
                    ranked = {
                        "flat_bm25": flat_index.bm25_top(q.text, LIMIT),
                        "flat_minilm": flat_index.vector_top(qvec, LIMIT),
                        "flat_rrf": flat_index.rrf_top(q.text, qvec, LIMIT),
                    }
                served = {}
                for mode in modes:
                    answer = service.recall(scope, q.text, ranking=mode, limit=LIMIT)  # type: ignore[arg-type]
                    ranked[mode] = [f.fact_id for f in answer.facts]
                    served[mode] = answer.mode
                    latency[mode].append(answer.timings_ms.total - answer.timings_ms.embed)
                rows.append({"q": q, "ranked": ranked, "served": served})
            log(f"  {conv}: {len(qs)} questions in {time.perf_counter() - t:.1f} s")
    finally:
        service.close()
        store.close()
        graph.close()
    return {"rows": rows, "prov": prov, "statements": statements, "latency": latency}


def merge(into: dict[str, Any], other: dict[str, Any]) -> None:
    """Add another evaluation's questions (other conversations) to `into`."""
    into["rows"].extend(other["rows"])
    for key in ("prov", "statements"):
        into[key].update(other[key])
    for mode, values in other["latency"].items():
        into["latency"][mode].extend(values)


def per_question(
    result: dict[str, Any], system: str, labels: str, convs: Sequence[str]
) -> list[dict[str, float]]:
    """One curve per question of `convs` (in the evaluation's order) for `system`."""
    prov = result["prov"]
    out = []
    for r in result["rows"]:
        q = r["q"]
        if q.conv in convs:
            out.append(locomo.score_ranking(r["ranked"][system], q.labels(labels), prov[q.conv]))
    return out


def summarize(result: dict[str, Any], systems: Sequence[str]) -> dict[str, Any]:
    """labels -> split -> questions, ceiling and each system's curve with intervals."""
    out: dict[str, Any] = {}
    for labels in LABELS:
        section: dict[str, Any] = {}
        for split, convs in SPLITS.items():
            qs = [r["q"] for r in result["rows"] if r["q"].conv in convs]
            if not qs:
                continue
            entry: dict[str, Any] = {
                "questions": len(qs),
                "ceiling": locomo.ceiling(qs, result["prov"], labels),
            }
            for system in systems:
                entry[system] = summary(per_question(result, system, labels, convs))
            section[split] = entry
        out[labels] = section
    return out


def table(summary_: dict[str, Any], systems: Sequence[str], labels: str, split: str) -> str:
    entry = summary_[labels][split]
    title = f"{split} ({entry['questions']} q), {labels} labels, ceiling {entry['ceiling']:.3f}"
    return curve_table(title, {s: entry[s] for s in systems})


def verdict(summary_: dict[str, Any]) -> tuple[list[str], list[str]]:
    """Issue 20's goals, for both label sets: (problems, below goal on the unseen check).

    Problems: on every judged split, the served ranking below flat RRF or flat vectors at some
    k, or `lexical` below flat BM25 at 40; on the held-out half, a figure below `GOALS`. The
    issue's "Done when" judges the absolute goals on the held-out half; the unseen
    conversation checks them again, and its figures below them are reported with the share of
    its provenance ceiling they reach (conv-30's ceiling, 0.825, is under the goal at 40, so
    the held-out goals cannot all hold there), not counted as problems."""
    problems: list[str] = []
    unseen_below: list[str] = []
    for labels in LABELS:
        for split in JUDGED_SPLITS:
            entry = summary_[labels].get(split)
            if entry is None:
                continue
            where = f"{split}/{labels}"
            below = unseen_below if split == "unseen" else problems
            ceiling = entry.get("ceiling")
            for mode in SERVED:
                for metric, goal in GOALS.items():
                    value = entry[mode][metric]["mean"]
                    if value < goal:
                        shown = (
                            f" ({value:.3f}, {value / ceiling:.0%} of the ceiling {ceiling:.3f})"
                            if ceiling
                            else ""
                        )
                        below.append(f"{where}: {mode} {metric} below {goal}{shown}")
                for flat in ("flat_rrf", "flat_minilm"):
                    for k in KS:
                        m = f"recall@{k}"
                        if entry[mode][m]["mean"] < entry[flat][m]["mean"]:
                            problems.append(f"{where}: {mode} {m} below {flat}")
            if entry["lexical"]["recall@40"]["mean"] < entry["flat_bm25"]["recall@40"]["mean"]:
                problems.append(f"{where}: lexical recall@40 below flat_bm25")
    return problems, unseen_below


def sources_check(result: dict[str, Any]) -> dict[str, int]:
    """How many facts' stored provenance (first statement and `sources`) equals every turn
    that stated them in the extracted_triples tables, and how many differ."""
    stored, statements = result["prov"], result["statements"]
    same = differ = 0
    for conv, facts in stored.items():
        for fid, turns in facts.items():
            if statements[conv].get(fid) == turns:
                same += 1
            else:
                differ += 1
    return {"same": same, "differ": differ}


ABLATION_MODES = ("hybrid", "lexical")
ABLATION_SPLITS = ("tune", "held_out")
# Issue 20's changes, each against the shipped ranking (the full list: bench_quality.py).
ABLATION = (
    "shipped",
    "issue 11 ranking (no focus, no dedup)",
    "before the retune",
    "fact_bm25_b=0.75",
    "structure_weight=0.1",
    "temporal_weight=0.5",
    "new_sources_top=10",
    "no dedup",
    "no new-source rule",
    "no focus",
    "focus_weight=0.25",
    "focus_weight=0.5",
    "focus_weight=1",
)


def ablation(data: Path, provider: Any, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Each variant (`bench/recall_variants.py`) against the shipped ranking, per half and
    mode, published labels: its curve and the paired difference (variant - shipped), each
    with its interval. A change is worth keeping when the held-out interval clears zero."""
    convs = [c for s in ABLATION_SPLITS for c in SPLITS[s]]
    questions = locomo.load_questions(convs)
    runs = {
        name: evaluate(
            data, questions, provider, config=config, modes=ABLATION_MODES, flat=False,
            log=lambda _: None,
        )
        for name, config in VARIANTS.items()
        if name in ABLATION
    }  # fmt: skip
    base = runs["shipped"]
    out: dict[str, Any] = {}
    for name, result in runs.items():
        out[name] = {}
        for split in ABLATION_SPLITS:
            for mode in ABLATION_MODES:
                mine = per_question(result, mode, "published", SPLITS[split])
                theirs = per_question(base, mode, "published", SPLITS[split])
                out[name][f"{split}/{mode}"] = {
                    "curve": summary(mine),
                    "minus_shipped": paired(mine, theirs),
                }
        log(f"  ablation {name}: done")
    return out


def ablation_table(variants: dict[str, Any], split: str, mode: str) -> str:
    """recall@5 / @10 / @40 and MRR of each variant, with the paired difference to the shipped
    ranking and its interval (bold: the interval clears zero)."""
    shown = ("recall@5", "recall@10", "recall@40", "mrr")
    lines = [
        f"{split} half, {mode}, published labels: variant (difference to shipped, 95% interval)",
        "| variant | " + " | ".join(shown) + " |",
        "|---|" + "---:|" * len(shown),
    ]
    for name, v in variants.items():
        entry = v[f"{split}/{mode}"]
        cells = []
        for m in shown:
            d = entry["minus_shipped"][m]
            text = (
                f"{entry['curve'][m]['mean']:.3f} ({d['mean']:+.3f}, {d['lo']:+.3f}…{d['hi']:+.3f})"
            )
            cells.append(f"**{text}**" if clears(d) else text)
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


VERSUS_SPLITS = ("tune", "held_out", "unseen")


def versus_table(diffs: dict[str, Any], labels: str, title: str) -> str:
    """The paired difference of `hybrid` with the benchmark's model minus with another, per
    split (bold: the interval lies above zero; a drop shows an interval below zero)."""
    shown = [f"recall@{k}" for k in KS] + ["mrr"]
    lines = [f"| {title}, {labels} labels | " + " | ".join(shown) + " |"]
    lines.append("|---|" + "---:|" * len(shown))
    for split in VERSUS_SPLITS:
        if split not in diffs[labels]:
            continue
        cells = []
        for m in shown:
            d = diffs[labels][split][m]
            text = f"{d['mean']:+.3f} ({d['lo']:+.3f}…{d['hi']:+.3f})"
            cells.append(f"**{text}**" if clears(d) else text)
        lines.append(f"| {split} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def versus(
    result: dict[str, Any], model: str, data: Path, log: Callable[[str], None] = print
) -> dict[str, Any]:
    """`hybrid` with the benchmark's model minus `hybrid` with `model` (an ONNX provider model;
    the float all-MiniLM-L6-v2's vectors come from the torch provider), per label set and
    split, paired over the same questions, each with its interval. `model`'s vectors are
    read from `data` (and `data/unseen`), made there first when missing."""
    from resources.models.onnx_embeddings import OnnxEmbeddingProvider

    pipeline_model = "" if model == locomo.DEFAULT_MODEL else model
    locomo.run_pipeline(data, CONVS, model=pipeline_model, log=log)
    (data / "unseen").mkdir(parents=True, exist_ok=True)
    locomo.run_pipeline(data / "unseen", UNSEEN, model=pipeline_model, log=log)
    provider = MemoProvider(OnnxEmbeddingProvider(model, threads=1))
    other = evaluate(data, locomo.load_questions(CONVS), provider, modes=("hybrid",), flat=False)
    merge(
        other,
        evaluate(
            data / "unseen", locomo.load_questions(UNSEEN), provider, modes=("hybrid",), flat=False
        ),
    )
    out: dict[str, Any] = {}
    for labels in LABELS:
        out[labels] = {
            split: paired(
                per_question(result, "hybrid", labels, SPLITS[split]),
                per_question(other, "hybrid", labels, SPLITS[split]),
            )
            for split in VERSUS_SPLITS
        }
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, help="pipeline output to keep and reuse")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument(
        "--ablation",
        action="store_true",
        help="also run the recall variants on both halves, against the shipped ranking",
    )
    parser.add_argument(
        "--embed-model",
        default="",
        help="embed (pipeline and queries) with this ONNX provider model (default: the "
        "provider's, all-MiniLM-L6-v2-int8), e.g. the float all-MiniLM-L6-v2; each model's "
        "vectors are added beside the others' in --data",
    )
    parser.add_argument(
        "--versus",
        default="",
        help="also evaluate hybrid with this other model (e.g. all-MiniLM-L6-v2) and report the "
        "paired difference, this model minus that one, per split and label set",
    )
    parser.add_argument(
        "--versus-data",
        type=Path,
        help="with --versus: where that model's pipeline output is (default: --data)",
    )
    args = parser.parse_args(argv)

    tmp = None
    data = args.data
    if data is None:
        tmp = Path(tempfile.mkdtemp(prefix="memflow-locomo-"))
        data = tmp
    data = data.resolve()
    data.mkdir(parents=True, exist_ok=True)
    from resources.models.onnx_embeddings import DEFAULT_MODEL, OnnxEmbeddingProvider

    model = args.embed_model or DEFAULT_MODEL
    # The float model's vectors come from the torch provider (`run_pipeline`'s ""): the same
    # vectors as ONNX Runtime's to 1e-4 (tests/unit/test_onnx_embeddings.py), and the ones every
    # figure before issue 20's default change was measured with.
    pipeline_model = "" if model == locomo.DEFAULT_MODEL else model
    variants = None
    try:
        t = time.perf_counter()
        info = locomo.run_pipeline(data, CONVS, model=pipeline_model)
        pipeline_s = time.perf_counter() - t
        # Query vectors through ONNX Runtime with the pipeline's model, one steady thread.
        provider = MemoProvider(OnnxEmbeddingProvider(model, threads=1))
        print(f"pipeline {pipeline_s:.0f} s; assets {info.get('assets')}")
        result = evaluate(data, locomo.load_questions(CONVS), provider)
        # The unseen conversations: a pipeline run and stores of their own.
        unseen = data / "unseen"
        unseen.mkdir(exist_ok=True)
        info["unseen"] = locomo.run_pipeline(unseen, UNSEEN, model=pipeline_model)
        merge(result, evaluate(unseen, locomo.load_questions(UNSEEN), provider))
        variants = ablation(data, provider) if args.ablation else None
        compared = None
        if args.versus:
            where = (args.versus_data or data).resolve()
            compared = versus(result, args.versus, where)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    systems = [*MODES, *FLAT]
    summary_ = summarize(result, systems)
    problems, unseen_below = verdict(summary_)
    served = sorted({m for r in result["rows"] for m in r["served"].values()})
    report = {
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "pipeline": info,
        "embedding_model": model,
        "sources_match_statements": sources_check(result),
        "limit": LIMIT,
        "metrics": list(METRICS),
        "splits": {k: list(v) for k, v in SPLITS.items()},
        "tuned_on": list(TUNE),
        "labels": {"published": "LoCoMo", "audited": "locomo-audit WRONG_CITATION corrections"},
        "audited_questions": sum(1 for r in result["rows"] if r["q"].audited),
        "modes_served": served,
        "goals": GOALS,
        "results": summary_,
        "p50_p95_ms_excl_embed": {
            m: [round(float(np.percentile(v, q)), 3) for q in (50, 95)]
            for m, v in result["latency"].items()
        },
        "problems": problems,
        "unseen_below_goal": unseen_below,
    }
    if variants is not None:
        report["ablation"] = variants
    if compared is not None:
        report["versus"] = {"model": args.versus, "minus": compared}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    for labels in LABELS:
        for split in SPLITS:
            print(table(summary_, systems, labels, split) + "\n")
    if variants is not None:
        for split in ABLATION_SPLITS:
            for mode in ABLATION_MODES:
                print(ablation_table(variants, split, mode) + "\n")
    if compared is not None:
        title = f"hybrid: {model} minus {args.versus}"
        for labels in LABELS:
            print(versus_table(compared, labels, title) + "\n")
    print(f"stored provenance vs statements: {report['sources_match_statements']}")
    print(f"written to {args.out}")
    for line in unseen_below:
        print(f"unseen check, below the held-out goal: {line}")
    for p in problems:
        print(f"PROBLEM: {p}")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
