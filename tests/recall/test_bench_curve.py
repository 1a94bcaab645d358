"""The recall curve the quality benchmarks report (bench/curve.py) and LoCoMo's two label sets
(bench/locomo.py with locomo-audit's corrected evidence)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bench import curve, locomo


def test_the_curve_counts_units_covered_by_the_first_k_items() -> None:
    units = {f"f{i}": {f"t{i}"} for i in range(1, 50)}
    units["dup"] = {"t1"}
    ranked = ["dup", "f1", *(f"f{i}" for i in range(20, 49)), "f3", "f2"]
    got = curve.curve(ranked, ["t1", "t2", "t3", "t99"], lambda x: units[x])
    assert got["mrr"] == 1.0  # "dup" covers t1
    assert got["recall@5"] == got["recall@20"] == 0.25  # the second t1 adds nothing
    # f3 sits at 32 and f2 at 33: inside 40, so 3 of 4 units; t99 is never covered.
    assert got["recall@40"] == 0.75
    assert curve.curve([], ["t1"], lambda x: units[x]) == {
        **{f"recall@{k}": 0.0 for k in curve.KS},
        "mrr": 0.0,
    }
    with pytest.raises(ValueError, match="relevant"):
        curve.curve(ranked, [], lambda x: units[x])


def test_items_past_forty_never_count() -> None:
    ranked = [f"x{i}" for i in range(40)] + ["hit"]
    got = curve.curve(ranked, ["h"], lambda x: {"h"} if x == "hit" else set())
    assert got["recall@40"] == 0.0 and got["mrr"] == 0.0


def test_the_bootstrap_interval_brackets_the_mean_and_narrows_with_more_questions() -> None:
    rng = np.random.default_rng(7)
    few = [{"recall@5": float(v), "mrr": float(v)} for v in rng.random(30) < 0.6]
    many = [{"recall@5": float(v), "mrr": float(v)} for v in rng.random(3000) < 0.6]
    a = curve.summary(few, ("recall@5",))["recall@5"]
    b = curve.summary(many, ("recall@5",))["recall@5"]
    assert a["lo"] <= a["mean"] <= a["hi"]
    assert b["lo"] <= b["mean"] <= b["hi"]
    assert b["hi"] - b["lo"] < (a["hi"] - a["lo"]) / 3
    assert abs(b["mean"] - 0.6) < 0.03
    # Seeded: the same figures every run.
    assert curve.summary(few, ("recall@5",)) == curve.summary(few, ("recall@5",))


def test_a_paired_difference_cancels_what_both_rankings_share() -> None:
    rng = np.random.default_rng(3)
    base = [{"recall@5": float(v)} for v in rng.random(400)]
    better = [{"recall@5": min(1.0, r["recall@5"] + 0.05)} for r in base]
    d = curve.paired(better, base, ("recall@5",))["recall@5"]
    assert curve.clears(d) and d["mean"] > 0.03
    # Unpaired, the same gap would sit inside the spread of the questions themselves.
    a = curve.summary(better, ("recall@5",))["recall@5"]
    b = curve.summary(base, ("recall@5",))["recall@5"]
    assert a["lo"] < b["hi"]
    assert not curve.clears(curve.paired(base, base, ("recall@5",))["recall@5"])
    with pytest.raises(ValueError, match="same questions"):
        curve.paired(base, base[:-1], ("recall@5",))


def test_audited_labels_replace_the_published_evidence_of_the_questions_they_name() -> None:
    rows = [
        json.loads(line)
        for line in (locomo.AUDIT).read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]
    assert len(rows) == 57  # locomo-audit's WRONG_CITATION entries, all ten conversations
    questions = locomo.load_questions()
    fixed = {(q.conv, q.text): q for q in questions if q.audited}
    ours = [r for r in rows if r["conv"] in locomo.CONVS and r["category"] in locomo.CATEGORIES]
    assert len(fixed) == len(ours) == 41
    for r in ours:
        q = fixed[(r["conv"], r["question"])]
        assert q.labels("published") == tuple(r["cited_evidence"]) == q.evidence
        assert q.labels("audited") == tuple(r["correct_evidence"])
    plain = next(q for q in questions if not q.audited)
    assert plain.labels("audited") == plain.labels("published")
    with pytest.raises(ValueError, match="labels"):
        plain.labels("gold")


def test_an_audit_that_disagrees_with_the_set_fails_loudly(tmp_path) -> None:
    row = json.loads(locomo.AUDIT.read_text(encoding="utf-8").splitlines()[0])
    q = next(q for q in locomo.load_questions(audit=None) if q.conv in locomo.CONVS)
    bad = tmp_path / "audit.jsonl"
    wrong = {**row, "conv": q.conv, "question": q.text, "cited_evidence": ["D99:1"]}
    bad.write_text(json.dumps(wrong) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match="audit cites"):
        locomo.load_questions(audit=bad)
    missing = {**row, "conv": q.conv, "question": "a question nobody asked", "category": 1}
    bad.write_text(json.dumps(missing) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match="lacks"):
        locomo.load_questions(audit=bad)


def test_the_unseen_conversation_is_in_no_tuned_or_held_out_split() -> None:
    assert set(locomo.UNSEEN) == {"conv-30"}
    assert not set(locomo.UNSEEN) & (set(locomo.TUNE) | set(locomo.HELD_OUT))
    unseen = locomo.load_questions(locomo.UNSEEN)
    assert {q.conv for q in unseen} == {"conv-30"} and len(unseen) == 81
    assert {q.category for q in unseen} <= set(locomo.CATEGORIES)
    # Adding it changed neither the eight conversations' questions nor their pipeline input.
    assert {q.conv for q in locomo.load_questions()} == set(locomo.CONVS)
    assert locomo.input_digest() != locomo.input_digest(locomo.UNSEEN)
    turns = locomo.landing_turns("conv-30", locomo.session_dates()["conv-30"])
    assert len(turns) == len({t["dia_ids"][0] for t in locomo.load_triples("conv-30")})


def test_the_verdict_gates_held_out_goals_and_reports_unseen_ones_beside_the_ceiling() -> None:
    from bench import bench_locomo

    def curve_(at5: float, at10: float, at40: float) -> dict[str, dict[str, float]]:
        values = {"recall@5": at5, "recall@10": at10, "recall@40": at40}
        metrics = (*(f"recall@{k}" for k in curve.KS), "mrr")
        return {m: {"mean": values.get(m, at40)} for m in metrics}

    good, low, flat = curve_(0.75, 0.85, 0.90), curve_(0.60, 0.70, 0.74), curve_(0.55, 0.60, 0.70)

    def entry(served: dict) -> dict:
        systems = {s: served for s in bench_locomo.SERVED}
        return {"ceiling": 0.825, **systems, "lexical": flat, "flat_bm25": flat,
                "flat_rrf": flat, "flat_minilm": flat}  # fmt: skip

    every = {labels: {"held_out": entry(good), "unseen": entry(low)} for labels in locomo.LABELS}
    problems, unseen = bench_locomo.verdict(every)
    assert problems == []
    assert len(unseen) == len(locomo.LABELS) * len(bench_locomo.SERVED) * 3
    assert all("of the ceiling 0.825" in line and line.startswith("unseen/") for line in unseen)
    assert any("recall@10 below 0.8 (0.700, 85% of the ceiling" in line for line in unseen)
    # Below a goal on the held-out half, or below flat RRF anywhere, is a problem.
    every["published"]["held_out"] = entry(low)
    every["audited"]["unseen"]["flat_rrf"] = curve_(0.9, 0.9, 0.9)
    problems, _ = bench_locomo.verdict(every)
    assert any(p.startswith("held_out/published") and "recall@10 below 0.8" in p for p in problems)
    assert any(p.startswith("unseen/audited") and "below flat_rrf" in p for p in problems)
    # Flat vectors and, for `lexical`, flat BM25 at 40 are judged on every split too.
    every = {labels: {"held_out": entry(good), "unseen": entry(low)} for labels in locomo.LABELS}
    every["published"]["unseen"]["flat_minilm"] = curve_(0.9, 0.9, 0.9)
    every["audited"]["held_out"]["flat_bm25"] = curve_(0.9, 0.9, 0.9)
    problems, _ = bench_locomo.verdict(every)
    assert sorted({p.split(":")[0] for p in problems}) == ["held_out/audited", "unseen/published"]
    assert any("below flat_minilm" in p for p in problems)
    assert "held_out/audited: lexical recall@40 below flat_bm25" in problems
