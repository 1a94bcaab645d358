"""The graph store contract: one suite, run against every backend (see conftest.py)."""

from __future__ import annotations

import json
import multiprocessing
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
import pytest

from resources.graph.base import GraphStore, GraphStoreError
from resources.graph.factory import open_graph_store
from resources.graph.sqlite import SqliteGraphStore
from resources.graph.sync import (
    graph_equals_table,
    records_from_tables,
    sync_and_check,
    sync_graph,
)
from schemas.records import EntityRecord, FactRecord
from schemas.scope import Scope
from schemas.tables import ENTITIES, FACTS
from tests.contract.conftest import GraphBackend

pytestmark = pytest.mark.slow

Scopes = Callable[..., Scope]
T0 = datetime(2024, 1, 1, tzinfo=UTC)
T1 = datetime(2024, 6, 1, 12, 30, tzinfo=UTC)
NOW = datetime(2025, 1, 1, tzinfo=UTC)
US = timedelta(microseconds=1)
HOSTILE = [
    "'); g.V().drop()//",
    '"); g.E().drop(); ("',
    "back\\slash\\\\ and \\n literal",
    "multi\nline\r\nvalue\ttabbed",
    "ünïcødé ✓ 日本語 🚀",
    "${jndi:ldap://x}",
    "' OR 1=1 --",
    "",
]


def ent(entity_id: str, name: str | None = None, **kw: object) -> EntityRecord:
    return EntityRecord(entity_id=entity_id, name=name or entity_id.upper(), **kw)  # type: ignore[arg-type]


def fact(
    fact_id: str, subject_id: str, object_id: str, confidence: float = 0.9, **kw: object
) -> FactRecord:
    values: dict[str, object] = {
        "subject": subject_id.upper(),
        "predicate": "USES",
        "object": object_id.upper(),
        "valid_from": T0,
        **kw,
    }
    return FactRecord(
        fact_id=fact_id,
        subject_id=subject_id,
        object_id=object_id,
        confidence=confidence,
        **values,  # type: ignore[arg-type]
    )


def expanded_ids(store: GraphStore, scope: Scope, seeds: list[str], **kw: object) -> list[str]:
    kw.setdefault("as_of", NOW)
    return [x.fact.fact_id for x in store.expand(scope, seeds, **kw)]  # type: ignore[arg-type]


def load_chain(store: GraphStore, scope: Scope) -> None:
    """a -> b -> c -> d, plus e -> a (incoming to the seed)."""
    store.upsert_entities(scope, [ent(x) for x in "abcde"])
    store.upsert_facts(
        scope,
        [
            fact("f_ab", "a", "b", 0.9),
            fact("f_bc", "b", "c", 0.8),
            fact("f_cd", "c", "d", 0.7),
            fact("f_ea", "e", "a", 0.6),
        ],
    )


# -- upsert and round trip -------------------------------------------------------------------


def test_entities_round_trip_and_upsert_is_idempotent(
    graph_store: GraphStore, new_scope: Scopes
) -> None:
    scope = new_scope()
    rows = [
        ent("e_b", "Postgres", aliases=("postgres", "PG"), types=("database", "service")),
        ent("e_a", "ünïcødé ✓", aliases=("ü",), types=()),
    ]
    assert graph_store.upsert_entities(scope, rows) == 2
    assert graph_store.upsert_entities(scope, rows) == 2
    assert graph_store.entities(scope) == sorted(rows, key=lambda e: e.entity_id)
    assert graph_store.counts(scope) == {"entities": 2, "facts": 0}

    changed = replace(rows[0], name="PostgreSQL", aliases=("pg",), types=(), row_hash="h2")
    assert graph_store.upsert_entities(scope, [changed]) == 1
    assert graph_store.get_entities(scope, ["e_b", "missing"]) == [changed]
    assert graph_store.counts(scope) == {"entities": 2, "facts": 0}
    assert graph_store.upsert_entities(scope, []) == 0


def test_facts_round_trip_every_field(graph_store: GraphStore, new_scope: Scopes) -> None:
    scope = new_scope()
    graph_store.upsert_entities(scope, [ent("a"), ent("b")])
    full = fact(
        "f1",
        "a",
        "b",
        0.123456789,
        predicate="DEPENDS_ON",
        valid_from=T0 + 7 * US,
        valid_to=T1,
        supersedes="f0",
        superseded_by="f2",
        session_id="s-1",
        turn_id="t-9",
        client="claude-code",
        model="qwen2.5:7b",
        source="llm",
        sources=(("s-1", "t-9"), ("s-2", "t-1"), ("s-1", "t-12")),
        row_hash="abc",
    )
    open_fact = fact("f2", "b", "a", 1.0, supersedes="f1")
    assert graph_store.upsert_facts(scope, [full, open_fact]) == 2
    assert graph_store.facts(scope) == [full, open_fact]
    assert graph_store.facts(scope)[1].valid_to is None

    again = replace(full, confidence=0.5, row_hash="def")
    assert graph_store.upsert_facts(scope, [again]) == 1
    assert graph_store.facts(scope) == [again, open_fact]
    assert graph_store.counts(scope) == {"entities": 2, "facts": 2}

    # A fact restated in a later turn: the same fact with one more source.
    restated = replace(again, sources=(*again.sources, ("s-3", "t-1")), row_hash="ghi")
    assert graph_store.upsert_facts(scope, [restated]) == 1
    assert graph_store.facts(scope) == [restated, open_fact]
    expanded = graph_store.expand(scope, ["b"], as_of=T0 + 7 * US)
    assert {x.fact.fact_id: x.fact.sources for x in expanded} == {
        "f1": restated.sources,
        "f2": (),
    }


def test_fact_with_new_ends_replaces_the_old_link(
    graph_store: GraphStore, new_scope: Scopes
) -> None:
    scope = new_scope()
    graph_store.upsert_entities(scope, [ent("a"), ent("b"), ent("c")])
    graph_store.upsert_facts(scope, [fact("f1", "a", "b")])
    graph_store.upsert_facts(scope, [fact("f1", "c", "b")])
    assert [(f.fact_id, f.subject_id) for f in graph_store.facts(scope)] == [("f1", "c")]
    assert expanded_ids(graph_store, scope, ["a"]) == []
    assert expanded_ids(graph_store, scope, ["c"]) == ["f1"]


