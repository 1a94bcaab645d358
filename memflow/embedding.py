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
from resources.scope import Scope
from resources.vector.ledger import SCHEMA, EmbeddingLedger
from schemas.ids import sha256_text

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


def with_text_hash(entities: pl.DataFrame) -> pl.DataFrame:
    """entity_id, name, text_hash (sha256 of the name); one row per entity, first one wins."""
    missing = {"entity_id", "name"} - set(entities.columns)
    if missing:
        raise ValueError(f"entities need columns {sorted(missing)}")
    frame = entities.select("entity_id", "name").unique(
        "entity_id", keep="first", maintain_order=True
    )
    if frame["entity_id"].null_count() or frame["name"].null_count():
        raise ValueError("entities with a null id or name cannot be embedded")
    hashes = [sha256_text(name) for name in frame["name"].to_list()]
    return frame.with_columns(pl.Series("text_hash", hashes, dtype=pl.String))


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
) -> EmbedReport:
    """Embed the names of `entities_df` (entity_id, name) that the ledger lacks for the model."""
    if batch < 1:
        raise ValueError("batch must be positive")
    started = time.perf_counter()
    model = provider.model
    _check_scope(entities_df, scope)
    if entities_df.is_empty():
        wanted = pl.DataFrame(
            schema={"entity_id": pl.String, "name": pl.String, "text_hash": pl.String}
        )
    else:
        wanted = with_text_hash(entities_df)
    done = ledger.load(model, scope).select("entity_id", "text_hash")
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


def vector_table(
    ledger: EmbeddingLedger,
    model: str,
    scope: Scope,
    entities: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """The model's vectors of the scope: tenant_id, ns, entity_id, model, dim, text_hash, vector.

    With `entities` (entity_id, name), exactly the vectors of their current names (an entity
    renamed back to an earlier name reuses that name's vector); without, the latest vector per
    entity.
    """
    held = ledger.load(model, scope)
    if entities is not None:
        current = (
            with_text_hash(entities).select("entity_id", "text_hash") if entities.height else None
        )
        held = (
            held.join(current, on=["entity_id", "text_hash"], how="semi", maintain_order="left")
            if current is not None
            else held.clear()
        )
    held = held.unique("entity_id", keep="last", maintain_order=True)
    return held.select(
        pl.lit(scope.tenant_id, dtype=pl.String).alias("tenant_id"),
        pl.lit(scope.ns, dtype=pl.String).alias("ns"),
        pl.col("entity_id"),
        pl.lit(model, dtype=pl.String).alias("model"),
        pl.col("dim").cast(SCHEMA["dim"]),
        pl.col("text_hash"),
        pl.col("vector"),
    )
