"""One record (JSONL line, Parquet row): validation into a turn or a reject, collected per
file."""

from __future__ import annotations

from datetime import datetime
from typing import Any, NamedTuple

import orjson
import polars as pl

from memflow.landing.format import (
    _ID_FIELDS,
    _MICROSECOND,
    REJECT_COLUMNS,
    RETRACT_TOOL,
    STAGE,
    TURN_COLUMNS,
    UPSERT_TOOL,
    _clipped_id,
    _id,
    _record,
    _redacted_clip,
    canonical_tool,
)
from schemas import ids
from schemas.rules import (
    EPOCH,
    ROLES,
    SEVERITY_ERROR,
    TimeWindow,
)
from schemas.scope import Scope


class _Reject(Exception):
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.detail = detail


class _Instant(NamedTuple):
    """A Parquet timestamp as microseconds since the epoch (any size: never converted to a
    Python datetime before it is known to fit)."""

    us: int
    aware: bool

    def text(self) -> str:
        try:
            return (EPOCH + self.us * _MICROSECOND).isoformat()
        except OverflowError:
            return f"{self.us} microseconds since 1970-01-01"


class _Unreadable(NamedTuple):
    """A Parquet row whose values cannot be converted to Python."""

    error: str


class _Collector:
    """Accepted rows and rejects of one file."""

    def __init__(self, scope: Scope, source_file: str, window: TimeWindow, now_us: int) -> None:
        self.scope = scope
        self.source_file = source_file
        self.window = window
        self.now_us = now_us
        self.bounds = (window.start_us, window.end_us(now_us))
        self.records = 0
        self.rows: list[tuple[Any, ...]] = []  # _ROW_FIELDS
        self.rejects: dict[str, list[Any]] = {c: [] for c in REJECT_COLUMNS if c not in _CONSTANT}

    def clear(self) -> None:
        """Forget every row and reject (a file that turns out to be one reject as a whole)."""
        self.records = 0
        self.rows.clear()
        for values in self.rejects.values():
            values.clear()

    def record(
        self, line_no: int, obj: Any, raw: str | bytes | None, *, from_struct: bool = False
    ) -> None:
        self.records += 1
        try:
            row = _check(obj, self.scope, from_struct, line_no, self)
        except _Reject as rej:
            self.reject(line_no, rej.reason, rej.detail, raw, obj)
            return
        self.rows.append(row)

    def reject(
        self,
        line_no: int | None,
        reason: str,
        detail: str,
        raw: str | bytes | None,
        obj: Any = None,
    ) -> None:
        if raw is None:  # a Parquet row: its record is its JSON form
            raw = _row_json(obj)
        rej = self.rejects
        rej["stage"].append(STAGE)
        rej["reason"].append(reason)
        rej["detail"].append(detail)
        rej["line_no"].append(line_no)
        rej["session_id"].append(_str_field(obj, "session_id"))
        rej["turn_id"].append(_str_field(obj, "turn_id"))
        rej["record"].append(_record(raw))
        rej["severity"].append(SEVERITY_ERROR)

    def frames(self) -> tuple[pl.DataFrame, pl.DataFrame]:
        constant = [
            pl.lit(self.scope.tenant_id).alias("tenant_id"),
            pl.lit(self.scope.ns).alias("ns"),
            pl.lit(self.source_file).alias("source_file"),
        ]
        columns = zip(*self.rows, strict=True) if self.rows else ([] for _ in _ROW_FIELDS)
        turns = pl.DataFrame(
            [
                pl.Series(name, values, dtype)
                for (name, dtype), values in zip(_ROW_FIELDS.items(), columns, strict=True)
            ]
        )
        keys = [
            ids.turn_key(self.scope.tenant_id, self.scope.ns, s, t)
            for s, t in zip(turns["session_id"], turns["turn_id"], strict=True)
        ]
        turns = turns.with_columns(
            pl.col("ts").cast(pl.Datetime("us")).dt.replace_time_zone("UTC"),
            pl.Series("turn_key", keys, dtype=pl.String),
            *constant,
        ).with_columns(day=pl.col("ts").dt.strftime("%Y-%m-%d"))
        rejects = pl.DataFrame(self.rejects, schema_overrides={"line_no": pl.Int64})
        return _typed(turns, TURN_COLUMNS), _typed(rejects.with_columns(constant), REJECT_COLUMNS)


_CONSTANT = frozenset({"tenant_id", "ns", "source_file"})
# What `_check` returns, in order; ts is in microseconds since the epoch.
_ROW_FIELDS: dict[str, pl.DataType] = {
    "session_id": pl.String(),
    "turn_id": pl.String(),
    "ts": pl.Int64(),
    "role": pl.String(),
    "client": pl.String(),
    "content": pl.String(),
    "tool_name": pl.String(),
    "tool_input_json": pl.String(),
    "line_no": pl.Int64(),
}
_MISSING = object()


