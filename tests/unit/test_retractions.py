"""Issue 17 item 3, pipeline side (shared-contracts.md): retract_facts turns close facts at
their time, record who, when, why and the turn, quarantine what matches nothing, forget
entities, and reopen a fact restated later. Turns go through the real stages: the turns
stage's payload, the extraction stage's requests, the facts stage's build."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memflow.extract import extract_day
from memflow.facts import FactsBuild, build_facts
from memflow.landing import RETRACT_TOOL, UPSERT_TOOL
from memflow.retractions import retract_payload
from memflow.turns import _tool_payload
from schemas import ids
from schemas.contracts import FactContract, QuarantineContract, TurnContract
from schemas.redaction import contains_secret
from schemas.rules import Reason
from schemas.scope import Scope
from schemas.tables import RAW_TURNS, RETRACTIONS, conform
from schemas.triples import resolve_fact_id
from tests.pipeline.landing_fixtures import SECRET_PASSWORD, SECRET_TOKEN

SCOPE = Scope("acme", "api")
T0 = datetime(2026, 11, 1, 9, 0, tzinfo=UTC)


def at(minutes: int) -> datetime:
    return T0 + timedelta(minutes=minutes)


class Tenant:
    """Turns of one tenant, built into tables the way the stages do, run after run."""

    def __init__(self) -> None:
        self.turns: list[dict] = []
        self.facts: pl.DataFrame | None = None
        self.entities: pl.DataFrame | None = None

    def _turn(self, turn_id: str, minute: int, tool_name: str, tool_input: object) -> None:
        raw = json.dumps(tool_input)
        triples, _ = _tool_payload(tool_name, raw)  # what the turns stage keeps, redacted
        retract, _ = retract_payload(tool_name, raw)
        self.turns.append(
            {
                "turn_key": ids.turn_key("acme", "api", "s1", turn_id),
                "tenant_id": "acme",
                "ns": "api",
                "day": at(minute).date().isoformat(),
                "session_id": "s1",
                "turn_id": turn_id,
                "ts": at(minute),
                "role": "tool",
                "client": "claude-code",
                "content": "",
                "content_sha256": ids.sha256_text(""),
                "tool_name": tool_name,
                "tool_triples": triples,
                "tool_retract": retract,
                "redactions": 0,
                "source_file": "a.jsonl",
                "line_no": len(self.turns) + 1,
            }
        )

    def save(self, turn_id: str, minute: int, *triples: tuple[str, str, str]) -> None:
        items = [{"subject": s, "predicate": p, "object": o} for s, p, o in triples]
        self._turn(turn_id, minute, UPSERT_TOOL, {"triples": items})

    def retract(self, turn_id: str, minute: int, *items: object, **extra: object) -> None:
        self._turn(turn_id, minute, RETRACT_TOOL, {"retract": list(items), **extra})

    def frame(self) -> pl.DataFrame:
        return conform(pl.DataFrame(self.turns, schema_overrides=RAW_TURNS), RAW_TURNS)

    def build(self, *, clean: bool = False) -> FactsBuild:
        report = extract_day(SCOPE, self.frame(), None)
        built = build_facts(
            SCOPE,
            report.triples,
            None if clean else self.facts,
            None if clean else self.entities,
            report.requests,
        )
        self.report = report
        if not clean:
            self.facts, self.entities = built.facts, built.entities
        return built


def valid(built: FactsBuild, when: datetime) -> set[tuple[str, str, str]]:
    rows = built.facts.filter(
        (pl.col("valid_from") <= when)
        & (pl.col("valid_to").is_null() | (pl.col("valid_to") > when))
    )
    return set(rows.select("subject", "predicate", "object").rows())


REDIS = ("cache", "USES", "redis 6")
VALKEY = ("cache", "USES", "valkey 8")
PG = ("api", "USES", "postgres")


def test_a_retracted_fact_closes_at_the_retraction_and_stays_visible_before() -> None:
    tenant = Tenant()
    tenant.save("t1", 0, REDIS, PG)
    tenant.retract("t2", 10, {"subject": "cache", "predicate": "uses", "object": "Redis 6"},
                   reason="moved to valkey", by="key:alice")  # fmt: skip
    built = tenant.build()
    assert tenant.report.retract_turns == 1 and tenant.report.triples.height == 2
    assert valid(built, at(9)) == {REDIS, PG}
    assert valid(built, at(10)) == {PG}
    fact = built.facts.filter(pl.col("object") == "redis 6").row(0, named=True)
    assert fact["valid_to"] == at(10)
    (record,) = built.retractions.to_dicts()
    assert record["fact_id"] == fact["fact_id"]
    assert (record["by"], record["reason"], record["retracted_at"]) == (
        "key:alice",
        "moved to valkey",
        at(10),
    )
    assert (record["session_id"], record["turn_id"], record["kind"]) == ("s1", "t2", "triple")
    assert dict(built.retractions.schema) == RETRACTIONS
    assert built.retracted == 1 and built.retract_unknown == 0
    assert built.balanced
    FactContract.validate(built.facts)


def test_retract_by_fact_id_and_an_unknown_item_is_quarantined() -> None:
    tenant = Tenant()
    tenant.save("t1", 0, REDIS, PG)
    redis_id = resolve_fact_id("acme", "api", *REDIS)
    tenant.retract("t2", 5, {"fact_id": redis_id}, {"fact_id": "f_0000000000000000"},
                   {"subject": "nobody", "predicate": "USES", "object": "nothing"},
                   {"entity": "never-mentioned"})  # fmt: skip
    built = tenant.build()
    assert valid(built, at(6)) == {PG}
    assert built.retracted == 1 and built.retract_unknown == 3
    unknown = built.rejects.filter(pl.col("reason") == Reason.RETRACT_UNKNOWN)
    assert unknown.height == 3
    assert set(unknown["severity"]) == {"error"} and set(unknown["turn_id"]) == {"t2"}
    assert any("f_0000000000000000" in d for d in unknown["detail"])
    QuarantineContract.validate(unknown)


def test_a_retraction_before_the_fact_was_stated_closes_nothing() -> None:
    tenant = Tenant()
    tenant.retract("t1", 0, {"subject": "cache", "predicate": "USES", "object": "redis 6"})
    tenant.save("t2", 5, REDIS)
    built = tenant.build()
    assert valid(built, at(6)) == {REDIS}
    assert built.retract_unknown == 1 and built.retractions.is_empty()


def test_forgetting_an_entity_closes_every_fact_it_is_in() -> None:
    tenant = Tenant()
    tenant.save("t1", 0, REDIS, ("worker", "READS_FROM", "Redis 6"), PG)
    tenant.retract("t2", 3, {"entity": "redis-6"}, by="mcp:forget")
    built = tenant.build()
    assert valid(built, at(2)) == {REDIS, ("worker", "READS_FROM", "Redis 6"), PG}
    assert valid(built, at(3)) == {PG}
    assert built.retractions.height == 2
    entity = ids.entity_id("acme", "api", ids.norm_key("redis 6"))
    assert set(built.retractions["entity_id"]) == {entity}
    assert set(built.retractions["kind"]) == {"entity"}
    # forgetting it by id does the same
    by_id = Tenant()
    by_id.save("t1", 0, REDIS, ("worker", "READS_FROM", "Redis 6"), PG)
    by_id.retract("t2", 3, {"entity": entity})
    assert valid(by_id.build(), at(3)) == {PG}


def test_a_restatement_after_a_retraction_is_a_new_fact_from_then_on() -> None:
    tenant = Tenant()
    tenant.save("t1", 0, REDIS)
    tenant.retract("t2", 10, {"subject": "cache", "predicate": "USES", "object": "redis 6"})
    tenant.save("t3", 20, REDIS)
    built = tenant.build()
    assert valid(built, at(5)) == {REDIS}
    assert valid(built, at(15)) == set()
    assert valid(built, at(25)) == {REDIS}
    first, again = built.facts.sort("valid_from").to_dicts()
    assert first["fact_id"] == resolve_fact_id("acme", "api", *REDIS)
    assert again["fact_id"] != first["fact_id"] and again["valid_from"] == at(20)
    assert [t["turn_id"] for t in first["sources"]] == ["t1"]
    assert [t["turn_id"] for t in again["sources"]] == ["t3"]
    # a second retraction closes the restated fact, a third restatement reopens it again
    tenant.retract("t4", 30, {"subject": "cache", "predicate": "USES", "object": "redis 6"})
    tenant.save("t5", 40, REDIS)
    built = tenant.build()
    assert [valid(built, at(m)) == {REDIS} for m in (5, 15, 25, 35, 45)] == [
        True, False, True, False, True
    ]  # fmt: skip
    assert built.facts.height == 3 and built.retracted == 2 and built.balanced


def test_a_restatement_with_an_earlier_valid_from_starts_at_the_retraction() -> None:
    tenant = Tenant()
    tenant.save("t1", 0, REDIS)
    tenant.retract("t2", 10, {"subject": "cache", "predicate": "USES", "object": "redis 6"})
    item = {"subject": "cache", "predicate": "USES", "object": "redis 6", "valid_from": "2020"}
    tenant._turn("t3", 20, UPSERT_TOOL, {"triples": [item]})
    built = tenant.build()
    assert valid(built, at(15)) == {REDIS}  # restated "since 2020": true again from t2 on
    assert valid(built, at(9)) == {REDIS}
    assert built.facts.height == 2
    assert sorted(built.facts["valid_from"].to_list())[1] == at(10)


def test_a_superseded_fact_cannot_be_retracted_later() -> None:
    tenant = Tenant()
    tenant.save("t1", 0, REDIS)
    upsert = {**dict(zip(("subject", "predicate", "object"), VALKEY, strict=True))}
    upsert["supersedes"] = dict(zip(("subject", "predicate", "object"), REDIS, strict=True))
    tenant._turn("t2", 5, UPSERT_TOOL, {"triples": [upsert]})
    tenant.retract("t3", 10, {"subject": "cache", "predicate": "USES", "object": "redis 6"})
    built = tenant.build()
    assert valid(built, at(7)) == {VALKEY}
    assert built.retract_unknown == 1
    assert (
        "already closed"
        in built.rejects.filter(pl.col("reason") == Reason.RETRACT_UNKNOWN)["detail"][0]
    )


def test_reruns_change_nothing_and_equal_a_clean_build() -> None:
    tenant = Tenant()
    tenant.save("t1", 0, REDIS, PG)
    first = tenant.build()
    tenant.retract("t2", 10, {"entity": "redis 6"})
    tenant.save("t3", 20, REDIS)
    second = tenant.build()
    third = tenant.build()
    clean = tenant.build(clean=True)
    for built in (third, clean):
        assert built.facts.sort("fact_id").equals(second.facts.sort("fact_id"))
        assert built.retractions.equals(second.retractions)
        assert built.rejects.sort("reject_id").equals(second.rejects.sort("reject_id"))
        assert built.merges.sort("triple_id").equals(second.merges.sort("triple_id"))
    assert first.retractions.is_empty() and second.retracted == 1


def test_a_late_fact_stated_before_the_retraction_is_retracted_too() -> None:
    """A turn landed after the retraction ran, but said before it: as a clean run would."""
    tenant = Tenant()
    tenant.save("t1", 0, PG)
    tenant.retract("t3", 10, {"entity": "redis 6"})
    tenant.build()
    tenant.save("t2", 5, REDIS)  # arrives late
    built = tenant.build()
    assert valid(built, at(7)) == {PG, REDIS}
    assert valid(built, at(11)) == {PG}
    assert built.retract_unknown == 0


@pytest.mark.parametrize(
    ("tool_input", "detail"),
    [
        ({"retract": "f_0123456789abcdef"}, "must be a list"),
        ({"retract": []}, "is empty"),
        ({"retract": [{"fact_id": "not an id"}]}, "fact id like"),
        ({"retract": [{"entity": 7}]}, "entity"),
        ({"retract": [{"entity": "x", "fact_id": "f_0123456789abcdef"}]}, "exactly one"),
        ({"retract": [{"subject": "a", "predicate": "bad one!", "object": "b"}]}, "UPPER_SNAKE"),
        ({"retract": [{"subject": "a", "object": "b"}]}, "UPPER_SNAKE"),
        ({"retract": ["a string"]}, "must be an object"),
        ({"retract": [{"entity": "x"}], "by": 5}, "by must be a string"),
        ([1, 2], "must be a list"),
    ],
)
def test_items_that_cannot_be_read_are_extraction_rejects(tool_input: object, detail: str) -> None:
    tenant = Tenant()
    tenant._turn("t1", 0, RETRACT_TOOL, tool_input)
    report = extract_day(SCOPE, tenant.frame(), None)
    assert report.requests.is_empty() and report.triples.is_empty()
    (reject,) = report.rejects.to_dicts()
    assert reject["reason"] == Reason.BAD_RETRACTION and detail in reject["detail"]


def test_a_retract_turn_is_never_text_for_the_extractor() -> None:
    class Refuses:
        kind, model = "command", "refuses"

        def extract(self, *args: object) -> object:
            raise AssertionError("a retract turn reached the extractor")

    tenant = Tenant()
    tenant.retract("t1", 0, {"entity": "x"})
    tenant.turns[0]["role"] = "assistant"
    tenant.turns[0]["content"] = "forget x"
    report = extract_day(SCOPE, tenant.frame(), Refuses())  # type: ignore[arg-type]
    assert report.text_turns == 0 and report.requests.height == 1


def test_secrets_in_a_retraction_never_reach_a_table() -> None:
    tenant = Tenant()
    tenant.save("t1", 0, ("deploy", "USES", f"token {SECRET_TOKEN}"))
    tenant.retract(
        "t2", 5, {"subject": "deploy", "predicate": "USES", "object": f"token {SECRET_TOKEN}"},
        reason=f"leaked password={SECRET_PASSWORD}", by=f"ci {SECRET_TOKEN}",
    )  # fmt: skip
    TurnContract.validate(tenant.frame())
    assert not contains_secret(tenant.turns[1]["tool_retract"])
    built = tenant.build()
    assert built.retracted == 1  # the redacted names still name the redacted fact
    for frame in (tenant.report.requests, built.retractions, built.rejects):
        for column in frame.columns:
            if frame[column].dtype == pl.String:
                assert not any(contains_secret(v) for v in frame[column].drop_nulls()), column


@settings(max_examples=60, deadline=None)
@given(
    events=st.lists(
        st.tuples(st.sampled_from(["save", "retract", "forget"]), st.sampled_from([REDIS, PG])),
        min_size=1,
        max_size=8,
    )
)
def test_validity_follows_the_last_event_before_any_time(
    events: list[tuple[str, tuple[str, str, str]]],
) -> None:
    """Property: a fact is valid at t exactly when its last save or retraction before t (by
    turn time) was a save; and every build is balanced, contract-clean and rerun-stable."""
    tenant = Tenant()
    for n, (event, triple) in enumerate(events):
        minute = 10 * n
        if event == "save":
            tenant.save(f"t{n}", minute, triple)
        elif event == "retract":
            tenant.retract(
                f"t{n}", minute, dict(zip(("subject", "predicate", "object"), triple, strict=True))
            )
        else:
            tenant.retract(f"t{n}", minute, {"entity": triple[2]})
    built = tenant.build()
    assert built.balanced
    FactContract.validate(built.facts)
    for n in range(len(events) + 1):
        when = at(10 * n - 5)
        expected = set()
        for triple in (REDIS, PG):
            last = None
            for m, (event, t) in enumerate(events):
                if t == triple and 10 * m < 10 * n - 5:
                    last = event
            if last == "save":
                expected.add(triple)
        assert valid(built, when) == expected, (when, events)
    again = tenant.build()
    assert again.facts.sort("fact_id").equals(built.facts.sort("fact_id"))


def test_an_input_nested_too_deeply_is_a_reject_not_a_crash() -> None:
    raw = '{"retract": [' + "[" * 5000 + '{"entity": "x"}' + "]" * 5000 + "]}"  # as landed
    payload, _ = retract_payload(RETRACT_TOOL, raw)
    tenant = Tenant()
    tenant._turn("t1", 0, RETRACT_TOOL, {"retract": []})
    tenant.turns[0]["tool_retract"] = payload
    report = extract_day(SCOPE, tenant.frame(), None)
    (reject,) = report.rejects.to_dicts()
    assert reject["reason"] == Reason.BAD_RETRACTION and "nested" in reject["detail"]
