"""`memflow migrate`: a data directory of the Parquet layouts -> the Delta tables.

Two earlier layouts are read, alone or mixed:

- the **per-tenant Parquet** layout (before the Delta tables): ``tables/<asset>/<org>/<repo>
  .parquet`` for most tables, ``tables/<asset>/<org>/<repo>/<YYYY-MM-DD>.parquet`` (plus a
  ``_manifest.json``) for raw_turns, extracted_triples and extraction_log, the landing zone's
  ``tables/landing_problems.parquet`` and the per-asset ``_summary.json``;
- the **tenant x day** design before it: every table of raw_turns, turn_rejects,
  extracted_triples and extraction_rejects per (tenant, day), no extraction_log, and an
  instance with multi-partition (tenant x day) materializations.

What it does, in an order a kill -9 cannot break (a rerun finishes a killed migration; a
second one changes nothing):

1. every tenant's table of every asset is read (the day files of a tenant concatenated, rows
   aligned by column name; per-day rejects merged by reject id) and written to new Delta
   tables in ``<data>/tables-migrating`` (one commit per asset);
2. **extraction_log**, where a tenant has none (the tenant x day design), is derived from
   what is stored so that nothing is extracted again: one row per stored turn; tool calls
   saving triples are `explicit`, every other turn is marked as done by the extractor the old
   instance last observed (the data version of its `extraction_model` observation;
   `--extraction-identity` overrides, and with neither the configured extractor is assumed);
3. the landing problems and the summaries move too; then ``tables`` becomes
   ``tables-parquet`` (kept, untouched: delete it once satisfied) and ``tables-migrating``
   becomes ``tables``, two renames;
4. **the instance**: every tenant with tables is made sure to be a "tenants" partition; the
   materializations of the old layout stay as history.

Kept as it is: the landing index (``landing_files``) of the per-tenant layout, so the first
run reads only new files. The tenant x day design kept no such index, so its first run reads
every landing file once more; that is idempotent (turn keys are stable, the extraction log
says what is done: nothing is extracted twice, no fact is doubled).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import polars as pl

from memflow.extract import extraction_log_rows, per_turn_counts
from resources.tables import TABLES_DIR, TableStore, forget_tables, legacy_layout
from schemas.scope import Scope, ScopeError
from schemas.tables import (
    EXTRACTION_LOG,
    LANDING_PROBLEMS,
    QUARANTINE,
    RAW_TURNS,
    TABLES,
    TRIPLES,
    Asset,
    conform,
)

LEGACY_DIR = "tables-parquet"  # where the Parquet tables are kept after the migration
BUILD_DIR = "tables-migrating"
DONE = "MIGRATED"  # written into LEGACY_DIR when the migration finished
BUILT = "_BUILT"  # written into BUILD_DIR when every table is in it
# Rows of these tables are unique by this column (per-day files may repeat a reject).
UNIQUE_BY = {
    Asset.TURN_REJECTS: "reject_id",
    Asset.EXTRACTION_REJECTS: "reject_id",
    Asset.QUARANTINE: "reject_id",
}
ORDER_BY = {
    Asset.RAW_TURNS: ("ts", "source_file", "line_no"),
    Asset.EXTRACTED_TRIPLES: ("day", "triple_id"),
    Asset.EXTRACTION_LOG: ("day", "turn_key"),
}
SUMMARY_FILE = "_summary.json"
BLOCK = 500  # tenants per commit


class MigrationError(RuntimeError):
    """The data directory cannot be migrated as it is; the message says why and what to do."""


@dataclass
class TenantMigration:
    tenant: str
    rows: dict[str, int] = field(default_factory=dict)  # asset -> rows moved
    day_files: dict[str, int] = field(default_factory=dict)  # asset -> day files read
    log_rows: int = 0  # extraction_log rows derived (0: it existed already)
    log_by_model: dict[str, int] = field(default_factory=dict)


@dataclass
class MigrationReport:
    data_dir: str
    extraction_identity: str
    identity_source: str
    tenants: list[TenantMigration] = field(default_factory=list)
    partitions_added: list[str] = field(default_factory=list)
    already_migrated: bool = False
    legacy_dir: str = ""

    def lines(self) -> list[str]:
        out = [
            f"migrate {self.data_dir}: {len(self.tenants)} tenant(s); extraction identity "
            f"{self.extraction_identity!r} (from the {self.identity_source})"
        ]
        for t in self.tenants:
            moved = ", ".join(f"{a} {n}" for a, n in sorted(t.rows.items()) if n)
            parts = [f"rows moved: {moved}"] if moved else []
            if t.log_rows:
                models = ", ".join(f"{m} {n}" for m, n in sorted(t.log_by_model.items()))
                parts.append(f"extraction_log derived for {t.log_rows} turns ({models})")
            out.append(f"  {t.tenant}: " + ("; ".join(parts) or "nothing to move"))
        if self.partitions_added:
            out.append(f"  tenant partitions added: {', '.join(self.partitions_added)}")
        if self.already_migrated:
            out.append("  already in the current layout: nothing changed")
        else:
            out.append(
                f"  the Parquet tables are kept in {self.legacy_dir} (delete it once satisfied); "
                "next: `memflow run` (or the landing sensor)"
            )
        return out


# ------------------------------------------------------------------- the legacy layouts


def _tenant_files(folder: Path) -> dict[Scope, list[Path]]:
    """A legacy table's files by tenant: `<org>/<repo>.parquet` and `<org>/<repo>/*.parquet`."""
    out: dict[Scope, list[Path]] = {}
    if not folder.is_dir():
        return out
    for org in sorted(folder.iterdir()):
        if not org.is_dir() or org.name.startswith((".", "_")):
            continue
        for entry in sorted(org.iterdir()):
            if entry.name.startswith((".", "_")):
                continue
            if entry.is_file() and entry.suffix == ".parquet":
                name, files = entry.stem, [entry]
            elif entry.is_dir():
                name = entry.name
                files = sorted(p for p in entry.glob("*.parquet") if not p.name.startswith("."))
            else:
                continue
            try:
                scope = Scope(org.name, name)
            except ScopeError:
                continue
            out.setdefault(scope, []).extend(files)
    return out


