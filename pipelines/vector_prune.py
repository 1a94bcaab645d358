"""`memflow vectors prune`: remove from the vector store the vectors of embedding models that
recall no longer serves (after a model switch, the old model's vectors stay in the store).

Kept: the current embedding model, `MEMFLOW_PREVIOUS_EMBEDDING_MODEL` and any model named with
`--keep`, each with its fact vectors (`facts:<model>`). A tenant whose entities the current model
does not cover yet keeps every model: recall still answers it with an older one. Without
`apply` nothing is deleted; the report says what would be.

The embedding ledger (`<data>/embedding-ledger/`) is left whole: it is the record of what each
model computed, so switching back to a pruned model re-uploads its vectors from the ledger
without calling the model (the vector sink makes the store equal the ledger's table).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import polars as pl

from resources.tables import TableStore
from resources.vector.base import VectorStore, fact_vectors_key
from resources.vector.ledger import with_text_hash
from schemas.scope import Scope
from schemas.tables import Asset

if TYPE_CHECKING:
    from resources.settings import Settings

NOT_COVERED = "kept: the current model does not cover this tenant yet"
NO_TABLE = "kept: this data directory has no entities table for the tenant"


class PruneRefused(ValueError):
    """Pruning would delete what recall serves (no current embedding model is configured)."""


@dataclass(frozen=True)
class PrunedModel:
    tenant: str
    model: str
    vectors: int
    outcome: str  # "deleted", "would delete" or "kept: <why>"


@dataclass
class PruneReport:
    keep: tuple[str, ...]
    applied: bool
    rows: list[PrunedModel] = field(default_factory=list)

    @property
    def removable(self) -> int:
        return sum(r.vectors for r in self.rows if not r.outcome.startswith("kept"))

    def lines(self) -> list[str]:
        out = [f"keeping: {', '.join(self.keep)} (each with its fact vectors)"]
        if not self.rows:
            return [*out, "no vectors of other models: nothing to prune"]
        width = max(len(r.tenant) for r in self.rows)
        mwidth = max(len(r.model) for r in self.rows)
        out += [
            f"  {r.tenant:<{width}}  {r.model:<{mwidth}}  {r.vectors:>9,}  {r.outcome}"
            for r in self.rows
        ]
        verb = "deleted" if self.applied else "would be deleted; run again with --apply"
        out.append(f"{self.removable:,} vectors {verb}")
        out.append("the embedding ledger keeps every model's vectors (switching back re-uploads)")
        return out


def kept_keys(keep: Iterable[str]) -> set[str]:
    return {key for model in keep for key in (model, fact_vectors_key(model))}


def covers(vectors: VectorStore, model: str, scope: Scope, entities: pl.DataFrame) -> bool:
    """True when `model` holds a vector of every entity's current name in the scope."""
    if entities.height == 0:
        return True
    wanted = dict(with_text_hash(entities).select("entity_id", "text_hash").iter_rows())
    return not vectors.missing(model, scope, wanted)


def prune_scope(
    vectors: VectorStore,
    scope: Scope,
    *,
    current: str,
    keep: Iterable[str],
    entities: pl.DataFrame | None,
    apply: bool,
) -> list[PrunedModel]:
    """The scope's vectors of models outside `keep` (and `current`), deleted when `apply` and
    `current` covers the scope's `entities` (entity_id, name; None: no table, nothing deleted)."""
    keys = kept_keys({current, *keep})
    stale = {m: n for m, (_, n) in sorted(vectors.models(scope).items()) if n and m not in keys}
    if not stale:
        return []
    why = (
        NO_TABLE
        if entities is None
        else NOT_COVERED
        if not covers(vectors, current, scope, entities)
        else None
    )
    if why is not None:
        return [PrunedModel(scope.key, m, n, why) for m, n in stale.items()]
    if not apply:
        return [PrunedModel(scope.key, m, n, "would delete") for m, n in stale.items()]
    rows = []
    for model in stale:
        held = list(vectors.ids(model, scope))
        rows.append(PrunedModel(scope.key, model, vectors.delete(model, scope, held), "deleted"))
    return rows


def prune_vectors(
    cfg: Settings,
    *,
    tenants: Sequence[Scope] = (),
    keep: Sequence[str] = (),
    apply: bool = False,
) -> PruneReport:
    """Prune every tenant the data directory holds (or `tenants`)."""
    current = cfg.embedding_model
    if not current:
        raise PruneRefused(
            "no embedding model is configured (MEMFLOW_EMBEDDER / MEMFLOW_EMBEDDING_MODEL): "
            "every model would be pruned; configure the model recall serves first"
        )
    previous = cfg["MEMFLOW_PREVIOUS_EMBEDDING_MODEL"]
    kept = tuple(dict.fromkeys(m for m in (current, previous, *keep) if m))
    tables = TableStore(cfg["MEMFLOW_DATA_DIR"])
    scopes = list(tenants) or sorted(tables.scopes(Asset.ENTITIES), key=lambda s: s.key)
    report = PruneReport(kept, apply)
    vectors = cfg.open_vectors()
    try:
        for scope in scopes:
            entities = tables.read_table(Asset.ENTITIES, scope)
            report.rows += prune_scope(
                vectors,
                scope,
                current=current,
                keep=kept,
                entities=entities.select("entity_id", "name") if entities is not None else None,
                apply=apply,
            )
    finally:
        vectors.close()
    return report
