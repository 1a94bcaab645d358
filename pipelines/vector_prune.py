"""`memflow vectors prune`: remove from the vector store the vectors of embedding models that
recall no longer serves (after a model switch, the old model's vectors stay in the store).

Kept: the current embedding model, `MEMFLOW_PREVIOUS_EMBEDDING_MODEL` and any model named with
`--keep`, each with its fact vectors (`facts:<model>`); and the current and previous models the
settings file names (`MEMFLOW_SETTINGS_FILE`, else `.env`), which the code location and a
reloaded `memflow serve` read over the environment, should the command's own resolution differ.
A tenant the current model does not cover yet keeps every model: recall still answers it with an
older one. Covered means what recall means (`recall.vector_leg`): a vector of every entity's
current name *and* of every validated fact's text, as the vector sink stores them. Without
`apply` nothing is deleted; the report says what would be. A tenant that fails (a store error,
a table that cannot be read) is reported as such and the others go on.

The embedding ledger (`<data>/embedding-ledger/`) is left whole: it is the record of what each
model computed, so switching back to a pruned model re-uploads its vectors from the ledger
without calling the model (the vector sink makes the store equal the ledger's table).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import polars as pl

from resources.settings import EMBEDDING_SETTINGS, read_settings_file
from resources.settings import PREVIOUS_MODEL_SETTING as PREVIOUS
from resources.tables import TableStore, open_tables
from resources.vector.base import VectorStore, fact_vectors_key
from resources.vector.ledger import with_text_hash
from schemas.scope import Scope
from schemas.tables import Asset

if TYPE_CHECKING:
    from resources.settings import Settings

NOT_COVERED = "kept: the current model does not cover this tenant yet"
NO_TABLE = "kept: this data directory has no entities table for the tenant"
FAILED = "failed"  # an outcome "failed: <why>": nothing more of the tenant was deleted


class PruneRefused(ValueError):
    """Pruning would delete what recall serves (no current embedding model is configured)."""


@dataclass(frozen=True)
class PrunedModel:
    tenant: str
    model: str
    vectors: int
    outcome: str  # "deleted", "would delete", "kept: <why>" or "failed: <why>"


@dataclass
class PruneReport:
    keep: tuple[str, ...]
    applied: bool
    rows: list[PrunedModel] = field(default_factory=list)
    tenants: int = 0  # tenants examined
    notes: list[str] = field(default_factory=list)

    @property
    def removable(self) -> int:
        return sum(r.vectors for r in self.rows if r.outcome in ("deleted", "would delete"))

    @property
    def failed(self) -> bool:
        return any(r.outcome.startswith(FAILED) for r in self.rows)

    def lines(self) -> list[str]:
        out = [f"keeping: {', '.join(self.keep)} (each with its fact vectors)", *self.notes]
        if not self.rows:
            return [
                *out,
                f"no vectors of other models in the {self.tenants} tenant(s) examined (those "
                "with an entities table here, or named with --tenant): nothing to prune",
            ]
        width = max(len(r.tenant) for r in self.rows)
        mwidth = max(len(r.model) for r in self.rows)
        out += [
            f"  {r.tenant:<{width}}  {r.model:<{mwidth}}  {r.vectors:>9,}  {r.outcome}"
            for r in self.rows
        ]
        verb = "deleted" if self.applied else "would be deleted; run again with --apply"
        out.append(f"{self.removable:,} vectors {verb}")
        if self.failed:
            out.append("some tenants failed (above): run again once the cause is fixed")
        out.append("the embedding ledger keeps every model's vectors (switching back re-uploads)")
        return out


def kept_keys(keep: Iterable[str]) -> set[str]:
    return {key for model in keep for key in (model, fact_vectors_key(model))}


def covers(vectors: VectorStore, model: str, scope: Scope, entities: pl.DataFrame) -> bool:
    """True when `model` holds a vector of every entity's current name in the scope (with
    `fact_texts(facts)` and the fact-vector key: of every fact's text)."""
    if entities.height == 0:
        return True
    wanted = dict(with_text_hash(entities).select("entity_id", "text_hash").iter_rows())
    return not vectors.missing(model, scope, wanted)


def covers_fully(
    vectors: VectorStore,
    model: str,
    scope: Scope,
    entities: pl.DataFrame,
    facts: pl.DataFrame | None,
) -> bool:
    """What recall calls covering a scope fully: every entity's name and every fact's text."""
    from memflow.fact_embedding import fact_texts

    if not covers(vectors, model, scope, entities):
        return False
    if facts is None or facts.height == 0:
        return True
    return covers(vectors, fact_vectors_key(model), scope, fact_texts(facts))


