"""Fact selection beyond entity legs: the fact-vector leg, score fusion, the named-date window
and the spread through shared entities (`recall.ranking`, `recall.temporal`)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from memflow.fact_embedding import fact_text
from recall.answers import RecallAnswer, SemanticUnavailable
from recall.ranking import RankingConfig
from recall.service import RecallConfig, RecallService
from recall.temporal import distance_days, question_window, to_us
from resources.graph.sqlite import SqliteGraphStore
from resources.vector.base import VectorStore, fact_vectors_key
from schemas.ids import sha256_text
from schemas.records import FactRecord
from schemas.scope import Scope
from tests.recall.conftest import T0, Memory, TableEmbedder


def _ids(answer: RecallAnswer) -> list[str]:
    return [f.fact_id for f in answer.facts]


def embed_facts(
    vectors: VectorStore, embedder: TableEmbedder, memory: Memory, facts: list[FactRecord]
) -> None:
    """Fact vectors as the fact sweep and the vector sink write them."""
    texts = [fact_text(f.subject, f.predicate, f.object) for f in facts]
    vecs = embedder.embed(texts)
    rows = [(f.fact_id, sha256_text(t), v) for f, t, v in zip(facts, texts, vecs, strict=True)]
    vectors.upsert(fact_vectors_key(embedder.model), len(vecs[0]), memory.scope, rows)


# -- the named-date window ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "start", "days"),
    [
        ("What did Maria share on 16 June, 2023?", datetime(2023, 6, 16, tzinfo=UTC), 1),
        ("dinner on May 3, 2023 with whom", datetime(2023, 5, 3, tzinfo=UTC), 1),
        ("the week before 15April, 2022", datetime(2022, 4, 15, tzinfo=UTC), 1),
        ("what changed on 2026-11-03", datetime(2026, 11, 3, tzinfo=UTC), 1),
        ("what did we decide in December 2023", datetime(2023, 12, 1, tzinfo=UTC), 31),
        ("deploys in Sept. 2024?", datetime(2024, 9, 1, tzinfo=UTC), 30),
    ],
)
def test_question_window(text: str, start: datetime, days: int) -> None:
    window = question_window(text)
    assert window is not None and window.start == start
    assert window.end == start + timedelta(days=days) - timedelta(microseconds=1)


@pytest.mark.parametrize(
    "text",
    ["which database do we use", "in 2023", "PAY-2023", "May we use Redis", "2023-13-01"],
)
def test_no_window_without_a_day_or_month(text: str) -> None:
    assert question_window(text) is None


def test_an_impossible_day_names_its_month() -> None:
    window = question_window("what happened on 31 February, 2023")
    assert window is not None and window.start == datetime(2023, 2, 1, tzinfo=UTC)


def test_distance_is_zero_inside_and_inf_far_away() -> None:
    window = question_window("on 16 June, 2023")
    assert window is not None
    days = [
        datetime(2023, 6, 16, 12, tzinfo=UTC),  # inside
        datetime(2023, 6, 9, tzinfo=UTC),  # a week before: "last week"
        datetime(2023, 5, 1, tzinfo=UTC),  # far before
        datetime(2023, 6, 30, tzinfo=UTC),  # far after
    ]
    got = distance_days(np.array([to_us(d) for d in days], dtype=np.int64), window)
    assert got[0] == 0 and got[1] == pytest.approx(7.0) and np.isinf(got[2:]).all()


# -- the fact-vector leg --------------------------------------------------------------------------


@pytest.fixture
def hobbies(graph: SqliteGraphStore, vectors: VectorStore) -> tuple[Memory, dict[str, str]]:
    """John's facts: the martial art is only "kickboxing", a word the question never uses."""
    john = Memory(Scope("locomo", "conv-x"))
    facts = {
        "kick": john.fact("John", "DOES", "kickboxing"),
        "tae": john.fact("John", "TRAINED_IN", "taekwondo"),
        "road": john.fact("John", "WENT_ON", "family road trip"),
        "dog": john.fact("John", "ADOPTED", "a puppy"),
    }
    for n in range(30):
        facts[f"x{n}"] = john.fact("John", "VISITED", f"city {n}")
    john.load(graph)
    return john, {k: f.fact_id for k, f in facts.items()}