def _read_legacy(asset: str, files: list[Path]) -> pl.DataFrame:
    frames = [conform(pl.read_parquet(p), TABLES[asset]) for p in files]
    df = frames[0] if len(frames) == 1 else pl.concat(frames, how="vertical_relaxed")
    if asset in UNIQUE_BY:
        df = df.unique(UNIQUE_BY[asset], keep="first", maintain_order=True)
    if asset in ORDER_BY:
        df = df.sort(list(ORDER_BY[asset]), nulls_last=True, maintain_order=True)
    return df


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
    # what each turn held when the old code extracted it is not known: unchanged, as in a log
    # written before the column existed (a digest of today's rows would re-extract turns the
    # old code read differently)
    log = log.with_columns(pl.lit(None, dtype=pl.String).alias("turn_sha256"))
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


# ---------------------------------------------------------------------------- the steps


def _build(
    legacy: Path, build: Path, identity: str, now: datetime, say: Callable[[str], None]
) -> list[TenantMigration]:
    """Every legacy table into fresh Delta tables under `build` (a killed build is redone)."""
    shutil.rmtree(build, ignore_errors=True)
    forget_tables(build)
    store = TableStore(build.parent, uri=str(build))
    files = {asset: _tenant_files(legacy / asset) for asset in TABLES}
    scopes = sorted({s for by in files.values() for s in by}, key=lambda s: s.key)
    entries = {s: TenantMigration(s.key) for s in scopes}
    for asset, by_scope in files.items():
        todo = sorted(by_scope, key=lambda s: s.key)
        for start in range(0, len(todo), BLOCK):
            frames = {}
            for scope in todo[start : start + BLOCK]:
                df = _read_legacy(asset, by_scope[scope])
                frames[scope] = df
                entries[scope].rows[asset] = df.height
                if len(by_scope[scope]) > 1:
                    entries[scope].day_files[asset] = len(by_scope[scope])
            try:
                store.write_tenants(asset, frames, run_id="memflow-migrate")
            except ValueError as exc:
                raise MigrationError(f"{legacy / asset}: {exc}") from exc
        say(f"{asset}: {len(todo)} tenant(s)")
    logs = {}
    for scope in scopes:
        if files[Asset.EXTRACTION_LOG].get(scope) or not files[Asset.RAW_TURNS].get(scope):
            continue
        turns = store.read(Asset.RAW_TURNS, scope)
        if turns is None:
            continue
        log = derive_extraction_log(
            turns,
            store.read(Asset.EXTRACTED_TRIPLES, scope),
            store.read(Asset.EXTRACTION_REJECTS, scope),
            scope,
            identity,
            now,
        )
        logs[scope] = log
        entries[scope].log_rows = log.height
        entries[scope].log_by_model = dict(log.group_by("model").len().iter_rows())
    if logs:
        store.write_tenants(Asset.EXTRACTION_LOG, logs, run_id="memflow-migrate")
    problems = legacy / f"{Asset.LANDING_PROBLEMS}.parquet"
    if problems.is_file():
        store.write_zone(
            conform(pl.read_parquet(problems), LANDING_PROBLEMS), Asset.LANDING_PROBLEMS
        )
    for asset in TABLES:
        summary = _summaries(legacy / asset / SUMMARY_FILE)
        if summary:
            store.record_summaries(asset, summary)
    (build / BUILT).write_text(now.isoformat())
    return list(entries.values())


