"""Helpers shared by the asset modules: partition iteration and run metadata."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import polars as pl
from dagster import AssetExecutionContext, MetadataValue, RetryPolicy
from dagster import Backoff as _Backoff

from assets.partitions import split_key
from schemas.scope import Scope

# Flaky I/O (a model server, a store) gets retried with backoff by Dagster itself.
IO_RETRY = RetryPolicy(max_retries=3, delay=2, backoff=_Backoff.EXPONENTIAL)


def run_scopes(context: AssetExecutionContext) -> Iterator[Scope]:
    """Every tenant of this run: one, or many in a single-run backfill."""
    for key in context.partition_keys:
        yield split_key(key)[0]


def preview(df: pl.DataFrame, columns: list[str], rows: int = 8, width: int = 60) -> MetadataValue:
    """A small markdown table for the UI; long values are cut."""
    if df.is_empty():
        return MetadataValue.md("_no rows_")
    cols = [c for c in columns if c in df.columns]
    head = df.head(rows).select(cols)
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in head.iter_rows():
        cells = []
        for v in row:
            text = "" if v is None else str(v).replace("|", "\\|").replace("\n", " ")
            cells.append(text if len(text) <= width else text[: width - 1] + "…")
        lines.append("| " + " | ".join(cells) + " |")
    return MetadataValue.md("\n".join(lines))


def by_reason(counts: Mapping[str, int]) -> MetadataValue:
    return MetadataValue.json(dict(sorted(counts.items())))


def count_reasons(df: pl.DataFrame) -> dict[str, int]:
    if df.is_empty():
        return {}
    return dict(df.group_by("reason").len().sort("reason").iter_rows())


def per_tenant_table(rows: Mapping[str, Mapping[str, Any]]) -> MetadataValue:
    if not rows:
        return MetadataValue.md("_no tenants_")
    cols = list(next(iter(rows.values())).keys())
    lines = ["| tenant | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
    for tenant, values in rows.items():
        lines.append(f"| {tenant} | " + " | ".join(str(values[c]) for c in cols) + " |")
    return MetadataValue.md("\n".join(lines))
