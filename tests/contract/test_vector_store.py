"""The vector store contract: one suite, run against every backend (`tests.support.vector_stores`:
the embedded store and a real Milvus 2.3 standalone server), then each backend's own promises."""

# The backend fixtures are imported from tests.support.vector_stores (the contract conftest
# belongs to the graph suite), so pytest finds them here; their names are then reused as
# parameters.
# ruff: noqa: F811

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import polars as pl
import pytest

from resources.vector.base import VectorStore, fact_vectors_key
from resources.vector.sync import sync_block, sync_vectors, table_fetch, vectors_equal_table
from schemas.scope import Scope, ScopeError
from tests.support.vector_stores import (  # noqa: F401
    fresh_scope,
    milvus_server_uri,
    vector_store,
)

pytestmark = pytest.mark.slow

Scopes = Callable[..., Scope]
INJECTIONS = [
    '" or tenant_id != "',
    'x" || ns != "y',
    "back\\slash\\",
    'quote"inside',
    "new\nline",
    "carriage\rreturn",
    "tab\tbed",
    "ünïcødé ✓",
    "' or 1=1 --",
]


def unit(*xs: float) -> list[float]:
    v = np.asarray(xs, dtype=np.float64)
    return (v / np.linalg.norm(v)).tolist()


def at_cosine(c: float) -> list[float]:
    """A 4-dim unit vector whose cosine with [1, 0, 0, 0] is `c`."""
    return [c, math.sqrt(1 - c * c), 0.0, 0.0]


E1 = [1.0, 0.0, 0.0, 0.0]


def test_upsert_then_nearest_best_first(vector_store: VectorStore, fresh_scope: Scopes) -> None:
    scope = fresh_scope()
    items = [("a", "ha", at_cosine(0.5)), ("b", "hb", E1), ("c", "hc", at_cosine(0.8))]
    assert vector_store.upsert("m", 4, scope, items) == 3
    hits = vector_store.nearest("m", scope, E1, k=8)
    assert [h.entity_id for h in hits] == ["b", "c", "a"]
    assert [round(h.score, 4) for h in hits] == [1.0, 0.8, 0.5]


def test_upsert_replaces_vector_and_hash(vector_store: VectorStore, fresh_scope: Scopes) -> None:
    scope = fresh_scope()
    vector_store.upsert("m", 4, scope, [("a", "h1", E1), ("b", "hb", at_cosine(0.6))])
    assert vector_store.upsert("m", 4, scope, [("a", "h2", [0.0, 0.0, 1.0, 0.0])]) == 1
    assert vector_store.ids("m", scope) == {"a": "h2", "b": "hb"}
    assert [h.entity_id for h in vector_store.nearest("m", scope, E1)] == ["b"]
    assert vector_store.models(scope) == {"m": (4, 2)}
    # the same id twice in one call is one row; the last one wins
    assert vector_store.upsert("m", 4, scope, [("c", "x", E1), ("c", "y", E1)]) == 1
    assert vector_store.ids("m", scope)["c"] == "y"


def test_models_never_share_vectors(vector_store: VectorStore, fresh_scope: Scopes) -> None:
    scope = fresh_scope()
    vector_store.upsert("model/one:v1", 4, scope, [("a", "h", E1), ("b", "h", E1)])
    vector_store.upsert("model-one-v1", 3, scope, [("z", "h", [1.0, 0.0, 0.0])])
    assert vector_store.models(scope) == {"model/one:v1": (4, 2), "model-one-v1": (3, 1)}
    assert {h.entity_id for h in vector_store.nearest("model/one:v1", scope, E1)} == {"a", "b"}
    assert [h.entity_id for h in vector_store.nearest("model-one-v1", scope, [1, 0, 0])] == ["z"]
    assert vector_store.ids("model-one-v1", scope) == {"z": "h"}
    assert vector_store.nearest("never-used", scope, E1) == []


