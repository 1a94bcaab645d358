"""The turns stage, table to table: a tenant's landing files -> redacted turns + rejects.

No Dagster here: the `raw_turns` asset wraps `read_tenant_day` and `apply_retention`, and the
landing sensor and the runner ask `file_days` which day partitions a file feeds.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl

from memflow import landing
from schemas import ids
from schemas.redaction import redact, redact_json, redact_with_count
from schemas.scope import Scope
from schemas.tables import QUARANTINE, RAW_TURNS, conform


def _tool_triples(raw: str | None) -> tuple[str | None, int]:
    """The redacted `triples` list of an upsert_graph_triples call, and how many secrets went.

    Only the triples are kept: the rest of a tool's input is not memflow's to store.
    """
    if raw is None:
        return None, 0
    value = json.loads(raw)
    triples = value.get("triples") if isinstance(value, dict) else None
    if triples is None:
        return None, 0
    text = json.dumps(triples, ensure_ascii=False, sort_keys=True)
    _, found = redact_with_count(text)
    return json.dumps(redact_json(triples), ensure_ascii=False, sort_keys=True), found


def mtime_day(path: Path) -> str:
    return datetime.fromtimestamp(path.stat().st_mtime, UTC).strftime("%Y-%m-%d")


def file_days(path: Path, landing_root: Path) -> list[str]:
    """The day partitions a landing file feeds: the days of its turns, or (a file with no
    readable turn) its modification day, where its rejects are reported."""
    return landing.days_in_file(path, landing_root) or [mtime_day(path)]


def _file_rejects_with_day(read: landing.LandingRead, path: Path) -> pl.DataFrame:
    """Give each rejected line the day of the nearest valid line before it (or after it, or the
    file's modification day) so it lands in exactly one day partition."""
    rejects = read.rejects
    if rejects.is_empty():
        return rejects.with_columns(pl.lit(None, dtype=pl.String).alias("day"))
    anchors = read.turns.select("line_no", "day").sort("line_no")
    fallback = mtime_day(path)
    rejects = rejects.sort("line_no").join_asof(anchors, on="line_no", strategy="backward")
    first_day = anchors["day"][0] if anchors.height else fallback
    return rejects.with_columns(pl.col("day").fill_null(first_day))


def read_tenant_day(
    landing_root: Path, scope: Scope, day: str
) -> tuple[pl.DataFrame, pl.DataFrame, dict]:
    """(redacted turns, redacted rejects, stats) of one tenant and day from the landing zone."""
    folder = landing_root / scope.tenant_id / scope.ns
    files = (
        sorted(p for p in folder.iterdir() if landing.is_landing_file(p))
        if (folder.is_dir())
        else []
    )
    turns: list[pl.DataFrame] = []
    rejects: list[pl.DataFrame] = []
    records = 0
    for path in files:
        read = landing.read_landing_file(path, landing_root)
        records += read.records
        turns.append(read.turns.filter(pl.col("day") == day))
        file_rejects = _file_rejects_with_day(read, path)
        rejects.append(file_rejects.filter(pl.col("day") == day).drop("day"))
    turn_df = pl.concat(turns, how="diagonal_relaxed") if turns else pl.DataFrame()
    reject_df = pl.concat(rejects, how="diagonal_relaxed") if rejects else pl.DataFrame()

    stats = {"files": len(files), "records_read": records, "redactions": 0}
    out_turns: list[dict] = []
    extra_rejects: list[dict] = []
    seen: set[str] = set()
    for row in turn_df.sort("ts", "source_file", "line_no").to_dicts() if turn_df.height else []:
        key = ids.turn_key(scope.tenant_id, scope.ns, row["session_id"], row["turn_id"])
        if key in seen:
            extra_rejects.append(
                {
                    **{k: row.get(k) for k in ("session_id", "turn_id", "source_file", "line_no")},
                    "tenant_id": scope.tenant_id,
                    "ns": scope.ns,
                    "stage": "landing",
                    "reason": "duplicate_turn",
                    "detail": "the same session_id and turn_id were already ingested from "
                    "another file; the first occurrence was kept",
                    "record": None,
                }
            )
            continue
        seen.add(key)
        content, n = redact_with_count(row.get("content") or "")
        tool_triples, n_tool = _tool_triples(row.get("tool_input_json"))
        stats["redactions"] += n + n_tool
        out_turns.append(
            {
                "turn_key": key,
                "tenant_id": scope.tenant_id,
                "ns": scope.ns,
                "day": day,
                "session_id": row["session_id"],
                "turn_id": row["turn_id"],
                "ts": row["ts"],
                "role": row["role"],
                "client": row.get("client"),
                "content": content,
                "content_sha256": ids.sha256_text(content),
                "tool_name": row.get("tool_name"),
                "tool_triples": tool_triples,
                "redactions": n + n_tool,
                "source_file": row.get("source_file"),
                "line_no": row.get("line_no"),
            }
        )
    turns_out = conform(
        pl.DataFrame(out_turns, schema_overrides=RAW_TURNS, infer_schema_length=None)
        if out_turns
        else pl.DataFrame(),
        RAW_TURNS,
    )
    rejects_all = (
        pl.concat(
            [reject_df, pl.DataFrame(extra_rejects)] if extra_rejects else [reject_df],
            how="diagonal_relaxed",
        )
        if (reject_df.height or extra_rejects)
        else pl.DataFrame()
    )
    return turns_out, _finish_rejects(rejects_all), stats


def _finish_rejects(df: pl.DataFrame) -> pl.DataFrame:
    if df.is_empty():
        return conform(pl.DataFrame(), QUARANTINE)
    df = df.with_columns(
        pl.col("record").map_elements(redact, return_dtype=pl.String)
        if "record" in df.columns
        else pl.lit(None, dtype=pl.String).alias("record"),
        pl.col("detail").map_elements(redact, return_dtype=pl.String),
    )
    df = df.with_columns(
        pl.struct("tenant_id", "ns", "source_file", "line_no", "reason")
        .map_elements(
            lambda r: ids.stable_id(
                "q_",
                r["tenant_id"],
                r["ns"],
                "landing",
                r["reason"],
                str(r["source_file"]),
                str(r["line_no"]),
            ),
            return_dtype=pl.String,
        )
        .alias("reject_id"),
        pl.lit("landing").alias("stage"),
    )
    return conform(df, QUARANTINE)


def apply_retention(turns: pl.DataFrame, retention_days: int, now: datetime) -> pl.DataFrame:
    """Drop turn text older than `retention_days` (ids and hashes stay). -1 keeps everything.

    0 is handled after extraction (text is needed until then), see `extracted_triples`.
    """
    if retention_days <= 0 or turns.is_empty():
        return turns
    cutoff = now - timedelta(days=retention_days)
    return turns.with_columns(
        pl.when(pl.col("ts") < cutoff).then(None).otherwise(pl.col("content")).alias("content")
    )
