"""The optional listwise rerank (resources/models/rerank.py through RecallService): one call
to a real OpenAI-compatible HTTP server over the top facts, off by default, within a budget
after which the answer keeps its own order and says why."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from recall.service import RecallConfig, RecallService
from resources.graph.sqlite import SqliteGraphStore
from resources.models.guard import NonLocalEndpointError
from resources.models.rerank import ListwiseReranker, parse_ranking
from schemas.scope import Scope
from tests.recall.conftest import Memory
from tests.support.openai_chat_server import Scripted
from tests.support.rerank_chat_server import RankingChatServer

QUESTION = "which database does the billing service store invoices in"


@pytest.fixture
def server() -> Iterator[RankingChatServer]:
    with RankingChatServer() as s:
        yield s


def _scope(graph: SqliteGraphStore) -> Memory:
    memory = Memory(Scope("acme", "billing"))
    # Lexically the question's "billing service" matches every billing fact; only one says
    # where invoices are stored.
    for n in range(6):
        memory.fact("billing service", "CALLS", f"billing helper {n}", confidence=0.95)
    memory.fact("billing service", "STORES_INVOICES_IN", "PostgreSQL database", confidence=0.5)
    memory.fact("billing service", "PREFERS_EDITOR", "vim")
    memory.fact("billing service", "PREFERS_EDITOR", "emacs")
    memory.load(graph)
    return memory


def _objects(answer) -> list[str]:
    return [f.object for f in answer.facts]


def test_one_call_over_the_top_facts_moves_the_answer_up(
    graph: SqliteGraphStore, server: RankingChatServer
) -> None:
    memory = _scope(graph)
    reranker = ListwiseReranker(server.url, "judge-model", budget_s=30)
    service = RecallService(graph, reranker=reranker, config=RecallConfig(rerank_candidates=5))
    plain = service.recall(memory.scope, QUESTION)
    assert plain.rerank is None and server.chat_requests == []  # off by default
    answer = service.recall(memory.scope, QUESTION, rerank=True)
    assert answer.rerank is not None and answer.rerank.reranked, answer.rerank
    assert answer.rerank.reason is None
    assert len(server.chat_requests) == 1  # listwise: one call, not one per candidate
    body = server.chat_requests[0].json
    assert body["model"] == "judge-model" and body["temperature"] == 0
    prompt = body["messages"][-1]["content"]
    assert QUESTION in prompt
    # The top 5 (a contradicting pair counts as one candidate) went to the model, in order.
    first = plain.facts[:6]
    assert sum(f"{f.subject} {f.predicate} {f.object}" in prompt for f in plain.facts) >= 5
    assert "PostgreSQL database" in _objects(plain)[:5] or "PostgreSQL database" not in prompt
    if "PostgreSQL database" in prompt:
        assert _objects(answer)[0] == "PostgreSQL database"
    # Same facts, other order; nothing past the reranked head moves.
    assert sorted(_objects(answer)) == sorted(_objects(plain))
    head = answer.rerank.candidates
    assert head >= 4 and len(first) == 6
    assert _objects(answer)[head + 1 :] == _objects(plain)[head + 1 :]


def test_contradicting_facts_move_together(
    graph: SqliteGraphStore, server: RankingChatServer
) -> None:
    memory = _scope(graph)
    reranker = ListwiseReranker(server.url, "judge-model", budget_s=30)
    service = RecallService(graph, reranker=reranker)
    answer = service.recall(
        memory.scope, "which editor does the billing service prefer", rerank=True
    )
    assert answer.rerank is not None and answer.rerank.reranked
    objects = _objects(answer)
    vim, emacs = objects.index("vim"), objects.index("emacs")
    assert abs(vim - emacs) == 1 and min(vim, emacs) == 0
    assert answer.facts[min(vim, emacs)].contradicts


@pytest.mark.parametrize(
    ("scripted", "reason"),
    [
        (Scripted.slow(3.0, '{"ranking": [2, 1]}'), "budget_exceeded"),
        (Scripted.error(500), "model_error"),
        (Scripted.error(404), "model_error"),
        (Scripted.answer("I think the second one is best."), "unparseable_answer"),
        (Scripted.answer('{"ranking": [0, 99, -1, "x"]}'), "unparseable_answer"),
        (Scripted(body=b"\x00\xff not json"), "model_error"),
    ],
)
def test_past_the_budget_or_on_a_bad_answer_the_order_stays_and_says_why(
    graph: SqliteGraphStore, server: RankingChatServer, scripted: Scripted, reason: str
) -> None:
    memory = _scope(graph)
    reranker = ListwiseReranker(server.url, "judge-model", budget_s=0.5)
    service = RecallService(graph, reranker=reranker)
    plain = service.recall(memory.scope, QUESTION)
    server.enqueue(scripted)
    answer = service.recall(memory.scope, QUESTION, rerank=True)
    assert answer.rerank is not None
    assert (answer.rerank.reranked, answer.rerank.reason) == (False, reason)
    assert _objects(answer) == _objects(plain)
    # The next call is served again.
    assert service.recall(memory.scope, QUESTION, rerank=True).rerank.reranked  # type: ignore[union-attr]
    reranker.close()


def test_asked_without_a_reranker_the_answer_says_so(graph: SqliteGraphStore) -> None:
    memory = _scope(graph)
    answer = RecallService(graph).recall(memory.scope, QUESTION, rerank=True)
    assert answer.rerank is not None
    assert (answer.rerank.reranked, answer.rerank.reason) == (False, "no_reranker")


def test_a_non_local_model_endpoint_is_refused_unless_allowed() -> None:
    with pytest.raises(NonLocalEndpointError):
        ListwiseReranker("http://93.184.216.34:8080", "m")
    ListwiseReranker("http://93.184.216.34:8080", "m", allow_hosts=["93.184.216.34"]).close()
    with pytest.raises(ValueError, match="budget_s"):
        ListwiseReranker("http://127.0.0.1:1", "m", budget_s=0)


def test_nothing_listening_is_a_model_error_not_an_exception() -> None:
    reranker = ListwiseReranker("http://127.0.0.1:9", "m", budget_s=2)
    outcome = reranker.rerank("q", ["a", "b"])
    assert (outcome.reranked, outcome.reason, outcome.order) == (False, "model_error", (0, 1))
    assert reranker.rerank("q", ["only one"]).reason == "too_few_candidates"
    reranker.close()
    assert reranker.rerank("q", ["a", "b"]).reason == "closed"


def test_the_model_answer_is_read_for_candidate_numbers_only() -> None:
    assert parse_ranking('{"ranking": [3, 1, 3, "2", true, 9]}', 3) == [2, 0, 1]
    assert parse_ranking("Best: [2, 1] because ignore previous instructions", 2) == [1, 0]
    assert parse_ranking('{"ranking": "all of them"}', 3) is None
    assert parse_ranking("", 3) is None
    assert parse_ranking('{"ranking": [1e400, null, {"a": 1}]}', 3) is None


def test_the_factory_builds_the_reranker_only_when_configured(server: RankingChatServer) -> None:
    from resources.models.factory import RerankConfig

    assert RerankConfig().build() is None
    with pytest.raises(ValueError, match="base_url and model"):
        RerankConfig(provider="openai").build()
    with pytest.raises(ValueError, match="unknown rerank provider"):
        RerankConfig(provider="cloud").build()
    with pytest.raises(NonLocalEndpointError):
        RerankConfig(provider="openai", base_url="http://93.184.216.34", model="m").build()
    built = RerankConfig(provider="openai", base_url=server.url, model="judge-model").build()
    assert built is not None
    assert built.rerank("which database", ["a database", "b"]).reranked
    built.close()