def test_facts_need_both_entities_in_the_scope(graph_store: GraphStore, new_scope: Scopes) -> None:
    scope, other = new_scope("one"), new_scope("two")
    graph_store.upsert_entities(scope, [ent("a")])
    graph_store.upsert_entities(other, [ent("b")])
    with pytest.raises(ValueError, match="not in scope"):
        graph_store.upsert_facts(scope, [fact("f1", "a", "b")])
    assert graph_store.counts(scope) == {"entities": 1, "facts": 0}


def test_naive_datetimes_are_refused(graph_store: GraphStore, new_scope: Scopes) -> None:
    scope = new_scope()
    graph_store.upsert_entities(scope, [ent("a"), ent("b")])
    with pytest.raises(ValueError, match="timezone"):
        graph_store.upsert_facts(scope, [fact("f1", "a", "b", valid_from=datetime(2024, 1, 1))])
    with pytest.raises(ValueError, match="timezone"):
        graph_store.expand(scope, ["a"], as_of=datetime(2024, 1, 1))


# -- scope isolation -------------------------------------------------------------------------


def test_same_ids_in_two_scopes_never_leak(graph_store: GraphStore, new_scope: Scopes) -> None:
    mine = new_scope("repo")
    sibling = new_scope("repo-2")  # same tenant, other namespace
    foreign = new_scope("repo", tenant_id=mine.tenant_id + "x")  # other tenant, same namespace
    for i, scope in enumerate((mine, sibling, foreign)):
        graph_store.upsert_entities(
            scope, [ent("a", f"A{i}"), ent("b", f"B{i}"), ent("c", f"C{i}")]
        )
        graph_store.upsert_facts(
            scope, [fact("f_ab", "a", "b", subject=f"A{i}"), fact("f_bc", "b", "c")]
        )
    graph_store.upsert_facts(foreign, [fact("f_only_foreign", "a", "c")])

    assert [e.name for e in graph_store.entities(mine)] == ["A0", "B0", "C0"]
    assert [e.name for e in graph_store.get_entities(sibling, ["a"])] == ["A1"]
    assert [f.subject for f in graph_store.facts(foreign) if f.fact_id == "f_ab"] == ["A2"]
    assert expanded_ids(graph_store, mine, ["a"], hops=2) == ["f_ab", "f_bc"]
    assert [x.fact.subject for x in graph_store.expand(mine, ["a"], as_of=NOW)] == ["A0"]
    assert graph_store.counts(foreign) == {"entities": 3, "facts": 3}
    assert set(graph_store.row_hashes(mine)[1]) == {"f_ab", "f_bc"}

    assert graph_store.delete_entities(sibling, ["a"]) == 1
    assert graph_store.delete_facts(foreign, ["f_bc"]) == 1
    graph_store.delete_scope(mine)
    assert graph_store.counts(mine) == {"entities": 0, "facts": 0}
    assert graph_store.counts(sibling) == {"entities": 2, "facts": 1}
    assert graph_store.counts(foreign) == {"entities": 3, "facts": 2}
    assert [e.name for e in graph_store.entities(foreign)] == ["A2", "B2", "C2"]
    scopes = set(graph_store.scopes())
    assert {sibling, foreign} <= scopes
    assert mine not in scopes


def test_operations_on_an_empty_or_unknown_scope(
    graph_store: GraphStore, new_scope: Scopes
) -> None:
    scope = new_scope()
    assert graph_store.entities(scope) == []
    assert graph_store.facts(scope) == []
    assert graph_store.row_hashes(scope) == ({}, {})
    assert graph_store.expand(scope, ["a"], hops=2, as_of=NOW) == []
    assert graph_store.delete_entities(scope, ["a"]) == 0
    assert graph_store.delete_facts(scope, ["f"]) == 0
    graph_store.delete_scope(scope)
    assert graph_store.counts(scope) == {"entities": 0, "facts": 0}


# -- time ------------------------------------------------------------------------------------


def test_valid_at_is_half_open(graph_store: GraphStore, new_scope: Scopes) -> None:
    scope = new_scope()
    graph_store.upsert_entities(scope, [ent("a"), ent("b")])
    graph_store.upsert_facts(scope, [fact("f1", "a", "b", valid_from=T0, valid_to=T1)])
    assert expanded_ids(graph_store, scope, ["a"], as_of=T0 - US) == []
    assert expanded_ids(graph_store, scope, ["a"], as_of=T0) == ["f1"]
    assert expanded_ids(graph_store, scope, ["a"], as_of=T1 - US) == ["f1"]
    assert expanded_ids(graph_store, scope, ["a"], as_of=T1) == []


def test_supersede_closes_and_links_and_as_of_sees_each_side(
    graph_store: GraphStore, new_scope: Scopes
) -> None:
    scope = new_scope()
    graph_store.upsert_entities(scope, [ent("app"), ent("mysql"), ent("postgres")])
    old = fact("f_old", "app", "mysql", 0.9, valid_from=T0)
    new = fact("f_new", "app", "postgres", 0.8, valid_from=T1)
    graph_store.upsert_facts(scope, [old, new])
    before = graph_store.version(scope)

    graph_store.supersede(scope, "f_old", "f_new", T1)

    assert graph_store.version(scope) != before
    assert expanded_ids(graph_store, scope, ["app"], as_of=T1 - US) == ["f_old"]
    assert expanded_ids(graph_store, scope, ["app"], as_of=T1) == ["f_new"]
    assert expanded_ids(graph_store, scope, ["app"], as_of=NOW) == ["f_new"]
    stored = {f.fact_id: f for f in graph_store.facts(scope)}
    assert stored["f_old"].valid_to == T1
    assert stored["f_old"].superseded_by == "f_new"
    assert stored["f_new"].supersedes == "f_old"
    # Content is not edited: only the closing time and the links changed.
    assert replace(stored["f_old"], valid_to=None, superseded_by=None, row_hash="") == old
    # The sink's hashes no longer match, so the next sync rewrites both rows from the table.
    assert graph_store.row_hashes(scope)[1] == {"f_old": "", "f_new": ""}


def test_supersede_refuses_unknown_facts_and_impossible_times(
    graph_store: GraphStore, new_scope: Scopes
) -> None:
    scope = new_scope()
    graph_store.upsert_entities(scope, [ent("a"), ent("b")])
    graph_store.upsert_facts(scope, [fact("f1", "a", "b", valid_from=T1), fact("f2", "b", "a")])
    with pytest.raises(KeyError):
        graph_store.supersede(scope, "nope", "f2", NOW)
    with pytest.raises(KeyError):
        graph_store.supersede(scope, "f1", "nope", NOW)
    with pytest.raises(ValueError):
        graph_store.supersede(scope, "f1", "f2", T0)
    with pytest.raises(ValueError):
        graph_store.supersede(scope, "f1", "f1", NOW)
    assert all(f.valid_to is None for f in graph_store.facts(scope))


