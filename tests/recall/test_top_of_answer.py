"""The top of a recall answer (issue 20): near-duplicates do not take two of the first ten
places, a superseded chain shows its newest link only, and facts about the entity the question
names come before facts about its neighbours. Real answers of `RecallService.recall` over the
SQLite store; each test also shows the order the rule changes."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from itertools import combinations

from recall.cache import ScopeIndex
from recall.ranking import RankingConfig, Statement, near_duplicates
from recall.service import RecallConfig, RecallService
from resources.graph.sqlite import SqliteGraphStore
from schemas.scope import Scope
from tests.recall.conftest import T0, Memory


def _service(graph: SqliteGraphStore, **ranking: object) -> RecallService:
    return RecallService(graph, config=RecallConfig(ranking=RankingConfig(**ranking)))  # type: ignore[arg-type]


def _shelter(graph: SqliteGraphStore) -> Memory:
    memory = Memory(Scope("acme", "ngo"))
    memory.fact("Maria", "VOLUNTEERS_AT", "homeless shelter")
    memory.fact("Maria", "STARTED_VOLUNTEERING_AT", "homeless shelter")
    memory.fact("Maria", "VOLUNTEERS_AT", "the homeless shelter downtown")
    memory.fact("homeless shelter", "VOLUNTEERED_AT_BY", "Maria")
    for n in range(12):
        memory.fact("Maria", "VOLUNTEERED_FOR", f"charity run {n} for the shelter")
    memory.load(graph)
    return memory


def _duplicate_pairs(graph: SqliteGraphStore, memory: Memory, fact_ids: list[str]) -> int:
    index = ScopeIndex(memory.scope, "v", graph.entities(memory.scope), graph.facts(memory.scope))
    statements = [Statement.of(index, index.fact_row[f]) for f in fact_ids]
    return sum(near_duplicates(a, b) for a, b in combinations(statements, 2))


def test_near_duplicates_do_not_take_two_of_the_first_ten_places(
    graph: SqliteGraphStore,
) -> None:
    memory = _shelter(graph)
    question = "where does Maria volunteer, the homeless shelter?"
    answer = _service(graph).recall(memory.scope, question)
    plain = _service(graph, distinct_top=0).recall(memory.scope, question)
    top = [f.fact_id for f in answer.facts[:10]]
    assert _duplicate_pairs(graph, memory, top) == 0
    # Without the rule the restatements crowd the top ten ...
    assert _duplicate_pairs(graph, memory, [f.fact_id for f in plain.facts[:10]]) >= 2
    # ... and with it nothing is dropped: the same facts, the restatements after the tenth.
    assert sorted(f.fact_id for f in answer.facts) == sorted(f.fact_id for f in plain.facts)
    assert len(answer.facts) == len(memory.facts)
    first = answer.facts[0]
    assert "homeless shelter" in f"{first.subject} {first.object}"


def test_statements_that_differ_are_not_duplicates(graph: SqliteGraphStore) -> None:
    memory = Memory(Scope("acme", "pets"))
    memory.fact("John", "HAD_PET", "Max")
    memory.fact("John", "WENT_CAMPING_WITH", "Max")
    memory.fact("John", "WENT_HIKING_WITH", "friends from church")
    memory.fact("John", "WENT_CAMPING_WITH", "friends from work")
    memory.fact("Maria", "HAD_PET", "Max")
    memory.load(graph)
    assert _duplicate_pairs(graph, memory, [f.fact_id for f in memory.facts.values()]) == 0


def test_contradicting_facts_stay_side_by_side_not_deduplicated(graph: SqliteGraphStore) -> None:
    memory = Memory(Scope("acme", "tools"))
    memory.fact("user", "PREFERS_EDITOR", "vim")
    memory.fact("user", "PREFERS_EDITOR", "neovim")
    memory.load(graph)
    answer = _service(graph).recall(memory.scope, "which editor does the user prefer")
    assert [f.object for f in answer.facts[:2]] in (["vim", "neovim"], ["neovim", "vim"])
    assert all(f.contradicts for f in answer.facts[:2])


def test_a_superseded_chain_shows_its_newest_link_only(graph: SqliteGraphStore) -> None:
    memory = Memory(Scope("acme", "billing"))
    day = timedelta(days=30)
    memory.fact("billing", "USES_DATABASE", "MySQL", valid_to=T0 + day)
    memory.fact(
        "billing", "USES_DATABASE", "PostgreSQL 14", valid_from=T0 + day, valid_to=T0 + 2 * day
    )
    memory.fact("billing", "USES_DATABASE", "PostgreSQL 16", valid_from=T0 + 2 * day)
    memory.load(graph)
    now = _service(graph).recall(memory.scope, "which database does billing use")
    assert [f.object for f in now.facts] == ["PostgreSQL 16"]
    then = _service(graph).recall(memory.scope, "which database does billing use", as_of=T0 + day)
    assert [f.object for f in then.facts] == ["PostgreSQL 14"]


def test_facts_about_the_entity_the_question_names_come_before_its_neighbours(
    graph: SqliteGraphStore,
) -> None:
    memory = Memory(Scope("acme", "pets"))
    memory.fact("Caroline", "HAS_PET", "Caroline's dog")
    memory.fact("Caroline's dog", "LIKES", "long walks")
    memory.fact("Caroline", "LIKES", "dog walks in the park", confidence=0.95)
    memory.fact("Caroline", "LIKES", "her dog", confidence=0.95)
    for n in range(5):
        memory.fact("Caroline", "VISITED", f"city {n}")
    memory.load(graph)
    question = "what does Caroline's dog like"

    def order(**ranking: object) -> list[bool]:
        answer = _service(graph, **ranking).recall(memory.scope, question)
        return ["Caroline's dog" in (f.subject, f.object) for f in answer.facts]

    # By default both facts touching "Caroline's dog" come first, then the facts about Caroline
    # alone ("Caroline" is named too, but inside the more specific name: a neighbour here).
    for focused in (order(), order(focus_weight=0.25)):
        assert focused[:3] == [True, True, False]
        assert focused[2:] == [False] * (len(memory.facts) - 2)
    # Without the question-entity signal a fact about Caroline alone outranks one about her dog.
    assert order(focus_weight=0.0)[:3] == [True, False, True]


def test_the_first_places_cite_new_turns_before_a_turn_already_cited(
    graph: SqliteGraphStore,
) -> None:
    memory = Memory(Scope("acme", "pets"))
    # One turn ("we adopted Pepper, a lab mix, from the shelter") stated three facts; two
    # other turns stated one each.
    same_turn = [
        memory.fact("Audrey", "ADOPTED", "Pepper the dog", confidence=0.99),
        memory.fact("Pepper the dog", "IS_BREED", "lab mix dog", confidence=0.98),
        memory.fact("Pepper the dog", "ADOPTED_FROM", "dog shelter", confidence=0.97),
    ]
    for record in same_turn:
        memory.facts[record.fact_id] = replace(record, turn_id="t-adopt")
    memory.fact("Audrey", "WALKS", "Pepper the dog every morning", confidence=0.9)
    memory.fact("Audrey", "BOUGHT_TOY_FOR", "Pepper the dog", confidence=0.9)
    memory.load(graph)
    question = "what about Pepper the dog"

    def turns(**ranking: object) -> list[str]:
        answer = _service(graph, **ranking).recall(memory.scope, question)
        return [memory.facts[f.fact_id].turn_id for f in answer.facts]

    plain, spread = turns(new_sources_top=0), turns(new_sources_top=3)
    # the default (20 since issue 20's retune on LoCoMo's tuning half; 10 before)
    assert turns() == turns(new_sources_top=20)
    # Without the rule the one turn's three facts come first ...
    assert plain[:3] == ["t-adopt"] * 3
    # ... with it the first three places cite three turns, and nothing is dropped.
    assert len(set(spread[:3])) == 3
    assert sorted(spread) == sorted(plain)
    assert len(spread) == len(memory.facts)
