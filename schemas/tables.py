"""The assets' names and the column layouts of their Parquet tables (the source of truth).

Every module names an asset or a table through `Asset`; contracts are in `contracts.py`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import polars as pl

from schemas.rules import SEVERITY_WARNING


class Asset:
    """Every asset's name. All but the sinks and the model sources are stored tables
    (`TABLES`). Plain strings, not an Enum: Dagster serializes asset keys and accepts only its
    own enums."""

    RAW_TURNS: Final = "raw_turns"
    TURN_REJECTS: Final = "turn_rejects"
    LANDING_FILES: Final = "landing_files"
    EXTRACTED_TRIPLES: Final = "extracted_triples"
    EXTRACTION_REJECTS: Final = "extraction_rejects"
    EXTRACTION_LOG: Final = "extraction_log"
    VALIDATED_FACTS: Final = "validated_facts"
    ENTITIES: Final = "entities"
    QUARANTINE: Final = "quarantine"
    FACT_MERGES: Final = "fact_merges"
    RETRACTION_REQUESTS: Final = "retraction_requests"
    RETRACTIONS: Final = "retractions"
    ENTITY_EMBEDDINGS: Final = "entity_embeddings"
    FACT_EMBEDDINGS: Final = "fact_embeddings"
    LANDING_PROBLEMS: Final = "landing_problems"
    GRAPH_SINK: Final = "graph_sink"
    VECTOR_SINK: Final = "vector_sink"
    EXTRACTION_MODEL: Final = "extraction_model"
    EMBEDDING_MODEL: Final = "embedding_model"


UTC_TS = pl.Datetime("us", "UTC")

RAW_TURNS: dict[str, pl.DataType] = {
    "turn_key": pl.String(),  # stable id: hash of tenant, ns, session_id, turn_id
    "tenant_id": pl.String(),
    "ns": pl.String(),
    "day": pl.String(),  # YYYY-MM-DD of ts in UTC
    "session_id": pl.String(),
    "turn_id": pl.String(),
    "ts": UTC_TS,
    "role": pl.String(),  # user | assistant | tool
    "client": pl.String(),
    "content": pl.String(),  # redacted; null once retention dropped it
    "content_sha256": pl.String(),  # of the redacted content; kept after retention
    "tool_name": pl.String(),
    # redacted JSON: an upsert's tool_input.triples array, a retract_facts turn's
    # {"retract": [...], "reason"?, "by"?}; null for any other turn
    "tool_triples": pl.String(),
    # A retract_facts call's input, redacted JSON {"retract": [...], "reason", "by"} (only what
    # memflow applies; `memflow.retractions`), or null. Null in tables written before it.
    "tool_retract": pl.String(),
    "redactions": pl.Int32(),  # how many secrets were removed from this turn
    "source_file": pl.String(),  # relative to the landing zone
    "line_no": pl.Int64(),
}

TRIPLES: dict[str, pl.DataType] = {
    "triple_id": pl.String(),
    "tenant_id": pl.String(),
    "ns": pl.String(),
    "day": pl.String(),
    "subject": pl.String(),
    "predicate": pl.String(),  # normalised to UPPER_SNAKE_CASE where trivially fixable
    "predicate_raw": pl.String(),
    "object": pl.String(),
    "subject_type": pl.String(),
    "object_type": pl.String(),
    "confidence": pl.Float64(),
    "valid_from": UTC_TS,
    "supersedes": pl.String(),  # fact_id of the fact this one replaces, or null
    "session_id": pl.String(),
    "turn_id": pl.String(),
    "client": pl.String(),
    "model": pl.String(),  # "explicit" for agents' tool calls, else the extraction model
    "source": pl.String(),  # explicit | llm | command
    # When the turn that stated it happened (its `ts`): orders statements made on one day, so
    # a fact's first statement is the earliest turn (null in tables written before it existed).
    "stated_at": UTC_TS,
}

# One turn that stated a fact.
SOURCE = pl.Struct({"session_id": pl.String(), "turn_id": pl.String()})

FACTS: dict[str, pl.DataType] = {
    "fact_id": pl.String(),
    "tenant_id": pl.String(),
    "ns": pl.String(),
    "subject_id": pl.String(),
    "subject": pl.String(),
    "predicate": pl.String(),
    "object_id": pl.String(),
    "object": pl.String(),
    "confidence": pl.Float64(),
    "valid_from": UTC_TS,
    "valid_to": UTC_TS,  # null = still valid
    "supersedes": pl.String(),
    "superseded_by": pl.String(),
    "session_id": pl.String(),
    "turn_id": pl.String(),
    "client": pl.String(),
    "model": pl.String(),
    "source": pl.String(),
    "triple_id": pl.String(),
    # Every turn whose triples state the fact, first statement first (its session_id and
    # turn_id above), at most `schemas.rules.MAX_FACT_SOURCES`; a stored fact restated later
    # gains the new turns (`memflow.facts`). Null in tables written before it existed.
    "sources": pl.List(SOURCE),
}

ENTITIES: dict[str, pl.DataType] = {
    "entity_id": pl.String(),
    "tenant_id": pl.String(),
    "ns": pl.String(),
    "name": pl.String(),  # the most used spelling
    "norm_key": pl.String(),
    "aliases": pl.List(pl.String()),  # other spellings of the same entity
    "types": pl.List(pl.String()),
    "first_seen": UTC_TS,
}

QUARANTINE: dict[str, pl.DataType] = {
    "reject_id": pl.String(),  # stable: the same bad input gives the same id
    "tenant_id": pl.String(),
    "ns": pl.String(),
    "stage": pl.String(),  # landing | extraction | validation
    "reason": pl.String(),  # a short machine-readable code, e.g. predicate_not_upper_snake
    "detail": pl.String(),  # a human sentence, redacted
    "source_file": pl.String(),
    "line_no": pl.Int64(),
    "session_id": pl.String(),
    "turn_id": pl.String(),
    "record": pl.String(),  # the offending record, redacted, at most 2,000 characters
    # error: the row stands for input that was not stored; warning: the input was stored, and
    # this row says what was changed (e.g. an unreadable valid_from replaced by the turn's time)
    "severity": pl.String(),
}

LANDING_FILES: dict[str, pl.DataType] = {
    # The landing index of a tenant: which version of each file its turns came from, so a run
    # reads only new or changed files, and every line is accounted for (records = turns +
    # rejects).
    "tenant_id": pl.String(),
    "ns": pl.String(),
    "source_file": pl.String(),  # relative to the landing zone
    "size": pl.Int64(),
    "mtime_ns": pl.Int64(),
    "sha256": pl.String(),  # of exactly the bytes read
    "records": pl.Int64(),  # non-blank lines (JSONL) or rows (Parquet)
    "turns": pl.Int64(),  # accepted into raw_turns
    "rejects": pl.Int64(),  # quarantined in turn_rejects
    "read_at": UTC_TS,
}

EXTRACTION_LOG: dict[str, pl.DataType] = {
    # One row per turn the extraction stage handled: the turns it owes nothing, and with which
    # model each was done (a model change re-extracts the turns of the previous model).
    "turn_key": pl.String(),
    "tenant_id": pl.String(),
    "ns": pl.String(),
    "day": pl.String(),
    "model": pl.String(),  # the extractor's identity, "explicit", or "none" (awaiting)
    "triples": pl.Int64(),
    "rejects": pl.Int64(),
    "extracted_at": UTC_TS,
    # What the turn held when it was extracted (`memflow.extract.turn_fingerprint`): a turn
    # restated under the same ids with other content is extracted again. Null in logs written
    # before the column existed (those turns count as unchanged).
    "turn_sha256": pl.String(),
}

# What the landing zone holds that no tenant's reader consumed: entries that are not regular
# files, symlinks (never followed), directories with invalid scope names, misplaced files,
# files that vanished or could not be opened. One row per entry, from
# `memflow.landing.landing_problems` / `TenantRead.problems_frame`.
LANDING_PROBLEMS: dict[str, pl.DataType] = {
    "path": pl.String(),  # relative to the landing root, posix; ids redacted
    "reason": pl.String(),  # invalid_scope | symlink | not_a_regular_file | nested_directory |
    # misplaced_file | missing_root | unreadable_file | vanished | hidden_directory
    "detail": pl.String(),
    "lines": pl.Int64(),  # non-blank lines / Parquet rows it holds; null: not counted
    "tenant_id": pl.String(),  # the tenant whose directory holds it; null outside any tenant
    "ns": pl.String(),
}

# Provenance of triples merged into a fact rather than stored as one: a triple that repeats
# the (subject, predicate, object) of a fact whose first statement is another triple. Counted
# as `merged` by `memflow.facts.build_facts`. A function of the triples and the stored facts'
# first statements only, so a rerun, or a kill -9 and a rerun, writes the same rows (before
# issue 16 an `into` column said whether the fact was stored by an earlier run, which a rerun
# changed from "batch" to "stored").
FACT_MERGES: dict[str, pl.DataType] = {
    "fact_id": pl.String(),  # the fact the triple was merged into
    "triple_id": pl.String(),
    "tenant_id": pl.String(),
    "ns": pl.String(),
    "subject": pl.String(),  # the spellings this triple used (kept as aliases)
    "predicate": pl.String(),
    "object": pl.String(),
    "confidence": pl.Float64(),
    "valid_from": UTC_TS,
    "session_id": pl.String(),
    "turn_id": pl.String(),
    "client": pl.String(),
    "model": pl.String(),
    "source": pl.String(),
}

# One item of a retract_facts turn (`memflow.retractions`), as the extraction stage read it:
# what to take out of memory, when (the turn's time), who asked and why. Applied by the facts
# stage on every run, so a fact that arrives late is still retracted, as a clean run would.
RETRACTION_REQUESTS: dict[str, pl.DataType] = {
    "request_id": pl.String(),  # stable: scope, session, turn, item index
    "tenant_id": pl.String(),
    "ns": pl.String(),
    "day": pl.String(),
    "session_id": pl.String(),  # the retract turn
    "turn_id": pl.String(),
    "ts": UTC_TS,  # when the retraction takes effect: the turn's time
    "item": pl.Int64(),  # index in tool_input.retract
    "kind": pl.String(),  # fact_id | triple | entity
    "fact_id": pl.String(),  # kind fact_id
    "subject": pl.String(),  # kind triple (names redacted, predicate normalised)
    "predicate": pl.String(),
    "object": pl.String(),
    "entity": pl.String(),  # kind entity: a name or an entity id
    "reason": pl.String(),  # redacted, clipped
    "by": pl.String(),  # the principal or client that asked, redacted
    "client": pl.String(),
}

# What the retractions did: one row per fact a request closed (valid_to = the request's time),
# with who asked, when, why and from which turn. A request that closed nothing is a quarantine
# row (`retract_unknown`) instead.
RETRACTIONS: dict[str, pl.DataType] = {
    "request_id": pl.String(),
    "tenant_id": pl.String(),
    "ns": pl.String(),
    "fact_id": pl.String(),  # the fact closed
    "subject": pl.String(),
    "predicate": pl.String(),
    "object": pl.String(),
    "kind": pl.String(),  # fact_id | triple | entity (a forget)
    "entity_id": pl.String(),  # kind entity: the entity forgotten
    "retracted_at": UTC_TS,
    "by": pl.String(),
    "reason": pl.String(),
    "session_id": pl.String(),  # the retract turn
    "turn_id": pl.String(),
    "client": pl.String(),
}

# Values a column takes when a table lacks it (written by an older version) or holds null.
COLUMN_DEFAULTS: dict[str, object] = {"severity": "error"}

EMBEDDINGS: dict[str, pl.DataType] = {
    "tenant_id": pl.String(),
    "ns": pl.String(),
    "entity_id": pl.String(),
    "model": pl.String(),
    "dim": pl.Int32(),
    "text_hash": pl.String(),  # sha256 of the embedded (redacted) name
}

FACT_EMBEDDINGS: dict[str, pl.DataType] = {
    # Which facts hold a vector of the current model; the vectors are in the embedding ledger
    # (`resources.vector.ledger`) under `model`, the fact-vector key (`facts:<model>`).
    "tenant_id": pl.String(),
    "ns": pl.String(),
    "fact_id": pl.String(),
    "model": pl.String(),
    "dim": pl.Int32(),
    "text_hash": pl.String(),  # sha256 of the embedded fact text (`memflow.fact_embedding`)
}


# The stored tables: asset -> columns. Every table is per tenant; the PER_DAY ones are stored
# one file per (tenant, day) of their `day` column, so a run rewrites only the days it changed.
TABLES: dict[str, dict[str, pl.DataType]] = {
    Asset.RAW_TURNS: RAW_TURNS,
    Asset.TURN_REJECTS: QUARANTINE,
    Asset.LANDING_FILES: LANDING_FILES,
    Asset.EXTRACTED_TRIPLES: TRIPLES,
    Asset.EXTRACTION_REJECTS: QUARANTINE,
    Asset.EXTRACTION_LOG: EXTRACTION_LOG,
    Asset.VALIDATED_FACTS: FACTS,
    Asset.ENTITIES: ENTITIES,
    Asset.QUARANTINE: QUARANTINE,
    Asset.FACT_MERGES: FACT_MERGES,
    Asset.RETRACTION_REQUESTS: RETRACTION_REQUESTS,
    Asset.RETRACTIONS: RETRACTIONS,
    Asset.ENTITY_EMBEDDINGS: EMBEDDINGS,
    Asset.FACT_EMBEDDINGS: FACT_EMBEDDINGS,
}
PER_DAY: tuple[str, ...] = (Asset.RAW_TURNS, Asset.EXTRACTED_TRIPLES, Asset.EXTRACTION_LOG)


def _landing_figures(df: pl.DataFrame) -> dict[str, int]:
    return {"records": int(df["records"].sum() or 0)}


def _log_figures(df: pl.DataFrame) -> dict[str, int]:
    return {"awaiting": int((df["model"] == "none").sum() or 0)}


def _quarantine_figures(df: pl.DataFrame) -> dict[str, int]:
    warning = pl.col("severity") == SEVERITY_WARNING
    out = {"rows": df.height, "warnings": int(df.select(warning.sum()).item() or 0)}
    for kind, part in (("reject", df.filter(~warning)), ("warning", df.filter(warning))):
        for reason, n in part.group_by("reason").len().iter_rows():
            out[f"{kind}:{reason}"] = n
    return out


# Per-tenant figures of a table that a report over every tenant needs (`memflow status`: the
# lines read, the turns awaiting extraction, the rejects by reason): the columns they are made
# of, and how. The table store records them with each write, beside the table, so the report
# reads one small table instead of every tenant's data files (`TableStore.figures`).
FIGURES: dict[str, tuple[tuple[str, ...], Callable[[pl.DataFrame], dict[str, int]]]] = {
    Asset.LANDING_FILES: (("records",), _landing_figures),
    Asset.EXTRACTION_LOG: (("model",), _log_figures),
    Asset.QUARANTINE: (("reason", "severity"), _quarantine_figures),
}


def empty(columns: dict[str, pl.DataType]) -> pl.DataFrame:
    return pl.DataFrame(schema=columns)


def conform(df: pl.DataFrame, columns: dict[str, pl.DataType]) -> pl.DataFrame:
    """Select and cast to the layout; absent columns become nulls of the right type, or the
    value `COLUMN_DEFAULTS` gives (which also fills that column's nulls)."""
    if _in_layout(df, columns):
        return df  # already conformed (most frames are, by the step that wrote them)
    out = _conform(df, columns)
    defaults = [
        pl.col(c).fill_null(pl.lit(v, dtype=columns[c]))
        for c, v in COLUMN_DEFAULTS.items()
        if c in columns
    ]
    return out.with_columns(defaults) if defaults else out


def _in_layout(df: pl.DataFrame, columns: dict[str, pl.DataType]) -> bool:
    """Exactly these columns in this order with these types (strictly: a time zone or a
    time unit counts), and no null a default would fill: conforming changes nothing."""
    if df.width != len(columns) or df.columns != list(columns):
        return False
    if not all(got.is_(want) for got, want in zip(df.dtypes, columns.values(), strict=True)):
        return False
    return not any(df[c].null_count() for c in COLUMN_DEFAULTS if c in columns)


def _conform(df: pl.DataFrame, columns: dict[str, pl.DataType]) -> pl.DataFrame:
    if df.height == 0:
        present = [c for c in columns if c in df.columns]
        return (
            pl.DataFrame(schema=columns)
            if not present
            else df.select(
                [
                    (pl.col(c) if c in df.columns else pl.lit(None)).cast(t, strict=False).alias(c)
                    for c, t in columns.items()
                ]
            )
        )
    return df.select(
        [
            (pl.col(c) if c in df.columns else pl.repeat(None, df.height))
            .cast(t, strict=False)
            .alias(c)
            for c, t in columns.items()
        ]
    )