# -- expansion -------------------------------------------------------------------------------


def test_one_hop_versus_two_hops(graph_store: GraphStore, new_scope: Scopes) -> None:
    scope = new_scope()
    load_chain(graph_store, scope)
    one = graph_store.expand(scope, ["a"], hops=1, as_of=NOW)
    assert [(x.fact.fact_id, x.hop, x.seeds) for x in one] == [
        ("f_ab", 1, ("a",)),
        ("f_ea", 1, ("a",)),
    ]
    two = graph_store.expand(scope, ["a"], hops=2, as_of=NOW)
    assert [(x.fact.fact_id, x.hop, x.seeds) for x in two] == [
        ("f_ab", 1, ("a",)),
        ("f_ea", 1, ("a",)),
        ("f_bc", 2, ("a",)),
    ]
    both = graph_store.expand(scope, ["a", "c"], hops=1, as_of=NOW)
    assert [(x.fact.fact_id, x.seeds) for x in both] == [
        ("f_ab", ("a",)),
        ("f_bc", ("c",)),
        ("f_cd", ("c",)),
        ("f_ea", ("a",)),
    ]


def test_second_hop_only_through_facts_valid_at_the_time(
    graph_store: GraphStore, new_scope: Scopes
) -> None:
    scope = new_scope()
    graph_store.upsert_entities(scope, [ent("a"), ent("b"), ent("c")])
    graph_store.upsert_facts(
        scope, [fact("f_ab", "a", "b", valid_to=T1), fact("f_bc", "b", "c", valid_from=T0)]
    )
    assert expanded_ids(graph_store, scope, ["a"], hops=2, as_of=T1 - US) == ["f_ab", "f_bc"]
    assert expanded_ids(graph_store, scope, ["a"], hops=2, as_of=T1) == []


def test_limit_and_ordering(graph_store: GraphStore, new_scope: Scopes) -> None:
    scope = new_scope()
    graph_store.upsert_entities(scope, [ent(x) for x in ("s", "n1", "n2", "n3", "far")])
    graph_store.upsert_facts(
        scope,
        [
            fact("f_b", "s", "n1", 0.5),
            fact("f_a", "s", "n2", 0.5),  # ties on confidence break by fact_id
            fact("f_c", "n3", "s", 0.7),
            fact("f_far", "n1", "far", 1.0),  # best confidence, but a hop further
        ],
    )
    assert expanded_ids(graph_store, scope, ["s"], hops=2) == ["f_c", "f_a", "f_b", "f_far"]
    assert expanded_ids(graph_store, scope, ["s"], hops=2, limit=3) == ["f_c", "f_a", "f_b"]
    assert expanded_ids(graph_store, scope, ["s"], hops=2, limit=2) == ["f_c", "f_a"]
    assert expanded_ids(graph_store, scope, ["s"], hops=1, limit=1) == ["f_c"]


def test_expand_arguments(graph_store: GraphStore, new_scope: Scopes) -> None:
    scope = new_scope()
    load_chain(graph_store, scope)
    assert graph_store.expand(scope, [], as_of=NOW) == []
    assert graph_store.expand(scope, ["unknown"], hops=2, as_of=NOW) == []
    assert expanded_ids(graph_store, scope, ["a", "a"]) == ["f_ab", "f_ea"]
    with pytest.raises(ValueError):
        graph_store.expand(scope, ["a"], hops=3, as_of=NOW)
    with pytest.raises(ValueError):
        graph_store.expand(scope, ["a"], hops=0, as_of=NOW)
    with pytest.raises(ValueError):
        graph_store.expand(scope, ["a"], limit=0, as_of=NOW)


# -- hostile values --------------------------------------------------------------------------


def test_hostile_values_are_stored_verbatim_and_never_run(
    graph_store: GraphStore, new_scope: Scopes
) -> None:
    scope, bystander = new_scope("repo"), new_scope("bystander")
    graph_store.upsert_entities(bystander, [ent("x"), ent("y")])
    graph_store.upsert_facts(bystander, [fact("f_xy", "x", "y")])

    entities = [
        ent(f"e{i}'\"\\", value or "empty-name", aliases=(value, "plain"), types=(value,))
        for i, value in enumerate(HOSTILE)
    ]
    graph_store.upsert_entities(scope, entities)
    facts = [
        fact(
            f"f{i}'); drop",
            entities[i].entity_id,
            entities[(i + 1) % len(entities)].entity_id,
            subject=value or "s",
            predicate="RELATES_TO",
            object=value + "\n" if value else "o",
            session_id=value,
            client=value,
            sources=((value, value + "]\"'"), ("[", value)),
        )
        for i, value in enumerate(HOSTILE)
    ]
    graph_store.upsert_facts(scope, facts)

    assert graph_store.entities(scope) == sorted(entities, key=lambda e: e.entity_id)
    assert graph_store.facts(scope) == sorted(facts, key=lambda f: f.fact_id)
    seeds = [entities[0].entity_id]
    assert expanded_ids(graph_store, scope, seeds) == sorted([facts[0].fact_id, facts[-1].fact_id])
    assert graph_store.counts(bystander) == {"entities": 2, "facts": 1}
    graph_store.delete_facts(scope, [facts[0].fact_id])
    graph_store.delete_entities(scope, [entities[1].entity_id])
    assert graph_store.counts(scope) == {"entities": len(HOSTILE) - 1, "facts": len(HOSTILE) - 2}
    assert graph_store.counts(bystander) == {"entities": 2, "facts": 1}


# -- counts, versions, hashes, deletes -------------------------------------------------------


