"""The turns stage, table to table: a tenant's landing files -> redacted turns, rejects and the
landing index.

Incremental: `ingest_turns` gets the tenant's previous tables and reads only the landing files
that are new or changed since the index recorded them (same size and mtime = unchanged, one
`stat`), plus the unchanged files that hold a duplicate of a turn a changed file held (their
copy may be the one to keep now). A changed file's previous rows are replaced by what it holds
now; rows of files that disappeared stay (nothing stored is lost). So a new day of turns costs
time proportional to the new data, not to the tenant's history. `settle` then applies what the
turn contract quarantined, recounts the index and applies retention. No Dagster here: the
`raw_turns` asset wraps these two calls.
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
from schemas.rules import Reason, TimeWindow
from schemas.scope import Scope
from schemas.tables import LANDING_FILES, QUARANTINE, RAW_TURNS, conform, empty

STAGE = "landing"


def _tool_payload(tool_name: str | None, raw: str | None) -> tuple[str | None, int]:
    """What a memflow tool turn keeps in ``tool_triples`` (redacted), and how many secrets went:
    an upsert's ``triples`` list, a retraction's ``{"retract", "reason"?, "by"?}`` object
    (checked by the landing reader). Any other tool's input is not memflow's to store."""
    if raw is None or tool_name not in landing.OWN_TOOLS:
        return None, 0
    value = json.loads(raw)
    kept = value.get("triples") if tool_name == landing.UPSERT_TOOL else value
    if kept is None:
        return None, 0
    text = json.dumps(kept, ensure_ascii=False, sort_keys=True)
    _, found = redact_with_count(text)
    return json.dumps(redact_json(kept), ensure_ascii=False, sort_keys=True), found


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
    files: Sequence[Path] | None,
    previous: TurnTables,
    now: datetime,
    window: TimeWindow | None = None,
) -> TurnsUpdate:
    """Bring the tenant's turn tables up to date with its landing `files` (as `discover` listed
    them; None: the tenant's directory is listed here, and only it): read what is new or
    changed, and what holds a duplicate of a turn a changed file held
    (`memflow.landing.read_tenant_files`: regular files only, the time window, duplicates
    against every other stored turn), redact it, and record each file's version and line
    counts in the index. A file that could not be read keeps its earlier rows; the problem is
    reported in `problems`."""
    listing_problems: list[landing.LandingProblem] = []
    if files is None:
        files, listing_problems = landing.tenant_files(landing_root, scope)
    index = {r["source_file"]: r for r in previous.files.to_dicts()}
    update = TurnsUpdate(previous, files_seen=len(files), problems=listing_problems)
    by_name = {landing.source_name(p, landing_root): p for p in files}
    changed = {name for name, p in by_name.items() if not _unchanged(p, index.get(name))}
    names = changed | (_holding_duplicates_of(previous, changed) & by_name.keys())
    if not names:
        return update
    others = previous.turns.filter(~pl.col("source_file").is_in(list(names)))
    read = landing.read_tenant_files(
        landing_root,
        scope,
        [by_name[name] for name in sorted(names)],
        window=window,
        ingested_keys=others["turn_key"],
        now=now,
    )
    update.problems = [*listing_problems, *read.problems]
    replaced = [f.source_file for f in read.files if f.read]
    if not replaced:
        return update
    update.read_files = replaced
    update.files_read = len(replaced)
    update.records_read = read.records
    kept_turns = previous.turns.filter(~pl.col("source_file").is_in(replaced))
    kept_rejects = previous.rejects.filter(~pl.col("source_file").is_in(replaced))
    update.replaced_turns = previous.turns.height - kept_turns.height
    turns_new, update.redactions = _redacted_turns(read.turns)
    rejects_new = finish_rejects(read.rejects)
    update.new_turns, update.new_rejects = turns_new.height, rejects_new.height
    for f in read.files:
        if f.read and f.fingerprint is not None:
            index[f.source_file] = _index_row(scope, f, now)
    update.tables = TurnTables(
        pl.concat([kept_turns, turns_new]).sort("ts", "source_file", "line_no"),
        pl.concat([kept_rejects, rejects_new]).sort("source_file", "line_no"),
        conform(
            pl.DataFrame(list(index.values()), schema_overrides=LANDING_FILES), LANDING_FILES
        ).sort("source_file"),
    )
    return update


def _holding_duplicates_of(previous: TurnTables, changed: set[str]) -> set[str]:
    """Unchanged files holding a ``duplicate_turn`` reject of a turn stored from a changed
    file, and so on (their copy may be the one a clean read keeps once the changed file is read
    again: a turn held by two files survives a rewrite of the one it was stored from)."""
    dupes = previous.rejects.filter(
        (pl.col("reason") == Reason.DUPLICATE_TURN) & ~pl.col("source_file").is_in(list(changed))
    )
    if not changed or dupes.is_empty():
        return set()
    held = [
        (source, ids.turn_key(tenant, ns, session or "", turn or ""))
        for source, tenant, ns, session, turn in dupes.select(
            "source_file", "tenant_id", "ns", "session_id", "turn_id"
        ).iter_rows()
    ]
    grown, found = set(changed), set()
    while True:
        stored = previous.turns.filter(pl.col("source_file").is_in(list(grown)))
        keys = set(stored["turn_key"].to_list())
        more = {source for source, key in held if key in keys and source not in grown}
        if not more:
            return found
        found |= more
        grown |= more


def _redacted_turns(turns: pl.DataFrame) -> tuple[pl.DataFrame, int]:
    """Read turns as `RAW_TURNS` rows: content and tool payload redacted, hashed; and how many
    secrets were replaced."""
    rows: list[dict] = []
    redactions = 0
    for row in turns.sort("ts", "source_file", "line_no").to_dicts():
        content, n = redact_with_count(row.get("content") or "")
        tool_triples, n_tool = _tool_payload(row.get("tool_name"), row.get("tool_input_json"))
        tool_retract, _ = retract_payload(row.get("tool_name"), row.get("tool_input_json"))
        redactions += n + n_tool
        rows.append(
            {
                **{c: row.get(c) for c in RAW_TURNS if c in row},
                "content": content,
                "content_sha256": ids.sha256_text(content),
                "tool_triples": tool_triples,
                "tool_retract": tool_retract,
                "redactions": n + n_tool,
            }
        )
    frame = (
        pl.DataFrame(rows, schema_overrides=RAW_TURNS, infer_schema_length=None)
        if rows
        else pl.DataFrame()
    )
    return conform(frame, RAW_TURNS), redactions


def _index_row(scope: Scope, f: landing.FileRead, now: datetime) -> dict:
    assert f.fingerprint is not None
    return {
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


@dataclass
class Settled:
    """A tenant's tables of this stage as they are stored, once the turn contract has spoken."""

    tables: TurnTables  # turns with retention applied
    contract_rejects: int  # turns the contract quarantined in this run
    new_rejects: pl.DataFrame  # rejects not stored before (landing and contract)
    unbalanced: list[str]  # source files whose records != turns + rejects


