"""`memflow vectors rebuild`: make the vector store equal the embedding ledger for the models
recall serves (the current embedding model and `MEMFLOW_PREVIOUS_EMBEDDING_MODEL`), for every
tenant the data directory holds (or those named), without calling any model.

It does what the vector sink does (`memflow.vector_sync`), outside a Dagster run: after the
embedded store's files were lost or damaged, after pointing memflow at a new Milvus server, and
once on a data directory written by a memflow that kept its vectors in Milvus Lite
(`resources.vector.legacy`): that server is stopped, and with `drop_legacy` its files go.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from resources.settings import PREVIOUS_MODEL_SETTING as PREVIOUS

if TYPE_CHECKING:
    import polars as pl

    from resources.settings import Settings
    from resources.tables import TableStore
    from schemas.scope import Scope


@dataclass
class RebuildReport:
    models: tuple[str, ...]
    tenants: int = 0
    written: int = 0
    deleted: int = 0
    unchanged: int = 0
    unequal: list[str] = field(default_factory=list)  # "tenant model": still differs
    notes: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        out = [
            f"models: {', '.join(self.models) or 'none configured'}",
            f"{self.tenants} tenant(s): {self.written:,} vectors written, {self.deleted:,} "
            f"deleted, {self.unchanged:,} already there",
            *self.notes,
        ]
        if self.unequal:
            out.append("NOT equal to the ledger after the rebuild: " + ", ".join(self.unequal))
        return out


def rebuild_vectors(
    cfg: Settings, *, tenants: Sequence[Scope] = (), drop_legacy: bool = False
) -> RebuildReport:
    from memflow.vector_sync import sync_tenants
    from resources.tables import TableStore
    from resources.vector.ledger import EmbeddingLedger
    from resources.vector.legacy import drop_legacy as drop
    from resources.vector.legacy import find_legacy, stop_legacy_server
    from schemas.tables import Asset

    data_dir = cfg.data_dir
    models = tuple(dict.fromkeys(m for m in (cfg.embedding_model, cfg[PREVIOUS].strip()) if m))
    report = RebuildReport(models)
    tables = TableStore(data_dir)
    scopes = list(dict.fromkeys(tenants)) or sorted(
        tables.scopes(Asset.ENTITIES), key=lambda s: s.key
    )
    report.tenants = len(scopes)
    ledger = EmbeddingLedger(data_dir)
    with cfg.open_vectors() as store:
        for model in models:
            for done in sync_tenants(store, ledger, model, _tenant_tables(tables, scopes)):
                for kind, r in done.reports.items():
                    report.written += r.written
                    report.deleted += r.deleted
                    report.unchanged += r.unchanged
                    if kind in done.mismatches:
                        report.unequal.append(f"{done.scope.key} {r.model}")
        counted = store.record_counts(scopes)
        if counted:
            report.notes.append(
                f"recorded the vector count of {counted} file(s) written before counts were "
                "kept (what `memflow status` reads)"
            )
    stopped = stop_legacy_server(data_dir)
    if stopped is not None:
        report.notes.append(f"stopped the Milvus Lite server of an earlier memflow (pid {stopped})")
    legacy = find_legacy(data_dir)
    if legacy is not None and drop_legacy:
        removed = drop(data_dir)
        report.notes.append("removed " + ", ".join(p.name for p in removed))
    elif legacy is not None:
        report.notes.append(legacy.note())
    return report


def _tenant_tables(
    tables: TableStore, scopes: Sequence[Scope]
) -> Iterator[tuple[Scope, pl.DataFrame, pl.DataFrame]]:
    from schemas.tables import ENTITIES, FACTS, Asset, conform, empty

    for scope in scopes:
        ents = tables.read_table(Asset.ENTITIES, scope)
        facts = tables.read_table(Asset.VALIDATED_FACTS, scope)
        yield (
            scope,
            conform(ents, ENTITIES) if ents is not None else empty(ENTITIES),
            conform(facts, FACTS) if facts is not None else empty(FACTS),
        )


def add_parser(
    vectors: Any,  # the `memflow vectors` sub-parsers
    common: Callable[[argparse.ArgumentParser], None],
    settings: Callable[[argparse.Namespace], Settings],
    scope: Callable[[str], Scope],
) -> None:
    """Register `memflow vectors rebuild` (kept here so the CLI module only names it)."""
    p = vectors.add_parser(
        "rebuild",
        help="write the vector store again from the embedding ledger (no model is called); "
        "stops the Milvus Lite server an earlier memflow left for the data directory",
    )
    common(p)
    p.add_argument("--tenant", action="append", help="only this ORG/REPO (repeatable)")
    p.add_argument(
        "--drop-legacy",
        action="store_true",
        help="also remove the Milvus Lite files an earlier memflow left (milvus/, milvus-*)",
    )

    def run(args: argparse.Namespace) -> int:
        report = rebuild_vectors(
            settings(args),
            tenants=[scope(t) for t in args.tenant or []],
            drop_legacy=args.drop_legacy,
        )
        print("\n".join(report.lines()))
        return 1 if report.unequal else 0

    p.set_defaults(func=run)