def test_counts_and_version_follow_every_change(graph_store: GraphStore, new_scope: Scopes) -> None:
    scope, other = new_scope("repo"), new_scope("other")
    versions = [graph_store.version(scope)]
    assert graph_store.version(scope) == versions[-1]

    graph_store.upsert_entities(scope, [ent("a"), ent("b"), ent("c")])
    versions.append(graph_store.version(scope))
    graph_store.upsert_facts(scope, [fact("f1", "a", "b"), fact("f2", "b", "c")])
    versions.append(graph_store.version(scope))
    assert graph_store.counts(scope) == {"entities": 3, "facts": 2}

    other_version = graph_store.version(other)
    graph_store.upsert_entities(other, [ent("a")])
    assert graph_store.version(scope) == versions[-1]  # another scope's write
    assert graph_store.version(other) != other_version

    assert graph_store.delete_facts(scope, ["f1", "unknown"]) == 1
    versions.append(graph_store.version(scope))
    assert graph_store.delete_facts(scope, ["unknown"]) == 0
    assert graph_store.version(scope) == versions[-1]  # nothing changed

    # Deleting an entity takes the facts touching it along.
    assert graph_store.delete_entities(scope, ["c"]) == 1
    versions.append(graph_store.version(scope))
    assert graph_store.counts(scope) == {"entities": 2, "facts": 0}

    graph_store.delete_scope(scope)
    assert graph_store.counts(scope) == {"entities": 0, "facts": 0}
    graph_store.upsert_entities(scope, [ent("z")])
    versions.append(graph_store.version(scope))
    assert len(set(versions)) == len(versions)