def test_fact_vectors_are_kept_apart_from_entity_vectors(
    vector_store: VectorStore, fresh_scope: Scopes
) -> None:
    scope = fresh_scope()
    facts = fact_vectors_key("m")
    vector_store.upsert("m", 4, scope, [("e1", "h", E1)])
    vector_store.upsert(facts, 4, scope, [("f1", "h", E1), ("f2", "h", at_cosine(0.5))])
    assert vector_store.models(scope) == {"m": (4, 1), facts: (4, 2)}
    assert [h.entity_id for h in vector_store.nearest("m", scope, E1)] == ["e1"]
    assert [h.entity_id for h in vector_store.nearest(facts, scope, E1)] == ["f1", "f2"]
    assert vector_store.delete(facts, scope, ["e1", "f2"]) == 1
    assert vector_store.ids("m", scope) == {"e1": "h"} and vector_store.ids(facts, scope) == {
        "f1": "h"
    }
    vector_store.delete_scope(scope)
    assert vector_store.models(scope) == {}


def test_dimension_mismatch_is_a_value_error(
    vector_store: VectorStore, fresh_scope: Scopes
) -> None:
    scope, other = fresh_scope(), fresh_scope("other")
    vector_store.upsert("m", 4, scope, [("a", "h", E1)])
    with pytest.raises(ValueError, match="4-dimensional"):
        vector_store.upsert("m", 3, scope, [("b", "h", [1.0, 0.0, 0.0])])
    with pytest.raises(ValueError, match="4-dimensional"):
        vector_store.upsert("m", 3, other, [("b", "h", [1.0, 0.0, 0.0])])
    with pytest.raises(ValueError, match="4-dimensional"):
        vector_store.nearest("m", scope, [1.0, 0.0, 0.0])
    with pytest.raises(ValueError, match="expected 4"):
        vector_store.upsert("m", 4, scope, [("c", "h", [1.0, 0.0])])
    assert vector_store.ids("m", scope) == {"a": "h"}


@pytest.mark.parametrize(
    "bad, message",
    [
        (("", "h", E1), r"1\.\.1024 bytes"),
        (("x" * 1025, "h", E1), r"1\.\.1024 bytes"),
        (("\ud800", "h", E1), "UTF-8"),  # a lone surrogate: no store can keep it
        ((7, "h", E1), "must be strings"),
        (("a", "h" * 129, E1), "at most 128 bytes"),
        (("a", "h", [1.0, 0.0]), "2 dimensions, expected 4"),
        (("a", "h", [math.inf, 0.0, 0.0, 0.0]), "NaN or an infinity"),
    ],
)
def test_a_bad_row_is_refused_and_nothing_is_written(
    vector_store: VectorStore, fresh_scope: Scopes, bad: tuple, message: str
) -> None:
    scope = fresh_scope()
    with pytest.raises(ValueError, match=message):
        vector_store.upsert("m", 4, scope, [("good", "h", E1), bad])
    assert vector_store.ids("m", scope) == {}


def test_min_cosine_floor(vector_store: VectorStore, fresh_scope: Scopes) -> None:
    scope = fresh_scope()
    cosines = {"c90": 0.9, "c50": 0.5, "c41": 0.41, "c39": 0.39, "c00": 0.0, "neg": -1.0}
    vector_store.upsert("m", 4, scope, [(e, "h", at_cosine(c)) for e, c in cosines.items()])
    assert [h.entity_id for h in vector_store.nearest("m", scope, E1)] == ["c90", "c50", "c41"]
    low = vector_store.nearest("m", scope, E1, min_cosine=-0.5)
    assert [h.entity_id for h in low] == ["c90", "c50", "c41", "c39", "c00"]
    assert vector_store.nearest("m", scope, E1, min_cosine=0.95) == []


def test_k_limits_the_hits(vector_store: VectorStore, fresh_scope: Scopes) -> None:
    scope = fresh_scope()
    items = [(f"e{i:02d}", "h", at_cosine(1 - i / 100)) for i in range(20)]
    vector_store.upsert("m", 4, scope, items)
    hits = vector_store.nearest("m", scope, E1, k=5)
    assert [h.entity_id for h in hits] == ["e00", "e01", "e02", "e03", "e04"]
    assert len(vector_store.nearest("m", scope, E1, k=50)) == 20
    assert vector_store.nearest("m", scope, E1, k=0) == []


