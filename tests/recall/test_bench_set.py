"""The quality benchmark set is well-formed, and names-only recall keeps its invariants on it."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from bench.bench_quality import evaluate, load_into, load_set
from recall.service import RecallService
from resources.graph.sqlite import SqliteGraphStore


def test_set_covers_what_recall_must_handle() -> None:
    bench = load_set()
    assert len(bench.queries) >= 60
    kinds = Counter(k for q in bench.queries for k in q.kinds)
    for kind in (
        "paraphrase", "alias", "multi_hop", "superseded", "temporal", "hub", "distractor",
        "contradiction",
    ):  # fmt: skip
        assert kinds[kind] >= 1, kind
    assert len(bench.facts) >= 4
    # A hub: one entity holding thousands of the scope's facts.
    busiest = max(
        Counter(f.subject_id for f in facts.values()).most_common(1)[0][1]
        for facts in bench.facts.values()
    )
    assert busiest >= 2000
    # Distractor tenants reuse names of the main one.
    names = {s: {e.name for e in ents.values()} for s, ents in bench.entities.items()}
    scopes = list(names)
    assert any(names[a] & names[b] for a in scopes for b in scopes if a.tenant_id != b.tenant_id)


def test_relevant_facts_are_valid_when_asked() -> None:
    bench = load_set()
    for q in bench.queries:
        assert q.relevant, q.id
        for fid in q.relevant:
            fact = bench.facts[q.scope][fid]
            superseded = [at for old, _, at in bench.supersessions.get(q.scope, []) if old == fid]
            if q.as_of is None:
                assert not superseded, f"{q.id}: {fid} is superseded"
            else:
                assert fact.valid_from <= q.as_of and all(q.as_of < at for at in superseded)


def test_names_only_recall_on_the_set(tmp_path: Path) -> None:
    bench = load_set()
    graph = SqliteGraphStore(tmp_path / "graph.db")
    try:
        load_into(graph, bench)
        result = evaluate(RecallService(graph), bench, "lexical")
    finally:
        graph.close()
    assert result["stale_answers"] == 0 and result["foreign_facts"] == 0
    assert result["modes"] == ["names"]
    # Far below the measured value (bench/results/quality.json); catches a broken pipeline.
    assert result["recall@10"] >= 0.8
