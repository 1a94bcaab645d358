"""The vector sink's work: make the vector store equal, for each tenant, the embedding ledger's
vectors of its current entity names (under the model) and of its fact texts (under
`facts:<model>`), idempotently.

What a tenant should hold is the pairs (id, text hash) of its current names and fact texts that
the ledger holds a vector of; a name or fact the sweep has not embedded yet is not wanted (it is
the embeddings assets' coverage check that reports it). Tenants are synced in batches of about
`BATCH_ROWS` wanted rows (`resources.vector.sync.sync_block`): a server is asked for a batch's
ids in one read before and one after, however many tenants it holds, while a batch holds no
more than one large tenant's ids, and only one tenant's vectors at a time (those it must write).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import polars as pl

from memflow.fact_embedding import fact_texts
from resources.vector.base import VectorStore, fact_vectors_key
from resources.vector.ledger import EmbeddingLedger, with_text_hash
from resources.vector.sync import VectorSyncReport, sync_block
from schemas.scope import Scope

BATCH_ROWS = 20_000  # about one tenant at the caps (5,000 entities + 10,000 facts)
KINDS = ("entities", "facts")


@dataclass(frozen=True, slots=True)
class TenantSync:
    scope: Scope
    reports: dict[str, VectorSyncReport]  # "entities", "facts"
    mismatches: dict[str, dict[str, Any]]  # kind -> what still differs; empty when equal
    seconds: float  # this tenant's share of the batch

    @property
    def equal(self) -> bool:
        return not self.mismatches


def wanted_vectors(
    ledger: EmbeddingLedger, key: str, scope: Scope, texts: pl.DataFrame
) -> dict[str, str]:
    """id -> text hash of the `texts` (entity_id, name) whose current text the ledger holds a
    vector of under `key` (an entity renamed back to an earlier name reuses that vector)."""
    if texts.is_empty():
        return {}
    current = with_text_hash(texts).select("entity_id", "text_hash")
    held = current.join(
        ledger.pairs(key, scope), on=["entity_id", "text_hash"], how="semi", maintain_order="left"
    )
    return dict(zip(held["entity_id"].to_list(), held["text_hash"].to_list(), strict=True))


def sync_tenants(
    store: VectorStore,
    ledger: EmbeddingLedger,
    model: str,
    tenants: Iterable[tuple[Scope, pl.DataFrame, pl.DataFrame]],
    *,
    batch_rows: int = BATCH_ROWS,
) -> Iterator[TenantSync]:
    """Sync each (scope, entities (entity_id, name), validated facts) of `tenants`, in order;
    one result per tenant, yielded batch by batch."""
    if batch_rows < 1:
        raise ValueError("batch_rows must be positive")
    keys = {"entities": model, "facts": fact_vectors_key(model)}
    batch: list[tuple[Scope, dict[str, dict[str, str]], float]] = []
    rows = 0
    for scope, entities, facts in tenants:
        started = time.perf_counter()
        texts = {"entities": entities.select("entity_id", "name"), "facts": fact_texts(facts)}
        wanted = {kind: wanted_vectors(ledger, keys[kind], scope, texts[kind]) for kind in KINDS}
        batch.append((scope, wanted, time.perf_counter() - started))
        rows += sum(len(w) for w in wanted.values())
        if rows >= batch_rows:
            yield from _sync_batch(store, ledger, keys, batch)
            batch, rows = [], 0
    if batch:
        yield from _sync_batch(store, ledger, keys, batch)


def _sync_batch(
    store: VectorStore,
    ledger: EmbeddingLedger,
    keys: dict[str, str],
    batch: list[tuple[Scope, dict[str, dict[str, str]], float]],
) -> Iterator[TenantSync]:
    started = time.perf_counter()
    results = {}
    # Entity names first: recall chooses its model by them, and keeps serving the previous
    # model until the new one covers the facts as well.
    for kind in KINDS:
        key = keys[kind]
        results[kind] = sync_block(
            store,
            key,
            {scope: wanted[kind] for scope, wanted, _ in batch},
            lambda scope, todo, key=key: ledger.vectors_of(key, scope, todo),
        )
    # files equal to the ledger are not rewritten: record their counts where missing
    store.record_counts([scope for scope, _, _ in batch])
    own = sum(r.seconds for kind in KINDS for r, _ in results[kind].values())
    shared = max(0.0, time.perf_counter() - started - own) / len(batch)
    for scope, _, prepared in batch:
        reports = {kind: results[kind][scope][0] for kind in KINDS}
        mismatches = {
            kind: diff.summary() for kind in KINDS if not (diff := results[kind][scope][1]).empty
        }
        seconds = prepared + shared + sum(r.seconds for r in reports.values())
        yield TenantSync(scope, reports, mismatches, seconds)
