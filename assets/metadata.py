"""What the asset modules share: the tenants of a run, per-partition metadata, contract checks
that quarantine instead of failing, and the one named road to a table outside the IO manager.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterator, Mapping, Sequence
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
from schemas import ids
from schemas.contracts import Violation, split_valid
from schemas.redaction import redact
from schemas.scope import Scope
from schemas.tables import QUARANTINE, TABLES, conform

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


def quarantine_contract_failures(
    frames: Mapping[str, pl.DataFrame],
    contract: type,
    stage: str,
    id_columns: Sequence[str] = ("session_id", "turn_id", "source_file", "line_no"),
) -> tuple[dict[str, pl.DataFrame], dict[str, pl.DataFrame]]:
    """Per tenant key (`org/repo`): (rows that meet `contract`, quarantine rows for the others).

    Each failing row is quarantined once per broken check, with ``contract:<column>:<check>``
    as its reason and no record: a row that broke the secrets check must not be copied
    anywhere. The frames of every tenant of the run are validated as one (pandera's fixed cost
    per call is most of a small tenant's validation); the contracts' frame-wide checks are per
    (tenant_id, ns) and their ids include the scope, so each tenant's verdict is its own.
    Frames whose columns differ, or holding rows of another scope, are validated one by one."""
    keys = [k for k, df in frames.items() if df.height]
    good = {k: df for k, df in frames.items()}
    rejects = {k: _no_rejects() for k in frames}
    if not keys:
        return good, rejects
    # Together: frames of one layout whose rows all carry their own tenant's scope (their ids
    # include it, so a unique-id check cannot match across tenants). Any other frame (rows of
    # another scope, as in a table folder copied from another tenant) is validated alone.
    together = [k for k in keys if _own_rows(frames[k], scope_of(k))]
    layouts = {tuple(frames[k].schema.items()) for k in together}
    if len(layouts) != 1:
        together = []
    groups = ([together] if together else []) + [[k] for k in keys if k not in together]
    for group in groups:
        whole = frames[group[0]] if len(group) == 1 else pl.concat([frames[k] for k in group])
        _, violations = split_valid(whole, contract)
        if not violations:
            continue
        ends = list(accumulate(frames[k].height for k in group))
        starts = [0, *ends[:-1]]
        found: dict[str, list[tuple[int, Violation]]] = {}
        for v in violations:
            at = bisect_right(ends, v.row)
            found.setdefault(group[at], []).append((v.row - starts[at], v))
        for key, local in found.items():
            df = frames[key]
            scope = scope_of(key)
            rows = df.with_row_index("__row").to_dicts()
            out = [_violation_row(rows[i], v, scope, stage, id_columns) for i, v in local]
            bad = sorted({i for i, _ in local})
            good[key] = df.with_row_index("__row").filter(~pl.col("__row").is_in(bad)).drop("__row")
            rejects[key] = conform(pl.DataFrame(out, infer_schema_length=None), QUARANTINE)
    return good, rejects


def _own_rows(df: pl.DataFrame, scope: Scope) -> bool:
    if "tenant_id" not in df.columns or "ns" not in df.columns:
        return False
    own = (pl.col("tenant_id") == scope.tenant_id) & (pl.col("ns") == scope.ns)
    return bool(df.select(own.fill_null(False).all()).item())


def _no_rejects() -> pl.DataFrame:
    return conform(pl.DataFrame(), QUARANTINE)


def _violation_row(
    row: dict, v: Violation, scope: Scope, stage: str, id_columns: Sequence[str]
) -> dict:
    ident = [str(row.get(c)) for c in id_columns]
    return {
        "reject_id": ids.stable_id("q_", scope.tenant_id, scope.ns, stage, v.reason, *ident),
        "tenant_id": scope.tenant_id,
        "ns": scope.ns,
        "stage": stage,
        "reason": v.reason,
        "detail": f"the row broke the contract's {v.check!r} check on {v.column!r}; it was "
        "quarantined and the rest stored",
        "source_file": redact(row["source_file"]) if row.get("source_file") else None,
        "line_no": row.get("line_no"),
        "session_id": redact(row["session_id"]) if row.get("session_id") else None,
        "turn_id": redact(row["turn_id"]) if row.get("turn_id") else None,
        "record": None,
    }


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