def new_turns(previous: TurnTables, update: TurnsUpdate) -> pl.DataFrame:
    """The turns of `update` that were not stored before: what the turn contract checks."""
    return update.tables.turns.join(previous.turns.select("turn_key"), on="turn_key", how="anti")


def settle(
    previous: TurnTables,
    update: TurnsUpdate,
    contract_rejects: pl.DataFrame,
    retention_days: int,
    now: datetime,
) -> Settled:
    """The tables to store: the turns the contract quarantined (`contract_rejects`, QUARANTINE
    rows) moved from the turns to the rejects, the index's per-file counts recounted from what
    is stored, retention applied (`apply_retention`)."""
    turns, rejects = update.tables.turns, update.tables.rejects
    if contract_rejects.height:
        on = ["session_id", "turn_id", "source_file", "line_no"]
        turns = turns.join(contract_rejects.select(on), on=on, how="anti")
        rejects = pl.concat([rejects, contract_rejects])
    files = recount(update.tables.files, turns, rejects)
    off = files.filter(pl.col("records") != pl.col("turns") + pl.col("rejects"))
    return Settled(
        TurnTables(apply_retention(turns, retention_days, now), rejects, files),
        contract_rejects.height,
        rejects.join(previous.rejects.select("reject_id"), on="reject_id", how="anti"),
        off["source_file"].to_list(),
    )


def recount(files: pl.DataFrame, turns: pl.DataFrame, rejects: pl.DataFrame) -> pl.DataFrame:
    """The index's per-file turn and reject counts, from the tables as stored."""
    kept = turns.group_by("source_file").agg(pl.len().alias("t"))
    dropped = rejects.group_by("source_file").agg(pl.len().alias("r"))
    return (
        files.join(kept, on="source_file", how="left")
        .join(dropped, on="source_file", how="left")
        .with_columns(
            pl.col("t").fill_null(0).cast(pl.Int64).alias("turns"),
            pl.col("r").fill_null(0).cast(pl.Int64).alias("rejects"),
        )
        .drop("t", "r")
    )


def apply_retention(turns: pl.DataFrame, retention_days: int, now: datetime) -> pl.DataFrame:
    """Drop turn text older than `retention_days` (ids and hashes stay). -1 keeps everything.

    0 is handled after extraction (text is needed until then): `drop_extracted_text`.
    """
    if retention_days <= 0 or turns.is_empty():
        return turns
    cutoff = now - timedelta(days=retention_days)
    return turns.with_columns(
        pl.when(pl.col("ts") < cutoff).then(None).otherwise(pl.col("content")).alias("content")
    )


def drop_extracted_text(turns: pl.DataFrame, log: pl.DataFrame) -> tuple[pl.DataFrame, int]:
    """Retention 0: the turns with the text of every turn whose extraction is done (in the
    extraction `log`) dropped, ids and hashes kept; and how many turns lost their text (0:
    `turns` unchanged)."""
    extracted = log.filter(pl.col("model") != "none").select("turn_key")
    target = turns.join(extracted, on="turn_key", how="semi").filter(
        pl.col("content").is_not_null()
    )
    if not target.height:
        return turns, 0
    stripped = turns.with_columns(
        pl.when(pl.col("turn_key").is_in(target["turn_key"].implode()))
        .then(pl.lit(None, dtype=pl.String))
        .otherwise(pl.col("content"))
        .alias("content")
    )
    return stripped, target.height


__all__ = [
    "Settled",
    "TurnTables",
    "TurnsUpdate",
    "apply_retention",
    "drop_extracted_text",
    "finish_rejects",
    "ingest_turns",
    "new_turns",
    "recount",
    "settle",
]