def test_scopes_are_isolated(vector_store: VectorStore, fresh_scope: Scopes) -> None:
    mine, theirs, sibling = fresh_scope(), fresh_scope(tenant="b"), fresh_scope("sibling")
    foreign = unit(0, 0, 1, 1)
    vector_store.upsert("m", 4, mine, [("e1", "mine", E1), ("e2", "mine", at_cosine(0.5))])
    vector_store.upsert("m", 4, theirs, [("e1", "theirs", foreign), ("e9", "theirs", foreign)])
    vector_store.upsert("m", 4, sibling, [("e1", "sib", foreign)])
    # a query equal to the foreign vectors finds nothing foreign
    assert vector_store.nearest("m", mine, foreign, min_cosine=-1.0, k=10) != []
    for hit in vector_store.nearest("m", mine, foreign, min_cosine=-1.0, k=10):
        assert hit.entity_id in {"e1", "e2"} and hit.score < 0.99
    assert vector_store.nearest("m", mine, foreign) == []
    assert vector_store.ids("m", mine) == {"e1": "mine", "e2": "mine"}
    assert vector_store.ids("m", theirs) == {"e1": "theirs", "e9": "theirs"}
    assert vector_store.delete("m", mine, ["e1", "e9"]) == 1
    assert vector_store.ids("m", theirs) == {"e1": "theirs", "e9": "theirs"}
    assert vector_store.ids("m", sibling) == {"e1": "sib"}
    assert vector_store.models(theirs) == {"m": (4, 2)}


def test_search_without_a_tenant_raises(vector_store: VectorStore) -> None:
    with pytest.raises(ScopeError):
        vector_store.nearest("m", None, E1)  # type: ignore[arg-type]
    with pytest.raises(ScopeError):
        vector_store.upsert("m", 4, "org/repo", [("a", "h", E1)])  # type: ignore[arg-type]
    with pytest.raises(ScopeError):
        Scope("", "repo")


@pytest.mark.parametrize("value", INJECTIONS)
def test_injection_strings_cannot_become_a_scope(value: str) -> None:
    with pytest.raises(ScopeError):
        Scope(value, "repo")
    with pytest.raises(ScopeError):
        Scope("org", value)


def test_injection_strings_as_ids_are_stored_and_filtered_safely(
    vector_store: VectorStore, fresh_scope: Scopes
) -> None:
    scope, other = fresh_scope(), fresh_scope(tenant="b")
    items = [(value, f"h{i}", at_cosine(1 - i / 50)) for i, value in enumerate(INJECTIONS)]
    vector_store.upsert("m", 4, scope, items)
    vector_store.upsert("m", 4, other, [("bystander", "h", E1)])
    assert vector_store.ids("m", scope) == {value: f"h{i}" for i, value in enumerate(INJECTIONS)}
    hits = vector_store.nearest("m", scope, E1, k=len(INJECTIONS))
    assert [h.entity_id for h in hits] == INJECTIONS
    wanted = {INJECTIONS[0]: "h0", INJECTIONS[1]: "stale", "absent\n": "h"}
    assert vector_store.missing("m", scope, wanted) == [INJECTIONS[1], "absent\n"]
    assert vector_store.delete("m", scope, [INJECTIONS[0], '" or pk != "']) == 1
    assert INJECTIONS[0] not in vector_store.ids("m", scope)
    assert len(vector_store.ids("m", scope)) == len(INJECTIONS) - 1
    assert vector_store.ids("m", other) == {"bystander": "h"}


def test_missing_and_ids(vector_store: VectorStore, fresh_scope: Scopes) -> None:
    scope = fresh_scope()
    assert vector_store.ids("m", scope) == {}
    vector_store.upsert("m", 4, scope, [("a", "ha", E1), ("b", "hb", E1), ("x", "hx", E1)])
    wanted = {"a": "ha", "b": "new", "c": "hc"}
    assert vector_store.missing("m", scope, wanted) == ["b", "c"]
    assert vector_store.missing("other-model", scope, wanted) == ["a", "b", "c"]
    assert vector_store.ids("m", scope) == {"a": "ha", "b": "hb", "x": "hx"}


def test_delete_and_delete_scope(vector_store: VectorStore, fresh_scope: Scopes) -> None:
    scope, keep = fresh_scope(), fresh_scope("keep")
    vector_store.upsert("m", 4, scope, [("a", "h", E1), ("b", "h", E1)])
    vector_store.upsert("n", 3, scope, [("a", "h", [1.0, 0.0, 0.0])])
    vector_store.upsert("m", 4, keep, [("a", "h", E1)])
    assert vector_store.delete("m", scope, ["a", "never-there"]) == 1
    assert vector_store.delete("m", scope, []) == 0
    assert vector_store.ids("m", scope) == {"b": "h"}
    assert vector_store.models(scope) == {"m": (4, 1), "n": (3, 1)}
    vector_store.delete_scope(scope)
    assert vector_store.models(scope) == {}
    assert vector_store.nearest("m", scope, E1) == []
    assert vector_store.ids("n", scope) == {}
    assert vector_store.models(keep) == {"m": (4, 1)}
    # the scope can be written again afterwards
    vector_store.upsert("m", 4, scope, [("c", "h", E1)])
    assert vector_store.ids("m", scope) == {"c": "h"}


