"""What the tables and stores hold, per tenant: the CLI's summaries and `memflow status`."""

from __future__ import annotations

from collections import Counter
from typing import Any

import polars as pl

from resources.scope import Scope
from resources.tables import TableStore

PER_DAY = ("raw_turns", "turn_rejects", "extracted_triples", "extraction_rejects")


def table_rows(tables: TableStore, scope: Scope) -> dict[str, int]:
    rows: dict[str, int] = {}
    for asset in PER_DAY:
        df = tables.read_days(asset, scope)
        rows[asset] = 0 if df is None else df.height
    for asset in ("validated_facts", "entities", "quarantine", "entity_embeddings"):
        df = tables.read(asset, scope)
        rows[asset] = 0 if df is None else df.height
    return rows


def tenant_summary(tables: TableStore, scope: Scope) -> dict[str, Any]:
    rows = table_rows(tables, scope)
    quarantine = tables.read("quarantine", scope)
    reasons = Counter(quarantine["reason"].to_list()) if quarantine is not None else Counter()
    turns = tables.read_days("raw_turns", scope)
    awaiting = 0
    if turns is not None and turns.height:
        awaiting = turns.filter(
            pl.col("role").is_in(["user", "assistant"])
            & pl.col("tool_triples").is_null()
            & pl.col("content").is_not_null()
        ).height
    triples = tables.read_days("extracted_triples", scope)
    model_triples = 0 if triples is None else triples.filter(pl.col("source") != "explicit").height
    return {
        "tenant": scope.key,
        "turns": rows["raw_turns"],
        "triples": rows["extracted_triples"],
        "facts": rows["validated_facts"],
        "entities": rows["entities"],
        "rejects": rows["quarantine"],
        "rejects_by_reason": dict(sorted(reasons.items())),
        "text_turns_awaiting_extraction": 0 if model_triples else awaiting,
    }


def format_summary(rows: list[dict[str, Any]]) -> str:
    lines = [
        f"{'tenant':<28} {'turns':>6} {'triples':>8} {'facts':>6} {'entities':>8} {'rejects':>8}"
    ]
    for r in rows:
        lines.append(
            f"{r['tenant']:<28} {r['turns']:>6} {r['triples']:>8} {r['facts']:>6} "
            f"{r['entities']:>8} {r['rejects']:>8}"
        )
        if r["rejects_by_reason"]:
            reasons = ", ".join(f"{k} {v}" for k, v in r["rejects_by_reason"].items())
            lines.append(f"    rejects by reason: {reasons}")
        if r.get("text_turns_awaiting_extraction"):
            lines.append(
                f"    {r['text_turns_awaiting_extraction']} text turns await extraction "
                "(no extractor configured: set MEMFLOW_EXTRACTOR)"
            )
        for key in ("graph", "vectors"):
            if key in r:
                lines.append(f"    {key}: {r[key]}")
    return "\n".join(lines)
