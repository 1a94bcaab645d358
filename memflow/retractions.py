"""Retracting facts and forgetting entities (README "Retracting and forgetting").

A `retract_facts` turn (`memflow.landing.RETRACT_TOOL`; the shared landing format) asks, at
its time ``ts``, to take facts out of memory: ``tool_input = {"retract": [ITEM, ...],
"reason"?, "by"?}`` with ITEM one of ``{"fact_id"}``, ``{"subject", "predicate", "object"}``
or ``{"entity"}`` (a name or an entity id: every fact it is subject or object of).

It travels like this:

1. turns stage (`retract_payload`): the input, redacted, is kept in ``raw_turns.tool_retract``
   (nothing else of a tool's input is stored);
2. extraction stage (`requests_from_turn`): each item becomes a row of `retraction_requests`,
   or an `extraction_rejects` row (``bad_retraction``) that says why it cannot be read. A
   retract turn is never sent to an extractor and never read as triples;
3. facts stage (`plan_generations`, `apply_retractions`), on every run over the tenant's
   whole request table, so a late fact is treated as a clean run would treat it:

   - every fact open at ``ts`` that an item names is closed: ``valid_to = ts`` (or its own
     ``valid_from`` when that lies after ``ts``: it never becomes valid). Recall as of
     ``t >= ts`` no longer sees it; as of ``t < ts`` it still does. Each closure is a row of
     `retractions` (fact, by, when, why, the retract turn);
   - an item that closes nothing (no such fact, or already closed before ``ts``) is a
     quarantine row ``retract_unknown``: never silent;
   - a restatement: a triple of the same subject, predicate and object stated (its turn's
     time) at or after ``ts`` is a new fact, `schemas.ids.reopened_fact_id`, valid from the
     later of its ``valid_from`` and ``ts``; statements made before ``ts`` stay with the
     closed fact. So "forget X" followed later by "X again" gives X back from then on, and
     as of any time in between X is not recalled.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import polars as pl

from memflow.landing import RETRACT_TOOL
from schemas import ids, rules
from schemas.redaction import redact, redact_json, redact_with_count
from schemas.rules import Reason
from schemas.scope import Scope
from schemas.tables import RETRACTION_REQUESTS, RETRACTIONS, conform
from schemas.triples import TurnContext, clean_name, reject_row, resolve_fact_id

FACT_ID = re.compile(r"f_[0-9a-f]{16}")
ENTITY_ID = re.compile(r"e_[0-9a-f]{16}")
_KEPT = ("retract", "reason", "by")  # what memflow applies of the tool's input
# A request's columns that say what it names (a `retract_unknown` quarantine record).
ITEM_COLUMNS = ("kind", "fact_id", "subject", "predicate", "object", "entity")
_UNREADABLE = "_unreadable"  # tool_retract holds only this when the input could not be read
_ITEM_KEYS = {"fact_id": ("fact_id",), "triple": ("subject", "predicate", "object")}


# --------------------------------------------------------------------------- turns stage


def retract_payload(tool_name: str | None, tool_input_json: str | None) -> tuple[str | None, int]:
    """The redacted input of a retract_facts call as `raw_turns.tool_retract` keeps it (only
    `retract`, `reason` and `by`), and how many secrets went; (None, 0) for other turns."""
    if tool_name != RETRACT_TOOL or tool_input_json is None:
        return None, 0
    try:
        value = json.loads(tool_input_json)
        kept = {k: value[k] for k in _KEPT if k in value} if isinstance(value, dict) else value
        text = json.dumps(kept, ensure_ascii=False, sort_keys=True)
        _, found = redact_with_count(text)
        return json.dumps(redact_json(kept), ensure_ascii=False, sort_keys=True), found
    except (RecursionError, ValueError):
        return json.dumps({_UNREADABLE: "tool_input is nested too deeply to be read"}), 0


def is_retraction(tool_name: object) -> bool:
    return tool_name == RETRACT_TOOL


# ---------------------------------------------------------------------- extraction stage


def requests_from_turn(payload: str | None, ctx: TurnContext) -> tuple[list[dict], list[dict]]:
    """(retraction request rows, extraction reject rows) of one retract turn. Every item is
    one request or one ``bad_retraction`` reject; a payload that cannot be read at all is one
    reject."""
    stage = "extraction"

    def bad(detail: str, record: Any) -> dict:
        return reject_row(ctx, stage, Reason.BAD_RETRACTION, detail, record)

    if payload is None:
        return [], [bad("the retract turn carries no input memflow kept; land it again", "")]
    try:
        value = json.loads(payload)
    except ValueError:
        return [], [bad("the retract turn's stored input is not JSON", payload)]
    if isinstance(value, dict) and _UNREADABLE in value:
        return [], [bad(str(value[_UNREADABLE]), "")]
    if not isinstance(value, dict) or not isinstance(value.get("retract"), list):
        return [], [bad("tool_input.retract must be a list of items", value)]
    extras = {k: value.get(k) for k in ("reason", "by")}
    for key, given in extras.items():
        if given is not None and not isinstance(given, str):
            return [], [bad(f"tool_input.{key} must be a string", value)]
    if not value["retract"]:
        return [], [bad("tool_input.retract is empty: nothing to retract", value)]
    reason = _clip(extras["reason"], rules.MAX_RETRACT_REASON_CHARS)
    by = _clip(extras["by"], rules.MAX_RETRACT_BY_CHARS) or ctx.client
    rows: list[dict] = []
    rejects: list[dict] = []
    for index, item in enumerate(value["retract"]):
        parsed, problem = _item(item)
        if problem is not None:
            rejects.append(bad(f"retract item {index}: {problem}", item))
            continue
        rows.append(
            {
                "request_id": ids.stable_id(
                    "rq_", ctx.tenant_id, ctx.ns, ctx.session_id, ctx.turn_id, str(index)
                ),
                "tenant_id": ctx.tenant_id,
                "ns": ctx.ns,
                "day": ctx.day,
                "session_id": ctx.session_id,
                "turn_id": ctx.turn_id,
                "ts": ctx.ts,
                "item": index,
                **parsed,
                "reason": reason,
                "by": by,
                "client": ctx.client,
            }
        )
    return rows, rejects


def _clip(value: str | None, size: int) -> str | None:
    if value is None:
        return None
    return (redact(" ".join(value.split())) or "")[:size] or None


def _item(item: object) -> tuple[dict, str | None]:
    """One item as request columns, or the reason it cannot be read."""
    empty = {"kind": None, "fact_id": None, "subject": None, "predicate": None, "object": None}
    empty["entity"] = None
    if not isinstance(item, Mapping):
        return empty, "an item must be an object"
    kinds = [k for k, keys in (*_ITEM_KEYS.items(), ("entity", ("entity",))) if keys[0] in item]
    if len(kinds) != 1:
        return (
            empty,
            'an item names exactly one of "fact_id", "subject"/"predicate"/"object", "entity"',
        )
    kind = kinds[0]
    if kind == "fact_id":
        value = item["fact_id"]
        if not isinstance(value, str) or not FACT_ID.fullmatch(value):
            return empty, "fact_id must be a fact id like f_0123456789abcdef"
        return {**empty, "kind": kind, "fact_id": value}, None
    if kind == "entity":
        name, problem = clean_name(item["entity"])
        if problem:
            return empty, f"entity: {problem.replace('_', ' ')}"
        return {**empty, "kind": kind, "entity": name}, None
    subject, p1 = clean_name(item.get("subject"))
    obj, p2 = clean_name(item.get("object"))
    raw = item.get("predicate")
    predicate = rules.normalize_predicate(redact(raw) if isinstance(raw, str) else raw)
    if p1 or p2:
        return empty, f"subject/object: {(p1 or p2 or '').replace('_', ' ')}"
    if predicate is None:
        return empty, "predicate is not UPPER_SNAKE_CASE"
    return {**empty, "kind": kind, "subject": subject, "predicate": predicate, "object": obj}, None


def requests_frame(rows: list[dict]) -> pl.DataFrame:
    return conform(
        pl.DataFrame(rows, schema_overrides=RETRACTION_REQUESTS, infer_schema_length=None)
        if rows
        else pl.DataFrame(),
        RETRACTION_REQUESTS,
    )


# --------------------------------------------------------------------------- facts stage


@dataclass
class Plan:
    """Which triples belong to a fact reopened after a retraction, and which (fact, request)
    closures the requests make; computed before the facts are built."""

    fact_of: dict[str, str] = field(default_factory=dict)  # triple_id -> reopened fact id
    starts: dict[str, datetime] = field(default_factory=dict)  # reopened fact id -> ts
    closures: list[tuple[str, dict]] = field(default_factory=list)  # (fact id, request)
    generations: dict[str, list[tuple[datetime, str]]] = field(default_factory=dict)
    entity_of: dict[str, str] = field(default_factory=dict)  # forget request -> entity id

    def current(self, fact_id: str, at: datetime) -> str:
        """The fact standing for `fact_id`'s subject/predicate/object at `at`."""
        out = fact_id
        for start, gen in self.generations.get(fact_id, ()):
            if start <= at:
                out = gen
        return out


