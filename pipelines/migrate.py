"""`memflow migrate`: a data directory and Dagster instance of the tenant x day design -> the
per-tenant incremental design.

The old design (before the per-tenant assets) stored four tables per (tenant, day):
``tables/<asset>/<org>/<repo>/<YYYY-MM-DD>.parquet`` for raw_turns, turn_rejects,
extracted_triples and extraction_rejects, and its instance held the dynamic partitions
"tenants" plus multi-partition (tenant x day) materializations. What this does, per tenant, each
step idempotent (a second `migrate` changes nothing; a migrate killed half-way is finished by
the next one):

1. **Rejects**: the per-day turn_rejects and extraction_rejects files become the tenant's one
   table (``tables/<asset>/<org>/<repo>.parquet``, rows merged by reject id), then the per-day
   files go.
2. **Per-day tables** (raw_turns, extracted_triples): rewritten through the table store so they
   are in the current layout (columns, order) and carry the manifest that lets a run rewrite
   only the days it changes.
3. **extraction_log**, derived from what is stored so that nothing is extracted again: one row
   per stored turn; tool calls saving triples are `explicit`, every other turn is marked as
   done by the extractor the old instance last observed (the data version of its
   `extraction_model` observation; `--extraction-identity` overrides, and with neither the
   currently configured extractor is assumed), with its stored triples and rejects counted.
   Turns of the old design that waited for an extractor (identity `none`) stay waiting.
4. **landing_files** is not rebuilt: the old design kept no record of which version of a file
   it read, so an index made now could mark lines as read that never were. The first run after
   the migration reads each tenant's landing files once more; that is idempotent (turn keys
   are stable, the extraction log says what is done, so nothing is extracted twice and no fact
   is doubled) and costs one pass of the turns stage (measured: README, "Migrating from the
   tenant x day design").
5. **The instance**: the "tenants" partitions stay (the new assets use the same dynamic
   partitions definition); every tenant with tables is made sure to be one. The old
   multi-partition materializations stay as history. The landing sensor's cursor format did
   not change.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import polars as pl

from memflow.extract import extraction_log_rows, per_turn_counts
from resources.tables import TableStore
from schemas.scope import Scope
from schemas.tables import (
    EXTRACTION_LOG,
    QUARANTINE,
    RAW_TURNS,
    TABLES,
    TRIPLES,
    Asset,
    conform,
)

OLD_PER_DAY_REJECTS = (Asset.TURN_REJECTS, Asset.EXTRACTION_REJECTS)
PER_DAY_TABLES = {
    Asset.RAW_TURNS: ("ts", "source_file", "line_no"),
    Asset.EXTRACTED_TRIPLES: ("day", "triple_id"),
}
MANIFEST = "_manifest.json"


@dataclass
class TenantMigration:
    tenant: str
    rejects_merged: dict[str, int] = field(default_factory=dict)  # asset -> day files merged
    tables_rewritten: list[str] = field(default_factory=list)
    log_rows: int = 0  # extraction_log rows derived (0: it existed already)
    log_by_model: dict[str, int] = field(default_factory=dict)


@dataclass
class MigrationReport:
    data_dir: str
    extraction_identity: str
    identity_source: str  # argument | instance | configured
    tenants: list[TenantMigration] = field(default_factory=list)
    partitions_added: list[str] = field(default_factory=list)
    already_migrated: bool = False

    def lines(self) -> list[str]:
        out = [
            f"migrate {self.data_dir}: {len(self.tenants)} tenant(s); extraction identity "
            f"{self.extraction_identity!r} (from the {self.identity_source})"
        ]
        for t in self.tenants:
            parts = [f"{a}: {n} day files merged" for a, n in t.rejects_merged.items()]
            if t.tables_rewritten:
                parts.append("rewritten " + ", ".join(t.tables_rewritten))
            if t.log_rows:
                models = ", ".join(f"{m} {n}" for m, n in sorted(t.log_by_model.items()))
                parts.append(f"extraction_log {t.log_rows} turns ({models})")
            out.append(f"  {t.tenant}: " + ("; ".join(parts) or "nothing to do"))
        if self.partitions_added:
            out.append(f"  tenant partitions added: {', '.join(self.partitions_added)}")
        if self.already_migrated:
            out.append("  already in the current layout: nothing changed")
        else:
            out.append(
                "  next: `memflow run` (or the landing sensor) reads each tenant's landing files "
                "once more; nothing is extracted again"
            )
        return out


def _tenants(store: TableStore) -> list[Scope]:
    found: set[Scope] = set()
    for asset in TABLES:
        found.update(store.scopes(asset))
    return sorted(found, key=lambda s: s.key)


def _day_folder(store: TableStore, asset: str, scope: Scope) -> Path:
    return store.root / asset / scope.tenant_id / scope.ns


def _day_files(folder: Path) -> list[Path]:
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.glob("*.parquet") if not p.name.startswith("."))


def _merge_rejects(store: TableStore, asset: str, scope: Scope) -> int:
    folder = _day_folder(store, asset, scope)
    files = _day_files(folder)
    if not files:
        return 0
    frames = [conform(pl.read_parquet(p), QUARANTINE) for p in files]
    current = store.read(asset, scope)
    if current is not None:  # a migrate killed after the write, before the clean-up
        frames.insert(0, conform(current, QUARANTINE))
    merged = pl.concat(frames).unique("reject_id", keep="first", maintain_order=True)
    store.write(merged, asset, scope)
    for p in files:
        p.unlink()
    (folder / MANIFEST).unlink(missing_ok=True)
    with contextlib.suppress(OSError):  # something else lives there (a dead writer's temp file)
        folder.rmdir()
    return len(files)


def _rewrite_days(store: TableStore, asset: str, scope: Scope) -> bool:
    folder = _day_folder(store, asset, scope)
    if not _day_files(folder) or (folder / MANIFEST).exists():
        return False
    df = store.read_table(asset, scope)
    if df is None:
        return False
    df = conform(df, TABLES[asset]).sort(list(PER_DAY_TABLES[asset]), nulls_last=True)
    store.write_table(df, asset, scope)
    return True


def derive_extraction_log(
    turns: pl.DataFrame,
    triples: pl.DataFrame | None,
    rejects: pl.DataFrame | None,
    scope: Scope,
    identity: str,
    now: datetime,
) -> pl.DataFrame:
    """The extraction_log the per-tenant design would have written for these stored turns: the
    rule of `memflow.extract.extract_tenant` (tool calls saving triples are `explicit`, every
    other turn was handled by the extractor `identity`)."""
    turns = conform(turns, RAW_TURNS)
    per_triples = per_turn_counts(conform(triples, TRIPLES) if triples is not None else None, scope)
    per_rejects = per_turn_counts(
        conform(rejects, QUARANTINE) if rejects is not None else None, scope
    )
    log = extraction_log_rows(turns, per_triples, per_rejects, identity, now)
    return conform(log, EXTRACTION_LOG).unique("turn_key", keep="first").sort("day", "turn_key")


def observed_extraction_identity(instance: Any) -> str | None:
    """The data version of the instance's latest `extraction_model` observation."""
    from dagster import AssetKey, DagsterEventType, EventRecordsFilter

    records = instance.get_event_records(
        EventRecordsFilter(
            event_type=DagsterEventType.ASSET_OBSERVATION,
            asset_key=AssetKey(Asset.EXTRACTION_MODEL),
        ),
        limit=1,
        ascending=False,
    )
    for record in records:
        observation = record.asset_observation
        if observation is not None:
            version = observation.tags.get("dagster/data_version") if observation.tags else None
            if version:
                return version
    return None


