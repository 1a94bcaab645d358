"""Issue 16 item 3: stored facts and entities written under the earlier resolution rule are
re-resolved by the facts stage (`memflow.rekey`): names the old rule merged come apart, names
it kept apart merge, nothing stored is lost, and the result equals a build from scratch under
the rule in force. The old rule is `tests.support.legacy_ids` (schemas/ids.py before issue 16).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import polars as pl
import pytest

from memflow.facts import FactsBuild, build_facts
from memflow.rekey import rekey_log, rekey_turn_keys
from schemas import ids
from schemas.contracts import EntityContract, FactContract
from schemas.scope import Scope
from schemas.triples import TurnContext, items_to_triples, triples_frame
from tests.support import legacy_ids

SCOPE = Scope("er", "resolve")
T0 = datetime(2026, 11, 1, 9, 0, tzinfo=UTC)

# (turn, subject, predicate, object): the review's H1 pairs, each statement in its own turn,
# and typographic variants (L2) the old rule kept apart.
STATEMENTS = [
    ("t1", "app", "REQUIRES", "python >3.12"),
    ("t2", "app", "REQUIRES", "python <3.12"),
    ("t3", "worker", "RETRIES", "1"),
    ("t4", "worker", "RETRIES", "-1"),
    ("t5", "trainer", "USES_LEARNING_RATE", "1e5"),
    ("t6", "trainer", "USES_LEARNING_RATE", "1e-5"),
    ("t7", "api", "LISTENS_ON", "1"),
    ("t8", "api", "LISTENS_ON", "::1"),
    ("t9", "billing", "RUNS_ON", "net"),
    ("t10", "billing", "RUNS_ON", ".NET"),
    ("t11", "deploy", "READS", "env"),
    ("t12", "deploy", "READS", ".env"),
    ("t13", "payments-api", "USES", "redis"),
    ("t14", "payments\u2013api", "USES", "redis"),  # en dash
    ("t15", "payments\u200bapi", "USES", "redis"),  # zero-width space
    ("t16", "p\u0430yments-api", "USES", "redis"),  # Cyrillic a
]


def frame(statements, supersede: dict[str, tuple[str, str, str]] | None = None) -> pl.DataFrame:
    frames = []
    for n, (turn, s, p, o) in enumerate(statements):
        ctx = TurnContext(
            "er", "resolve", "2026-11-01", "s1", turn, T0 + timedelta(minutes=n), "codex",
            "explicit", "explicit",
        )  # fmt: skip
        item = {"subject": s, "predicate": p, "object": o}
        if supersede and turn in supersede:
            old = supersede[turn]
            item["supersedes"] = {"subject": old[0], "predicate": old[1], "object": old[2]}
        rows, _ = items_to_triples([item], ctx)
        frames.append(triples_frame(rows))
    return pl.concat(frames)


def old_build(monkeypatch: pytest.MonkeyPatch, statements, **kw) -> tuple[pl.DataFrame, FactsBuild]:
    """Triples and a facts build as the earlier code made them (its key in every id)."""
    with monkeypatch.context() as m:
        m.setattr(ids, "norm_key", legacy_ids.norm_key)
        triples = frame(statements, **kw)
        return triples, build_facts(SCOPE, triples)


def same_tables(a: FactsBuild, b: FactsBuild) -> None:
    order = {"validated": "fact_id", "entities": "entity_id", "merges": "triple_id"}
    assert a.facts.sort(order["validated"]).equals(b.facts.sort(order["validated"]))
    assert a.entities.sort(order["entities"]).equals(b.entities.sort(order["entities"]))
    assert a.merges.sort(order["merges"]).equals(b.merges.sort(order["merges"]))


def test_the_old_rule_merged_the_review_pairs(monkeypatch: pytest.MonkeyPatch) -> None:
    """The state an existing data directory holds (the review's reproduction)."""
    _, old = old_build(monkeypatch, STATEMENTS)
    assert old.facts.height == 6 + 4  # six H1 pairs merged, four payments spellings apart
    python = old.facts.filter(pl.col("subject") == "app").row(0, named=True)
    assert python["object"] == "python >3.12"
    assert [t["turn_id"] for t in python["sources"]] == ["t1", "t2"]


def test_stored_state_of_the_old_rule_is_re_resolved(monkeypatch: pytest.MonkeyPatch) -> None:
    triples, old = old_build(monkeypatch, STATEMENTS)
    built = build_facts(SCOPE, triples, old.facts, old.entities)
    assert built.balanced, built.counts
    # Changed ids: facts first stated in a spelling whose key changed (python >3.12 and three
    # payments spellings); entities whose stored name did (ties made ".NET", "1e-5", ".env",
    # "python <3.12" their names), each joining or leaving another.
    assert built.rekeyed == {"facts": 4, "facts_joined": 3, "entities": 7}
    # one fact per H1 statement, one for every payments spelling
    assert built.facts.height == 12 + 1
    by_object = {r["object"]: r for r in built.facts.to_dicts() if r["subject"] == "app"}
    assert set(by_object) == {"python >3.12", "python <3.12"}
    # recall cites each turn for what it said, and only that (H1)
    assert [t["turn_id"] for t in by_object["python >3.12"]["sources"]] == ["t1"]
    assert [t["turn_id"] for t in by_object["python <3.12"]["sources"]] == ["t2"]
    payments = built.facts.filter(pl.col("object") == "redis").row(0, named=True)
    assert payments["subject"] == "payments-api"
    assert [t["turn_id"] for t in payments["sources"]] == ["t13", "t14", "t15", "t16"]
    entity = built.entities.filter(pl.col("name") == "payments-api").row(0, named=True)
    assert set(entity["aliases"]) == {"payments\u2013api", "payments\u200bapi", "p\u0430yments-api"}
    net = built.entities.filter(pl.col("name") == "net").row(0, named=True)
    assert ".NET" not in net["aliases"]
    # nothing stored is lost: every old fact's first statement still states a fact
    cited = {(t["session_id"], t["turn_id"]) for ts in built.facts["sources"] for t in ts}
    assert set(old.facts.select("session_id", "turn_id").rows()) <= cited
    FactContract.validate(built.facts)
    EntityContract.validate(built.entities)


def test_re_resolved_state_equals_a_clean_build_and_settles(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    triples, old = old_build(monkeypatch, STATEMENTS)
    migrated = build_facts(SCOPE, triples, old.facts, old.entities)
    clean = build_facts(SCOPE, frame(STATEMENTS))
    same_tables(migrated, clean)
    again = build_facts(SCOPE, triples, migrated.facts, migrated.entities)
    assert again.rekeyed == {}
    same_tables(again, migrated)
    assert again.counts["facts_new"] == 0 and again.balanced


def test_supersession_links_follow_the_new_ids(monkeypatch: pytest.MonkeyPatch) -> None:
    statements = [
        ("t1", "cache", "USES", "redis\u20136"),  # en dash: its key changes
        ("t2", "cache", "USES", "valkey <8"),
    ]
    supersede = {"t2": ("cache", "USES", "redis\u20136")}
    triples, old = old_build(monkeypatch, statements, supersede=supersede)
    assert old.facts.filter(pl.col("valid_to").is_not_null()).height == 1
    built = build_facts(SCOPE, triples, old.facts, old.entities)
    clean = build_facts(SCOPE, frame(statements, supersede=supersede))
    same_tables(built, clean)
    redis, valkey = built.facts.sort("valid_from").to_dicts()
    assert redis["superseded_by"] == valkey["fact_id"] and valkey["supersedes"] == redis["fact_id"]
    assert redis["valid_to"] == valkey["valid_from"]
    assert built.warnings == 0


def test_a_tenant_stored_under_the_current_rule_is_not_touched() -> None:
    triples = frame(STATEMENTS)
    first = build_facts(SCOPE, triples)
    again = build_facts(SCOPE, triples, first.facts, first.entities)
    assert again.rekeyed == {}
    same_tables(again, first)


def test_turn_keys_of_ids_holding_the_old_separator_move_over() -> None:
    rows = [("a\x1fb", "c"), ("a", "b\x1fc"), ("plain", "1")]
    turns = pl.DataFrame(
        {
            "tenant_id": ["er"] * 3,
            "ns": ["resolve"] * 3,
            "session_id": [s for s, _ in rows],
            "turn_id": [t for _, t in rows],
            "turn_key": [ids.legacy_turn_key("er", "resolve", s, t) for s, t in rows],
        }
    )
    assert turns["turn_key"].n_unique() == 2  # the review's L3 collision
    moved, _ = rekey_turn_keys(turns)
    assert moved["turn_key"].to_list() == [ids.turn_key("er", "resolve", s, t) for s, t in rows]
    assert moved["turn_key"].n_unique() == 3
    assert moved["turn_key"][2] == turns["turn_key"][2]  # a plain id keeps its key
    again, _ = rekey_turn_keys(moved)
    assert again.equals(moved)


def test_the_extraction_log_follows_the_turns_keys() -> None:
    """As stored: one of two colliding turns in raw_turns (the other was a duplicate_turn)."""
    rows = [("a", "b\x1fc"), ("plain", "1")]
    legacy = [ids.legacy_turn_key("er", "resolve", s, t) for s, t in rows]
    turns = pl.DataFrame(
        {"session_id": [s for s, _ in rows], "turn_id": [t for _, t in rows], "turn_key": legacy}
    ).with_columns(tenant_id=pl.lit("er"), ns=pl.lit("resolve"))
    moved, mapping = rekey_turn_keys(turns)
    log = pl.DataFrame({"turn_key": legacy})
    assert rekey_log(log, mapping)["turn_key"].to_list() == moved["turn_key"].to_list()
