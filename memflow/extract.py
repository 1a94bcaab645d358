"""Raw turns of one tenant-day -> candidate triples and extraction-stage rejects.

`ExtractionReport.rejects` is quarantine-shaped and holds both severities: ``error`` rows
(items that became no triple, counted in `rejects_by_reason`) and ``warning`` rows (triples
kept with a change, e.g. an unreadable valid_from; counted in `warnings_by_reason`).

Explicit triples come from the agents' `upsert_graph_triples` tool calls. Text turns (user and
assistant turns with content and no tool call) go to the configured extraction provider; with no
provider they are kept in `raw_turns` and counted as awaiting extraction, never dropped.
A `retract_facts` turn is neither: its items become retraction requests
(`memflow.retractions`), never sent to a model, never read as triples.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

import polars as pl

from memflow.landing import RETRACT_TOOL, UPSERT_TOOL
from memflow.rekey import rekey_log, rekey_turn_keys
from memflow.retractions import is_retraction, requests_frame, requests_from_turn
from resources.models.base import ExtractionProvider, ModelError, TurnText
from schemas import ids, rules
from schemas.scope import Scope
from schemas.tables import EXTRACTION_LOG, QUARANTINE, RETRACTION_REQUESTS, TRIPLES, conform, empty
from schemas.triples import (
    TurnContext,
    items_to_triples,
    reject_row,
    rejects_frame,
    triples_frame,
)


@dataclass
class ExtractionReport:
    triples: pl.DataFrame
    rejects: pl.DataFrame
    requests: pl.DataFrame = field(default_factory=lambda: requests_frame([]))
    turns: int = 0
    explicit_turns: int = 0
    retract_turns: int = 0
    text_turns: int = 0
    awaiting_extraction: int = 0
    model_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    low_confidence_dropped: int = 0
    model: str | None = None
    seconds: float = 0.0
    rejects_by_reason: dict[str, int] = field(default_factory=dict)  # severity error only
    warnings_by_reason: dict[str, int] = field(default_factory=dict)  # kept, with a change


def _ctx(row: dict, *, model: str, source: str) -> TurnContext:
    return TurnContext(
        tenant_id=row["tenant_id"],
        ns=row["ns"],
        day=row["day"],
        session_id=row["session_id"],
        turn_id=row["turn_id"],
        ts=row["ts"],
        client=row["client"] or "unknown",
        model=model,
        source=source,
        source_file=row.get("source_file"),
        line_no=row.get("line_no"),
    )


def extract_day(
    scope: Scope,
    turns: pl.DataFrame,
    provider: ExtractionProvider | None,
    known_entities: Sequence[str] = (),
    *,
    progress: Callable[[str], None] | None = None,
) -> ExtractionReport:
    started = time.perf_counter()
    rows: list[dict] = []
    rejects: list[dict] = []
    report = ExtractionReport(
        triples=conform(pl.DataFrame(), TRIPLES), rejects=conform(pl.DataFrame(), QUARANTINE)
    )
    records = turns.sort("ts", "session_id", "turn_id").to_dicts()
    report.turns = len(records)

    text: list[dict] = []
    requests: list[dict] = []
    for row in records:
        if row["tenant_id"] != scope.tenant_id or row["ns"] != scope.ns:
            raise ValueError(f"a turn of {row['tenant_id']}/{row['ns']} reached {scope}")
        if is_retraction(row.get("tool_name")):
            report.retract_turns += 1
            ctx = _ctx(row, model="explicit", source="explicit")
            got, bad = requests_from_turn(row.get("tool_retract"), ctx)
            requests += got
            rejects += bad
        elif row.get("tool_name") == UPSERT_TOOL and row.get("tool_triples") is not None:
            report.explicit_turns += 1
            items = json.loads(row["tool_triples"])
            got, bad = items_to_triples(items, _ctx(row, model="explicit", source="explicit"))
            rows += got
            rejects += bad
        elif row["role"] in rules.TEXT_ROLES and (row.get("content") or "").strip():
            text.append(row)
    report.text_turns = len(text)

    if provider is None:
        report.awaiting_extraction = len(text)
    elif text:
        report.model = provider.model
        source = "command" if provider.kind == "command" else "llm"
        by_session: dict[str, list[dict]] = {}
        for row in text:
            by_session.setdefault(row["session_id"], []).append(row)
        for session_id, session_rows in by_session.items():
            if progress:
                progress(f"extracting session {session_id} ({len(session_rows)} turns)")
            batch = provider.extract(
                [
                    TurnText(r["session_id"], r["turn_id"], r["role"], r["content"])
                    for r in session_rows
                ],
                known_entities,
            )
            report.model_calls += batch.calls
            report.prompt_tokens += batch.prompt_tokens
            report.completion_tokens += batch.completion_tokens
            by_turn = {r["turn_id"]: r for r in session_rows}
            last = session_rows[-1]
            for reason, detail in batch.rejects:
                rejects += _batch_reject(last, provider.model, source, reason, detail)
            grouped: dict[str, list] = {}
            for item in batch.items:
                turn_id = str(item.get("turn_id")) if isinstance(item, dict) else ""
                grouped.setdefault(turn_id if turn_id in by_turn else last["turn_id"], []).append(
                    item
                )
            for turn_id, items in grouped.items():
                got, bad = items_to_triples(
                    items, _ctx(by_turn[turn_id], model=provider.model, source=source)
                )
                rows += got
                rejects += bad
    report.triples = triples_frame(rows)
    report.rejects = rejects_frame(rejects)
    report.requests = requests_frame(requests)
    severity = report.rejects["severity"]
    errors = report.rejects.filter(severity == rules.SEVERITY_ERROR)["reason"].to_list()
    warnings = report.rejects.filter(severity == rules.SEVERITY_WARNING)["reason"].to_list()
    report.rejects_by_reason = dict(Counter(errors))
    report.warnings_by_reason = dict(Counter(warnings))
    report.low_confidence_dropped = report.rejects_by_reason.get(rules.Reason.LOW_CONFIDENCE, 0)
    report.seconds = time.perf_counter() - started
    return report


def _batch_reject(row: dict, model: str, source: str, reason: str, detail: str) -> list[dict]:
    ctx = _ctx(row, model=model, source=source)
    return [reject_row(ctx, "extraction", reason, detail[:500], "")]


@dataclass
class ExtractionTables:
    """A tenant's tables of the extraction stage (previous or new)."""

    triples: pl.DataFrame  # TRIPLES
    rejects: pl.DataFrame  # QUARANTINE (stage extraction)
    log: pl.DataFrame  # EXTRACTION_LOG
    requests: pl.DataFrame = field(default_factory=lambda: requests_frame([]))

    @classmethod
    def of(
        cls,
        triples: pl.DataFrame | None,
        rejects: pl.DataFrame | None,
        log: pl.DataFrame | None,
        requests: pl.DataFrame | None = None,
    ) -> ExtractionTables:
        def typed(df: pl.DataFrame | None, columns: dict) -> pl.DataFrame:
            return conform(df, columns) if df is not None else empty(columns)

        return cls(
            typed(triples, TRIPLES),
            typed(rejects, QUARANTINE),
            typed(log, EXTRACTION_LOG),
            typed(requests, RETRACTION_REQUESTS),
        )


