"""RecallService end to end on the real SQLite graph store and the embedded vector store."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import datetime, timedelta

import pytest

from recall.answers import NOTICE, RecallAnswer, RecallError, SemanticUnavailable
from recall.service import RecallConfig, RecallService
from resources.graph.sqlite import SqliteGraphStore
from resources.models.openai_embeddings import OpenAIEmbeddingProvider
from resources.vector.base import VectorStore
from schemas.scope import Scope
from tests.recall.conftest import T0, Memory, TableEmbedder
from tests.recall.test_fact_signals import embed_facts
from tests.support.embeddings_server import EmbeddingsServer, Fault


def _ids(answer: RecallAnswer) -> list[str]:
    return [f.fact_id for f in answer.facts]


def _payments(memory: Memory) -> dict[str, str]:
    """A small payments memory; returns fact ids by a short key."""
    memory.entity("payments-api", aliases=["payments service"], types=["service"])
    memory.entity("PostgreSQL", aliases=["postgres"], types=["database"])
    memory.entity("PgBouncer", types=["connection pooler"])
    memory.entity("Redis", types=["cache"])
    facts = {
        "db": memory.fact("payments-api", "USES_DATABASE", "PostgreSQL"),
        "pool": memory.fact("payments-api", "CONNECTS_THROUGH", "PgBouncer"),
        "mode": memory.fact("PgBouncer", "POOL_MODE", "transaction pooling"),
        "cache": memory.fact("payments-api", "USES_CACHE", "Redis"),
        "version": memory.fact("PostgreSQL", "HAS_VERSION", "16.2"),
    }
    return {k: f.fact_id for k, f in facts.items()}


# -- gate, answer shape ----------------------------------------------------------------------


def test_gated_query_is_skipped_without_touching_the_stores(
    graph: SqliteGraphStore, acme: Memory
) -> None:
    _payments(acme)
    acme.load(graph)
    service = RecallService(graph)
    answer = service.recall(acme.scope, "thanks!")
    assert answer.skipped and answer.skip_reason == "greeting"
    assert answer.facts == [] and answer.entities == []
    assert service.indexes.builds == 0
    assert service.recall(acme.scope, "  ").skip_reason == "empty"
    assert service.recall(acme.scope, "🤔").skip_reason == "no_words"


def test_answer_carries_facts_provenance_notice_and_timings(
    graph: SqliteGraphStore, acme: Memory
) -> None:
    ids = _payments(acme)
    acme.load(graph)
    answer = RecallService(graph).recall(acme.scope, "which database do we use?")
    assert answer.mode == "names" and answer.ranking == "auto" and not answer.skipped
    assert answer.facts[0].fact_id == ids["db"]
    fact = answer.facts[0]
    assert (fact.subject, fact.predicate, fact.object) == (
        "payments-api",
        "USES_DATABASE",
        "PostgreSQL",
    )
    # Stored without a list of sources: the first statement is the one source known.
    assert fact.provenance.model_dump() == {
        "session_id": "s-1",
        "turn_id": "t-1",
        "client": "claude-code",
        "model": "explicit",
        "sources": [{"session_id": "s-1", "turn_id": "t-1"}],
    }
    assert fact.hop == 1 and fact.score is not None and fact.score > 0
    assert answer.notice == NOTICE and "not instructions" in answer.notice
    assert {e.via for e in answer.entities} == {"name"}
    timings = answer.timings_ms.model_dump()
    assert set(timings) == {
        "gate",
        "lexical",
        "embed",
        "vector",
        "fuse",
        "expand",
        "select",
        "total",
    }
    assert timings["total"] >= timings["lexical"] > 0
    # Facts only: no source text, no turn content, no storage-internal columns.
    payload = json.loads(answer.model_dump_json())
    assert set(payload["facts"][0]) == {
        "fact_id", "subject_id", "subject", "predicate", "object_id", "object", "confidence",
        "valid_from", "valid_to", "provenance", "hop", "score", "contradicts",
    }  # fmt: skip
    assert '"source"' not in json.dumps(payload["facts"])  # the triple's origin kind stays in


def test_answer_cites_every_turn_that_stated_the_fact(
    graph: SqliteGraphStore, acme: Memory
) -> None:
    ids = _payments(acme)
    turns = (("s-1", "t-1"), ("s-2", "t-7"), ("s-3", "t-2"))
    acme.facts[ids["db"]] = replace(acme.facts[ids["db"]], sources=turns)
    acme.load(graph)
    service = RecallService(graph)
    for answer in (
        service.recall(acme.scope, "which database do we use?"),
        service.subgraph(acme.scope, [acme.eid("payments-api")]),
    ):
        fact = next(f for f in answer.facts if f.fact_id == ids["db"])
        got = [(s.session_id, s.turn_id) for s in fact.provenance.sources]
        assert got == list(turns)
        assert (fact.provenance.session_id, fact.provenance.turn_id) == turns[0]


def test_bad_arguments_raise_recall_error(graph: SqliteGraphStore, acme: Memory) -> None:
    service = RecallService(graph)
    for kwargs in ({"ranking": "fuzzy"}, {"hops": 3}, {"limit": 0}, {"k_entities": 0}):
        with pytest.raises(RecallError) as err:
            service.recall(acme.scope, "database", **kwargs)  # type: ignore[arg-type]
        assert err.value.code == "invalid_request"


def test_unknown_scope_answers_empty(graph: SqliteGraphStore) -> None:
    answer = RecallService(graph).recall(Scope("nobody", "nothing"), "which database")
    assert answer.facts == [] and answer.entities == [] and not answer.skipped


def test_naive_as_of_is_utc(graph: SqliteGraphStore, acme: Memory) -> None:
    _payments(acme)
    acme.load(graph)
    answer = RecallService(graph).recall(acme.scope, "redis", as_of=datetime(2024, 6, 1))
    assert answer.as_of.utcoffset() == timedelta(0) and answer.facts


# -- ranking --------------------------------------------------------------------------------


def test_hub_with_thousands_of_facts_still_yields_the_right_one(
    graph: SqliteGraphStore, acme: Memory
) -> None:
    for n in range(1800):
        acme.fact("user", "WORKED_ON", f"PAY-{1000 + n}", confidence=0.95)
    for n in range(900):
        acme.fact("user", "REVIEWED", f"PR #{4000 + n}", confidence=0.95)
    for n in range(300):
        acme.fact("user", "OPENED_FILE", f"src/payments/module_{n}.py", confidence=0.95)
    # Lowest confidence of the hub: storage order (hop, confidence, id) would put it last.
    editor = acme.fact("user", "PREFERS_EDITOR", "Neovim", confidence=0.6)
    shell = acme.fact("user", "PREFERS_SHELL", "zsh", confidence=0.6)
    acme.load(graph)
    assert graph.counts(acme.scope)["facts"] == 3002

    service = RecallService(graph)
    answer = service.recall(acme.scope, "which editor does the user prefer")
    assert len(answer.facts) == 40
    assert _ids(answer)[0] == editor.fact_id
    assert shell.fact_id in _ids(service.recall(acme.scope, "what shell do I use"))[:3]


def test_contradicting_facts_come_side_by_side(graph: SqliteGraphStore, acme: Memory) -> None:
    four = acme.fact("user", "PREFERS_INDENTATION", "4 spaces", confidence=0.8)
    two = acme.fact("user", "PREFERS_INDENTATION", "2 spaces", confidence=0.7)
    redis = acme.fact("payments-api", "USES", "Redis")
    kafka = acme.fact("payments-api", "USES", "Kafka")
    acme.load(graph)
    service = RecallService(graph)

    answer = service.recall(acme.scope, "indentation preference of the user")
    by_id = {f.fact_id: f for f in answer.facts}
    assert by_id[four.fact_id].contradicts == [two.fact_id]
    assert by_id[two.fact_id].contradicts == [four.fact_id]
    order = _ids(answer)
    assert abs(order.index(four.fact_id) - order.index(two.fact_id)) == 1

    # Several objects of a multi-valued predicate are no conflict.
    uses = service.recall(acme.scope, "what does payments-api use")
    assert {redis.fact_id, kafka.fact_id} <= set(_ids(uses))
    assert all(f.contradicts == [] for f in uses.facts)

    # A conflicting pair is never cut in half by the limit.
    for limit in (1, 2, 3):
        got = set(_ids(service.recall(acme.scope, "user indentation 4 spaces", limit=limit)))
        assert len(got) <= limit
        assert (four.fact_id in got) == (two.fact_id in got)


def test_entry_entities_are_capped_and_found_by_alias(
    graph: SqliteGraphStore, acme: Memory
) -> None:
    ids = _payments(acme)
    acme.load(graph)
    service = RecallService(graph)
    answer = service.recall(acme.scope, "postgres version", k_entities=1)
    assert [e.name for e in answer.entities] == ["PostgreSQL"]
    assert answer.entities[0].ranks == {"name": 1}
    assert _ids(answer)[0] == ids["version"]


# -- vectors: modes, degradation, model choice ----------------------------------------------


@pytest.fixture
def embedded(graph: SqliteGraphStore, vectors: VectorStore, acme: Memory) -> dict[str, str]:
    ids = _payments(acme)
    acme.load(graph)
    acme.embed(vectors, TableEmbedder("table-model"))
    return ids


def test_hybrid_finds_by_meaning_what_names_cannot(
    graph: SqliteGraphStore, vectors: VectorStore, acme: Memory, embedded: dict[str, str]
) -> None:
    embedder = TableEmbedder("table-model", same={"relational store of the ledger": "PostgreSQL"})
    service = RecallService(graph, vectors, embedder)
    query = "relational store of the ledger"

    names = service.recall(acme.scope, query, ranking="lexical")
    assert names.mode == "names" and names.facts == []
    assert embedder.calls == 0  # lexical never embeds

    hybrid = service.recall(acme.scope, query)
    assert hybrid.mode == "hybrid" and hybrid.embedding_model == "table-model"
    assert hybrid.entities[0].name == "PostgreSQL" and hybrid.entities[0].via == "vector"
    assert {embedded["db"], embedded["version"]} <= set(_ids(hybrid))

    both = service.recall(acme.scope, "PostgreSQL", ranking="hybrid")
    assert both.entities[0].name == "PostgreSQL" and both.entities[0].via == "both"

    semantic = service.recall(acme.scope, "PostgreSQL", ranking="semantic")
    assert semantic.mode == "semantic"
    assert all(set(e.ranks) == {"vector"} for e in semantic.entities)


def test_semantic_and_hybrid_refuse_without_vectors(graph: SqliteGraphStore, acme: Memory) -> None:
    _payments(acme)
    acme.load(graph)
    service = RecallService(graph)  # no vector store, no embedder
    for ranking in ("semantic", "hybrid"):
        with pytest.raises(SemanticUnavailable) as err:
            service.recall(acme.scope, "which database", ranking=ranking)  # type: ignore[arg-type]
        assert err.value.code == "semantic_unavailable"
    auto = service.recall(acme.scope, "which database")
    assert auto.mode == "names" and auto.facts
    assert [w.code for w in auto.warnings] == ["names_only"]


def test_auto_degrades_to_names_when_the_embedding_server_fails(
    graph: SqliteGraphStore, vectors: VectorStore, acme: Memory
) -> None:
    ids = _payments(acme)
    acme.load(graph)
    with EmbeddingsServer(dim=256) as server:
        provider = OpenAIEmbeddingProvider(server.url, "hash-model", max_attempts=2, backoff=0.01)
        acme.embed(vectors, provider)  # the server works while the sweep runs
        service = RecallService(graph, vectors, provider)
        assert service.recall(acme.scope, "PostgreSQL").mode == "hybrid"

        server.enqueue(Fault(status=500), Fault(status=500))  # both attempts of the next call
        query = "which database holds secret-project-x?"
        answer = service.recall(acme.scope, query)
        assert answer.mode == "names"
        assert ids["db"] in _ids(answer)
        (warning,) = answer.warnings
        assert warning.code == "names_only" and "embedding_failed" in warning.message
        assert "secret-project-x" not in warning.model_dump_json()

        server.enqueue(Fault(status=500), Fault(status=500))
        with pytest.raises(SemanticUnavailable) as err:
            service.recall(acme.scope, "another database question", ranking="hybrid")
        assert err.value.reason == "embedding_failed"
        provider.close()


def test_auto_gives_up_on_a_slow_embedding_server(
    graph: SqliteGraphStore, vectors: VectorStore, acme: Memory, embedded: dict[str, str]
) -> None:
    with EmbeddingsServer(dim=256, model="table-model") as server:
        provider = OpenAIEmbeddingProvider(server.url, "table-model", max_attempts=1)
        service = RecallService(graph, vectors, provider, config=RecallConfig(embed_timeout_s=0.2))
        server.enqueue(Fault(delay=1.0))
        answer = service.recall(acme.scope, "which database do we use")
        assert answer.mode == "names" and embedded["db"] in _ids(answer)
        assert "embedding_timeout" in answer.warnings[0].message
        service.close()
        provider.close()


def test_previous_model_serves_until_the_new_one_covers_the_scope(
    graph: SqliteGraphStore, vectors: VectorStore, acme: Memory, embedded: dict[str, str]
) -> None:
    old = TableEmbedder("table-model")
    new = TableEmbedder("new-model")
    first = next(iter(acme.entities.values()))
    vectors.upsert("new-model", 256, acme.scope, [(first.entity_id, "h", new.embed(["x"])[0])])

    both = RecallService(graph, vectors, {"new-model": new, "table-model": old})
    answer = both.recall(acme.scope, "PostgreSQL")
    assert answer.mode == "hybrid" and answer.embedding_model == "table-model"
    assert [w.code for w in answer.warnings] == ["previous_model"]

    only_new = RecallService(graph, vectors, new)
    with pytest.raises(SemanticUnavailable) as err:
        only_new.recall(acme.scope, "PostgreSQL", ranking="hybrid")
    assert err.value.reason == "provider_unavailable"

    # Once the new model covers every entity it takes over.
    acme.embed(vectors, new)
    switched = RecallService(graph, vectors, {"new-model": new, "table-model": old})
    answer = switched.recall(acme.scope, "PostgreSQL")
    assert answer.embedding_model == "new-model" and answer.warnings == []


def test_previous_model_serves_until_the_new_one_covers_the_facts_too(
    graph: SqliteGraphStore, vectors: VectorStore, acme: Memory, embedded: dict[str, str]
) -> None:
    old = TableEmbedder("table-model")
    new = TableEmbedder("new-model")
    facts = list(acme.facts.values())
    both = {"new-model": new, "table-model": old}

    # Neither model has fact vectors (a store from before them): the current model serves.
    acme.embed(vectors, new)
    assert RecallService(graph, vectors, both).recall(acme.scope, "PostgreSQL").embedding_model == (
        "new-model"
    )

    # The previous model covers entities and facts; the new one every entity, not every fact.
    embed_facts(vectors, old, acme, facts)
    embed_facts(vectors, new, acme, facts[:2])
    answer = RecallService(graph, vectors, both).recall(acme.scope, "PostgreSQL")
    assert answer.mode == "hybrid" and answer.embedding_model == "table-model"
    assert [w.code for w in answer.warnings] == ["previous_model"]

    # Once the new model's fact vectors cover the facts it takes over.
    embed_facts(vectors, new, acme, facts)
    answer = RecallService(graph, vectors, both).recall(acme.scope, "PostgreSQL")
    assert answer.embedding_model == "new-model" and answer.warnings == []

    # A new fact the sink has not embedded yet leaves no model fully covering: the current
    # one keeps serving (no flapping back to the previous model).
    extra = acme.fact("PgBouncer", "FRONTS", "PostgreSQL")  # no new entity
    acme.load(graph)
    answer = RecallService(graph, vectors, both).recall(acme.scope, "PgBouncer")
    assert answer.embedding_model == "new-model" and answer.warnings == []
    assert extra.fact_id in _ids(answer)


def test_partial_vectors_serve_a_first_embedding_with_a_warning(
    graph: SqliteGraphStore, vectors: VectorStore, acme: Memory
) -> None:
    _payments(acme)
    acme.load(graph)
    embedder = TableEmbedder("table-model")
    service = RecallService(graph, vectors, embedder)
    with pytest.raises(SemanticUnavailable) as err:
        service.recall(acme.scope, "PostgreSQL", ranking="semantic")
    assert err.value.reason == "not_embedded"

    pg = acme.entities["PostgreSQL"]
    vectors.upsert(
        "table-model", 256, acme.scope, [(pg.entity_id, "h", embedder.embed([pg.name])[0])]
    )
    fresh = RecallService(graph, vectors, embedder)
    answer = fresh.recall(acme.scope, "PostgreSQL", ranking="semantic")
    assert answer.entities[0].name == "PostgreSQL"
    assert [w.code for w in answer.warnings] == ["partial_coverage"]


# -- isolation, caching, concurrency --------------------------------------------------------


def test_another_tenants_names_never_bring_back_its_facts(
    graph: SqliteGraphStore, vectors: VectorStore, acme: Memory
) -> None:
    _payments(acme)
    globex = Memory(Scope("globex", "payments"))
    globex.entity("payments-api", types=["service"])
    globex.fact("payments-api", "USES_DATABASE", "MySQL")
    globex.fact("payments-api", "PUBLISHES_TO", "RabbitMQ")
    globex.fact("user", "PREFERS_EDITOR", "Emacs")
    embedder = TableEmbedder("table-model")
    for memory in (acme, globex):
        memory.load(graph)
        memory.embed(vectors, embedder)

    service = RecallService(graph, vectors, embedder)
    foreign_facts = set(globex.facts)
    foreign_entities = {e.entity_id for e in globex.entities.values()}
    for query in ("MySQL", "RabbitMQ", "Emacs", "which database does payments-api use"):
        for ranking in ("lexical", "hybrid"):
            answer = service.recall(acme.scope, query, ranking=ranking)  # type: ignore[arg-type]
            assert not foreign_facts & set(_ids(answer)), (query, ranking)
            assert not foreign_entities & {e.entity_id for e in answer.entities}
            assert set(_ids(answer)) <= set(acme.facts)
    emacs = service.recall(globex.scope, "Emacs", ranking="hybrid")
    assert _ids(emacs) == [f.fact_id for f in globex.facts.values() if f.object == "Emacs"]


def test_index_is_built_once_per_store_version(graph: SqliteGraphStore, acme: Memory) -> None:
    _payments(acme)
    acme.load(graph)
    service = RecallService(graph)
    service.recall(acme.scope, "redis")
    service.recall(acme.scope, "postgres")
    assert service.indexes.builds == 1
    added = acme.fact("payments-api", "PUBLISHES_TO", "Kafka")
    acme.load(graph)
    assert added.fact_id in _ids(service.recall(acme.scope, "kafka"))
    assert service.indexes.builds == 2


def test_concurrent_requests_share_one_index_and_agree(
    graph: SqliteGraphStore, acme: Memory
) -> None:
    _payments(acme)
    for n in range(200):
        acme.fact("user", "WORKED_ON", f"PAY-{n}")
    acme.load(graph)
    queries = ["which database", "pgbouncer pool mode", "redis", "PAY-17", "postgres version"] * 8
    service = RecallService(graph)
    with ThreadPoolExecutor(max_workers=8) as pool:
        got = list(pool.map(lambda q: _ids(service.recall(acme.scope, q)), queries))
    assert service.indexes.builds == 1
    expected = {q: _ids(RecallService(graph).recall(acme.scope, q)) for q in set(queries)}
    assert got == [expected[q] for q in queries]


# -- entity search, subgraph ----------------------------------------------------------------


def test_search_entities(graph: SqliteGraphStore, acme: Memory) -> None:
    _payments(acme)
    acme.load(graph)
    service = RecallService(graph)
    found = service.search_entities(acme.scope, "pg bouncer", limit=3)
    assert found.mode == "names" and found.entities[0].name == "PgBouncer"
    assert found.entities[0].types == ["connection pooler"] and found.entities[0].via == "name"
    assert service.search_entities(acme.scope, "???").skip_reason == "no_words"
    assert service.search_entities(Scope("other", "repo"), "PgBouncer").entities == []


def test_subgraph_follows_the_store_and_ignores_foreign_ids(
    graph: SqliteGraphStore, acme: Memory
) -> None:
    ids = _payments(acme)
    acme.load(graph)
    other = Memory(Scope("globex", "payments"))
    other.fact("payments-api", "USES_DATABASE", "MySQL")
    other.load(graph)
    service = RecallService(graph)
    pg = acme.entities["PostgreSQL"].entity_id
    sub = service.subgraph(acme.scope, [pg, other.eid("MySQL")], hops=1)
    assert {f.fact_id for f in sub.facts} == {ids["db"], ids["version"]}
    assert all(f.hop == 1 and f.score is None for f in sub.facts)
    assert pg in {e.entity_id for e in sub.entities}
    assert sub.notice == NOTICE
    two = service.subgraph(acme.scope, [pg], hops=2, as_of=T0 + timedelta(days=1))
    assert {ids["pool"], ids["cache"]} <= {f.fact_id for f in two.facts}
    assert service.subgraph(acme.scope, [other.eid("MySQL")]).facts == []


def test_an_entity_no_fact_is_valid_for_is_no_way_in_at_that_time(
    graph: SqliteGraphStore, vectors: VectorStore, acme: Memory
) -> None:
    """A forgotten entity (every fact of it closed at the retraction) leaves the name and the
    vector leg from the retraction on and is an entry entity before it; a restatement brings it
    back (README "Retracting and forgetting")."""
    forgot, restated = T0 + timedelta(days=10), T0 + timedelta(days=20)
    acme.entity("Redis", types=["cache"])
    acme.fact("payments-api", "USES_CACHE", "Redis", valid_to=forgot)
    acme.fact("report job", "READS_FROM", "Redis", valid_to=forgot)
    acme.fact("payments-api", "USES_DATABASE", "PostgreSQL")
    acme.load(graph)
    acme.embed(vectors, TableEmbedder("table-model"))
    embedder = TableEmbedder("table-model", same={"key value store": "Redis"})
    service = RecallService(graph, vectors, embedder)

    def entries(query: str, at: datetime, ranking: str = "hybrid") -> list[str]:
        answer = service.recall(acme.scope, query, as_of=at, ranking=ranking)  # type: ignore[arg-type]
        return [e.name for e in answer.entities]

    before = forgot - timedelta(seconds=1)
    assert "Redis" in entries("Redis cache", before)
    assert "Redis" in entries("key value store", before, "semantic")
    for at in (forgot, forgot + timedelta(days=1)):
        assert "Redis" not in entries("Redis cache", at)
        assert "Redis" not in entries("Redis cache", at, "lexical")
        assert "Redis" not in entries("key value store", at, "semantic")
    # others are unaffected, and an entity is no way in before anything was said of it
    assert entries("PostgreSQL", forgot)[0] == "PostgreSQL"
    assert "PostgreSQL" not in entries("PostgreSQL", T0 - timedelta(days=1))
    assert "Redis" not in [e.name for e in service.search_entities(acme.scope, "Redis").entities]

    acme.fact("payments-api", "USES_CACHE", "Redis", valid_from=restated)
    acme.load(graph)
    assert "Redis" in entries("Redis cache", restated)
    assert "Redis" not in entries("Redis cache", restated - timedelta(days=1))
    assert [e.name for e in service.search_entities(acme.scope, "Redis").entities] == ["Redis"]