def test_fact_vectors_find_what_neither_names_nor_words_do(
    graph: SqliteGraphStore, vectors: VectorStore, hobbies: tuple[Memory, dict[str, str]]
) -> None:
    john, ids = hobbies
    question = "What martial arts has John done?"
    embedder = TableEmbedder(
        "table-model",
        same={
            question: "martial",
            "John does kickboxing": "martial",
            "John trained in taekwondo": "martial",
        },
    )
    john.embed(vectors, embedder)
    service = RecallService(graph, vectors, embedder)
    before = service.recall(john.scope, question, ranking="hybrid")
    assert before.mode == "hybrid"  # entity vectors only: nothing points at the two facts
    assert set(_ids(before)[:2]) != {ids["kick"], ids["tae"]}

    embed_facts(vectors, embedder, john, list(john.facts.values()))
    fresh = RecallService(graph, vectors, embedder, config=RecallConfig(coverage_ttl_s=0))
    for ranking in ("hybrid", "semantic", "auto"):
        answer = fresh.recall(john.scope, question, ranking=ranking)  # type: ignore[arg-type]
        assert set(_ids(answer)[:2]) == {ids["kick"], ids["tae"]}, ranking
    off = RecallService(graph, vectors, embedder, config=RecallConfig(fact_vectors=0))
    assert set(_ids(off.recall(john.scope, question))[:2]) != {ids["kick"], ids["tae"]}
    # lexical never embeds and never reads fact vectors.
    calls = embedder.calls
    fresh.recall(john.scope, question, ranking="lexical")
    assert embedder.calls == calls


def test_fact_vectors_alone_do_not_make_a_scope_embedded(
    graph: SqliteGraphStore, vectors: VectorStore, hobbies: tuple[Memory, dict[str, str]]
) -> None:
    john, _ = hobbies
    embedder = TableEmbedder("table-model")
    embed_facts(vectors, embedder, john, list(john.facts.values()))  # no entity-name vectors
    service = RecallService(graph, vectors, embedder)
    with pytest.raises(SemanticUnavailable) as err:
        service.recall(john.scope, "martial arts", ranking="semantic")
    assert err.value.reason == "not_embedded"
    assert service.recall(john.scope, "kickboxing").mode == "names"


def test_fact_vector_hits_never_bring_closed_or_foreign_facts(
    graph: SqliteGraphStore, vectors: VectorStore
) -> None:
    acme = Memory(Scope("acme", "payments"))
    old = acme.fact("payments-api", "USES_CACHE", "Redis 6", valid_to=T0 + timedelta(days=30))
    new = acme.fact("payments-api", "USES_CACHE", "Valkey 8", valid_from=T0 + timedelta(days=30))
    globex = Memory(Scope("globex", "payments"))
    theirs = globex.fact("payments-api", "USES_CACHE", "Memcached")
    question = "in-memory store"
    embedder = TableEmbedder(
        "table-model",
        same={
            question: "cache",
            "payments-api uses cache Redis 6": "cache",
            "payments-api uses cache Valkey 8": "cache",
            "payments-api uses cache Memcached": "cache",
        },
    )
    for memory in (acme, globex):
        memory.load(graph)
        memory.embed(vectors, embedder)
        embed_facts(vectors, embedder, memory, list(memory.facts.values()))
    # A foreign fact's vector stored under acme's scope (a stale or corrupt row) is not a fact
    # of acme either.
    embed_facts(vectors, embedder, acme, [theirs])
    service = RecallService(graph, vectors, embedder)
    for ranking in ("hybrid", "semantic"):
        now = service.recall(acme.scope, question, ranking=ranking)  # type: ignore[arg-type]
        assert new.fact_id in _ids(now) and old.fact_id not in _ids(now)
        assert theirs.fact_id not in _ids(now)
        then = service.recall(acme.scope, question, ranking=ranking, as_of=T0 + timedelta(days=1))  # type: ignore[arg-type]
        assert old.fact_id in _ids(then) and new.fact_id not in _ids(then)
        before = service.recall(acme.scope, question, ranking=ranking, as_of=T0 - timedelta(days=1))  # type: ignore[arg-type]
        assert before.facts == []


# -- fusion, dates, spread ---------------------------------------------------------------------


def test_a_rare_word_match_outranks_many_facts_a_little_good_on_two_signals(
    graph: SqliteGraphStore,
) -> None:
    team = Memory(Scope("acme", "org"))
    team.entity("payments-team", aliases=["payments squad"], types=["team"])
    lead = team.fact("Alice Chen", "LEADS", "payments-team")
    for n in range(60):
        team.fact("payments-team", "HAS_MEMBER", f"member {n}")
    team.load(graph)
    cc = RecallService(graph).recall(team.scope, "who leads the payments squad")
    assert _ids(cc)[0] == lead.fact_id


