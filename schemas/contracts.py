"""pandera (polars) contracts for every table. Built from the rules in `rules.py`.

Validation is explicit (``Contract.validate(df)`` inside an asset or a blocking asset check)
rather than through a Dagster type: dagster-pandera's polars support is beta and clashes with
polars IO-manager type resolution.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pandera.errors as pa_errors
import pandera.polars as pa
import polars as pl
from pandera.api.polars.types import PolarsData

from schemas import rules


def _no_secrets(data: PolarsData) -> pl.LazyFrame:
    # Imported here: redaction compiles its detectors once, and only validation needs them.
    from schemas.redaction import secret_mask

    series = data.lazyframe.select(pl.col(data.key)).collect().to_series()
    return pl.LazyFrame({data.key: (~secret_mask(series)).fill_null(True)})


_NAME_LENGTH = {"min_value": 1, "max_value": rules.MAX_NAME_CHARS}


def _check(*fields: str, name: str) -> Callable[[Any], Any]:
    """`pa.check` on `fields` (`pa.dataframe_check` without), whose name survives pandera
    building the check again. pandera 0.35 pops `name` from a check's shared info the first
    time it builds a model's checks; a second build (a subclass inheriting the check, as
    FactContract from TripleContract, or another thread racing the first) falls back to the
    function's name, so the quarantine reason depended on which contract a process validated
    first. The function takes the check's name as its own."""

    def register(fn: Any) -> Any:
        (fn.__func__ if isinstance(fn, classmethod) else fn).__name__ = name
        return (pa.check(*fields, name=name) if fields else pa.dataframe_check(name=name))(fn)

    return register


class _Scoped(pa.DataFrameModel):
    tenant_id: str = pa.Field(nullable=False, str_matches=rules.SCOPE_PATTERN)
    ns: str = pa.Field(nullable=False, str_matches=rules.SCOPE_PATTERN)

    class Config:
        strict = False
        coerce = False


class TurnContract(_Scoped):
    turn_key: str = pa.Field(nullable=False, unique=True)
    day: str = pa.Field(nullable=False, str_matches=r"^\d{4}-\d{2}-\d{2}$")
    session_id: str = pa.Field(nullable=False)
    turn_id: str = pa.Field(nullable=False)
    ts: pl.Datetime(time_unit="us", time_zone="UTC") = pa.Field(nullable=False)  # type: ignore[valid-type]
    role: str = pa.Field(nullable=False, isin=list(rules.ROLES))
    content: str = pa.Field(nullable=True)
    content_sha256: str = pa.Field(nullable=False)
    tool_triples: str = pa.Field(nullable=True)
    tool_retract: str = pa.Field(nullable=True)

    @_check("content", name="redacted")
    @classmethod
    def content_redacted(cls, data: PolarsData) -> pl.LazyFrame:
        return _no_secrets(data)

    @_check("tool_triples", name="redacted")
    @classmethod
    def tool_triples_redacted(cls, data: PolarsData) -> pl.LazyFrame:
        return _no_secrets(data)

    @_check("tool_retract", name="redacted")
    @classmethod
    def tool_retract_redacted(cls, data: PolarsData) -> pl.LazyFrame:
        return _no_secrets(data)


class TripleContract(_Scoped):
    triple_id: str = pa.Field(nullable=False)
    subject: str = pa.Field(nullable=False, str_length=_NAME_LENGTH)
    object: str = pa.Field(nullable=False, str_length=_NAME_LENGTH)
    predicate: str = pa.Field(
        nullable=False,
        str_matches=rules.PREDICATE_PATTERN,
        str_length={"max_value": rules.MAX_PREDICATE_CHARS},
    )
    confidence: float = pa.Field(nullable=False, ge=rules.MIN_CONFIDENCE, le=rules.MAX_CONFIDENCE)
    valid_from: pl.Datetime(time_unit="us", time_zone="UTC") = pa.Field(nullable=False)  # type: ignore[valid-type]
    session_id: str = pa.Field(nullable=False)
    turn_id: str = pa.Field(nullable=False)
    client: str = pa.Field(nullable=False)
    model: str = pa.Field(nullable=False)
    source: str = pa.Field(nullable=False, isin=["explicit", "llm", "command"])

    @_check("subject", "object", name="redacted")
    @classmethod
    def names_redacted(cls, data: PolarsData) -> pl.LazyFrame:
        return _no_secrets(data)