def prune_scope(
    vectors: VectorStore,
    scope: Scope,
    *,
    current: str,
    keep: Iterable[str],
    entities: pl.DataFrame | None,
    apply: bool,
    facts: pl.DataFrame | None = None,
) -> list[PrunedModel]:
    """The scope's vectors of models outside `keep` (and `current`), deleted when `apply` and
    `current` covers the scope's `entities` (entity_id, name; None: no table, nothing deleted)
    and `facts` (fact_id, subject, predicate, object; None: no facts)."""
    keys = kept_keys({current, *keep})
    stale = {m: n for m, (_, n) in sorted(vectors.models(scope).items()) if n and m not in keys}
    if not stale:
        return []
    why = (
        NO_TABLE
        if entities is None
        else NOT_COVERED
        if not covers_fully(vectors, current, scope, entities, facts)
        else None
    )
    if why is not None:
        return [PrunedModel(scope.key, m, n, why) for m, n in stale.items()]
    if not apply:
        return [PrunedModel(scope.key, m, n, "would delete") for m, n in stale.items()]
    rows = []
    for model, count in stale.items():
        try:
            held = list(vectors.ids(model, scope))
            deleted = vectors.delete(model, scope, held)
        except Exception as exc:  # what was deleted before is reported with it
            return [*rows, PrunedModel(scope.key, model, count, _failed(exc))]
        rows.append(PrunedModel(scope.key, model, deleted, "deleted"))
    return rows


def settings_file_models(cfg: Settings, path: str | os.PathLike[str] | None) -> list[str]:
    """The current and previous embedding models the settings file names (over `cfg`, as the
    code location and a reloaded `memflow serve` read it); [] without a file."""
    if not path or not Path(path).is_file():
        return []
    try:
        found = read_settings_file(path)
    except (OSError, ValueError) as exc:
        raise PruneRefused(
            f"the settings file {path} cannot be read ({type(exc).__name__}): the models it "
            "names cannot be kept"
        ) from None
    names = [*EMBEDDING_SETTINGS.values(), PREVIOUS]
    seen = cfg.with_values(**{k: found[k] for k in names if k in found})
    return [m for m in (seen.embedding_model, seen[PREVIOUS].strip()) if m]


def prune_vectors(
    cfg: Settings,
    *,
    tenants: Sequence[Scope] = (),
    keep: Sequence[str] = (),
    apply: bool = False,
    settings_file: str | os.PathLike[str] | None = None,
) -> PruneReport:
    """Prune every tenant the data directory holds (or `tenants`). `settings_file`: the file
    whose current and previous models are kept as well."""
    current = cfg.embedding_model
    if not current:
        raise PruneRefused(
            "no embedding model is configured (MEMFLOW_EMBEDDER / MEMFLOW_EMBEDDING_MODEL): "
            "every model would be pruned; configure the model recall serves first"
        )
    previous = cfg[PREVIOUS].strip()  # as `memflow serve` reads it (recall.server)
    named = settings_file_models(cfg, settings_file)
    kept = tuple(dict.fromkeys(m for m in (current, previous, *keep, *named) if m))
    tables = open_tables(cfg)
    scopes = list(dict.fromkeys(tenants)) or sorted(
        tables.scopes(Asset.ENTITIES), key=lambda s: s.key
    )
    report = PruneReport(kept, apply, tenants=len(scopes))
    extra = [m for m in named if m not in (current, previous, *keep)]
    if extra:
        report.notes.append(
            f"  also kept: {', '.join(extra)}, named by {settings_file} (which the code location "
            "and a reloaded `memflow serve` read over the environment)"
        )
    vectors = cfg.open_vectors()
    try:
        for scope in scopes:
            report.rows += _prune_one(vectors, tables, scope, current, kept, apply)
    finally:
        vectors.close()
    return report


def _prune_one(
    vectors: VectorStore,
    tables: TableStore,
    scope: Scope,
    current: str,
    kept: tuple[str, ...],
    apply: bool,
) -> list[PrunedModel]:
    try:
        entities = tables.read_table(Asset.ENTITIES, scope)
        facts = tables.read_table(Asset.VALIDATED_FACTS, scope) if entities is not None else None
        return prune_scope(
            vectors,
            scope,
            current=current,
            keep=kept,
            entities=entities.select("entity_id", "name") if entities is not None else None,
            facts=facts,
            apply=apply,
        )
    except Exception as exc:  # one tenant's failure is reported; the others go on
        return [PrunedModel(scope.key, "-", 0, _failed(exc))]


def _failed(exc: BaseException) -> str:
    first = (str(exc).strip().splitlines() or [""])[0][:200]
    return f"{FAILED}: {type(exc).__name__}" + (f": {first}" if first else "")