@pytest.mark.parametrize("grouped", [False, True], ids=["few scopes", "grouped"])
def test_counts_many_answers_each_scope_asked_as_counts_does_and_no_other(
    graph_store: GraphStore, new_scope: Scopes, grouped: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`memflow status` counts every tenant's graph at once: one answer per scope asked (zeros
    for an empty one), never the counts of a scope not asked for, even one whose org and
    namespace are each among those asked."""
    if grouped:  # the grouped read (SQLite from 64 scopes; Gremlin in chunks of scopes)
        monkeypatch.setattr("resources.graph.sqlite._GROUPED_FROM", 0)
        monkeypatch.setattr("resources.graph.gremlin._COUNT_CHUNK", 2)
    first, second = new_scope("alpha"), new_scope("beta", tenant_id=f"o{uuid.uuid4().hex[:12]}")
    empty = new_scope("gamma")
    crossed = new_scope("beta")  # first's org, second's namespace: not asked
    load_chain(graph_store, first)
    graph_store.upsert_entities(second, [ent("x"), ent("y")])
    graph_store.upsert_facts(second, [fact("f_xy", "x", "y")])
    graph_store.upsert_entities(crossed, [ent("q")])
    asked = [first, second, empty, first]  # a scope asked twice is answered once

    got = graph_store.counts_many(asked)

    assert list(got) == [first, second, empty]
    assert got == {s: graph_store.counts(s) for s in (first, second, empty)}
    assert got[first] == {"entities": 5, "facts": 4} and got[second] == {"entities": 2, "facts": 1}
    assert got[empty] == {"entities": 0, "facts": 0}
    assert graph_store.counts_many([]) == {}


def test_row_hashes_are_what_was_written(graph_store: GraphStore, new_scope: Scopes) -> None:
    scope = new_scope()
    graph_store.upsert_entities(scope, [ent("a", row_hash="ha"), ent("b", row_hash="hb")])
    graph_store.upsert_facts(scope, [fact("f1", "a", "b", row_hash="hf")])
    assert graph_store.row_hashes(scope) == ({"a": "ha", "b": "hb"}, {"f1": "hf"})


def test_content_rows_are_the_records_content(graph_store: GraphStore, new_scope: Scopes) -> None:
    """What the graph check re-hashes: a backend's own `content_rows` (SQLite reads its
    columns) equals the content of the records it returns, hostile values, closures and
    sources included, and follows a change."""
    scope = new_scope()
    graph_store.upsert_entities(
        scope,
        [ent("a", HOSTILE[0], aliases=tuple(HOSTILE[1:4]), types=("svc",)), ent("b"), ent("c")],
    )
    graph_store.upsert_facts(
        scope,
        [
            fact("f1", "a", "b", 0.125, valid_to=T1, sources=(("s1", "t1"), (HOSTILE[4], "t2"))),
            fact("f2", "b", "c", 1.0, supersedes="f1", session_id=HOSTILE[2]),
            fact("f3", "c", "a", 0.5, valid_from=T0 + 7 * US),
        ],
    )
    graph_store.supersede(scope, "f3", "f2", T1)
    assert graph_store.content_rows(scope) == GraphStore.content_rows(graph_store, scope)
    ents, facts = graph_store.content_rows(scope)
    assert [r[0] for r in ents] == ["a", "b", "c"] and [r[0] for r in facts] == ["f1", "f2", "f3"]
    graph_store.upsert_entities(scope, [ent("b", "Renamed", aliases=("bee",))])
    graph_store.delete_facts(scope, ["f1"])
    assert graph_store.content_rows(scope) == GraphStore.content_rows(graph_store, scope)
    assert graph_store.content_rows(scope)[0][1] == ("b", "Renamed", ["bee"], [])
    assert GraphStore.content_rows(graph_store, new_scope("empty")) == ([], [])
    assert graph_store.content_rows(new_scope("empty")) == ([], [])


def test_a_second_handle_sees_the_same_store(
    graph_backend: GraphBackend, graph_store: GraphStore, new_scope: Scopes
) -> None:
    scope = new_scope()
    load_chain(graph_store, scope)
    with graph_backend.open() as second:
        assert second.counts(scope) == {"entities": 5, "facts": 4}
        assert second.version(scope) == graph_store.version(scope)
        second.delete_facts(scope, ["f_ab"])
    assert graph_store.counts(scope) == {"entities": 5, "facts": 3}


# -- sync ------------------------------------------------------------------------------------


def tables(scope: Scope, n_entities: int = 6) -> tuple[pl.DataFrame, pl.DataFrame]:
    ids = [f"e{i}" for i in range(n_entities)]
    entities = pl.DataFrame(
        {
            "entity_id": ids,
            "tenant_id": [scope.tenant_id] * n_entities,
            "ns": [scope.ns] * n_entities,
            "name": [f"Name {i} ✓" for i in range(n_entities)],
            "norm_key": [f"name{i}" for i in range(n_entities)],
            "aliases": [[f"n{i}", "x'y"] if i % 2 else [] for i in range(n_entities)],
            "types": [["service"] if i % 3 else None for i in range(n_entities)],
            "first_seen": [T0] * n_entities,
        },
        schema=ENTITIES,
    )
    facts = pl.DataFrame(
        {
            "fact_id": [f"f{i}" for i in range(n_entities - 1)],
            "tenant_id": [scope.tenant_id] * (n_entities - 1),
            "ns": [scope.ns] * (n_entities - 1),
            "subject_id": ids[:-1],
            "subject": [f"Name {i} ✓" for i in range(n_entities - 1)],
            "predicate": ["CALLS"] * (n_entities - 1),
            "object_id": ids[1:],
            "object": [f"Name {i + 1} ✓" for i in range(n_entities - 1)],
            "confidence": [0.6 + i / 100 for i in range(n_entities - 1)],
            "valid_from": [T0 + i * US for i in range(n_entities - 1)],
            "valid_to": [T1 if i == 0 else None for i in range(n_entities - 1)],
            "supersedes": [None] * (n_entities - 1),
            "superseded_by": [None] * (n_entities - 1),
            "session_id": ["s1"] * (n_entities - 1),
            "turn_id": [str(i) for i in range(n_entities - 1)],
            "client": ["codex"] * (n_entities - 1),
            "model": ["explicit"] * (n_entities - 1),
            "source": ["explicit"] * (n_entities - 1),
            "triple_id": [f"t{i}" for i in range(n_entities - 1)],
            "sources": [
                [{"session_id": "s1", "turn_id": str(i)}]
                + ([{"session_id": "s2", "turn_id": "x'ÿ"}] if i % 2 else [])
                for i in range(n_entities - 1)
            ],
        },
        schema=FACTS,
    )
    return entities, facts


def test_sync_is_idempotent_and_follows_the_table(
    graph_store: GraphStore, new_scope: Scopes
) -> None:
    scope = new_scope()
    entities, facts = tables(scope)

    first = sync_graph(graph_store, scope, entities, facts)
    assert (first.entities_written, first.facts_written, first.unchanged) == (6, 5, 0)
    assert graph_equals_table(graph_store, scope, entities, facts)[0]
    records = records_from_tables(entities, facts)
    assert graph_store.entities(scope) == records[0]
    assert graph_store.facts(scope) == records[1]

    version = graph_store.version(scope)
    again = sync_graph(graph_store, scope, entities, facts)
    assert (again.entities_written, again.facts_written) == (0, 0)
    assert (again.entities_deleted, again.facts_deleted, again.unchanged) == (0, 0, 11)
    assert not again.changed
    assert graph_store.version(scope) == version

    renamed = entities.with_columns(
        pl.when(pl.col("entity_id") == "e2")
        .then(pl.lit("Renamed"))
        .otherwise(pl.col("name"))
        .alias("name")
    )
    fewer_facts = facts.filter(pl.col("fact_id") != "f4")
    fewer_entities = renamed.filter(pl.col("entity_id") != "e5")  # only f4 touched e5
    third = sync_graph(graph_store, scope, fewer_entities, fewer_facts)
    assert (third.entities_written, third.facts_written) == (1, 0)
    assert (third.entities_deleted, third.facts_deleted) == (1, 1)
    assert graph_equals_table(graph_store, scope, fewer_entities, fewer_facts)[0]


def test_a_new_source_resyncs_the_fact_and_nothing_else(
    graph_store: GraphStore, new_scope: Scopes
) -> None:
    scope = new_scope()
    entities, facts = tables(scope)
    sync_graph(graph_store, scope, entities, facts)
    assert [f.sources for f in graph_store.facts(scope)][:2] == [
        (("s1", "0"),),
        (("s1", "1"), ("s2", "x'ÿ")),
    ]
    restated = facts.with_columns(
        pl.when(pl.col("fact_id") == "f3")
        .then(pl.col("sources").list.concat(pl.lit([{"session_id": "s9", "turn_id": "t9"}])))
        .otherwise(pl.col("sources"))
        .alias("sources")
    )
    ok, details = graph_equals_table(graph_store, scope, entities, restated)
    assert not ok and details["sample"] == {"changed_facts": ["f3"]}
    report = sync_graph(graph_store, scope, entities, restated)
    assert (report.entities_written, report.facts_written, report.unchanged) == (0, 1, 10)
    assert graph_equals_table(graph_store, scope, entities, restated)[0]
    f3 = next(f for f in graph_store.facts(scope) if f.fact_id == "f3")
    assert f3.sources == (("s1", "3"), ("s2", "x'ÿ"), ("s9", "t9"))
    # A table written before facts kept sources (null, or no column) syncs as no sources.
    for older in (restated.with_columns(pl.lit(None).alias("sources")), facts.drop("sources")):
        sync_graph(graph_store, scope, entities, older)
        assert graph_equals_table(graph_store, scope, entities, older)[0]
        assert {f.sources for f in graph_store.facts(scope)} == {()}


def test_a_closure_in_the_table_resyncs_the_fact_and_as_of_sees_each_side(
    graph_store: GraphStore, new_scope: Scopes
) -> None:
    """A retraction closes a stored fact (valid_to set where it was open, or moved earlier):
    the sink rewrites that fact only, and expansion as of before the closure still finds it
    while as of the closure and after does not (issue 17 item 3, every backend)."""
    scope = new_scope()
    entities, facts = tables(scope)
    sync_graph(graph_store, scope, entities, facts)
    closed_at = T1 + timedelta(days=30)
    retracted = facts.with_columns(
        pl.when(pl.col("fact_id").is_in(["f2", "f0"]))
        .then(pl.lit(closed_at, dtype=pl.Datetime("us", "UTC")))
        .otherwise(pl.col("valid_to"))
        .alias("valid_to")
    )
    ok, details = graph_equals_table(graph_store, scope, entities, retracted)
    assert not ok and details["sample"] == {"changed_facts": ["f0", "f2"]}
    report = sync_graph(graph_store, scope, entities, retracted)
    assert (report.facts_written, report.entities_written, report.unchanged) == (2, 0, 9)
    assert graph_equals_table(graph_store, scope, entities, retracted)[0]
    before = expanded_ids(graph_store, scope, ["e2"], as_of=closed_at - US)
    after = expanded_ids(graph_store, scope, ["e2"], as_of=closed_at)
    assert "f2" in before and "f2" not in after
    assert "f1" in before and "f1" in after  # e1 -> e2, still open
    assert not sync_graph(graph_store, scope, entities, retracted).changed


def _as_written_before_sources(store: GraphStore, scope: Scope) -> None:
    """Make the scope's facts look written by a version that kept no `sources`: the SQLite
    column or the Gremlin property is gone, and row hashes are an older version's."""
    if isinstance(store, SqliteGraphStore):
        import sqlite3

        with sqlite3.connect(store.path) as db:
            db.execute("UPDATE facts SET row_hash = 'older'")
            db.execute("ALTER TABLE facts DROP COLUMN sources")
        return
    from resources.graph.gremlin import GremlinGraphStore, _facts_e, _run

    assert isinstance(store, GremlinGraphStore)
    store._call(lambda g: _run(_facts_e(g, scope).properties("sources").drop()))
    store._call(lambda g: _run(_facts_e(g, scope).property("row_hash", "older")))