def test_a_named_day_brings_that_days_facts_forward(graph: SqliteGraphStore) -> None:
    maria = Memory(Scope("locomo", "conv-y"))
    day = datetime(2023, 6, 16, tzinfo=UTC)
    for n in range(40):
        topic = f"topic {chr(ord('a') + n % 26)}{chr(ord('a') + n // 26)}"  # no digits
        maria.fact("Maria", "MENTIONED", topic, valid_from=day - timedelta(days=60 + n))
    gym = maria.fact("Maria", "JOINED", "gym", valid_from=day - timedelta(days=5))
    talk = maria.fact("Maria", "TALKED_ABOUT", "news", valid_from=day)
    maria.load(graph)
    service = RecallService(graph)
    answer = service.recall(maria.scope, "What did Maria share on 16 June, 2023?")
    assert _ids(answer)[:2] == [talk.fact_id, gym.fact_id]
    off = RecallService(graph, config=RecallConfig(ranking=RankingConfig(temporal_weight=0.0)))
    assert _ids(off.recall(maria.scope, "What did Maria share on 16 June, 2023?"))[:2] != [
        talk.fact_id,
        gym.fact_id,
    ]


def _audrey_and_pepper(graph: SqliteGraphStore, ns: str) -> tuple[Memory, FactRecord]:
    """Audrey adopted Pepper, Pepper's breed is one hop away, and 30 of Audrey's hobbies crowd
    the question's words: (the memory, loaded into `graph`; the breed fact)."""
    audrey = Memory(Scope("locomo", ns))
    audrey.fact("Audrey", "ADOPTED", "Pepper")
    breed = audrey.fact("Pepper", "HAS_BREED", "Lab mix")
    for n in range(30):
        audrey.fact("Audrey", "LIKES", f"hobby {n}")
    audrey.load(graph)
    return audrey, breed


def test_spread_lifts_facts_about_the_entity_of_the_best_fact(graph: SqliteGraphStore) -> None:
    audrey, breed = _audrey_and_pepper(graph, "conv-z")
    question = "which dog did Audrey adopt"
    # Lexical feedback also reaches the breed ("pepper" is a word of the best fact): off, so
    # this measures the spread alone.
    with_spread = RecallService(graph, config=RecallConfig(feedback_weight=0.0)).recall(
        audrey.scope, question
    )
    without = RecallService(
        graph, config=RecallConfig(ranking=RankingConfig(spread_weight=0.0), feedback_weight=0.0)
    ).recall(audrey.scope, question)
    assert _ids(with_spread).index(breed.fact_id) < _ids(without).index(breed.fact_id)
    assert _ids(with_spread).index(breed.fact_id) == 1


def test_fusion_must_be_known() -> None:
    with pytest.raises(ValueError, match="fusion"):
        RankingConfig(fusion="max")


def test_a_question_that_names_only_a_date_gets_that_dates_facts(graph: SqliteGraphStore) -> None:
    log = Memory(Scope("acme", "ops"))
    day = datetime(2023, 6, 16, tzinfo=UTC)
    for n in range(30):
        log.fact(
            "deploy-bot",
            "RAN",
            f"job {chr(ord('a') + n % 26)}",
            valid_from=day - timedelta(days=90 + n),
        )
    rollback = log.fact("payments-api", "ROLLED_BACK_TO", "v41", valid_from=day)
    log.load(graph)
    service = RecallService(graph)
    for ranking in ("lexical", "auto"):
        answer = service.recall(log.scope, "What happened on 16 June, 2023?", ranking=ranking)  # type: ignore[arg-type]
        assert _ids(answer)[:1] == [rollback.fact_id]
        assert all(f.valid_from >= day - timedelta(days=14) for f in answer.facts)
    before = service.recall(
        log.scope, "What happened on 16 June, 2023?", as_of=day - timedelta(days=365)
    )
    assert before.facts == []


def test_graph_distance_is_a_prior_only_from_entry_entities_the_question_names() -> None:
    from recall.cache import FunctionalPredicates, ScopeIndex
    from recall.ranking import Signals, select_facts

    memory = Memory(Scope("acme", "payments"))
    near = memory.fact("payments-api", "USES_CACHE", "Redis", confidence=0.7)
    far = memory.fact("billing", "USES_CACHE", "Memcached", confidence=0.9)
    index = ScopeIndex(
        memory.scope, "v1", list(memory.entities.values()), list(memory.facts.values())
    )
    valid = index.valid_at(T0 + timedelta(days=1))
    hops = index.neighbourhood([memory.eid("payments-api")], 2, valid)
    cosine = np.full(len(index.facts), 0.8, dtype=np.float32)

    def order(prior: np.ndarray | None) -> list[str]:
        signals = Signals(
            hops, valid, lexical=np.zeros(len(index.facts)), fact_cosine=cosine, prior_hops=prior
        )
        # The prior is off by default since issue 20's retune (LoCoMo's tuning half ranked
        # better without it); switched on here at its old weight to test how it is counted.
        chosen = select_facts(
            index,
            signals,
            RankingConfig(structure_weight=0.1),
            limit=10,
            functional=FunctionalPredicates(),
        )
        assert {index.facts[s.row].fact_id: s.hop for s in chosen}[near.fact_id] == 1
        return [index.facts[s.row].fact_id for s in chosen]

    # An entry entity the question names: the fact next to it gets the graph-distance prior.
    assert order(None) == [near.fact_id, far.fact_id]
    # The same entity found by vector alone: no prior (the hop is still reported); the tie
    # goes to the more confident fact.
    assert order(np.zeros_like(hops)) == [far.fact_id, near.fact_id]