def _typed(df: pl.DataFrame, columns: dict[str, pl.DataType]) -> pl.DataFrame:
    return df.select(pl.col(c).cast(t) for c, t in columns.items())


def _row_json(obj: Any) -> str:
    if isinstance(obj, _Unreadable):
        return ""
    if isinstance(obj, dict) and isinstance(obj.get("ts"), _Instant):
        obj = {**obj, "ts": obj["ts"].text()}
    try:
        return orjson.dumps(obj, default=str, option=orjson.OPT_NON_STR_KEYS).decode()
    except TypeError:  # orjson.JSONEncodeError: nested past orjson's limit, a bad key
        pass
    try:
        return repr(obj)
    except RecursionError:
        return "<a row nested too deeply to show>"


def _check(
    obj: Any, scope: Scope, from_struct: bool, line_no: int, out: _Collector
) -> tuple[Any, ...]:
    """Validate one decoded record; returns the `_ROW_FIELDS` values or raises `_Reject`."""
    if not _plainly_valid(obj, scope):
        _diagnose(obj, scope)
    content = obj["content"]
    ts = _epoch_us(obj["ts"])
    if not out.bounds[0] <= ts <= out.bounds[1]:
        problem = out.window.check_us(ts, out.now_us)
        if problem is not None:
            raise _Reject(problem.reason, problem.detail)
    tool_name = obj.get("tool_name")
    tool_input = obj.get("tool_input")
    tool_json = None
    if tool_name is not None or tool_input is not None:
        tool_name, tool_json = _tool(tool_name, tool_input, from_struct)
    return (
        _id(obj["session_id"]),
        _id(obj["turn_id"]),
        ts,
        obj["role"],
        _id(obj["client"]),
        content or "",
        _id(tool_name) if tool_name else None,
        tool_json,
        line_no,
    )


def _plainly_valid(obj: Any, scope: Scope) -> bool:
    """The common case, checked cheaply; `_diagnose` names the problem when this says no."""
    if type(obj) is not dict:
        return False
    get = obj.get
    session_id, turn_id, client, ts = get("session_id"), get("turn_id"), get("client"), get("ts")
    content = get("content", _MISSING)
    return bool(
        get("org") == scope.tenant_id
        and get("repo") == scope.ns
        and type(session_id) is str
        and type(turn_id) is str
        and type(client) is str
        and session_id
        and turn_id
        and client
        and not (session_id.isspace() or turn_id.isspace() or client.isspace())
        and get("role") in ROLES
        and (type(ts) is str or isinstance(ts, datetime | _Instant))
        and (content is None or type(content) is str)
    )


def _diagnose(obj: Any, scope: Scope) -> None:
    """Raise the first problem of a record's required fields, in a fixed order."""
    if isinstance(obj, _Unreadable):
        raise _Reject("bad_value", f"a value of this row cannot be read ({obj.error})")
    if not isinstance(obj, dict):
        raise _Reject("not_an_object", f"a turn must be a JSON object, not {_kind_of(obj)}")
    for name in _ID_FIELDS:
        value = obj.get(name)
        if value is None or (isinstance(value, str) and not value.strip()):
            raise _Reject(
                f"missing_field:{name}", f"the required field {name!r} is missing or empty"
            )
        if not isinstance(value, str) and not (
            name == "ts" and isinstance(value, datetime | _Instant)
        ):
            raise _Reject(f"bad_type:{name}", f"{name!r} must be a string, not {_kind_of(value)}")
    if "content" not in obj:
        raise _Reject("missing_field:content", "the required field 'content' is missing")
    content = obj["content"]
    if content is not None and not isinstance(content, str):
        raise _Reject("bad_type:content", f"'content' must be a string, not {_kind_of(content)}")
    if obj["org"] != scope.tenant_id or obj["repo"] != scope.ns:
        raise _Reject(
            "scope_mismatch",
            f"the line names {_short(obj['org'])}/{_short(obj['repo'])} but lies in {scope.key}",
        )
    if obj["role"] not in ROLES:
        raise _Reject("bad_role", "'role' must be one of user, assistant, tool")


def _epoch_us(value: str | datetime | _Instant) -> int:
    """Microseconds since the epoch of an aware timestamp; any int (the window decides)."""
    if isinstance(value, _Instant):
        if not value.aware:
            raise _Reject(
                "bad_timestamp", "'ts' has no time zone (a Parquet timestamp without one)"
            )
        return value.us
    if isinstance(value, str):
        value = value.strip()  # as writers' own parsers read it
        try:  # RFC 3339 allows a lower-case t and z; Python's parser only the upper case
            value = datetime.fromisoformat(value if value.isupper() else value.upper())
        except ValueError as exc:
            raise _Reject("bad_timestamp", "'ts' is not an ISO-8601 timestamp") from exc
    if value.tzinfo is None or value.utcoffset() is None:
        raise _Reject("bad_timestamp", "'ts' has no time zone (add Z or an offset like +01:00)")
    try:
        return (value - EPOCH) // _MICROSECOND
    except OverflowError as exc:  # pragma: no cover - timedelta holds any datetime difference
        raise _Reject("bad_timestamp", "'ts' is out of range") from exc