def _summaries(path: Path) -> dict[Scope, dict[str, int]]:
    try:
        raw = json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return {}
    out = {}
    for key, values in raw.items() if isinstance(raw, dict) else ():
        try:
            out[Scope.parse(key)] = {k: int(v) for k, v in values.items()}
        except (ScopeError, AttributeError, TypeError, ValueError):
            continue
    return out


def _swap(data: Path, now: datetime) -> None:
    """tables -> tables-parquet, tables-migrating -> tables (finishes a half-done swap)."""
    tables, legacy, build = data / TABLES_DIR, data / LEGACY_DIR, data / BUILD_DIR
    if tables.exists() and legacy_layout(tables):
        tables.rename(legacy)
    if build.exists():
        build.rename(tables)
    forget_tables(tables)
    forget_tables(build)
    (legacy / DONE).write_text(now.isoformat())
    (tables / BUILT).unlink(missing_ok=True)


def migrate(
    data_dir: str | os.PathLike[str],
    *,
    extraction_identity: str | None = None,
    instance: Any = None,
    now: datetime | None = None,
    progress: Callable[[str], None] | None = None,
) -> MigrationReport:
    """Migrate `data_dir` (and `instance`, the Dagster instance of that data directory, when
    given) to the Delta tables. Idempotent; a killed migration is finished by the next one."""
    say = progress or (lambda _m: None)
    now = now or datetime.now(UTC)
    data = Path(data_dir)
    tables, legacy, build = data / TABLES_DIR, data / LEGACY_DIR, data / BUILD_DIR
    source = "--extraction-identity argument"
    identity = extraction_identity
    if identity is None and instance is not None:
        identity, source = observed_extraction_identity(instance), "instance's last observation"
    if identity is None:
        identity, source = configured_extraction_identity(), "configured extractor"
    report = MigrationReport(str(data_dir), identity, source, legacy_dir=str(legacy))
    if legacy_layout(tables):
        if (legacy / DONE).exists():
            raise MigrationError(
                f"{tables} holds Parquet tables again although {legacy} was migrated already: "
                f"move one of them away and run `memflow migrate` again"
            )
        report.tenants = _build(tables, build, identity, now, say)
        _swap(data, now)
    elif (build / BUILT).exists() and not tables.exists():
        _swap(data, now)  # killed between the two renames
    else:
        report.already_migrated = True
    if instance is not None:
        from assets.partitions import TENANTS

        store = TableStore(data)
        scopes = {s.key for asset in TABLES for s in store.scopes(asset)}
        known = set(instance.get_dynamic_partitions(TENANTS))
        missing = sorted(scopes - known)
        if missing:
            instance.add_dynamic_partitions(TENANTS, missing)
            report.partitions_added = missing
            report.already_migrated = False
    return report


__all__ = [
    "MigrationError",
    "MigrationReport",
    "TenantMigration",
    "derive_extraction_log",
    "legacy_layout",
    "migrate",
    "observed_extraction_identity",
]
