"""F9 and issue 7 item 4: entity resolution never merges names that differ in digits or in the
punctuation between digits, and every triple is accounted for: a new fact, merged into a fact
(spelling kept as an alias, provenance kept), or quarantined with a reason."""

from __future__ import annotations

import re
import unicodedata
from datetime import UTC, datetime, timedelta

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memflow.facts import build_facts
from schemas import ids, rules
from schemas.contracts import EntityContract, FactContract
from schemas.rules import Reason
from schemas.scope import Scope
from schemas.tables import FACT_MERGES
from schemas.triples import TurnContext, items_to_triples, triples_frame

SCOPE = Scope("acme", "api")
T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)


def triples(*items: dict, at: datetime = T0, turn: str = "t1") -> pl.DataFrame:
    ctx = TurnContext("acme", "api", "2026-11-01", "s1", turn, at, "codex", "explicit", "explicit")
    rows, rejects = items_to_triples(items, ctx)
    assert [r for r in rejects if r["severity"] == "error"] == []
    return triples_frame(rows)


def t(s: str, p: str, o: str) -> dict:
    return {"subject": s, "predicate": p, "object": o}


# ------------------------------------------------------------------------- the reproductions

DIFFERENT = [
    ("Node 1.8", "Node 18"),
    ("10.0.0.1", "100.0.1"),
    ("Python 3.10", "Python 3.1.0"),
    ("s1_10", "s11_0"),
    ("1,000", "1000"),
    ("v1-2", "v1.2"),
    ("10 0", "100"),
    ("C++", "C"),
    ("C#", "C"),
]
SAME = [
    ("PostgreSQL", "postgre sql"),
    ("PostgreSQL", "ＰｏｓｔｇｒｅＳＱＬ"),
    ("node.js", "Node JS"),
    ("Node 18", "node-18"),
    ("Node 18", "NODE18"),
    ("Python 3.10", "python 3.10"),
    ("10.0.0.1", "10.0.0.1."),
    ("payments-api", "Payments API"),
    ("１８", "18"),
]


@pytest.mark.parametrize(("a", "b"), DIFFERENT)
def test_names_differing_in_digits_or_punctuation_between_digits_stay_apart(a: str, b: str):
    assert ids.norm_key(a) != ids.norm_key(b)


@pytest.mark.parametrize(("a", "b"), SAME)
def test_case_space_and_unicode_variants_still_merge(a: str, b: str):
    assert ids.norm_key(a) == ids.norm_key(b)


def test_f9_the_merge_case_keeps_six_facts() -> None:
    """F9 merge case: 6 triples in, 4 facts out, 0 rejects."""
    df = triples(
        t("web-app", "USES", "Node 1.8"),
        t("web-app", "USES", "Node 18"),
        t("gateway", "ROUTES_TO", "10.0.0.1"),
        t("gateway", "ROUTES_TO", "100.0.1"),
        t("ml", "RUNS_ON", "Python 3.10"),
        t("ml", "RUNS_ON", "Python 3.1.0"),
    )
    built = build_facts(SCOPE, df)
    assert built.facts.height == 6
    assert built.counts == {
        "triples_in": 6,
        "facts_stored": 0,
        "facts_new": 6,
        "merged": 0,
        "rejects": 0,
        "warnings": 0,
    }
    names = set(built.entities["name"].to_list())
    assert {"Node 1.8", "Node 18", "10.0.0.1", "100.0.1", "Python 3.10", "Python 3.1.0"} <= names


def test_f9_the_100k_shape_scaled_down_is_fully_accounted_for() -> None:
    """`s{j}_{i} USES o{j}_{i}`: 8,910 of 100,000 triples vanished (s1_10 == s11_0). Scaled to
    60 turns x 100 triples (6,000), past the 5,000-entity cap."""
    frames = [
        triples(*[t(f"s{j}_{i}", "USES", f"o{j}_{i}") for i in range(100)], turn=f"t{j}")
        for j in range(60)
    ]
    built = build_facts(SCOPE, pl.concat(frames))
    assert built.balanced
    assert built.counts == {
        "triples_in": 6_000,
        "facts_stored": 0,
        "facts_new": rules.MAX_ENTITIES_PER_REPO // 2,
        "merged": 0,
        "rejects": 6_000 - rules.MAX_ENTITIES_PER_REPO // 2,
        "warnings": 0,
    }
    assert built.rejects_by_reason == {Reason.ENTITY_CAP: 3_500}
    assert built.rejects.height == 3_500
    assert built.entities.height == rules.MAX_ENTITIES_PER_REPO


