"""The domain rules, each written once. Contracts (`contracts.py`) and triage (`triples.py`,
`memflow.facts`) both build on these constants and expressions."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Literal, get_args

import polars as pl

MAX_NAME_CHARS = 120
MAX_PREDICATE_CHARS = 64
MAX_FACTS_PER_REPO = 10_000
MAX_ENTITIES_PER_REPO = 5_000
MIN_CONFIDENCE = 0.6
MAX_CONFIDENCE = 1.0
EXPLICIT_CONFIDENCE = 1.0

PREDICATE_PATTERN = r"^[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)*$"
# An org or repo name. Python checks it with `fullmatch` (its `$` would accept a trailing
# newline); polars with the anchored form. ".." is refused as well (a path step).
SCOPE_PART = r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}"
SCOPE_PATTERN = rf"^{SCOPE_PART}$"
Role = Literal["user", "assistant", "tool"]
ROLES: tuple[str, ...] = get_args(Role)
TEXT_ROLES = ("user", "assistant")  # roles whose text goes to the extraction model
# A rejected record is kept (redacted) up to this many characters.
MAX_RECORD_CHARS = 2_000
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

_PREDICATE_RE = re.compile(PREDICATE_PATTERN)
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_SEPARATORS = re.compile(r"[\s\-./]+")


class Reason:
    """Reject reason codes, as they appear in the quarantine table and in run metadata."""

    MISSING_SCOPE = "missing_scope"
    NAME_EMPTY = "name_empty"
    NAME_TOO_LONG = "name_too_long"
    NAME_REDACTED_ENTIRELY = "name_redacted_entirely"
    SECRET_IN_NAME = "secret_in_name"
    PREDICATE_INVALID = "predicate_not_upper_snake_case"
    CONFIDENCE_INVALID = "confidence_not_a_number"
    CONFIDENCE_OUT_OF_RANGE = "confidence_out_of_range"
    LOW_CONFIDENCE = "confidence_below_0.6"
    BAD_VALID_FROM = "bad_valid_from"
    BAD_SUPERSEDES = "bad_supersedes"
    VALIDITY_INVERTED = "valid_from_after_valid_to"
    FACT_CAP = "fact_cap_exceeded"
    ENTITY_CAP = "entity_cap_exceeded"
    SUPERSEDES_UNKNOWN = "supersedes_unknown_fact"
    SUPERSEDES_OUT_OF_ORDER = "supersedes_out_of_order"
    AWAITING_EXTRACTION = "awaiting_extraction"


def normalize_predicate(raw: object) -> str | None:
    """Fix the trivially fixable ("uses" -> USES, "depends on" / "dependsOn" -> DEPENDS_ON).

    Returns None when the result is still not UPPER_SNAKE_CASE: the caller rejects it.
    """
    if not isinstance(raw, str):
        return None
    text = _CAMEL.sub("_", raw.strip())
    text = _SEPARATORS.sub("_", text).upper()
    if len(text) > MAX_PREDICATE_CHARS or not _PREDICATE_RE.match(text):
        return None
    return text


def predicate_ok(col: str = "predicate") -> pl.Expr:
    c = pl.col(col)
    return (
        c.is_not_null()
        & c.str.contains(PREDICATE_PATTERN)
        & (c.str.len_chars() <= MAX_PREDICATE_CHARS)
    )


def name_ok(col: str) -> pl.Expr:
    c = pl.col(col)
    return c.is_not_null() & (c.str.len_chars() > 0) & (c.str.len_chars() <= MAX_NAME_CHARS)


def scope_ok() -> pl.Expr:
    return (
        pl.col("tenant_id").is_not_null()
        & pl.col("ns").is_not_null()
        & pl.col("tenant_id").str.contains(SCOPE_PATTERN)
        & pl.col("ns").str.contains(SCOPE_PATTERN)
        & ~pl.col("tenant_id").str.contains("..", literal=True)
        & ~pl.col("ns").str.contains("..", literal=True)
    )


def confidence_ok(col: str = "confidence") -> pl.Expr:
    c = pl.col(col)
    return c.is_not_null() & c.is_between(MIN_CONFIDENCE, MAX_CONFIDENCE)


def validity_ok() -> pl.Expr:
    return pl.col("valid_to").is_null() | (pl.col("valid_from") <= pl.col("valid_to"))
