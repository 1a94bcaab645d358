from __future__ import annotations

from datetime import UTC, datetime

import polars as pl
import pytest

from schemas.contracts import TripleContract
from schemas.rules import Reason
from schemas.triples import TurnContext, items_to_triples, resolve_fact_id, triage, triples_frame

TS = datetime(2026, 11, 3, 9, 0, tzinfo=UTC)


def ctx(source: str = "explicit") -> TurnContext:
    return TurnContext(
        "acme",
        "api",
        "2026-11-03",
        "s1",
        "t1",
        TS,
        "claude-code",
        "explicit" if source == "explicit" else "openai-compatible:m",
        source,
    )


def one(item: object, source: str = "explicit") -> tuple[list[dict], list[dict]]:
    return items_to_triples([item], ctx(source))


def test_a_good_explicit_triple_gets_defaults_and_provenance() -> None:
    rows, rejects = one({"subject": "payments-api", "predicate": "uses", "object": "Postgres"})
    assert rejects == []
    (row,) = rows
    assert row["predicate"] == "USES" and row["predicate_raw"] == "uses"
    assert row["confidence"] == 1.0
    assert row["valid_from"] == TS
    assert (row["session_id"], row["turn_id"], row["client"], row["model"]) == (
        "s1",
        "t1",
        "claude-code",
        "explicit",
    )
    again, _ = one({"subject": "payments-api", "predicate": "uses", "object": "Postgres"})
    assert again[0]["triple_id"] == row["triple_id"]


@pytest.mark.parametrize(
    ("item", "reason"),
    [
        ({"subject": "a", "predicate": "likes!!!", "object": "b"}, Reason.PREDICATE_INVALID),
        ({"subject": "", "predicate": "USES", "object": "b"}, Reason.NAME_EMPTY),
        ({"predicate": "USES", "object": "b"}, Reason.NAME_EMPTY),
        ({"subject": "x" * 121, "predicate": "USES", "object": "b"}, Reason.NAME_TOO_LONG),
        (
            {"subject": "a", "predicate": "USES", "object": "b", "confidence": 0.3},
            Reason.LOW_CONFIDENCE,
        ),
        (
            {"subject": "a", "predicate": "USES", "object": "b", "confidence": 1.7},
            Reason.CONFIDENCE_OUT_OF_RANGE,
        ),
        (
            {"subject": "a", "predicate": "USES", "object": "b", "confidence": "high"},
            Reason.CONFIDENCE_INVALID,
        ),
        (
            {"subject": "a", "predicate": "USES", "object": "b", "supersedes": 42},
            Reason.BAD_SUPERSEDES,
        ),
        (
            {"subject": "AKIAIOSFODNN7EXAMPLE", "predicate": "USES", "object": "b"},
            Reason.NAME_REDACTED_ENTIRELY,
        ),
        (["not", "an", "object"], "not_an_object"),
    ],
)
def test_bad_items_are_rejected_with_a_reason(item: object, reason: str) -> None:
    rows, rejects = one(item)
    assert rows == []
    assert [r["reason"] for r in rejects] == [reason]
    assert rejects[0]["tenant_id"] == "acme" and rejects[0]["ns"] == "api"


def test_model_items_need_a_confidence_and_the_rest_of_a_batch_is_kept() -> None:
    items = [
        {"subject": "a", "predicate": "USES", "object": "b", "confidence": 0.9},
        {"subject": "a", "predicate": "USES", "object": "c"},
        {"subject": "a", "predicate": "USES", "object": "d", "confidence": 0.59},
    ]
    rows, rejects = items_to_triples(items, ctx("llm"))
    assert [r["object"] for r in rows] == ["b"]
    assert sorted(r["reason"] for r in rejects) == sorted(
        [Reason.CONFIDENCE_INVALID, Reason.LOW_CONFIDENCE]
    )


def test_secrets_in_names_are_redacted_before_anything_else() -> None:
    rows, _ = one(
        {
            "subject": "deploy key ghp_abcdefghijklmnopqrstuvwxyz0123456789",
            "predicate": "USES",
            "object": "b",
        }
    )
    assert "ghp_" not in rows[0]["subject"]
    assert "[REDACTED" in rows[0]["subject"]


def test_supersedes_as_a_triple_resolves_to_the_fact_id() -> None:
    rows, rejects = one(
        {
            "subject": "cache",
            "predicate": "USES",
            "object": "Valkey 8",
            "supersedes": {"subject": "Cache", "predicate": "uses", "object": "redis 6"},
        }
    )
    assert rejects == []
    assert rows[0]["supersedes"] == resolve_fact_id("acme", "api", "cache", "USES", "Redis 6")


def test_triage_applies_the_same_rules_vectorised_and_the_contract_agrees() -> None:
    rows, _ = items_to_triples(
        [
            {"subject": "a", "predicate": "USES", "object": "b"},
            {"subject": "a", "predicate": "USES", "object": "c"},
        ],
        ctx(),
    )
    df = triples_frame(rows)
    broken = df.with_columns(
        pl.Series("predicate", ["USES", "bad predicate"]),
    )
    good, bad = triage(broken)
    assert good.height == 1 and bad["reason"].to_list() == [Reason.PREDICATE_INVALID]
    TripleContract.validate(good)
    with pytest.raises(Exception, match="str_matches"):
        TripleContract.validate(broken)