def test_a_store_written_before_facts_kept_sources_reads_and_resyncs(
    graph_backend: GraphBackend, graph_store: GraphStore, new_scope: Scopes
) -> None:
    scope = new_scope()
    entities, facts = tables(scope)
    sync_graph(graph_store, scope, entities, facts)
    _as_written_before_sources(graph_store, scope)
    with graph_backend.open() as older:  # a new handle: SQLite adds the column back on open
        assert {f.sources for f in older.facts(scope)} == {()}
        assert {x.fact.sources for x in older.expand(scope, ["e1"], as_of=NOW)} == {()}
        ok, details = graph_equals_table(older, scope, entities, facts)
        assert not ok and details["changed_facts"] == 5
        report = sync_graph(older, scope, entities, facts)
        assert (report.entities_written, report.facts_written) == (0, 5)
        assert graph_equals_table(older, scope, entities, facts)[0]
        assert older.facts(scope)[1].sources == (("s1", "1"), ("s2", "x'ÿ"))


def test_sync_deletes_rows_the_table_does_not_have(
    graph_store: GraphStore, new_scope: Scopes
) -> None:
    scope = new_scope()
    entities, facts = tables(scope)
    graph_store.upsert_entities(scope, [ent("stray"), ent("e0", "stale name")])
    graph_store.upsert_facts(scope, [fact("f_stray", "stray", "e0")])

    ok, details = graph_equals_table(graph_store, scope, entities, facts)
    assert not ok
    assert details["extra_entities"] == 1 and details["missing_entities"] == 5
    assert details["changed_entities"] == 1 and details["sample"]["extra_facts"] == ["f_stray"]

    report = sync_graph(graph_store, scope, entities, facts)
    assert (report.entities_deleted, report.facts_deleted) == (1, 1)
    assert graph_equals_table(graph_store, scope, entities, facts) == (
        True,
        {
            "table_entities": 6,
            "store_entities": 6,
            "table_facts": 5,
            "store_facts": 5,
            **{f"{w}_{k}": 0 for k in ("entities", "facts") for w in ("missing", "extra")},
            "changed_entities": 0,
            "changed_facts": 0,
            "sample": {},
        },
    )


def test_sync_repairs_edits_made_behind_its_back(
    graph_store: GraphStore, new_scope: Scopes
) -> None:
    scope = new_scope()
    entities, facts = tables(scope)
    sync_graph(graph_store, scope, entities, facts)
    graph_store.supersede(scope, "f1", "f2", T1)
    ok, details = graph_equals_table(graph_store, scope, entities, facts)
    assert not ok and details["sample"] == {"changed_facts": ["f1", "f2"]}
    report = sync_graph(graph_store, scope, entities, facts)
    assert report.facts_written == 2
    assert graph_equals_table(graph_store, scope, entities, facts)[0]


def test_the_check_reads_sqlite_columns_as_the_records_would(tmp_path: Path) -> None:
    """SQLite's `content_rows` normalises stored values exactly as reading the records and
    hashing them did: values a writer of another kind left (a float time, "" for no link,
    sources spelled with spaces) give the same content; an edit of the content is a change."""
    import sqlite3

    from resources.graph.common import FACT_FIELDS, fact_from_row, fact_row, stored_fact_content

    scope = Scope.parse("acme/api")
    store = SqliteGraphStore(tmp_path / "graph.sqlite")
    entities, facts = tables(scope)
    sync_graph(store, scope, entities, facts)
    with sqlite3.connect(store.path) as db:
        db.execute(
            "UPDATE facts SET valid_from = valid_from + 0.0, supersedes = '' WHERE fact_id = 'f1'"
        )
        db.execute(
            """UPDATE facts SET sources = '[ ["s1", "1"] , ["s2","x''ÿ"] ]' WHERE fact_id = 'f1'"""
        )
    rows = store.content_rows(scope)
    assert rows == GraphStore.content_rows(store, scope)
    f1 = dict(zip(FACT_FIELDS, next(r for r in rows[1] if r[0] == "f1"), strict=True))
    assert type(f1["valid_from"]) is int and f1["supersedes"] is None
    assert f1["sources"] == '[["s1","1"],["s2","x\'ÿ"]]'
    raw = tuple({**f1, "valid_from": f1["valid_from"] + 0.0, "supersedes": ""}.values())
    assert stored_fact_content(raw) == fact_row(fact_from_row(raw, "")) == tuple(f1.values())
    assert graph_equals_table(store, scope, entities, facts)[0]
    with sqlite3.connect(store.path) as db:
        db.execute("UPDATE entities SET aliases = '[\"n1\"]' WHERE entity_id = 'e1'")
        db.execute("UPDATE facts SET confidence = 0.99 WHERE fact_id = 'f2'")
    ok, details = graph_equals_table(store, scope, entities, facts)
    assert not ok
    assert details["sample"] == {"changed_entities": ["e1"], "changed_facts": ["f2"]}
    store.close()


def test_sync_and_check_is_sync_then_check_on_every_table_version(
    graph_store: GraphStore, new_scope: Scopes
) -> None:
    """The graph sink's one-pass step equals `sync_graph` then `graph_equals_table`, version after
    version (new, renamed, fewer rows, restated sources), on two scopes of the same store."""
    fused, apart = new_scope("fused"), new_scope("apart")
    versions = []
    for scope in (fused, apart):
        entities, facts = tables(scope)
        renamed = entities.with_columns(
            pl.when(pl.col("entity_id") == "e2")
            .then(pl.lit("Renamed"))
            .otherwise(pl.col("name"))
            .alias("name")
        )
        fewer = (
            renamed.filter(pl.col("entity_id") != "e5"),
            facts.filter(pl.col("fact_id") != "f4"),
        )
        restated = facts.with_columns(
            pl.col("sources").list.concat(pl.lit([{"session_id": "s9", "turn_id": "t9"}]))
        )
        versions.append([(entities, facts), (renamed, facts), fewer, (entities, restated)])
    for (ents_f, facts_f), (ents_a, facts_a) in zip(*versions, strict=True):
        report, equal, details = sync_and_check(graph_store, fused, ents_f, facts_f)
        expected = sync_graph(graph_store, apart, ents_a, facts_a)
        assert (equal, details) == graph_equals_table(graph_store, apart, ents_a, facts_a)
        assert equal
        assert {**report.to_dict(), "seconds": 0} == {**expected.to_dict(), "seconds": 0}