def test_delete_many_counts_each_scope_and_touches_no_other(
    vector_store: VectorStore, fresh_scope: Scopes
) -> None:
    a, b, other = fresh_scope("a"), fresh_scope("b"), fresh_scope(tenant="b")
    for scope in (a, b, other):
        vector_store.upsert("m", 4, scope, [("x", "h", E1), ("y", "h", E1)])
    # `other` holds "x" too, but it is not named for `other`: it stays.
    done = vector_store.delete_many("m", {a: ["x", "y", "never-there"], b: ["y"], other: []})
    assert done == {a: 2, b: 1, other: 0}
    assert vector_store.ids("m", a) == {}
    assert vector_store.ids("m", b) == {"x": "h"}
    assert vector_store.ids("m", other) == {"x": "h", "y": "h"}
    assert vector_store.delete_many("never-written", {a: ["x"]}) == {a: 0}


def table_of(rows: list[tuple[str, str, list[float]]]) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "entity_id": [r[0] for r in rows],
            "text_hash": [r[1] for r in rows],
            "dim": [len(r[2]) for r in rows],
            "vector": [r[2] for r in rows],
        },
        schema={
            "entity_id": pl.String,
            "text_hash": pl.String,
            "dim": pl.Int32,
            "vector": pl.List(pl.Float32),
        },
    )


def test_sync_makes_the_store_equal_the_table_idempotently(
    vector_store: VectorStore, fresh_scope: Scopes
) -> None:
    scope = fresh_scope()
    vector_store.upsert("other", 4, scope, [("keep-me", "h", E1)])
    rows = [(f"e{i}", f"h{i}", at_cosine(1 - i / 10)) for i in range(6)]
    first = sync_vectors(vector_store, "m", scope, table_of(rows))
    assert (first.written, first.deleted, first.unchanged) == (6, 0, 0)
    assert vectors_equal_table(vector_store, "m", scope, table_of(rows))[0]
    again = sync_vectors(vector_store, "m", scope, table_of(rows))
    assert (again.written, again.deleted, again.unchanged) == (0, 0, 6)
    changed = [("e0", "renamed", at_cosine(0.2)), *rows[1:5]]  # e5 gone, e0 re-embedded
    equal, diff = vectors_equal_table(vector_store, "m", scope, table_of(changed))
    assert not equal
    assert diff["stale"]["sample"] == ["e0"] and diff["extra"]["sample"] == ["e5"]
    third = sync_vectors(vector_store, "m", scope, table_of(changed))
    assert (third.written, third.deleted, third.unchanged) == (1, 1, 4)
    assert vector_store.ids("m", scope) == {e: h for e, h, _ in changed}
    assert [h.entity_id for h in vector_store.nearest("m", scope, E1, k=2)] == ["e1", "e2"]
    assert vector_store.ids("other", scope) == {"keep-me": "h"}
    emptied = sync_vectors(vector_store, "m", scope, table_of([]))
    assert emptied.deleted == 5 and vector_store.ids("m", scope) == {}


def test_ids_many_answers_each_scope_asked_and_no_other(
    vector_store: VectorStore, fresh_scope: Scopes
) -> None:
    a, b = fresh_scope("one", tenant="a"), fresh_scope("two", tenant="b")
    crossed = Scope(a.tenant_id, b.ns)  # a pair of the same tenant and namespace values
    empty = fresh_scope("none", tenant="c")
    vector_store.upsert("m", 4, a, [("x", "ha", E1)])
    vector_store.upsert("m", 4, b, [("y", "hb", E1), ("z", "hb", E1)])
    vector_store.upsert("m", 4, crossed, [("leak", "hc", E1)])
    held = vector_store.ids_many("m", [a, b, empty, a])
    assert held == {a: {"x": "ha"}, b: {"y": "hb", "z": "hb"}, empty: {}}
    assert vector_store.ids_many("unknown-model", [a]) == {a: {}}
    assert vector_store.ids_many("m", []) == {}