def test_lexical_feedback_lifts_facts_about_what_the_best_facts_name(
    graph: SqliteGraphStore,
) -> None:
    audrey, breed = _audrey_and_pepper(graph, "conv-f")
    question = "which dog did Audrey adopt"
    alone = RecallConfig(
        ranking=RankingConfig(spread_weight=0.0)
    )  # the feedback without the spread's help
    fed = RecallService(graph, config=alone).recall(audrey.scope, question)
    off = RecallService(graph, config=replace(alone, feedback_weight=0.0)).recall(
        audrey.scope, question
    )
    assert _ids(fed).index(breed.fact_id) == 1
    assert _ids(off).index(breed.fact_id) > 1


@pytest.mark.parametrize("when", ["superseded", "future"])
def test_facts_not_valid_at_as_of_never_steer_the_feedback(
    graph: SqliteGraphStore, when: str
) -> None:
    memory = Memory(Scope("acme", "pets"))
    if when == "superseded":
        memory.fact("Audrey", "ADOPTED", "Rex dog", valid_to=T0 + timedelta(days=1))
    else:
        memory.fact("Audrey", "ADOPTED", "Rex dog", valid_from=T0 + timedelta(days=365))
    memory.fact("Rex dog", "HAS_BREED", "Wire Fox Terrier")
    memory.fact("Pepper dog", "HAS_BREED", "Lab mix")
    for n in range(30):
        memory.fact("Audrey", "LIKES", f"hobby {n}")
    memory.load(graph)

    def ranked(weight: float) -> list[str]:
        config = RecallConfig(ranking=RankingConfig(spread_weight=0.0), feedback_weight=weight)
        answer = RecallService(graph, config=config).recall(
            memory.scope,
            "which dog did Audrey adopt",
            ranking="lexical",
            as_of=T0 + timedelta(days=10),
        )
        return [f.object for f in answer.facts]

    assert "Rex dog" not in ranked(0.5)  # never returned: not valid at as_of
    # ... and its words ("rex") do not lift Rex's breed over Pepper's: same order as without
    # feedback.
    assert ranked(0.5)[:2] == ranked(0.0)[:2] == ["Lab mix", "Wire Fox Terrier"]


@pytest.mark.parametrize("weight", [float("nan"), float("inf"), -0.5])
def test_feedback_weight_must_be_finite_and_not_negative(weight: float) -> None:
    with pytest.raises(ValueError, match="feedback_weight"):
        RecallConfig(feedback_weight=weight)


@pytest.mark.parametrize(
    "field", ["fact_cosine_weight", "entity_cosine_weight", "temporal_weight", "spread_beta"]
)
@pytest.mark.parametrize("value", [float("nan"), float("inf"), -0.1])
def test_ranking_weights_must_be_finite_and_not_negative(field: str, value: float) -> None:
    with pytest.raises(ValueError, match=field):
        RankingConfig(**{field: value})


def test_the_entity_cosine_weight_reaches_the_ranking_under_its_own_name(
    graph: SqliteGraphStore,
) -> None:
    # The two cosines once crossed names between the service and the ranking: the entity
    # cosine must change the order only when `entity_cosine_weight` is set.
    from recall.cache import ScopeIndex
    from recall.ranking import Signals, score_candidates

    memory = Memory(Scope("acme", "cos"))
    a = memory.fact("payments-api", "USES", "Redis")
    b = memory.fact("billing", "USES", "Memcached")
    index = ScopeIndex(
        memory.scope, "v1", list(memory.entities.values()), list(memory.facts.values())
    )
    rows = np.arange(len(index.facts))
    entity = np.zeros(len(index.entity_ids), dtype=np.float32)
    entity[index.entity_row[memory.eid("billing")]] = 0.9
    fact = np.zeros(len(index.facts), dtype=np.float32)
    fact[index.fact_row[a.fact_id]] = 0.9
    signals = Signals(
        np.zeros(len(index.facts), dtype=np.int8), np.ones(len(index.facts), dtype=bool),
        lexical=np.zeros(len(index.facts)), fact_cosine=fact, entity_cosine=entity,
    )  # fmt: skip
    only_fact = score_candidates(index, rows, signals, RankingConfig(spread_weight=0))
    both = score_candidates(
        index, rows, signals, RankingConfig(spread_weight=0, entity_cosine_weight=2.0)
    )
    ra, rb = index.fact_row[a.fact_id], index.fact_row[b.fact_id]
    assert only_fact[ra] > only_fact[rb] == 0
    assert both[rb] > both[ra]