class _LosesAFact:
    """A store whose fact writes drop the last fact: a sink that trusted its writes would
    report success."""

    def __init__(self, store: GraphStore) -> None:
        self._store = store

    def upsert_facts(self, scope: Scope, facts: list[FactRecord]) -> int:
        return self._store.upsert_facts(scope, facts[:-1])

    def __getattr__(self, name: str):
        return getattr(self._store, name)


def test_sync_and_check_sees_a_write_the_store_lost(
    graph_store: GraphStore, new_scope: Scopes
) -> None:
    scope = new_scope()
    entities, facts = tables(scope)
    _, equal, details = sync_and_check(_LosesAFact(graph_store), scope, entities, facts)  # type: ignore[arg-type]
    assert not equal
    assert details["sample"] == {"missing_facts": ["f4"]}
    assert details["store_facts"] == 4 and details["table_facts"] == 5


def test_sync_refuses_rows_of_another_scope(graph_store: GraphStore, new_scope: Scopes) -> None:
    scope, other = new_scope("repo"), new_scope("other")
    entities, facts = tables(scope)
    foreign_entities, _ = tables(other)
    with pytest.raises(ValueError, match="not in scope"):
        sync_graph(graph_store, scope, pl.concat([entities, foreign_entities.head(1)]), facts)
    with pytest.raises(ValueError, match="not in scope"):
        sync_graph(graph_store, other, entities, facts)
    assert graph_store.counts(scope) == {"entities": 0, "facts": 0}
    assert graph_store.counts(other) == {"entities": 0, "facts": 0}


# -- concurrency -----------------------------------------------------------------------------

WRITER = """
import json, sys
from datetime import UTC, datetime
from resources.graph.factory import open_graph_store
from resources.graph.sqlite import SqliteGraphStore
from schemas.records import EntityRecord, FactRecord
from schemas.scope import Scope

args = json.loads(sys.argv[1])
scope = Scope(args["tenant_id"], args["ns"])
t0 = datetime(2024, 1, 1, tzinfo=UTC)
options = {"sqlite_path": args["path"], "gremlin_url": args["url"]}
with open_graph_store(args["backend"], **options, gremlin_options=args["options"]) as s:
    print("ready", flush=True)
    for r in range(args["rounds"]):
        ids = [f"r{r}e{i}" for i in range(args["per_round"])]
        s.upsert_entities(scope, [EntityRecord(e, e.upper()) for e in ids])
        s.upsert_facts(scope, [
            FactRecord(f"r{r}f{i}", a, a.upper(), "NEXT", b, b.upper(), 0.5, t0)
            for i, (a, b) in enumerate(zip(ids, ids[1:]))
        ])
print("done", flush=True)
"""


