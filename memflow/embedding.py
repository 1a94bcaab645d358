"""The embedding sweep: embed the entity names that hold no vector of the provider's model yet.

Only the (already redacted) `name` column is sent to the model. The ledger is the cursor: each
batch is appended before the next call, so a crash loses at most one batch and a rerun embeds
only what is missing; nothing is embedded twice.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import polars as pl

from resources.models.base import EMBED_BATCH, EmbeddingProvider, ModelError
from resources.vector.ledger import EmbeddingLedger, with_text_hash
from schemas.scope import Scope

Progress = Callable[[int, int], None]
COMPACT_AFTER_PARTS = 8


@dataclass(frozen=True, slots=True)
class EmbedReport:
    model: str
    dim: int
    embedded: int
    skipped: int  # already in the ledger for this model and name
    batches: int
    seconds: float
    names_per_s: float

    def as_metadata(self) -> dict[str, Any]:
        return asdict(self)


def _check_scope(entities: pl.DataFrame, scope: Scope) -> None:
    for column, value in (("tenant_id", scope.tenant_id), ("ns", scope.ns)):
        if column in entities.columns and entities.height:
            others = entities.filter(pl.col(column) != value).height
            if others or entities[column].null_count():
                raise ValueError(f"entities of another {column} than {scope.key} were given")


def embed_missing(
    provider: EmbeddingProvider,
    ledger: EmbeddingLedger,
    scope: Scope,
    entities_df: pl.DataFrame,
    *,
    batch: int = EMBED_BATCH,
    progress: Progress | None = None,
    key: str | None = None,
) -> EmbedReport:
    """Embed the names of `entities_df` (entity_id, name) that the ledger lacks for the model.

    `key` is the ledger's model key (default: the provider's model); the fact sweep
    (`memflow.fact_embedding`) passes `fact_vectors_key(model)` so fact vectors never mix with
    entity-name vectors.
    """
    if batch < 1:
        raise ValueError("batch must be positive")
    started = time.perf_counter()
    model = key or provider.model
    _check_scope(entities_df, scope)
    if entities_df.is_empty():
        wanted = pl.DataFrame(
            schema={"entity_id": pl.String, "name": pl.String, "text_hash": pl.String}
        )
    else:
        wanted = with_text_hash(entities_df)
    done = ledger.pairs(model, scope)  # ids and hashes only: no vector is read
    todo = wanted.join(done, on=["entity_id", "text_hash"], how="anti", maintain_order="left")
    ids, hashes, names = (todo[c].to_list() for c in ("entity_id", "text_hash", "name"))
    dims = ledger.dims(model)
    dim = next(iter(dims)) if len(dims) == 1 else 0
    batches = 0
    for start in range(0, len(names), batch):
        chunk = names[start : start + batch]
        vectors = provider.embed(chunk)
        if len(vectors) != len(chunk):
            raise ModelError(f"model {model!r} returned {len(vectors)} vectors for {len(chunk)}")
        end = start + len(chunk)
        ledger.append(
            model, scope, list(zip(ids[start:end], hashes[start:end], vectors, strict=True))
        )
        dim = len(vectors[0]) if vectors else dim
        batches += 1
        if progress is not None:
            progress(end, len(names))
    if batches and len(ledger.parts(model, scope)) >= COMPACT_AFTER_PARTS:
        ledger.compact(model, scope)
    seconds = time.perf_counter() - started
    return EmbedReport(
        model=model,
        dim=dim,
        embedded=len(names),
        skipped=wanted.height - len(names),
        batches=batches,
        seconds=seconds,
        names_per_s=len(names) / seconds if names and seconds > 0 else 0.0,
    )