@dataclass
class TenantExtraction:
    tables: ExtractionTables
    report: ExtractionReport
    todo_turns: int  # turns (re-)extracted in this run
    reasons: dict[str, int]  # why: new, turn_changed, model_changed, forced
    dropped_turns: int  # turns no longer in raw_turns whose triples went


def _turn_keys(df: pl.DataFrame, scope: Scope) -> pl.Series:
    return pl.Series(
        "turn_key",
        [
            ids.turn_key(scope.tenant_id, scope.ns, str(s), str(t))
            for s, t in zip(df["session_id"].to_list(), df["turn_id"].to_list(), strict=True)
        ],
        dtype=pl.String,
    )


def extract_tenant(
    scope: Scope,
    turns: pl.DataFrame,
    previous: ExtractionTables,
    provider: ExtractionProvider | None,
    identity: str,
    known_entities: Sequence[str] = (),
    *,
    force_days: tuple[str, str] | None = None,
    now: datetime | None = None,
    progress: Callable[[str], None] | None = None,
) -> TenantExtraction:
    """Bring a tenant's triples up to date with its turns and the current extractor.

    A turn is (re-)extracted when the log has no row for it, when its text was extracted by
    another model than `identity` (the extractor's identity: a model change replays), or when
    its day lies in `force_days` (inclusive ISO days, a re-extraction asked for by hand).
    Explicit (tool-call) triples depend on no model. Triples of turns that left raw_turns go.
    """
    now = now or datetime.now(UTC)
    turns, moved = rekey_turn_keys(turns)  # keys of the \x1f join (memflow.rekey)
    previous = replace(previous, log=rekey_log(previous.log, moved))
    keys = turns.select("turn_key", "day", "role", "tool_name", turn_fingerprint())
    log = previous.log.join(keys.select("turn_key"), on="turn_key", how="semi")
    dropped = previous.log.height - log.height
    is_text = ~pl.col("tool_name").fill_null("").is_in([UPSERT_TOOL, RETRACT_TOOL])
    joined = keys.join(
        log.select("turn_key", "model", pl.col("turn_sha256").alias("logged_sha256")),
        on="turn_key",
        how="left",
    )
    reasons: dict[str, pl.Expr] = {
        "new": pl.col("model").is_null(),
        "turn_changed": pl.col("model").is_not_null()
        & pl.col("logged_sha256").is_not_null()
        & (pl.col("logged_sha256") != pl.col("turn_sha256")),
        "model_changed": pl.col("model").is_not_null()
        & is_text
        & (pl.col("model") != pl.lit("explicit"))
        & (pl.col("model") != pl.lit(identity)),
    }
    if force_days is not None:
        reasons["forced"] = pl.col("day").is_between(pl.lit(force_days[0]), pl.lit(force_days[1]))
    flagged = joined.with_columns(**{k: v for k, v in reasons.items()})
    todo_keys = flagged.filter(pl.any_horizontal(list(reasons))).select("turn_key")
    counts = {k: int(flagged[k].sum()) for k in reasons}

    def keep(df: pl.DataFrame) -> pl.DataFrame:
        if not df.height:
            return df
        tagged = df.with_columns(_turn_keys(df, scope))
        current = tagged.join(keys.select("turn_key"), on="turn_key", how="semi")
        return current.join(todo_keys, on="turn_key", how="anti").drop("turn_key")

    todo = turns.join(todo_keys, on="turn_key", how="semi")
    report = extract_day(scope, todo, provider, known_entities, progress=progress)
    new_triples = report.triples
    new_rejects = report.rejects
    per_turn_triples = per_turn_counts(new_triples, scope)
    per_turn_rejects = per_turn_counts(new_rejects, scope)
    text_model = identity if provider is not None else "none"
    log_rows = extraction_log_rows(todo, per_turn_triples, per_turn_rejects, text_model, now)
    tables = ExtractionTables(
        triples=pl.concat([keep(previous.triples), new_triples]).sort("day", "triple_id"),
        rejects=pl.concat([keep(previous.rejects), new_rejects]),
        requests=pl.concat([keep(previous.requests), report.requests]).sort("ts", "request_id"),
        log=pl.concat(
            [
                _with_digests(log.join(todo_keys, on="turn_key", how="anti"), keys),
                conform(log_rows, EXTRACTION_LOG),
            ]
        ).sort("day", "turn_key"),
    )
    return TenantExtraction(tables, report, todo.height, counts, dropped)