def test_a_repeated_fact_is_merged_with_its_spelling_and_provenance_kept() -> None:
    first = triples(t("payments-api", "USES", "PostgreSQL"))
    stored = build_facts(SCOPE, first)
    later = pl.concat(
        [
            triples(t("Payments API", "uses", "postgresql"), turn="t2", at=T0 + timedelta(1)),
            triples(t("payments api", "USES", "Postgre-SQL"), turn="t3", at=T0 + timedelta(2)),
            triples(t("payments-api", "USES", "Redis"), turn="t4", at=T0 + timedelta(2)),
            triples(t("payments-api", "USES", "redis"), turn="t5", at=T0 + timedelta(3)),
        ]
    )
    built = build_facts(SCOPE, later, stored.facts, stored.entities)
    assert built.counts == {
        "triples_in": 4,
        "facts_stored": 0,
        "facts_new": 1,
        "merged": 3,
        "rejects": 0,
        "warnings": 0,
    }
    assert built.facts.height == 2
    merges = built.merges
    assert dict(merges.schema) == FACT_MERGES
    assert sorted(merges["turn_id"]) == ["t2", "t3", "t5"]
    # A rerun over the same triples writes the same merges (review L1: `into` changed).
    again = build_facts(SCOPE, later, built.facts, built.entities)
    assert again.merges.sort("triple_id").equals(merges.sort("triple_id"))
    pg = built.entities.filter(pl.col("name") == "PostgreSQL").row(0, named=True)
    assert {"postgresql", "Postgre-SQL"} <= set(pg["aliases"])
    FactContract.validate(built.facts)
    EntityContract.validate(built.entities)


def test_every_triple_of_a_capped_fact_is_a_reject() -> None:
    n = rules.MAX_FACTS_PER_REPO
    items = [t(f"m-{i % 2000}", "DEPENDS_ON", f"lib-{i // 2000}") for i in range(n)]
    stored = build_facts(SCOPE, triples(*items))
    more = pl.concat(
        [
            triples(t("new", "USES", "thing"), turn="t2", at=T0 + timedelta(1)),
            triples(t("NEW", "uses", "Thing"), turn="t3", at=T0 + timedelta(2)),
        ]
    )
    built = build_facts(SCOPE, more, stored.facts, stored.entities)
    assert built.counts["rejects"] == 2 and built.balanced
    assert sorted(built.rejects["turn_id"].to_list()) == ["t2", "t3"]


def test_supersession_link_problems_are_warnings_not_rejects() -> None:
    df = triples(
        {
            **t("cache", "USES", "Valkey 8"),
            "supersedes": {"subject": "cache", "predicate": "USES", "object": "Memcached"},
        }
    )
    built = build_facts(SCOPE, df)
    assert built.counts == {
        "triples_in": 1,
        "facts_stored": 0,
        "facts_new": 1,
        "merged": 0,
        "rejects": 0,
        "warnings": 1,
    }
    assert built.rejects.select("reason", "severity").rows() == [
        (Reason.SUPERSEDES_UNKNOWN, "warning")
    ]
    assert built.warnings_by_reason == {Reason.SUPERSEDES_UNKNOWN: 1}


# ------------------------------------------------------------------------------- properties

SEPARATORS = " -_.,;:/\\'\"`()[]{}|!?\t"  # < > ~ carry meaning (issue 16): never separators
_SEP_CLASS = re.escape(SEPARATORS)


def signature(name: str) -> list[str]:
    """The digits of a name and the separator runs between two digits, in order."""
    text = unicodedata.normalize("NFKC", name).casefold()
    tokens = re.findall(rf"\d|(?<=\d)[{_SEP_CLASS}\s]+(?=\d)", text)
    return [re.sub(r"\s+", " ", token) for token in tokens]  # the key collapses spaces


names = st.text(
    alphabet=st.sampled_from("abcXYZ0123456789" + SEPARATORS + "+#@é１ß<>~"),
    min_size=1,
    max_size=16,
)


