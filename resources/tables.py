"""The Parquet tables, the source of truth: one file per asset and partition.

Layout under the data directory::

    tables/<asset>/<org>/<repo>.parquet            per-tenant assets
    tables/<asset>/<org>/<repo>/<YYYY-MM-DD>.parquet  per tenant x day assets

Writes are atomic (temp file + rename), so a killed run never leaves half a table behind.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

import polars as pl

from schemas.scope import Scope


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