@dataclass
class _Fact:
    """One subject/predicate/object while the requests are walked in time order."""

    base: str
    statements: list[tuple[datetime, str]]  # (stated at, triple_id), in order
    gen: str = ""  # the fact standing for it now: base, or a reopened fact
    pending: int = 0  # statements[:pending] are assigned
    stated: bool = False  # the current fact has a statement before the time reached

    def __post_init__(self) -> None:
        self.gen = self.base

    def advance(self, ts: datetime, plan: Plan) -> None:
        while self.pending < len(self.statements) and self.statements[self.pending][0] < ts:
            if self.gen != self.base:
                plan.fact_of[self.statements[self.pending][1]] = self.gen
            self.pending += 1
            self.stated = True

    def finish(self, plan: Plan) -> None:
        if self.gen != self.base:
            for _, triple_id in self.statements[self.pending :]:
                plan.fact_of[triple_id] = self.gen


def plan_generations(
    scope: Scope,
    good: pl.DataFrame,
    stored: pl.DataFrame,
    requests: pl.DataFrame | None,
    key: Callable[[str], str],
) -> Plan:
    """Split each fact's statements at the retractions that closed it (module docstring),
    walking the requests in time order.

    `good` holds triples with their base `fact_id` (one per subject/predicate/object) and
    `subject_id`/`object_id`; `stored` the stored facts (whose ids may be reopened ones).
    """
    plan = Plan()
    if requests is None or requests.is_empty():
        return plan
    known = _Known.of(scope, good, stored)
    stated: dict[str, list[tuple[datetime, str]]] = {}
    for triple_id, fact_id, at, valid_from in good.select(
        "triple_id", "fact_id", "stated_at", "valid_from"
    ).rows():
        # A triple written before `stated_at` was kept counts at its valid_from.
        stated.setdefault(fact_id, []).append((at or valid_from, triple_id))
    walking: dict[str, _Fact] = {}
    for request in requests.sort("ts", "session_id", "turn_id", "item").to_dicts():
        ts, request_id = request["ts"], request["request_id"]
        for base, named in _targets(scope, request, known, key, plan):
            fact = walking.get(base)
            if fact is None:
                fact = walking[base] = _Fact(base, sorted(stated.get(base, [])))
            fact.advance(ts, plan)
            opened = known.stored_from.get(fact.gen)
            if opened is not None and opened <= ts:
                fact.stated = True  # a stored fact (its triples may be gone)
            if not fact.stated or (named is not None and named != fact.gen):
                continue  # nothing of it was stated before ts: nothing to close
            plan.closures.append((fact.gen, request))
            fact.gen = ids.reopened_fact_id(scope.tenant_id, scope.ns, base, request_id)
            fact.stated = False
            plan.starts[fact.gen] = ts
            plan.generations.setdefault(base, []).append((ts, fact.gen))
            known.base_of[fact.gen] = base
    for fact in walking.values():
        fact.finish(plan)
    return plan


