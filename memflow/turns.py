"""The turns stage, table to table: a tenant's landing files -> redacted turns, rejects and the
landing index.

Incremental: `ingest_turns` gets the tenant's previous tables and reads only the landing files
that are new or changed since the index recorded them (same size and mtime = unchanged, one
`stat`). A changed file's previous rows are replaced by what it holds now; rows of files that
disappeared stay (nothing stored is lost). So a new day of turns costs time proportional to the
new data, not to the tenant's history. No Dagster here: the `raw_turns` asset wraps this.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

import polars as pl

from memflow import landing
from memflow.rekey import rekey_turn_keys, stale_duplicate_files
from memflow.retractions import retract_payload
from schemas import ids
from schemas.redaction import redact, redact_json, redact_with_count
from schemas.rules import TimeWindow
from schemas.scope import Scope
from schemas.tables import LANDING_FILES, QUARANTINE, RAW_TURNS, conform, empty

STAGE = "landing"


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


@dataclass
class TurnTables:
    """A tenant's tables of this stage (previous or new)."""

    turns: pl.DataFrame  # RAW_TURNS
    rejects: pl.DataFrame  # QUARANTINE (stage landing)
    files: pl.DataFrame  # LANDING_FILES

    @classmethod
    def empty(cls) -> TurnTables:
        return cls(empty(RAW_TURNS), empty(QUARANTINE), empty(LANDING_FILES))

    @classmethod
    def of(
        cls,
        turns: pl.DataFrame | None,
        rejects: pl.DataFrame | None,
        files: pl.DataFrame | None,
    ) -> TurnTables:
        def typed(df: pl.DataFrame | None, columns: dict) -> pl.DataFrame:
            return conform(df, columns) if df is not None else empty(columns)

        # Turn keys of ids holding \x1f or \x1e, written before the injective id encoding,
        # move over (memflow.rekey); every other key is what it was.
        stored, _ = rekey_turn_keys(typed(turns, RAW_TURNS))
        held, index = typed(rejects, QUARANTINE), typed(files, LANDING_FILES)
        if reread := stale_duplicate_files(stored, held):
            index = index.filter(~pl.col("source_file").is_in(sorted(reread)))
        return cls(stored, held, index)


@dataclass
class TurnsUpdate:
    tables: TurnTables
    files_seen: int = 0
    files_read: int = 0
    records_read: int = 0
    new_turns: int = 0
    new_rejects: int = 0
    replaced_turns: int = 0  # rows of changed files, replaced by what the files hold now
    redactions: int = 0
    read_files: list[str] = field(default_factory=list)
    problems: list[landing.LandingProblem] = field(default_factory=list)

    def metadata(self) -> dict[str, int]:
        return {
            "files_seen": self.files_seen,
            "files_read": self.files_read,
            "records_read": self.records_read,
            "new_turns": self.new_turns,
            "new_rejects": self.new_rejects,
            "replaced_turns": self.replaced_turns,
            "redactions": self.redactions,
        }


def _unchanged(path: Path, known: dict | None) -> bool:
    if known is None:
        return False
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return False
    return st.st_size == known["size"] and st.st_mtime_ns == known["mtime_ns"]


def ingest_turns(
    landing_root: Path,
    scope: Scope,
    files: Sequence[Path],
    previous: TurnTables,
    now: datetime,
    window: TimeWindow | None = None,
) -> TurnsUpdate:
    """Bring the tenant's turn tables up to date with its landing `files` (as `discover` listed
    them): read what is new or changed (`memflow.landing.read_tenant_files`: regular files only,
    the time window, duplicates against every stored turn), redact it, and record each file's
    version and line counts in the index. A file that could not be read keeps its earlier rows;
    the problem is reported in `problems`."""
    index = {r["source_file"]: r for r in previous.files.to_dicts()}
    update = TurnsUpdate(previous, files_seen=len(files))
    candidates = [
        p for p in files if not _unchanged(p, index.get(landing.source_name(p, landing_root)))
    ]
    if not candidates:
        return update
    names = {landing.source_name(p, landing_root) for p in candidates}
    others = previous.turns.filter(~pl.col("source_file").is_in(list(names)))
    read = landing.read_tenant_files(
        landing_root,
        scope,
        candidates,
        window=window,
        ingested_keys=others["turn_key"],
        now=now,
    )
    update.problems = read.problems
    replaced = [f.source_file for f in read.files if f.read]
    if not replaced:
        return update
    update.read_files = replaced
    update.files_read = len(replaced)
    update.records_read = read.records

    kept_turns = previous.turns.filter(~pl.col("source_file").is_in(replaced))
    kept_rejects = previous.rejects.filter(~pl.col("source_file").is_in(replaced))
    update.replaced_turns = previous.turns.height - kept_turns.height

    new_turns: list[dict] = []
    for row in read.turns.sort("ts", "source_file", "line_no").to_dicts():
        content, n = redact_with_count(row.get("content") or "")
        tool_triples, n_tool = _tool_triples(row.get("tool_input_json"))
        tool_retract, n_retract = retract_payload(row.get("tool_name"), row.get("tool_input_json"))
        update.redactions += n + n_tool + n_retract
        new_turns.append(
            {
                **{c: row.get(c) for c in RAW_TURNS if c in row},
                "content": content,
                "content_sha256": ids.sha256_text(content),
                "tool_triples": tool_triples,
                "tool_retract": tool_retract,
                "redactions": n + n_tool + n_retract,
            }
        )
    turns_new = conform(
        pl.DataFrame(new_turns, schema_overrides=RAW_TURNS, infer_schema_length=None)
        if new_turns
        else pl.DataFrame(),
        RAW_TURNS,
    )
    rejects_new = finish_rejects(read.rejects)
    update.new_turns, update.new_rejects = turns_new.height, rejects_new.height

    turns = pl.concat([kept_turns, turns_new]).sort("ts", "source_file", "line_no")
    rejects = pl.concat([kept_rejects, rejects_new]).sort("source_file", "line_no")
    for f in read.files:
        if not f.read or f.fingerprint is None:
            continue
        index[f.source_file] = {
            "tenant_id": scope.tenant_id,
            "ns": scope.ns,
            "source_file": f.source_file,
            "size": f.fingerprint.size,
            "mtime_ns": f.fingerprint.mtime_ns,
            "sha256": f.fingerprint.sha256,
            "records": f.records,
            "turns": f.turns,
            "rejects": f.rejects,
            "read_at": now,
        }
    files_df = conform(
        pl.DataFrame(list(index.values()), schema_overrides=LANDING_FILES), LANDING_FILES
    ).sort("source_file")
    update.tables = TurnTables(turns, rejects, files_df)
    return update


def finish_rejects(df: pl.DataFrame) -> pl.DataFrame:
    """Landing rejects in the QUARANTINE layout: redacted, with stable ids."""
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
                STAGE,
                r["reason"],
                str(r["source_file"]),
                str(r["line_no"]),
            ),
            return_dtype=pl.String,
        )
        .alias("reject_id"),
        pl.lit(STAGE).alias("stage"),
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


__all__ = ["TurnTables", "TurnsUpdate", "apply_retention", "finish_rejects", "ingest_turns"]
