"""The vector sink's work (`memflow.vector_sync`) on the embedded store and a real ledger: the
store ends equal to the ledger's vectors of the current names and fact texts, batch by batch,
and the check read back from the store says when it is not."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from memflow.fact_embedding import fact_texts
from memflow.vector_sync import sync_tenants, wanted_vectors
from resources.vector.base import fact_vectors_key
from resources.vector.ledger import EmbeddingLedger, with_text_hash
from resources.vector.local import LocalVectorStore
from schemas.scope import Scope

MODEL = "hash-model"
FACTS_KEY = fact_vectors_key(MODEL)


def entities(*names: str) -> pl.DataFrame:
    return pl.DataFrame({"entity_id": [f"e{i}" for i in range(len(names))], "name": list(names)})


def facts(*triples: tuple[str, str, str]) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "fact_id": [f"f{i}" for i in range(len(triples))],
            "subject": [t[0] for t in triples],
            "predicate": [t[1] for t in triples],
            "object": [t[2] for t in triples],
        }
    )


def embed(ledger: EmbeddingLedger, scope: Scope, key: str, texts: pl.DataFrame) -> None:
    """What the sweeps do: a vector per (id, text) into the ledger (a vector seeded by the text)."""
    rows = with_text_hash(texts)
    vectors = [
        np.random.default_rng(int(h[:8], 16)).standard_normal(8).tolist() for h in rows["text_hash"]
    ]
    ledger.append(key, scope, list(zip(rows["entity_id"], rows["text_hash"], vectors, strict=True)))


def tenant(ledger: EmbeddingLedger, scope: Scope, names: Sequence[str], n_facts: int = 2):
    ents = entities(*names)
    fs = facts(*[(names[0], "USES", f"thing {i}") for i in range(n_facts)])
    embed(ledger, scope, MODEL, ents)
    embed(ledger, scope, FACTS_KEY, fact_texts(fs))
    return scope, ents, fs


def test_every_tenant_ends_equal_batch_by_batch(tmp_path: Path) -> None:
    ledger, store = EmbeddingLedger(tmp_path / "data"), LocalVectorStore(tmp_path / "vectors")
    block = [tenant(ledger, Scope("acme", f"r{i}"), [f"svc {i}", "PostgreSQL"]) for i in range(7)]
    done = list(sync_tenants(store, ledger, MODEL, iter(block), batch_rows=5))
    assert [d.scope for d in done] == [s for s, _, _ in block]
    assert all(d.equal for d in done)
    assert [(d.reports["entities"].written, d.reports["facts"].written) for d in done] == [
        (2, 2)
    ] * 7
    for scope, ents, _ in block:
        assert store.ids(MODEL, scope) == wanted_vectors(ledger, MODEL, scope, ents)
        assert set(store.ids(FACTS_KEY, scope)) == {"f0", "f1"}
    again = list(sync_tenants(store, ledger, MODEL, iter(block)))
    assert all(d.equal and d.reports["entities"].unchanged == 2 for d in again)
    assert sum(r.written + r.deleted for d in again for r in d.reports.values()) == 0


def test_renames_follow_the_current_name_and_unembedded_names_are_not_wanted(
    tmp_path: Path,
) -> None:
    ledger, store = EmbeddingLedger(tmp_path / "data"), LocalVectorStore(tmp_path / "vectors")
    scope, ents, fs = tenant(ledger, Scope("acme", "api"), ["payments", "Postgres"])
    list(sync_tenants(store, ledger, MODEL, [(scope, ents, fs)]))
    first = store.ids(MODEL, scope)
    # e1 is renamed to a name the sweep embedded; e0 to one it has not embedded yet.
    renamed = entities("payments-api", "PostgreSQL")
    embed(ledger, scope, MODEL, renamed.filter(pl.col("entity_id") == "e1"))
    (done,) = sync_tenants(store, ledger, MODEL, [(scope, renamed, fs)])
    assert done.equal
    held = store.ids(MODEL, scope)
    assert set(held) == {"e1"} and held["e1"] != first["e1"]
    assert (done.reports["entities"].written, done.reports["entities"].deleted) == (1, 1)
    # Renamed back: the ledger still holds that name's vector, nothing is embedded again.
    (back,) = sync_tenants(store, ledger, MODEL, [(scope, ents, fs)])
    assert back.equal and store.ids(MODEL, scope) == first


class DroppingStore(LocalVectorStore):
    """Acknowledges every row and keeps only the first of each call (a broken backend)."""

    def upsert(self, model, dim, scope, items):  # type: ignore[no-untyped-def, override]
        super().upsert(model, dim, scope, list(items)[:1])
        return len(items)


def test_the_check_reads_the_store_back_and_names_what_is_missing(tmp_path: Path) -> None:
    ledger = EmbeddingLedger(tmp_path / "data")
    store = DroppingStore(tmp_path / "vectors")
    scope, ents, fs = tenant(ledger, Scope("acme", "api"), ["a", "b", "c"], n_facts=3)
    (done,) = sync_tenants(store, ledger, MODEL, [(scope, ents, fs)])
    assert not done.equal
    assert done.reports["entities"].written == 3  # what the store claimed
    assert done.mismatches["entities"]["missing"]["count"] == 2
    assert done.mismatches["facts"]["missing"]["sample"] == ["f1", "f2"]


def test_a_tenant_with_nothing_embedded_holds_nothing(tmp_path: Path) -> None:
    ledger, store = EmbeddingLedger(tmp_path / "data"), LocalVectorStore(tmp_path / "vectors")
    scope = Scope("acme", "new")
    store.upsert(MODEL, 8, scope, [("stale", "h", [1.0] * 8)])
    empty_facts = facts()
    (done,) = sync_tenants(store, ledger, MODEL, [(scope, entities("x"), empty_facts)])
    assert done.equal and store.ids(MODEL, scope) == {}
    assert done.reports["entities"].deleted == 1


def test_batches_must_have_rows(tmp_path: Path) -> None:
    ledger, store = EmbeddingLedger(tmp_path / "data"), LocalVectorStore(tmp_path / "vectors")
    with pytest.raises(ValueError, match="batch_rows"):
        list(sync_tenants(store, ledger, MODEL, [], batch_rows=0))


def test_a_sync_that_writes_nothing_records_the_counts_a_file_lacks(tmp_path: Path) -> None:
    """A data directory written before the embedded store kept counts beside its files: the
    next sink run writes no vector (the files equal the ledger) and records their counts, so
    `memflow status` stops opening the Arrow files."""
    import resources.vector.local as local

    ledger, store = EmbeddingLedger(tmp_path / "data"), LocalVectorStore(tmp_path / "vectors")
    block = [tenant(ledger, Scope("acme", f"r{i}"), [f"svc {i}", "PostgreSQL"]) for i in range(3)]
    list(sync_tenants(store, ledger, MODEL, iter(block)))
    records = sorted((tmp_path / "vectors").rglob(f"*{local.ROWS_SUFFIX}"))
    assert len(records) == 6  # two keys (names, facts) for three tenants
    for record in records:
        record.unlink()  # as an earlier memflow left them

    again = list(sync_tenants(store, ledger, MODEL, iter(block)))

    assert all(d.reports["entities"].written == d.reports["facts"].written == 0 for d in again)
    assert sorted((tmp_path / "vectors").rglob(f"*{local.ROWS_SUFFIX}")) == records
    held = store.models_many([scope for scope, _, _ in block])
    assert all(m == {MODEL: (8, 2), FACTS_KEY: (8, 2)} for m in held.values())