def _tool(tool_name: Any, tool_input: Any, from_struct: bool) -> tuple[str | None, str | None]:
    """(tool name, tool_input as JSON) of a turn: a memflow tool under any spelling is named
    canonically and its input checked and kept (only what the facts stage reads); any other
    tool's input is neither checked nor kept (memflow never stores it)."""
    if tool_name is not None and not isinstance(tool_name, str):
        raise _Reject(
            "bad_type:tool_name", f"'tool_name' must be a string, not {_kind_of(tool_name)}"
        )
    tool = canonical_tool(tool_name) if tool_name else None
    if tool is None:
        return tool_name or None, None
    try:
        value = _tool_input(tool_input, from_struct)
    except RecursionError as exc:
        raise _Reject("bad_tool_input", "tool_input is nested too deeply") from exc
    kept = _upsert_input(value) if tool == UPSERT_TOOL else _retract_input(value)
    try:
        tool_json = orjson.dumps(kept, default=str, option=orjson.OPT_NON_STR_KEYS)
    except TypeError as exc:  # orjson.JSONEncodeError: nested past its limit, or a bad key
        raise _Reject("bad_tool_input", f"tool_input cannot be written as JSON ({exc})") from exc
    return tool, tool_json.decode()


def _upsert_input(value: Any) -> dict[str, Any]:
    if not (isinstance(value, dict) and isinstance(value.get("triples"), list)):
        raise _Reject("bad_tool_input", f"{UPSERT_TOOL} needs tool_input.triples as a list")
    return {"triples": value["triples"]}  # each triple is validated downstream


_RETRACT_FORMS = (("fact_id",), ("subject", "predicate", "object"), ("entity",))
_RETRACT_NAMES = "fact_id, subject/predicate/object or entity"


def _retract_input(value: Any) -> dict[str, Any]:
    """The retraction a `RETRACT_TOOL` turn asks for, checked: ``retract`` a non-empty list
    of items, each exactly one of ``{fact_id}``, ``{subject, predicate, object}`` or
    ``{entity}`` (non-empty strings; other keys are dropped), ``reason`` and ``by`` strings
    when given."""
    items = value.get("retract") if isinstance(value, dict) else None
    if not isinstance(items, list):
        raise _Reject("bad_tool_input", f"{RETRACT_TOOL} needs tool_input.retract as a list")
    if not items:
        raise _Reject("bad_tool_input", f"tool_input.retract is empty: name a {_RETRACT_NAMES}")
    kept: dict[str, Any] = {"retract": [_retract_item(item, n) for n, item in enumerate(items)]}
    for key in ("reason", "by"):
        given = value.get(key)
        if given is None:
            continue
        if not isinstance(given, str):
            raise _Reject(
                "bad_tool_input", f"tool_input.{key} must be a string, not {_kind_of(given)}"
            )
        kept[key] = given
    return kept


def _retract_item(item: Any, n: int) -> dict[str, str]:
    where = f"tool_input.retract[{n}]"
    if not isinstance(item, dict):
        raise _Reject("bad_tool_input", f"{where} must be an object, not {_kind_of(item)}")
    forms = [form for form in _RETRACT_FORMS if any(key in item for key in form)]
    if len(forms) != 1:
        raise _Reject("bad_tool_input", f"{where} must name exactly one {_RETRACT_NAMES}")
    kept = {}
    for key in forms[0]:
        given = item.get(key)
        if not isinstance(given, str) or not given.strip():
            raise _Reject("bad_tool_input", f"{where}.{key} must be a non-empty string")
        kept[key] = given
    return kept


def _tool_input(value: Any, from_struct: bool) -> Any:
    if isinstance(value, str):
        try:
            decoded = orjson.loads(value)
        except orjson.JSONDecodeError:
            return value
        return decoded if isinstance(decoded, dict | list) else value
    if from_struct and value is not None:
        return _drop_nulls(value)
    return value


def _drop_nulls(value: Any) -> Any:
    """A Parquet struct has every field on every row; a null field means 'not given'."""
    if isinstance(value, dict):
        return {k: _drop_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_nulls(v) for v in value]
    return value


def _kind_of(value: Any) -> str:
    return {
        dict: "an object",
        list: "an array",
        str: "a string",
        bool: "a boolean",
        int: "a number",
        float: "a number",
    }.get(type(value), "null" if value is None else type(value).__name__)


def _short(value: str) -> str:
    """A value for a detail, redacted before it is clipped (a secret cut in two is no longer
    recognised)."""
    return repr(_redacted_clip(value, 100))


def _str_field(obj: Any, name: str) -> str | None:
    """An id field of a rejected record, redacted before it is clipped (a secret cut in two
    is no longer recognised)."""
    value = obj.get(name) if isinstance(obj, dict) else None
    if not isinstance(value, str):
        return None
    return _clipped_id(value)
