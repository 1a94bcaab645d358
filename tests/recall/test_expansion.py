"""Expansion: validity at `as_of`, supersession, and agreement with the store's own expand."""

from __future__ import annotations

import random
import threading
import time
from datetime import timedelta

import pytest

from recall.answers import RecallAnswer
from recall.cache import ScopeIndexCache
from recall.service import RecallService
from resources.graph.sqlite import SqliteGraphStore
from tests.recall.conftest import T0, Memory


def _ids(answer: RecallAnswer) -> list[str]:
    return [f.fact_id for f in answer.facts]


def test_only_facts_valid_at_as_of_are_recalled(graph: SqliteGraphStore, acme: Memory) -> None:
    acme.entity("payments-api", types=["service"])
    past = acme.fact("payments-api", "MONITORED_BY", "New Relic", valid_to=T0 + timedelta(days=90))
    now = acme.fact("payments-api", "MONITORED_BY", "Datadog", valid_from=T0 + timedelta(days=90))
    future = acme.fact(
        "payments-api", "MONITORED_BY", "Grafana Cloud", valid_from=T0 + timedelta(days=36500)
    )
    acme.load(graph)
    service = RecallService(graph)
    query = "payments-api monitoring"

    at_start = _ids(service.recall(acme.scope, query, as_of=T0 + timedelta(days=1)))
    assert past.fact_id in at_start and now.fact_id not in at_start
    later = _ids(service.recall(acme.scope, query, as_of=T0 + timedelta(days=200)))
    assert now.fact_id in later and past.fact_id not in later
    # valid_to is exclusive: at the switch the new fact holds and the old one does not.
    switch = _ids(service.recall(acme.scope, query, as_of=T0 + timedelta(days=90)))
    assert now.fact_id in switch and past.fact_id not in switch
    assert future.fact_id not in _ids(service.recall(acme.scope, query))


def test_superseded_fact_is_hidden_now_but_not_before(
    graph: SqliteGraphStore, acme: Memory
) -> None:
    old = acme.fact("user", "PREFERS_EDITOR", "VS Code", valid_from=T0)
    new = acme.fact("user", "PREFERS_EDITOR", "Neovim", valid_from=T0 + timedelta(days=60))
    acme.load(graph)
    graph.supersede(acme.scope, old.fact_id, new.fact_id, T0 + timedelta(days=60))
    service = RecallService(graph)

    current = service.recall(acme.scope, "which editor does the user prefer")
    assert _ids(current) == [new.fact_id]
    assert current.facts[0].contradicts == []  # a supersession is not a contradiction
    earlier = service.recall(
        acme.scope, "which editor does the user prefer", as_of=T0 + timedelta(days=30)
    )
    assert _ids(earlier) == [old.fact_id]
    assert earlier.facts[0].valid_to == T0 + timedelta(days=60)


def test_hop_two_reaches_through_an_intermediate_entity(
    graph: SqliteGraphStore, acme: Memory
) -> None:
    uses = acme.fact("payments-api", "USES_DATABASE", "PostgreSQL")
    version = acme.fact("PostgreSQL", "HAS_VERSION", "16.2")
    acme.load(graph)
    service = RecallService(graph)
    answer = service.recall(acme.scope, "payments-api", hops=2)
    hops = {f.fact_id: f.hop for f in answer.facts}
    assert hops == {uses.fact_id: 1, version.fact_id: 2}
    assert _ids(service.recall(acme.scope, "payments-api", hops=1)) == [uses.fact_id]


@pytest.mark.parametrize("hops", [1, 2])
def test_index_expansion_matches_the_store(
    graph: SqliteGraphStore, acme: Memory, hops: int
) -> None:
    rng = random.Random(hops)
    names = [f"svc-{i}" for i in range(40)]
    for i in range(160):
        start = T0 + timedelta(days=rng.randint(0, 100))
        end = start + timedelta(days=rng.randint(1, 100)) if rng.random() < 0.3 else None
        acme.fact(
            rng.choice(names), f"REL_{i % 7}", rng.choice(names), valid_from=start, valid_to=end
        )
    acme.load(graph)
    index = ScopeIndexCache(graph).get(acme.scope)
    for trial in range(12):
        seeds = [acme.eid(n) for n in rng.sample(names, rng.randint(1, 4))]
        when = T0 + timedelta(days=rng.randint(0, 220))
        store = graph.expand(acme.scope, seeds, hops=hops, limit=100_000, as_of=when)
        hop = index.neighbourhood(seeds, hops, index.valid_at(when))
        mine = {index.facts[r].fact_id: int(hop[r]) for r in hop.nonzero()[0]}
        assert mine == {x.fact.fact_id: x.hop for x in store}, trial


def test_the_scope_cache_stays_bounded_however_many_scopes_are_asked_for(
    graph: SqliteGraphStore,
) -> None:
    from schemas.scope import Scope
    from tests.recall.conftest import Memory

    for i in range(20):
        memory = Memory(Scope("org", f"repo{i}"))
        memory.fact("svc", "USES", f"db{i}")
        memory.load(graph)
    cache = ScopeIndexCache(graph, max_scopes=8)
    for i in range(20):
        assert cache.get(Scope("org", f"repo{i}")).facts
    for i in range(500):  # unknown scopes: nothing to hold, and nothing held for them
        assert not cache.get(Scope("nobody", f"repo{i}")).facts
    assert cache.footprint() == (8, 0)
    assert cache.builds == 20


class _SlowEmptyStore:
    """A store that holds nothing and takes its time, or fails, and counts its builds."""

    def __init__(self, fail: bool = False) -> None:
        self.inflight = self.peak = 0
        self.fail = fail
        self._lock = threading.Lock()

    def version(self, scope) -> str:
        return "v0"

    def entities(self, scope) -> list:
        if self.fail:
            raise RuntimeError("store timed out")
        with self._lock:
            self.inflight += 1
            self.peak = max(self.peak, self.inflight)
        time.sleep(0.02)
        with self._lock:
            self.inflight -= 1
        return []

    def facts(self, scope) -> list:
        return []


def test_concurrent_requests_for_one_scope_build_it_once_at_a_time() -> None:
    from schemas.scope import Scope

    store = _SlowEmptyStore()
    cache = ScopeIndexCache(store, max_scopes=8)  # type: ignore[arg-type]
    scope = Scope("acme", "api")
    threads = [
        threading.Thread(target=lambda: [cache.get(scope) for _ in range(5)]) for _ in range(16)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert store.peak == 1
    assert cache.footprint() == (0, 0)


def test_a_build_that_fails_leaves_nothing_behind() -> None:
    from schemas.scope import Scope

    cache = ScopeIndexCache(_SlowEmptyStore(fail=True), max_scopes=8)  # type: ignore[arg-type]
    for i in range(100):
        with pytest.raises(RuntimeError):
            cache.get(Scope(f"t{i}", "api"))
    assert cache.footprint() == (0, 0)
