"""pandera (polars) contracts for every table. Built from the rules in `rules.py`.

Validation is explicit (``Contract.validate(df)`` inside an asset or a blocking asset check)
rather than through a Dagster type: dagster-pandera's polars support is beta and clashes with
polars IO-manager type resolution.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

import pandera.errors as pa_errors
import pandera.polars as pa
import polars as pl
from pandera.api.polars.types import PolarsData

from schemas import ids, rules
from schemas.scope import Scope
from schemas.tables import QUARANTINE, conform


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
    together = [k for k in keys if _own_rows(frames[k], Scope.parse(k))]
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
            scope = Scope.parse(key)
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
    from schemas.redaction import redact  # the engine loads when a row is quarantined

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


__all__ = [
    "EntityContract",
    "FactContract",
    "QuarantineContract",
    "TripleContract",
    "TurnContract",
    "Violation",
    "quarantine_contract_failures",
    "split_valid",
]
