from __future__ import annotations

from datetime import UTC, datetime, timedelta

import polars as pl
import pytest

from memflow.facts import build_facts
from schemas import rules
from schemas.contracts import EntityContract, FactContract
from schemas.rules import Reason
from schemas.scope import Scope
from schemas.tables import TRIPLES, conform
from schemas.triples import TurnContext, items_to_triples, triples_frame

SCOPE = Scope("acme", "api")
T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)


def triples(*items: dict, at: datetime = T0, turn: str = "t1", session: str = "s1") -> pl.DataFrame:
    ctx = TurnContext(
        "acme", "api", at.strftime("%Y-%m-%d"), session, turn, at, "codex", "explicit", "explicit"
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


def test_retention_zero_drops_the_text_of_extracted_turns_only() -> None:
    from memflow.turns import drop_extracted_text

    turns = pl.DataFrame(
        {
            "turn_key": ["done", "waiting", "gone"],
            "content": ["said", "not yet", None],
            "content_sha256": ["h1", "h2", "h3"],
        }
    )
    log = pl.DataFrame({"turn_key": ["done", "waiting", "gone"], "model": ["m", "none", "m"]})
    stripped, dropped = drop_extracted_text(turns, log)
    assert dropped == 1  # "gone" had no text left to drop
    assert stripped["content"].to_list() == [None, "not yet", None]
    assert stripped["content_sha256"].to_list() == ["h1", "h2", "h3"]
    again, none = drop_extracted_text(stripped, log)
    assert none == 0 and again.equals(stripped)


def test_a_tenants_quarantine_keeps_each_reject_once_where_first_met() -> None:
    from memflow.facts import tenant_quarantine
    from schemas.tables import QUARANTINE

    def rejects(*pairs: tuple[str, str]) -> pl.DataFrame:
        rows = {"reject_id": [r for r, _ in pairs], "stage": [s for _, s in pairs]}
        return conform(pl.DataFrame(rows), QUARANTINE)

    df = triples(t("a", "USES", "b"), t("a", "USES", "c"))
    built = build_facts(SCOPE, df.with_columns(pl.Series("predicate", ["USES", "not upper"])))
    assert built.rejects.height == 1
    out = tenant_quarantine(
        [rejects(("r1", "landing")), None, pl.DataFrame()],
        built,
        [rejects(("r1", "validation"), ("r2", "validation"))],
    )
    assert out.columns == list(QUARANTINE)
    assert out["reject_id"].to_list() == ["r1", built.rejects["reject_id"][0], "r2"]
    assert out["stage"].to_list()[0] == "landing"


# -- provenance: every stating turn, first statement first -----------------------------------


def _sources(frame: pl.DataFrame, obj: str) -> list[tuple[str, str]]:
    row = frame.filter(pl.col("object") == obj).row(0, named=True)
    return [(s["session_id"], s["turn_id"]) for s in row["sources"]]


def test_same_day_restatements_keep_the_earliest_turn_first() -> None:
    # Six turns of one day state one fact with the same valid_from: only the turn's time can
    # tell which came first (the triple id is a hash, in another order).
    day = {"valid_from": "2026-11-01"}
    frames = [
        triples(t("api", "USES", "Postgres", **day), at=T0 + timedelta(minutes=i), turn=f"t{i}")
        for i in range(6)
    ]
    df = pl.concat(list(reversed(frames)))
    assert df["stated_at"].null_count() == 0
    by_hash = df.sort("triple_id")["turn_id"].to_list()
    assert by_hash != [f"t{i}" for i in range(6)]  # the old tie-break would not hold
    built = build_facts(SCOPE, df)
    fact = built.facts.row(0, named=True)
    assert fact["turn_id"] == "t0"
    assert _sources(built.facts, "Postgres") == [("s1", f"t{i}") for i in range(6)]
    assert built.counts["merged"] == 5


def test_a_stored_fact_restated_later_gains_the_turn_and_nothing_else() -> None:
    first = triples(t("api", "USES", "Postgres"), t("api", "CALLS", "billing"))
    stored = build_facts(SCOPE, first)
    later = triples(
        t("api", "USES", "Postgres", confidence=0.7),
        at=T0 + timedelta(days=3),
        turn="t9",
        session="s2",
    )
    built = build_facts(SCOPE, pl.concat([first, later]), stored.facts, stored.entities)
    assert _sources(built.facts, "Postgres") == [("s1", "t1"), ("s2", "t9")]
    assert _sources(built.facts, "billing") == [("s1", "t1")]
    before = stored.facts.filter(pl.col("object") == "Postgres").row(0, named=True)
    after = built.facts.filter(pl.col("object") == "Postgres").row(0, named=True)
    assert {k: v for k, v in after.items() if k != "sources"} == {
        k: v for k, v in before.items() if k != "sources"
    }
    assert built.counts == {**built.counts, "facts_stored": 2, "merged": 1, "facts_new": 0}
    # Rerun: nothing new, the same sources.
    again = build_facts(SCOPE, pl.concat([first, later]), built.facts, built.entities)
    assert again.facts.equals(built.facts)


def test_sources_stop_at_the_cap_and_keep_the_first_statements() -> None:
    n = rules.MAX_FACT_SOURCES + 8
    frames = [
        triples(t("api", "USES", "Postgres"), at=T0 + timedelta(hours=i), turn=f"t{i:02d}")
        for i in range(n)
    ]
    half = pl.concat(frames[: n // 2])
    stored = build_facts(SCOPE, half)
    assert len(_sources(stored.facts, "Postgres")) == n // 2
    built = build_facts(SCOPE, pl.concat(frames), stored.facts, stored.entities)
    assert _sources(built.facts, "Postgres") == [
        ("s1", f"t{i:02d}") for i in range(rules.MAX_FACT_SOURCES)
    ]
    fresh = build_facts(SCOPE, pl.concat(frames))
    assert _sources(fresh.facts, "Postgres") == _sources(built.facts, "Postgres")


def test_tables_written_before_sources_and_stated_at_still_build() -> None:
    first = triples(t("api", "USES", "Postgres"), turn="t1")
    second = triples(t("api", "USES", "Postgres"), at=T0 + timedelta(hours=1), turn="t2")
    older_triples = pl.concat([first, second]).drop("stated_at")
    stored = build_facts(SCOPE, conform(older_triples, TRIPLES))
    older_facts = stored.facts.drop("sources")
    third = triples(t("api", "USES", "Postgres"), at=T0 + timedelta(hours=2), turn="t3")
    built = build_facts(
        SCOPE, conform(pl.concat([older_triples, third.drop("stated_at")]), TRIPLES),
        older_facts, stored.entities,
    )  # fmt: skip
    # Its own first statement first, then every other stating turn in statement order.
    assert _sources(built.facts, "Postgres") == [("s1", "t1"), ("s1", "t2"), ("s1", "t3")]