class FactContract(TripleContract):
    fact_id: str = pa.Field(nullable=False, unique=True)
    subject_id: str = pa.Field(nullable=False)
    object_id: str = pa.Field(nullable=False)
    valid_to: pl.Datetime(time_unit="us", time_zone="UTC") = pa.Field(nullable=True)  # type: ignore[valid-type]
    supersedes: str = pa.Field(nullable=True)
    superseded_by: str = pa.Field(nullable=True)

    @_check(name="valid_from <= valid_to")
    @classmethod
    def validity(cls, data: PolarsData) -> pl.LazyFrame:
        return data.lazyframe.select(rules.validity_ok())

    @_check(name=f"at most {rules.MAX_FACTS_PER_REPO} facts per repo")
    @classmethod
    def fact_cap(cls, data: PolarsData) -> pl.LazyFrame:
        n = pl.len().over("tenant_id", "ns")
        return data.lazyframe.select(n <= rules.MAX_FACTS_PER_REPO)


class EntityContract(_Scoped):
    entity_id: str = pa.Field(nullable=False, unique=True)
    name: str = pa.Field(nullable=False, str_length=_NAME_LENGTH)
    norm_key: str = pa.Field(nullable=False)

    @_check("name", name="redacted")
    @classmethod
    def name_redacted(cls, data: PolarsData) -> pl.LazyFrame:
        return _no_secrets(data)

    @_check(name=f"at most {rules.MAX_ENTITIES_PER_REPO} entities per repo")
    @classmethod
    def entity_cap(cls, data: PolarsData) -> pl.LazyFrame:
        n = pl.len().over("tenant_id", "ns")
        return data.lazyframe.select(n <= rules.MAX_ENTITIES_PER_REPO)


class QuarantineContract(_Scoped):
    reject_id: str = pa.Field(nullable=False)
    stage: str = pa.Field(nullable=False, isin=["landing", "extraction", "validation"])
    reason: str = pa.Field(nullable=False, str_length={"min_value": 1})
    detail: str = pa.Field(nullable=True)
    record: str = pa.Field(nullable=True)
    severity: str = pa.Field(nullable=False, isin=list(rules.SEVERITIES))

    @_check("detail", "record", name="redacted")
    @classmethod
    def redacted(cls, data: PolarsData) -> pl.LazyFrame:
        return _no_secrets(data)


@dataclass(frozen=True, slots=True)
class Violation:
    """One row that broke one check of a contract."""

    row: int  # position in the validated frame
    column: str  # the column, or the contract's name for a table-wide check
    check: str

    @property
    def reason(self) -> str:
        """The quarantine reason: ``contract:<column>:<check>``."""
        return f"contract:{self.column}:{self.check}"


def split_valid(
    df: pl.DataFrame, contract: type[pa.DataFrameModel]
) -> tuple[pl.DataFrame, list[Violation]]:
    """(rows that meet the contract, one `Violation` per failing row and check).

    The contract becomes a row filter: an asset quarantines the failing rows with their reason
    and stores the rest, so the blocking check on what it stores is a last guard that never
    fires on input. A failure that names no row (a wrong column type) is a bug in memflow, not
    bad input: it is raised.
    """
    try:
        contract.validate(df, lazy=True)
    except pa_errors.SchemaErrors as exc:
        cases = exc.failure_cases
    else:
        return df, []
    tablewide = cases.filter(pl.col("index").is_null())
    if tablewide.height:
        raise pa_errors.SchemaError(
            contract.to_schema(), df, f"{contract.__name__}: {tablewide.to_dicts()}"
        )
    violations = [
        Violation(int(r["index"]), str(r["column"] or contract.__name__), _check_name(r["check"]))
        for r in cases.select("index", "column", "check").unique(maintain_order=True).to_dicts()
    ]
    bad = sorted({v.row for v in violations})
    good = df.with_row_index("__row").filter(~pl.col("__row").is_in(bad)).drop("__row")
    return good, violations


def _check_name(check: str | None) -> str:
    """`str_matches('^...$')` -> `str_matches`; names without arguments stay."""
    text = str(check or "check")
    return text.split("(", 1)[0].strip() or text


__all__ = [
    "EntityContract",
    "FactContract",
    "QuarantineContract",
    "TripleContract",
    "TurnContract",
    "Violation",
    "split_valid",
]
