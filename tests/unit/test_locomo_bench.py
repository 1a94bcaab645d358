"""The public benchmark's landing and metrics (bench/locomo.py); the data is read, not changed."""

from __future__ import annotations

import json

import pytest

from bench import locomo


def test_valid_from_becomes_an_instant() -> None:
    assert locomo.instant("2022-12-17") == "2022-12-17T00:00:00Z"
    assert locomo.instant("2022-12") == "2022-12-01T00:00:00Z"
    assert locomo.instant("2022") == "2022-01-01T00:00:00Z"


def test_one_tool_turn_per_dia_id_holding_every_triple_read_from_it() -> None:
    dates = locomo.session_dates()["conv-41"]
    turns = locomo.landing_turns("conv-41", dates)
    triples = locomo.load_triples("conv-41")
    dia_ids = {d for t in triples for d in t["dia_ids"]}
    assert [t["turn_id"] for t in turns] == sorted(dia_ids, key=locomo._turn_order)
    assert all(
        t["session_id"] == "conv-41" and t["tool_name"] == "upsert_graph_triples" for t in turns
    )
    assert sum(len(t["tool_input"]["triples"]) for t in turns) == sum(
        len(set(t["dia_ids"])) for t in triples
    )
    first = turns[0]
    assert first["ts"] == dates[locomo.session_of(first["turn_id"])]
    kept = {k for t in turns for tr in t["tool_input"]["triples"] for k in tr}
    assert kept <= {"subject", "predicate", "object", "subject_type", "object_type", "valid_from"}


def test_the_kept_aside_conversations_are_not_in_the_benchmark() -> None:
    assert not {"conv-26", "conv-30"} & set(locomo.CONVS)
    assert set(locomo.TUNE) | set(locomo.HELD_OUT) == set(locomo.CONVS)
    assert not set(locomo.TUNE) & set(locomo.HELD_OUT)
    assert {q.conv for q in locomo.load_questions()} == set(locomo.CONVS)
    assert {q.category for q in locomo.load_questions()} == {1, 2, 4}


def test_metrics_of_one_answer() -> None:
    prov = {
        "f1": frozenset({"D1:1"}),
        "f2": frozenset({"D2:2", "D3:3"}),
        "f3": frozenset({"D9:9"}),
    }
    got = locomo.score_ranking(["f3", "f2", "f1"], ["D2:2", "D1:1", "D4:4", "D:1"], prov)
    assert got == {
        "recall@5": 0.5,
        "recall@10": 0.5,
        "recall@15": 0.5,
        "recall@20": 0.5,
        "recall@40": 0.5,
        "mrr": 0.5,
    }
    assert locomo.score_ranking([], ["D1:1"], prov)["recall@40"] == 0.0
    assert locomo.first_provenance({"f": frozenset({"D10:1", "D2:7"})}) == {
        "f": frozenset({"D2:7"})
    }


def test_questions_are_unchanged() -> None:
    with (locomo.DATA / "questions.jsonl").open(encoding="utf-8") as fh:
        raw = [json.loads(line) for line in fh if line.strip()]
    loaded = locomo.load_questions()
    assert len(loaded) == len(raw) == 1224
    assert [q.evidence for q in loaded] == [tuple(r["evidence"]) for r in raw]


@pytest.mark.parametrize("bad", ["D", "D:11:26", "x1:2"])
def test_a_malformed_dia_id_is_no_session(bad: str) -> None:
    with pytest.raises(ValueError):
        locomo.session_of(bad)


def test_stored_provenance_reads_the_first_statement_and_every_source() -> None:
    from datetime import UTC, datetime

    from schemas.records import FactRecord

    def fact(fid: str, turn: str, sources: tuple[tuple[str, str], ...]) -> FactRecord:
        t0 = datetime(2023, 5, 1, tzinfo=UTC)
        return FactRecord(
            fid, "e1", "A", "LIKES", "e2", "B", 1.0, t0, turn_id=turn, sources=sources
        )

    facts = [
        fact("f1", "D1:3", (("conv-41", "D1:3"), ("conv-41", "D4:2"))),
        fact("f2", "D2:1", ()),  # stored before facts kept sources
    ]
    assert locomo.stored_provenance(facts) == {
        "f1": frozenset({"D1:3", "D4:2"}),
        "f2": frozenset({"D2:1"}),
    }