@dataclass
class _Known:
    ends: dict[str, tuple[str, str]]  # base fact id -> (subject_id, object_id)
    base_of: dict[str, str]  # reopened fact id -> base
    stored_from: dict[str, datetime]  # stored fact id -> valid_from
    touching: dict[str, set[str]]  # entity id -> base fact ids

    @classmethod
    def of(cls, scope: Scope, good: pl.DataFrame, stored: pl.DataFrame) -> _Known:
        ends = {f: (s, o) for f, s, o in good.select("fact_id", "subject_id", "object_id").rows()}
        base_of: dict[str, str] = {}
        stored_from: dict[str, datetime] = {}
        columns = ("fact_id", "subject_id", "predicate", "object_id", "valid_from")
        for fact_id, s, p, o, valid_from in stored.select(columns).rows():
            base = ids.fact_id(scope.tenant_id, scope.ns, s, p, o)
            ends.setdefault(base, (s, o))
            if base != fact_id:
                base_of[fact_id] = base
            stored_from[fact_id] = valid_from
        touching: dict[str, set[str]] = {}
        for base, (s, o) in ends.items():
            touching.setdefault(s, set()).add(base)
            touching.setdefault(o, set()).add(base)
        return cls(ends, base_of, stored_from, touching)


def _targets(
    scope: Scope, request: dict, known: _Known, key: Callable[[str], str], plan: Plan
) -> list[tuple[str, str | None]]:
    """(base fact id, the fact it names or None for whichever stands now) per target."""
    kind = request["kind"]
    if kind == "fact_id":
        named = request["fact_id"]
        base = known.base_of.get(named, named)
        return [(base, named)] if base in known.ends else []
    if kind == "triple":
        base = resolve_fact_id(
            scope.tenant_id, scope.ns, request["subject"], request["predicate"], request["object"]
        )
        return [(base, None)] if base in known.ends else []
    entity = request["entity"] or ""
    if ENTITY_ID.fullmatch(entity):
        entity_id = entity
    else:
        entity_id = ids.entity_id(scope.tenant_id, scope.ns, key(entity))
    plan.entity_of[request["request_id"]] = entity_id
    return [(base, None) for base in sorted(known.touching.get(entity_id, ()))]


