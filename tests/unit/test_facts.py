from __future__ import annotations

from datetime import UTC, datetime, timedelta

import polars as pl
import pytest

from memflow.facts import build_facts
from schemas import rules
from schemas.contracts import EntityContract, FactContract
from schemas.rules import Reason
from schemas.scope import Scope
from schemas.triples import TurnContext, items_to_triples, triples_frame

SCOPE = Scope("acme", "api")
T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)


def triples(*items: dict, at: datetime = T0, turn: str = "t1") -> pl.DataFrame:
    ctx = TurnContext(
        "acme", "api", at.strftime("%Y-%m-%d"), "s1", turn, at, "codex", "explicit", "explicit"
    )
    rows, rejects = items_to_triples(items, ctx)
    assert rejects == []
    return triples_frame(rows)


def t(s: str, p: str, o: str, **kw: object) -> dict:
    return {"subject": s, "predicate": p, "object": o, **kw}


def test_spellings_become_one_entity_with_aliases_and_stable_ids() -> None:
    df = pl.concat(
        [
            triples(t("payments-api", "USES", "PostgreSQL")),
            triples(t("Payments API", "USES", "postgresql"), turn="t2"),
            triples(t("payments-api", "DEPLOYED_ON", "ＰｏｓｔｇｒｅＳＱＬ"), turn="t3"),
        ]
    )
    built = build_facts(SCOPE, df)
    names = {r["name"]: r for r in built.entities.to_dicts()}
    assert len(names) == 2
    pg = next(r for r in names.values() if "SQL" in r["name"] or "sql" in r["name"])
    assert set(pg["aliases"]) | {pg["name"]} == {"PostgreSQL", "postgresql", "ＰｏｓｔｇｒｅＳＱＬ"}
    # the two USES statements are one fact; the first statement carries provenance
    assert built.facts.height == 2
    uses = built.facts.filter(pl.col("predicate") == "USES").row(0, named=True)
    assert uses["turn_id"] == "t1"
    again = build_facts(SCOPE, df)
    assert again.facts["fact_id"].to_list() == built.facts["fact_id"].to_list()
    assert again.entities["entity_id"].to_list() == built.entities["entity_id"].to_list()
    FactContract.validate(built.facts)
    EntityContract.validate(built.entities)


def test_supersession_closes_and_links_and_never_edits_content() -> None:
    old = triples(t("cache", "USES", "Redis 6"))
    later = T0 + timedelta(days=2)
    new = triples(
        t(
            "cache",
            "USES",
            "Valkey 8",
            supersedes={"subject": "cache", "predicate": "USES", "object": "Redis 6"},
        ),
        at=later,
        turn="t9",
    )
    first = build_facts(SCOPE, old)
    built = build_facts(SCOPE, pl.concat([old, new]), first.facts, first.entities)
    by_obj = {r["object"]: r for r in built.facts.to_dicts()}
    assert by_obj["Redis 6"]["valid_to"] == later
    assert by_obj["Redis 6"]["superseded_by"] == by_obj["Valkey 8"]["fact_id"]
    assert by_obj["Valkey 8"]["supersedes"] == by_obj["Redis 6"]["fact_id"]
    assert by_obj["Valkey 8"]["valid_to"] is None
    before = first.facts.row(0, named=True)
    for key in ("subject", "predicate", "object", "confidence", "valid_from", "turn_id"):
        assert by_obj["Redis 6"][key] == before[key]
    assert built.superseded == 1


def test_supersedes_an_unknown_fact_keeps_the_fact_and_reports_the_link() -> None:
    df = triples(
        t(
            "cache",
            "USES",
            "Valkey 8",
            supersedes={"subject": "cache", "predicate": "USES", "object": "Memcached"},
        )
    )
    built = build_facts(SCOPE, df)
    assert built.facts.height == 1 and built.facts["supersedes"][0] is None
    assert built.rejects["reason"].to_list() == [Reason.SUPERSEDES_UNKNOWN]


def test_fact_cap_rejects_overflow_and_never_evicts_stored_facts() -> None:
    n = rules.MAX_FACTS_PER_REPO
    items = [t(f"module-{i % 2000}", "DEPENDS_ON", f"lib-{i // 2000}") for i in range(n)]
    stored = build_facts(SCOPE, triples(*items))
    assert stored.facts.height == n and stored.rejects.height == 0
    # Older triples arriving later (a backfill) must not displace what is stored.
    older = triples(*[t(f"old-{i}", "USES", "x") for i in range(5)], at=T0 - timedelta(days=30))
    newer = triples(t("module-1", "USES", "brand-new"), at=T0 + timedelta(days=1))
    built = build_facts(
        SCOPE, pl.concat([triples(*items), older, newer]), stored.facts, stored.entities
    )
    assert built.facts.height == n
    assert set(built.facts["fact_id"]) == set(stored.facts["fact_id"])
    assert built.rejects_by_reason == {Reason.FACT_CAP: 6}
    FactContract.validate(built.facts)


def test_entity_cap_rejects_facts_that_need_new_entities() -> None:
    n = rules.MAX_ENTITIES_PER_REPO
    items = [t(f"e{i}", "RELATES_TO", f"e{i + 1}") for i in range(0, n, 2)]
    built = build_facts(SCOPE, triples(*items))
    assert built.entities.height == n
    more = triples(
        t("e0", "RELATES_TO", "e3"), t("e0", "RELATES_TO", "fresh"), at=T0 + timedelta(hours=1)
    )
    again = build_facts(SCOPE, pl.concat([triples(*items), more]), built.facts, built.entities)
    assert again.entities.height == n
    assert again.rejects_by_reason == {Reason.ENTITY_CAP: 1}
    assert again.new_facts == 1  # e0 -> e3 needs no new entity


def test_invalid_triples_reaching_the_asset_are_quarantined_not_dropped() -> None:
    df = triples(t("a", "USES", "b"), t("a", "USES", "c"))
    df = df.with_columns(pl.Series("predicate", ["USES", "not upper"]))
    built = build_facts(SCOPE, df)
    assert built.facts.height == 1
    assert built.rejects["reason"].to_list() == [Reason.PREDICATE_INVALID]


def test_a_foreign_scope_triple_is_an_error() -> None:
    df = triples(t("a", "USES", "b")).with_columns(pl.lit("globex").alias("tenant_id"))
    with pytest.raises(ValueError, match="another scope"):
        build_facts(SCOPE, df)


def test_retention_of_n_days_drops_old_text_and_keeps_ids_and_hashes() -> None:
    from memflow.turns import apply_retention

    now = datetime(2026, 11, 30, tzinfo=UTC)
    turns = pl.DataFrame(
        {
            "turn_key": ["t_old", "t_new"],
            "ts": [now - timedelta(days=10), now - timedelta(days=1)],
            "content": ["old text", "new text"],
            "content_sha256": ["h1", "h2"],
        }
    )
    kept = apply_retention(turns, 7, now)
    assert kept["content"].to_list() == [None, "new text"]
    assert kept["content_sha256"].to_list() == ["h1", "h2"]
    assert apply_retention(turns, -1, now).equals(turns)
