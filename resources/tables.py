"""The Parquet tables, the source of truth: one table per asset and tenant.

Layout under the data directory::

    tables/<asset>/<org>/<repo>.parquet               a tenant's table
    tables/<asset>/<org>/<repo>/<YYYY-MM-DD>.parquet  a per-day table, one file per day of its
                                                      `day` column (`schemas.tables.PER_DAY`)
    tables/<asset>/<org>/<repo>/_manifest.json        per-day tables: a content hash per day

`write_table` rewrites only the days whose content changed (the manifest says which), so a run
that adds one day writes one file whatever the tenant's history. Writes are atomic (temp file +
rename), so a killed run never leaves half a table behind.
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

import polars as pl

from schemas.scope import Scope
from schemas.tables import PER_DAY

MANIFEST = "_manifest.json"
SUMMARY = "_summary.json"


class TableStore:
    def __init__(self, data_dir: str | os.PathLike[str]) -> None:
        self.root = Path(data_dir) / "tables"

    def path(self, asset: str, scope: Scope, day: str | None = None) -> Path:
        base = self.root / asset / scope.tenant_id
        return base / scope.ns / f"{day}.parquet" if day else base / f"{scope.ns}.parquet"

    def write(self, df: pl.DataFrame, asset: str, scope: Scope, day: str | None = None) -> Path:
        target = self.path(asset, scope, day)
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-", suffix=".parquet")
        os.close(fd)
        try:
            df.write_parquet(tmp, statistics=True)
            os.replace(tmp, target)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        return target

    def exists(self, asset: str, scope: Scope, day: str | None = None) -> bool:
        return self.path(asset, scope, day).exists()

    def read(self, asset: str, scope: Scope, day: str | None = None) -> pl.DataFrame | None:
        """The table, or None if it was never written."""
        path = self.path(asset, scope, day)
        return pl.read_parquet(path) if path.exists() else None

    def days(self, asset: str, scope: Scope) -> list[str]:
        folder = self.root / asset / scope.tenant_id / scope.ns
        if not folder.is_dir():
            return []
        return sorted(p.stem for p in folder.glob("*.parquet") if not p.name.startswith("."))

    def read_days(
        self, asset: str, scope: Scope, days: Iterable[str] | None = None
    ) -> pl.DataFrame | None:
        """Every stored day of a per-day asset (or the given ones), concatenated; None if none."""
        wanted = set(days) if days is not None else None
        frames = [
            pl.read_parquet(self.path(asset, scope, d))
            for d in self.days(asset, scope)
            if wanted is None or d in wanted
        ]
        frames = [f for f in frames if f.width]
        return pl.concat(frames, how="diagonal_relaxed") if frames else None

    def scopes(self, asset: str) -> list[Scope]:
        """Tenants that have a table for `asset`."""
        base = self.root / asset
        found: set[Scope] = set()
        if not base.is_dir():
            return []
        for org in base.iterdir():
            if not org.is_dir():
                continue
            for entry in org.iterdir():
                name = entry.stem if entry.suffix == ".parquet" else entry.name
                if entry.name.startswith("."):
                    continue
                try:
                    found.add(Scope(org.name, name))
                except ValueError:
                    continue
        return sorted(found, key=lambda s: s.key)

    # ------------------------------------------------------------------ whole tenant tables

    def read_table(self, asset: str, scope: Scope) -> pl.DataFrame | None:
        """A tenant's table, per-day or not; None if it was never written."""
        return self.read_days(asset, scope) if asset in PER_DAY else self.read(asset, scope)

    def write_table(self, df: pl.DataFrame, asset: str, scope: Scope) -> dict[str, int]:
        """Store a tenant's whole table. Per-day tables: write the days whose content changed,
        delete the days that have no row any more. Returns {"written": files, "kept": files}."""
        if asset not in PER_DAY:
            self.write(df, asset, scope)
            return {"written": 1, "kept": 0}
        folder = self.root / asset / scope.tenant_id / scope.ns
        manifest = self._manifest(folder)
        new: dict[str, str] = {}
        written = kept = 0
        by_day = df.partition_by("day", as_dict=True, maintain_order=True) if df.height else {}
        for (day,), part in by_day.items():
            digest = _digest(part)
            new[day] = digest
            if manifest.get(day) == digest and self.exists(asset, scope, day):
                kept += 1
                continue
            self.write(part, asset, scope, day)
            written += 1
        for day in set(self.days(asset, scope)) - set(new):
            self.path(asset, scope, day).unlink(missing_ok=True)
        self._write_manifest(folder, new)
        return {"written": written, "kept": kept}

    def _manifest(self, folder: Path) -> dict[str, str]:
        try:
            return json.loads((folder / MANIFEST).read_text())
        except (FileNotFoundError, ValueError):
            return {}

    def _write_manifest(self, folder: Path, manifest: dict[str, str]) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".json")
        with os.fdopen(fd, "w") as fh:
            json.dump(dict(sorted(manifest.items())), fh)
        os.replace(tmp, folder / MANIFEST)

    # --------------------------------------------------------------- per-tenant summaries

    def record_summary(self, asset: str, scope: Scope, values: dict[str, int]) -> None:
        """Remember a small summary of a tenant's table (counts a check reads for every tenant
        without opening every table). One JSON file per asset, updated under a lock."""
        folder = self.root / asset
        folder.mkdir(parents=True, exist_ok=True)
        with open(folder / ".summary.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            summary = self.summaries(asset)
            summary[scope.key] = values
            fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".json")
            with os.fdopen(fd, "w") as fh:
                json.dump(dict(sorted(summary.items())), fh)
            os.replace(tmp, folder / SUMMARY)

    def summaries(self, asset: str) -> dict[str, dict[str, int]]:
        """Every tenant's recorded summary of `asset` (tenant key -> values)."""
        try:
            return json.loads((self.root / asset / SUMMARY).read_text())
        except (FileNotFoundError, ValueError):
            return {}


def _digest(df: pl.DataFrame) -> str:
    """A content hash of a day's rows (order-sensitive; the writers sort deterministically)."""
    first = df.hash_rows(seed=0).sum()
    second = df.hash_rows(seed=7).sum()
    return f"{df.height}:{first}:{second}:{','.join(df.columns)}"