def reopen(good: pl.DataFrame, plan: Plan) -> pl.DataFrame:
    """Triples stated after a retraction moved to the reopened fact (valid from the later of
    their valid_from and the retraction), and `supersedes` links pointed at the fact that
    stood for the named triple when the superseding triple was stated."""
    if not plan.generations:
        return good
    rows = good.to_dicts()
    for row in rows:
        gen = plan.fact_of.get(row["triple_id"])
        if gen is not None:
            row["fact_id"] = gen
            start = plan.starts[gen]
            if row["valid_from"] < start:
                row["valid_from"] = start
        target = row["supersedes"]
        if target and target in plan.generations:
            row["supersedes"] = plan.current(target, row["stated_at"] or row["valid_from"])
    return pl.DataFrame(rows, schema=good.schema)


@dataclass
class Applied:
    facts: pl.DataFrame
    retractions: pl.DataFrame
    unknown: list[dict]  # requests that closed nothing, with a `detail` (memflow.facts
    # quarantines them as retract_unknown)
    closed: int = 0


def apply_retractions(facts: pl.DataFrame, plan: Plan, requests: pl.DataFrame | None) -> Applied:
    """Close the planned facts at their request's time; every request that closed nothing is
    returned in `unknown`. Idempotent: a fact already closed at exactly the request's time
    (by this request, on an earlier run) counts as closed by it."""
    if requests is None or requests.is_empty():
        return Applied(facts, conform(pl.DataFrame(), RETRACTIONS), [])
    rows = facts.to_dicts()
    by_id = {r["fact_id"]: r for r in rows}
    records: list[dict] = []
    done: set[str] = set()
    why: dict[str, str] = {}
    for fact_id, request in plan.closures:
        fact = by_id.get(fact_id)
        ts = request["ts"]
        if fact is None:
            why.setdefault(request["request_id"], f"fact {fact_id} is not stored (over a cap?)")
            continue
        if fact["valid_to"] is not None and fact["valid_to"] < ts:
            why.setdefault(
                request["request_id"],
                f"fact {fact_id} was already closed at {fact['valid_to'].isoformat()}",
            )
            continue
        end = max(ts, fact["valid_from"])
        if fact["valid_to"] is None or fact["valid_to"] > end:
            fact["valid_to"] = end
        done.add(request["request_id"])
        records.append(_record(fact, request, plan.entity_of.get(request["request_id"])))
    changed = bool(records)
    out = pl.DataFrame(rows, schema=facts.schema) if changed and rows else facts
    unknown = []
    for request in requests.sort("ts", "session_id", "turn_id", "item").to_dicts():
        if request["request_id"] not in done:
            unknown.append(
                {**request, "detail": why.get(request["request_id"]) or _nothing(request)}
            )
    retractions = conform(
        pl.DataFrame(records, schema_overrides=RETRACTIONS, infer_schema_length=None)
        if records
        else pl.DataFrame(),
        RETRACTIONS,
    ).sort("retracted_at", "request_id", "fact_id")
    return Applied(out, retractions, unknown, closed=len(records))


def _record(fact: dict, request: dict, entity_id: str | None) -> dict:
    return {
        "request_id": request["request_id"],
        "tenant_id": fact["tenant_id"],
        "ns": fact["ns"],
        "fact_id": fact["fact_id"],
        "subject": fact["subject"],
        "predicate": fact["predicate"],
        "object": fact["object"],
        "kind": request["kind"],
        "entity_id": entity_id,
        "retracted_at": request["ts"],
        "by": request["by"],
        "reason": request["reason"],
        "session_id": request["session_id"],
        "turn_id": request["turn_id"],
        "client": request["client"],
    }


def _nothing(request: dict) -> str:
    at = request["ts"].isoformat()
    if request["kind"] == "fact_id":
        return f"no fact {request['fact_id']} was open at {at}"
    if request["kind"] == "entity":
        return f"no open fact of the entity {request['entity']!r} at {at}"
    return (
        f"no open fact ({request['subject']!r} {request['predicate']} {request['object']!r}) "
        f"at {at}"
    )