@pytest.mark.parametrize("reads", ["one read", "reads fill", "chunks of two"])
def test_models_many_answers_each_scope_asked_as_models_does_and_no_other(
    vector_store: VectorStore, fresh_scope: Scopes, reads: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`memflow status` counts every tenant's vectors at once, without reading them. Milvus:
    with reads of 2 rows at most, a read that fills one is counted scope by scope; with 2
    scopes a read, the crossed scope (first's org, second's repo), asked in the next chunk,
    matches the first chunk's filter too and is still counted once."""
    if reads == "reads fill":
        monkeypatch.setattr("resources.vector.milvus.QUERY_LIMIT", 2)
    if reads == "chunks of two":
        monkeypatch.setattr("resources.vector.milvus.SCOPES_PER_QUERY", 2)
    a, b = fresh_scope("one", tenant="a"), fresh_scope("two", tenant="b")
    crossed = Scope(a.tenant_id, b.ns)
    empty = fresh_scope("none", tenant="c")
    facts = fact_vectors_key("m")
    vector_store.upsert("m", 4, a, [("x", "ha", E1), ("w", "ha", E1)])
    vector_store.upsert(facts, 4, a, [("f1", "h", E1)])
    vector_store.upsert("m", 4, b, [("y", "hb", E1)])
    vector_store.upsert("n3", 3, b, [("y", "hb", [1.0, 0.0, 0.0])])
    vector_store.upsert("m", 4, crossed, [("leak", "hc", E1)])

    held = vector_store.models_many([a, b, empty, a])

    assert list(held) == [a, b, empty]
    assert held == {s: vector_store.models(s) for s in (a, b, empty)}
    assert held[a] == {"m": (4, 2), facts: (4, 1)} and held[b] == {"m": (4, 1), "n3": (3, 1)}
    assert held[empty] == {}
    both = vector_store.models_many([a, b, crossed, empty])
    assert both[crossed] == {"m": (4, 1)} and both[a] == held[a] and both[b] == held[b]
    vector_store.delete("m", a, ["x"])
    assert vector_store.models_many([a])[a] == {"m": (4, 1), facts: (4, 1)}
    assert vector_store.models_many([]) == {}


def test_sync_block_syncs_each_scope_and_reads_back(
    vector_store: VectorStore, fresh_scope: Scopes
) -> None:
    scopes = [fresh_scope(f"repo{i}") for i in range(4)]
    table = table_of([(f"e{i}", f"h{i}", at_cosine(1 - i / 10)) for i in range(5)])
    vector_store.upsert("m", 4, scopes[0], [("gone", "h", E1), ("e0", "old", E1)])
    wanted = {s: {f"e{i}": f"h{i}" for i in range(n + 1)} for n, s in enumerate(scopes)}
    fetched: list[tuple[Scope, list[str]]] = []
    fetch_table = table_fetch(table)

    def fetch(scope: Scope, todo: dict[str, str]):  # type: ignore[no-untyped-def]
        fetched.append((scope, sorted(todo)))
        return fetch_table(scope, todo)

    done = sync_block(vector_store, "m", wanted, fetch)
    assert [(r.written, r.deleted, r.unchanged) for r, _ in done.values()] == [
        (1, 1, 0),
        (2, 0, 0),
        (3, 0, 0),
        (4, 0, 0),
    ]
    assert all(diff.empty for _, diff in done.values())
    for scope in scopes:
        assert vector_store.ids("m", scope) == wanted[scope]
    fetched.clear()
    again = sync_block(vector_store, "m", wanted, fetch)
    assert fetched == []  # nothing to write: no vector fetched
    assert [r.unchanged for r, _ in again.values()] == [1, 2, 3, 4]


def test_a_fetch_that_misses_wanted_rows_fails_naming_them(
    vector_store: VectorStore, fresh_scope: Scopes
) -> None:
    scope = fresh_scope()
    table = table_of([("e0", "h0", E1)])
    with pytest.raises(ValueError, match="no vector of 1 wanted rows"):
        sync_block(vector_store, "m", {scope: {"e0": "h0", "e1": "h1"}}, table_fetch(table))
    assert vector_store.ids("m", scope) == {}