def _with_digests(log: pl.DataFrame, keys: pl.DataFrame) -> pl.DataFrame:
    """Log rows written without `turn_sha256` (before the column, or by a migration) take the
    digest of the turn as it is now: it was not re-extracted, so that is what it was read as."""
    if not log.height or not log["turn_sha256"].null_count():
        return log
    now = keys.select("turn_key", pl.col("turn_sha256").alias("_now"))
    filled = log.join(now, on="turn_key", how="left").with_columns(
        pl.col("turn_sha256").fill_null(pl.col("_now"))
    )
    return conform(filled.drop("_now"), EXTRACTION_LOG)


def turn_fingerprint() -> pl.Expr:
    """`turn_sha256`: a digest of what a raw turn holds (its text's digest, the tool and the
    tool's triples), so a turn restated under the same session and turn ids is told apart."""
    parts = pl.concat_str(
        [
            pl.col("content_sha256").fill_null(""),
            pl.col("tool_name").fill_null(""),
            pl.col("tool_triples").fill_null(""),
        ],
        separator="\x1f",
    )
    return parts.map_batches(
        lambda s: pl.Series([ids.sha256_text(v) for v in s.to_list()], dtype=pl.String),
        return_dtype=pl.String,
    ).alias("turn_sha256")


def per_turn_counts(df: pl.DataFrame | None, scope: Scope) -> dict[str, int]:
    """Rows of `df` (triples or rejects) per turn key; rows without a session or turn id are
    nobody's."""
    if df is None or not df.height:
        return {}
    df = df.filter(pl.col("session_id").is_not_null() & pl.col("turn_id").is_not_null())
    if not df.height:
        return {}
    return dict(df.with_columns(_turn_keys(df, scope)).group_by("turn_key").len().iter_rows())


def extraction_log_rows(
    turns: pl.DataFrame,
    per_turn_triples: dict[str, int],
    per_turn_rejects: dict[str, int],
    text_model: str,
    now: datetime,
) -> pl.DataFrame:
    """The extraction log's rows for `turns`: tool calls saving triples or retracting facts are
    `explicit`, every other turn was handled by `text_model`, with the triples and rejects
    each turn gave."""
    return turns.select(
        "turn_key",
        "tenant_id",
        "ns",
        "day",
        pl.when(pl.col("tool_name").fill_null("").is_in([UPSERT_TOOL, RETRACT_TOOL]))
        .then(pl.lit("explicit"))
        .otherwise(pl.lit(text_model))
        .alias("model"),
        turn_fingerprint(),
    ).with_columns(
        pl.col("turn_key")
        .replace_strict(per_turn_triples, default=0, return_dtype=pl.Int64)
        .alias("triples"),
        pl.col("turn_key")
        .replace_strict(per_turn_rejects, default=0, return_dtype=pl.Int64)
        .alias("rejects"),
        pl.lit(now).alias("extracted_at"),
    )


__all__ = [
    "UPSERT_TOOL",
    "ExtractionReport",
    "ExtractionTables",
    "ModelError",
    "TenantExtraction",
    "extract_day",
    "extract_tenant",
    "extraction_log_rows",
    "per_turn_counts",
    "turn_fingerprint",
]
