"""From untrusted triple items (agents' tool calls, model output) to contract-shaped rows.

`items_to_triples` is the only place an item becomes a triple; `triage` is the only place a
triple table is split into rows that meet the contract and rows rejected with a reason.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import polars as pl

from schemas import ids, rules
from schemas.redaction import redact, redact_record
from schemas.rules import Reason
from schemas.tables import QUARANTINE, TRIPLES, conform

_WS = re.compile(r"\s+")
_PLACEHOLDER = re.compile(r"\[REDACTED(?::[a-z0-9_]+)?\]")


@dataclass(frozen=True, slots=True)
class TurnContext:
    """Where a batch of items came from: provenance recorded on every triple."""

    tenant_id: str
    ns: str
    day: str
    session_id: str
    turn_id: str
    ts: datetime
    client: str
    model: str
    source: str  # explicit | llm | command
    source_file: str | None = None
    line_no: int | None = None


def clean_name(value: object) -> tuple[str | None, str | None]:
    """(name, None) for a usable name, else (None, reason). Redaction comes first."""
    if not isinstance(value, str):
        return None, Reason.NAME_EMPTY if value is None else "bad_type:name"
    name = _WS.sub(" ", redact(value) or "").strip()
    if not name:
        return None, Reason.NAME_EMPTY
    if not _PLACEHOLDER.sub("", name).strip(" -_:/.,;"):
        return None, Reason.NAME_REDACTED_ENTIRELY
    if len(name) > rules.MAX_NAME_CHARS:
        return None, Reason.NAME_TOO_LONG
    return name, None


def parse_confidence(value: object, *, explicit: bool) -> tuple[float | None, str | None]:
    if value is None:
        if explicit:
            return rules.EXPLICIT_CONFIDENCE, None
        return None, Reason.CONFIDENCE_INVALID
    if isinstance(value, bool):
        return None, Reason.CONFIDENCE_INVALID
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            return None, Reason.CONFIDENCE_INVALID
    if not isinstance(value, int | float) or value != value:  # NaN
        return None, Reason.CONFIDENCE_INVALID
    confidence = float(value)
    if not 0.0 <= confidence <= rules.MAX_CONFIDENCE:
        return None, Reason.CONFIDENCE_OUT_OF_RANGE
    if confidence < rules.MIN_CONFIDENCE:
        return None, Reason.LOW_CONFIDENCE
    return confidence, None


def parse_instant(value: object) -> datetime | None:
    """A `valid_from` as an aware UTC datetime, None when absent or unreadable (never raises).
    The accepted forms are `schemas.rules.parse_date_or_datetime`'s: ISO date-times with or
    without a zone (none means UTC), ISO dates (00:00 UTC), ``YYYY-MM`` and ``YYYY``."""
    return rules.parse_date_or_datetime(value)


def resolve_fact_id(tenant_id: str, ns: str, subject: str, predicate: str, obj: str) -> str:
    """The fact id a (subject, predicate, object) triple gets in this scope."""
    s_id = ids.entity_id(tenant_id, ns, ids.norm_key(subject))
    o_id = ids.entity_id(tenant_id, ns, ids.norm_key(obj))
    return ids.fact_id(tenant_id, ns, s_id, predicate, o_id)


def _supersedes(value: object, ctx: TurnContext) -> tuple[str | None, str | None]:
    if value is None or value == "":
        return None, None
    if isinstance(value, str) and re.fullmatch(r"f_[0-9a-f]{16}", value):
        return value, None
    if isinstance(value, Mapping):
        subject, r1 = clean_name(value.get("subject"))
        obj, r2 = clean_name(value.get("object"))
        predicate = rules.normalize_predicate(_redacted(value.get("predicate")))
        if subject and obj and predicate and not (r1 or r2):
            return resolve_fact_id(ctx.tenant_id, ctx.ns, subject, predicate, obj), None
    return None, Reason.BAD_SUPERSEDES


def reject_row(
    ctx: TurnContext,
    stage: str,
    reason: str,
    detail: str,
    record: Any,
    *,
    severity: str = rules.SEVERITY_ERROR,
) -> dict:
    """One quarantine row. `severity` ``warning`` marks a row whose input was stored anyway."""
    text = record if isinstance(record, str) else json.dumps(record, default=str, sort_keys=True)
    text = (redact(text) or "")[: rules.MAX_RECORD_CHARS]
    return {
        "reject_id": ids.stable_id(
            "q_", ctx.tenant_id, ctx.ns, stage, reason, ctx.session_id, ctx.turn_id, text
        ),
        "tenant_id": ctx.tenant_id,
        "ns": ctx.ns,
        "stage": stage,
        "reason": reason,
        "detail": redact(detail),
        "source_file": ctx.source_file,
        "line_no": ctx.line_no,
        "session_id": ctx.session_id,
        "turn_id": ctx.turn_id,
        "record": text,
        "severity": severity,
    }


def items_to_triples(
    items: Iterable[Any], ctx: TurnContext, *, stage: str = "extraction"
) -> tuple[list[dict], list[dict]]:
    """Validate untrusted items one by one: (triple rows, quarantine rows). Nothing dropped.

    A quarantine row of severity ``error`` stands for an item that became no triple; one of
    severity ``warning`` for a change made to an item that did (a `valid_from` that cannot be
    read keeps the turn's time). Every item gives one triple or one error row."""
    explicit = ctx.source == "explicit"
    rows: list[dict] = []
    rejects: list[dict] = []
    for index, item in enumerate(items):
        if not isinstance(item, Mapping):
            rejects.append(reject_row(ctx, stage, "not_an_object", "triple is not an object", item))
            continue
        subject, reason = clean_name(item.get("subject"))
        obj, reason_o = clean_name(item.get("object")) if reason is None else (None, None)
        reason = reason or reason_o
        raw_predicate = _redacted(item.get("predicate"))
        predicate = rules.normalize_predicate(raw_predicate)
        if reason is None and predicate is None:
            reason = Reason.PREDICATE_INVALID
        confidence, c_reason = parse_confidence(item.get("confidence"), explicit=explicit)
        reason = reason or c_reason
        supersedes, s_reason = _supersedes(item.get("supersedes"), ctx)
        reason = reason or s_reason
        if reason is not None:
            rejects.append(reject_row(ctx, stage, reason, _detail(reason, item), item))
            continue
        valid_from = ctx.ts
        raw_valid_from = item.get("valid_from")
        if raw_valid_from is not None and raw_valid_from != "":
            parsed = parse_instant(raw_valid_from)
            if parsed is None:
                rejects.append(
                    reject_row(
                        ctx,
                        stage,
                        Reason.VALID_FROM_UNPARSED,
                        _valid_from_detail(raw_valid_from, ctx.ts),
                        item,
                        severity=rules.SEVERITY_WARNING,
                    )
                )
            else:
                valid_from = parsed
        assert subject and obj and predicate and confidence is not None and valid_from
        # The turn the item came from, never a turn_id the item names itself: the extraction
        # stage keeps a turn's triples by (session_id, turn_id), so a triple under any other id
        # would be lost on the next incremental run (extract_day already groups model items
        # by the turn they name).
        turn_id = ctx.turn_id
        rows.append(
            {
                "triple_id": ids.stable_id(
                    "tr_",
                    ctx.tenant_id,
                    ctx.ns,
                    ctx.session_id,
                    turn_id,
                    ctx.source,
                    str(index),
                    subject,
                    predicate,
                    obj,
                ),
                "tenant_id": ctx.tenant_id,
                "ns": ctx.ns,
                "day": ctx.day,
                "subject": subject,
                "predicate": predicate,
                "predicate_raw": str(raw_predicate)[: rules.MAX_PREDICATE_CHARS * 2],
                "object": obj,
                "subject_type": _type(item.get("subject_type")),
                "object_type": _type(item.get("object_type")),
                "confidence": confidence,
                "valid_from": valid_from,
                "supersedes": supersedes,
                "session_id": ctx.session_id,
                "turn_id": turn_id,
                "client": ctx.client,
                "model": ctx.model,
                "source": ctx.source,
                "stated_at": ctx.ts,
            }
        )
    return rows, rejects


def _type(value: object) -> str | None:
    name, reason = clean_name(value)
    return None if reason else name


def _redacted(value: object) -> object:
    """A string redacted (a predicate is a name too: a token can be UPPER_SNAKE_CASE), anything
    else as it is."""
    return redact(value) if isinstance(value, str) else value


def _shown(value: object, size: int) -> str:
    """A value for a detail: redacted before it is clipped (a secret cut in two is no longer
    recognised, so clipping first would keep the rest of it)."""
    return repr(redact_record(str(value), size))


def _valid_from_detail(value: object, kept: datetime) -> str:
    shown = _shown(value, 40) if isinstance(value, str) else f"a {type(value).__name__}"
    return (
        f"valid_from {shown} is not a date (ISO-8601 date or date-time, YYYY-MM or YYYY); "
        f"the fact was kept with the turn's time {kept.isoformat()}"
    )


def _detail(reason: str, item: Mapping) -> str:
    if reason == Reason.PREDICATE_INVALID:
        return f"predicate {_shown(item.get('predicate'), 80)} is not UPPER_SNAKE_CASE"
    if reason == Reason.NAME_TOO_LONG:
        return f"a name is longer than {rules.MAX_NAME_CHARS} characters"
    if reason == Reason.LOW_CONFIDENCE:
        return f"confidence {item.get('confidence')!r} is below {rules.MIN_CONFIDENCE}"
    if reason == Reason.CONFIDENCE_OUT_OF_RANGE:
        return f"confidence {item.get('confidence')!r} is outside [0, 1]"
    if reason == Reason.CONFIDENCE_INVALID:
        return f"confidence {_shown(item.get('confidence'), 40)} is not a number"
    return reason.replace("_", " ")


def triples_frame(rows: Sequence[dict]) -> pl.DataFrame:
    return conform(
        pl.DataFrame(rows, schema_overrides=TRIPLES, infer_schema_length=None)
        if rows
        else pl.DataFrame(),
        TRIPLES,
    )


def rejects_frame(rows: Sequence[dict]) -> pl.DataFrame:
    return conform(
        pl.DataFrame(rows, schema_overrides=QUARANTINE, infer_schema_length=None)
        if rows
        else pl.DataFrame(),
        QUARANTINE,
    )


def triage(triples: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Split a triple table into (rows meeting the contract, rows with a `reason` column).

    Vectorised; the same rules as `items_to_triples`, applied again to whatever reaches the
    facts asset (a triple table may have been written by an older version or by hand).
    """
    reason = (
        pl.when(~rules.scope_ok())
        .then(pl.lit(Reason.MISSING_SCOPE))
        .when(~rules.name_ok("subject") | ~rules.name_ok("object"))
        .then(
            pl.when(
                pl.col("subject").str.len_chars().fill_null(0).eq(0)
                | pl.col("object").str.len_chars().fill_null(0).eq(0)
            )
            .then(pl.lit(Reason.NAME_EMPTY))
            .otherwise(pl.lit(Reason.NAME_TOO_LONG))
        )
        .when(~rules.predicate_ok())
        .then(pl.lit(Reason.PREDICATE_INVALID))
        .when(pl.col("confidence").is_null() | pl.col("confidence").is_nan())
        .then(pl.lit(Reason.CONFIDENCE_INVALID))
        .when(pl.col("confidence") < rules.MIN_CONFIDENCE)
        .then(pl.lit(Reason.LOW_CONFIDENCE))
        .when(pl.col("confidence") > rules.MAX_CONFIDENCE)
        .then(pl.lit(Reason.CONFIDENCE_OUT_OF_RANGE))
        .when(pl.col("valid_from").is_null())
        .then(pl.lit(Reason.BAD_VALID_FROM))
        .otherwise(pl.lit(None, dtype=pl.String))
        .alias("reason")
    )
    marked = triples.with_columns(reason)
    good = marked.filter(pl.col("reason").is_null()).drop("reason")
    bad = marked.filter(pl.col("reason").is_not_null())
    return good, bad


def utcnow() -> datetime:
    return datetime.now(UTC)