def configured_extraction_identity() -> str:
    from resources.settings import Settings

    return Settings.from_env().extraction().identity()


def migrate(
    data_dir: str | os.PathLike[str],
    *,
    extraction_identity: str | None = None,
    instance: Any = None,
    now: datetime | None = None,
    progress: Callable[[str], None] | None = None,
) -> MigrationReport:
    """Migrate `data_dir` (and `instance`, the Dagster instance of that data directory, when
    given) to the per-tenant layout. Idempotent."""
    say = progress or (lambda _m: None)
    now = now or datetime.now(UTC)
    store = TableStore(data_dir)
    source = "argument"
    identity = extraction_identity
    if identity is None and instance is not None:
        identity, source = observed_extraction_identity(instance), "instance"
    if identity is None:
        identity, source = configured_extraction_identity(), "configured"
    report = MigrationReport(str(data_dir), identity, f"{source} extractor")
    if source == "argument":
        report.identity_source = "--extraction-identity argument"
    elif source == "instance":
        report.identity_source = "instance's last extraction_model observation"
    changed = False
    for scope in _tenants(store):
        entry = TenantMigration(scope.key)
        for asset in OLD_PER_DAY_REJECTS:
            merged = _merge_rejects(store, asset, scope)
            if merged:
                entry.rejects_merged[asset] = merged
        for asset in PER_DAY_TABLES:
            if _rewrite_days(store, asset, scope):
                entry.tables_rewritten.append(asset)
        turns = store.read_table(Asset.RAW_TURNS, scope)
        if turns is not None and store.read_table(Asset.EXTRACTION_LOG, scope) is None:
            log = derive_extraction_log(
                turns,
                store.read_table(Asset.EXTRACTED_TRIPLES, scope),
                store.read_table(Asset.EXTRACTION_REJECTS, scope),
                scope,
                identity,
                now,
            )
            store.write_table(log, Asset.EXTRACTION_LOG, scope)
            entry.log_rows = log.height
            entry.log_by_model = dict(log.group_by("model").len().iter_rows())
        changed |= bool(entry.rejects_merged or entry.tables_rewritten or entry.log_rows)
        say(f"{scope.key}: migrated")
        report.tenants.append(entry)
    if instance is not None:
        from assets.partitions import TENANTS

        known = set(instance.get_dynamic_partitions(TENANTS))
        missing = [t.tenant for t in report.tenants if t.tenant not in known]
        if missing:
            instance.add_dynamic_partitions(TENANTS, missing)
            report.partitions_added = missing
            changed = True
    report.already_migrated = not changed
    return report


__all__ = [
    "MigrationReport",
    "TenantMigration",
    "derive_extraction_log",
    "migrate",
    "observed_extraction_identity",
]
