"""What the asset modules share: the tenants of a run, per-partition metadata, the blocking
contract check (the quarantine before it is `schemas.contracts.quarantine_contract_failures`),
and the one named road to a table outside the IO manager.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterator, Mapping
from itertools import accumulate
from typing import Any

import polars as pl
from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetExecutionContext,
    MetadataValue,
)

from assets.partitions import scope_of
from resources.configurable import Storage
from schemas.contracts import split_valid
from schemas.redaction import redact
from schemas.scope import Scope
from schemas.tables import TABLES

PARTITION_ROW_COUNT = "dagster/partition_row_count"  # Dagster's standard table metadata key


def run_scopes(context: AssetExecutionContext) -> Iterator[Scope]:
    """Every tenant of this run: one, or a range of them in a batched run."""
    for key in context.partition_keys:
        yield scope_of(key)


def stored_table(storage: Storage, asset: str, scope: Scope) -> pl.DataFrame | None:
    """A table read outside the IO manager. Only two reads take this road, both named in their
    asset's description: `extracted_triples` reads the tenant's `entities` (a feedback edge: the
    known names go into the extraction prompt) and every incremental asset reads its own
    previous output (the state it brings up to date)."""
    return storage.tables().read_table(asset, scope)


def tenant_metadata(
    context: AssetExecutionContext, asset: str, scope: Scope, metadata: Mapping[str, Any]
) -> None:
    """Metadata on this tenant's materialization of `asset` (not the run's totals), through
    Dagster's public `add_asset_metadata(partition_key=...)`. A tenant table's rows
    (`rows_out`) are also its ``dagster/partition_row_count``, the catalog's name for them.

    Each call checks the partition against the run's range, which costs a few event-log
    queries; with the local instance's event log (`pipelines/event_log.py`) that is a small
    share of a run (BENCHMARKS.md, "Per-tenant metadata through the public API")."""
    values = dict(metadata)
    if "rows_out" in values and asset in TABLES:
        values[PARTITION_ROW_COUNT] = values["rows_out"]
    context.add_asset_metadata(values, asset_key=asset, partition_key=scope.key)


def preview(df: pl.DataFrame, columns: list[str], rows: int = 8, width: int = 60) -> MetadataValue:
    """A small markdown table for the UI; long values are cut. Cells are redacted once more:
    metadata lands in Dagster's event log, which outlives every table."""
    if df.is_empty():
        return MetadataValue.md("_no rows_")
    cols = [c for c in columns if c in df.columns]
    head = df.head(rows).select(cols)
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in head.iter_rows():
        cells = []
        for v in row:
            text = "" if v is None else (redact(str(v)) or "").replace("|", "\\|")
            text = text.replace("\n", " ")
            cells.append(text if len(text) <= width else text[: width - 1] + "…")
        lines.append("| " + " | ".join(cells) + " |")
    return MetadataValue.md("\n".join(lines))


def by_reason(counts: Mapping[str, int]) -> MetadataValue:
    return MetadataValue.json(dict(sorted(counts.items())))


def count_reasons(df: pl.DataFrame) -> dict[str, int]:
    if df.is_empty():
        return {}
    return dict(df.group_by("reason").len().sort("reason").iter_rows())


def contract_check(
    name: str, asset: str, contract: type, frames: Mapping[str, pl.DataFrame]
) -> AssetCheckResult:
    """The blocking last guard: every stored frame of the run meets `contract`.

    The frames of every tenant of the run are validated as one (pandera's fixed cost per call
    is most of a small tenant's check); the contracts' frame-wide checks are per (tenant_id, ns)
    and their ids include the scope, so the verdict per tenant is the same."""
    errors: dict[str, set[str]] = {}
    keys = [k for k, df in frames.items() if df.height]
    if keys:
        whole = pl.concat([frames[k] for k in keys], how="vertical_relaxed")
        _, violations = split_valid(whole, contract)
        if violations:
            ends = list(accumulate(frames[k].height for k in keys))
            for v in violations:
                errors.setdefault(keys[bisect_right(ends, v.row)], set()).add(v.reason)
    failures = {tenant: sorted(reasons) for tenant, reasons in errors.items()}
    return AssetCheckResult(
        check_name=name,
        asset_key=asset,
        passed=not failures,
        severity=AssetCheckSeverity.ERROR,
        metadata={"failures": MetadataValue.json(failures)}
        if failures
        else {"tenants": len(frames)},
    )