def test_reads_while_another_process_writes(
    graph_backend: GraphBackend, graph_store: GraphStore, new_scope: Scopes
) -> None:
    scope = new_scope()
    rounds, per_round = 25, 8
    args = {
        "backend": graph_backend.name,
        "path": str(graph_backend.sqlite_path) if graph_backend.sqlite_path else None,
        "url": graph_backend.gremlin_url,
        "options": graph_backend.gremlin_options,
        "tenant_id": scope.tenant_id,
        "ns": scope.ns,
        "rounds": rounds,
        "per_round": per_round,
    }
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, json.dumps(args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert writer.stdout is not None
    before = graph_store.version(scope)
    assert writer.stdout.readline().strip() == "ready"
    seen: list[int] = []
    deadline = time.monotonic() + 120
    while writer.poll() is None and time.monotonic() < deadline:
        seen.append(graph_store.counts(scope)["entities"])
        assert all(e.name == e.entity_id.upper() for e in graph_store.entities(scope))
        for x in graph_store.expand(scope, ["r0e1"], hops=2, as_of=NOW):
            assert x.fact.fact_id in {"r0f0", "r0f1", "r0f2"}
    writer.wait(timeout=120)
    # Read through the same text streams: `readline` above may already hold "done" in its
    # buffer (a fast writer), which `communicate(timeout=...)` would skip (it reads the fd).
    out, err = writer.stdout.read(), writer.stderr.read() if writer.stderr else ""
    assert writer.returncode == 0, err
    assert out.strip() == "done"
    assert seen == sorted(seen), "counts went backwards"
    assert graph_store.counts(scope) == {
        "entities": rounds * per_round,
        "facts": rounds * (per_round - 1),
    }
    assert graph_store.version(scope) != before


def test_threads_share_a_store(graph_store: GraphStore, new_scope: Scopes) -> None:
    scope = new_scope()
    load_chain(graph_store, scope)

    def read(i: int) -> tuple[int, list[str]]:
        ids = expanded_ids(graph_store, scope, ["a"], hops=2)
        return graph_store.counts(scope)["facts"], ids

    with ThreadPoolExecutor(max_workers=4) as pool:
        futures = [pool.submit(read, i) for i in range(16)]
        graph_store.upsert_entities(scope, [ent("z")])
        results = [f.result() for f in futures]
    assert all(r == (4, ["f_ab", "f_ea", "f_bc"]) for r in results)


def _write_in_child(store: SqliteGraphStore, scope: Scope) -> None:
    store.upsert_entities(scope, [ent("from_child")])


def test_sqlite_store_survives_a_fork(tmp_path: Path) -> None:
    """A store opened before a fork works in the child (its own connection) and the parent."""
    scope = Scope("forked", "repo")
    with SqliteGraphStore(tmp_path / "graph.sqlite") as store:
        store.upsert_entities(scope, [ent("from_parent")])
        child = multiprocessing.get_context("fork").Process(
            target=_write_in_child, args=(store, scope)
        )
        child.start()
        child.join(60)
        assert child.exitcode == 0
        assert [e.entity_id for e in store.entities(scope)] == ["from_child", "from_parent"]
        store.upsert_entities(scope, [ent("after")])
        assert store.counts(scope) == {"entities": 3, "facts": 0}


# -- backend selection and failures ------------------------------------------------------------


def test_factory_refuses_unknown_backends_and_missing_settings() -> None:
    with pytest.raises(ValueError, match="unknown graph store backend 'neo4j'"):
        open_graph_store("neo4j", sqlite_path="x", gremlin_url="ws://x")
    with pytest.raises(ValueError, match="sqlite_path"):
        open_graph_store("sqlite", sqlite_path=None, gremlin_url=None)
    with pytest.raises(ValueError, match="gremlin_url"):
        open_graph_store("gremlin", sqlite_path=None, gremlin_url=None)


@pytest.mark.gremlin
def test_gremlin_options_in_the_url(gremlin_server_url: str) -> None:
    url = f"{gremlin_server_url}?new_rows=inject&insert_batch=7&traversal_source=g"
    with open_graph_store("gremlin", gremlin_url=url) as store:
        assert (store.url, store.new_rows, store.insert_batch) == (gremlin_server_url, "inject", 7)
    options = {"new_rows": "coalesce"}
    with open_graph_store("gremlin", gremlin_url=url, gremlin_options=options) as store:
        assert store.new_rows == "coalesce"  # explicit arguments win
    with pytest.raises(ValueError, match="unknown gremlin URL option 'user'"):
        open_graph_store("gremlin", gremlin_url=f"{gremlin_server_url}?user=x")


def test_unreachable_gremlin_server_is_a_store_error_naming_the_url() -> None:
    from resources.graph.gremlin import GremlinGraphStore

    url = "ws://127.0.0.1:9/gremlin"  # the discard port: nothing listens there
    with pytest.raises(GraphStoreError, match=re.escape(url)):
        GremlinGraphStore(url, connect_attempts=2)


@pytest.mark.gremlin
def test_gremlin_retries_transient_server_failures_only(gremlin_server_url: str) -> None:
    """A server that reports a rolled-back transaction (a BerkeleyDB deadlock victim in
    JanusGraph, a ConcurrentModificationException in Neptune) is asked again, even for an
    insert; any other refusal is an error at once."""
    from gremlin_python.driver.protocol import GremlinServerError

    from resources.graph.gremlin import GremlinGraphStore

    def failure(message: str, exceptions: list[str]) -> GremlinServerError:
        attributes = {"exceptions": exceptions, "stackTrace": ""}
        return GremlinServerError({"code": 500, "message": message, "attributes": attributes})

    deadlock = failure(
        "Could not commit transaction due to exception during persistence",
        ["org.janusgraph.core.JanusGraphException"],
    )
    refused = failure("The property does not exist", ["java.lang.IllegalArgumentException"])
    store = GremlinGraphStore(gremlin_server_url, connect_attempts=3)
    try:
        calls: list[int] = []

        def flaky(g: object) -> int:
            calls.append(1)
            if len(calls) < 3:
                raise deadlock
            return 7

        assert store._call(flaky, idempotent=False) == 7
        assert len(calls) == 3

        def wrong(g: object) -> int:
            calls.append(1)
            raise refused

        calls.clear()
        with pytest.raises(GraphStoreError, match="property does not exist"):
            store._call(wrong)
        assert len(calls) == 1
    finally:
        store.close()


@pytest.mark.gremlin
@pytest.mark.parametrize("new_rows", ["coalesce", "inject"])
@pytest.mark.parametrize(
    "server",
    ["gremlin_server_url", pytest.param("janusgraph_server_url", marks=pytest.mark.server)],
)
def test_gremlin_traversals_are_scoped_bytecode(
    request: pytest.FixtureRequest, server: str, monkeypatch: pytest.MonkeyPatch, new_rows: str
) -> None:
    """Every V()/E() the store sends is followed by the tenant and namespace filters, every
    insert stamps the scope, and nothing it sends is a script or a lambda (on TinkerGraph and on
    JanusGraph, so both ways of inserting run against both)."""
    from gremlin_python.driver.driver_remote_connection import DriverRemoteConnection
    from gremlin_python.process.traversal import Bytecode

    from resources.graph.gremlin import GremlinGraphStore

    gremlin_server_url = request.getfixturevalue(server)

    sent: list[Bytecode] = []
    submit = DriverRemoteConnection.submit

    def recording(self: DriverRemoteConnection, bytecode: Bytecode) -> object:
        sent.append(bytecode)
        return submit(self, bytecode)

    monkeypatch.setattr(DriverRemoteConnection, "submit", recording)
    store = GremlinGraphStore(gremlin_server_url, new_rows=new_rows)  # type: ignore[arg-type]
    scope = Scope(f"t{time.time_ns()}", "repo")
    try:
        sent.clear()
        load_chain(store, scope)
        store.upsert_facts(scope, [fact("f_ab", "a", "c")])
        store.supersede(scope, "f_bc", "f_cd", T1)
        store.expand(scope, ["a"], hops=2, as_of=NOW)
        store.entities(scope)
        store.get_entities(scope, ["a"])
        store.facts(scope)
        store.row_hashes(scope)
        store.counts(scope)
        store.version(scope)
        store.delete_facts(scope, ["f_ab"])
        store.delete_entities(scope, ["e"])
    finally:
        store.delete_scope(scope)
        store.close()

    def check(instructions: list[list[object]]) -> int:
        lookups = 0
        for i, (op, *args) in enumerate(instructions):
            assert not any(callable(a) and not isinstance(a, Bytecode) for a in args), op
            # Steps one supported TinkerPop line lacks or reads differently (3.5-3.8):
            # discard() is 3.8 only, none() changed meaning in 3.8, merge steps are 3.6+,
            # elementMap() returns ids JanusGraph serialises as its own type.
            assert op not in ("discard", "none", "mergeV", "mergeE", "elementMap"), op
            if op in ("V", "E"):
                lookups += 1
                assert args == [], "no element ids are ever sent"
                assert instructions[i + 1] == ["has", "tenant_id", scope.tenant_id]
                assert instructions[i + 2] == ["has", "ns", scope.ns]
            for arg in args:
                if isinstance(arg, Bytecode):
                    lookups += check(arg.step_instructions)
        return lookups

    assert len(sent) > 10
    inserts = 0
    for bytecode in sent:
        assert bytecode.source_instructions == []
        steps = bytecode.step_instructions
        if steps[0][0] == "inject":  # a batch insert: rows in, new elements stamped with scope
            inserts += 1
            assert [s[0] for s in steps[1:3]] == ["unfold", "as"]
            assert steps[3][0] in ("addV", "addE")
            assert ["property", "tenant_id", scope.tenant_id] in steps
            assert ["property", "ns", scope.ns] in steps
            check(steps)
        else:
            assert check(steps) >= 1
    # inject: the chain's entities, its facts, and f_ab again once its object moved.
    assert inserts == (3 if new_rows == "inject" else 0)