@given(a=names)
def test_the_key_keeps_the_digits_and_the_separators_between_digits(a: str) -> None:
    """So two names with one key have one signature (the key determines it)."""
    assert signature(ids.norm_key(a)) == signature(a)


@given(a=names, b=names)
def test_one_key_means_the_same_digits_and_separators_between_digits(a: str, b: str) -> None:
    if ids.norm_key(a) == ids.norm_key(b):
        assert signature(a) == signature(b)


@st.composite
def variant(draw: st.DrawFn) -> tuple[str, str, bool]:
    """A name and a variant: case changes and separators added or removed next to a
    non-digit (same entity), or a separator added or removed between two digits (not)."""
    base = draw(st.text(alphabet="abcdXY0123456789", min_size=2, max_size=12))
    out = []
    for ch in base:
        out.append(ch.upper() if draw(st.booleans()) else ch.lower())
    same = "".join(out)
    # add separators only where one side is not a digit
    chars = list(same)
    with_seps = []
    for i, ch in enumerate(chars):
        with_seps.append(ch)
        nxt = chars[i + 1] if i + 1 < len(chars) else ""
        if nxt and not (ch.isdigit() and nxt.isdigit()) and draw(st.booleans()):
            with_seps.append(draw(st.sampled_from([" ", "-", "_", ".", "  "])))
    merged = "".join(with_seps)
    pairs = [i for i in range(len(base) - 1) if base[i].isdigit() and base[i + 1].isdigit()]
    if pairs and draw(st.booleans()):
        i = draw(st.sampled_from(pairs))
        split = base[: i + 1] + draw(st.sampled_from([".", "_", " ", "-", ","])) + base[i + 1 :]
        return base, split, False
    return base, merged, True


@given(case=variant())
def test_variants_merge_and_digit_splits_do_not(case: tuple[str, str, bool]) -> None:
    a, b, same = case
    assert (ids.norm_key(a) == ids.norm_key(b)) is same


@st.composite
def triple_batches(draw: st.DrawFn) -> list[pl.DataFrame]:
    vocab = draw(
        st.lists(
            st.sampled_from(
                ["Node 1.8", "Node 18", "node-18", "s1_10", "s11_0", "Redis", "redis", "API", "x"]
            )
            | st.text(alphabet="ab1 ._", min_size=1, max_size=6),
            min_size=2,
            max_size=8,
        )
    )
    predicates = ["USES", "uses", "DEPENDS_ON", "bad one!"]
    frames = []
    for turn in range(draw(st.integers(1, 4))):
        items = draw(
            st.lists(
                st.builds(
                    t, st.sampled_from(vocab), st.sampled_from(predicates), st.sampled_from(vocab)
                ),
                max_size=12,
            )
        )
        ctx = TurnContext(
            "acme",
            "api",
            "2026-11-01",
            "s1",
            f"t{turn}",
            T0 + timedelta(hours=turn),
            "codex",
            "explicit",
            "explicit",
        )
        rows, _ = items_to_triples(items, ctx)
        frames.append(triples_frame(rows))
    return frames


@settings(max_examples=60, deadline=None)
@given(batches=triple_batches())
def test_triples_in_equals_facts_new_plus_merged_plus_rejects(
    batches: list[pl.DataFrame],
) -> None:
    facts = entities = None
    stored = 0
    for batch in batches:
        built = build_facts(SCOPE, batch, facts, entities)
        assert built.balanced, built.counts
        assert built.merges.height == built.merged
        assert built.facts.height == stored + built.new_facts
        errors = built.rejects.filter(pl.col("severity") == "error")
        assert errors.height == built.rejected
        facts, entities, stored = built.facts, built.entities, built.facts.height


def test_a_rerun_counts_each_stored_facts_own_triple_as_stored_not_merged() -> None:
    df = triples(
        t("web-app", "USES", "Node 18"), t("web-app", "USES", "node 18"), t("web", "USES", "x")
    )
    first = build_facts(SCOPE, df)
    again = build_facts(SCOPE, df, first.facts, first.entities)
    assert again.counts == {
        "triples_in": 3,
        "facts_stored": 2,
        "facts_new": 0,
        "merged": 1,
        "rejects": 0,
        "warnings": 0,
    }
    assert again.balanced and again.facts.equals(first.facts)
