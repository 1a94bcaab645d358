"""The one write path of the HTTP API and the MCP server: check, redact, land, re-read, and ask
for the tenant's ingestion.

    writes = Writes(landing_dir, window=TimeWindow.from_settings(cfg), trigger=trigger)
    saved = writes.save_triples(scope, items, session_id=..., client="claude-code")
    landed = writes.save_turns(scope, turns)
    gone = writes.retract(scope, [{"fact_id": "f_..."}], reason=..., by="key:k_...")

What every write does, in this order:

1. **Check**: triples go one by one through the pipeline's own contract
   (`schemas.triples.items_to_triples`), so each input gets one result: saved, saved with a
   warning (a ``valid_from`` that cannot be read keeps the turn's time), or rejected with its
   reason. `check_triples` is the one check; `strict` refuses a request with any item that is
   not saved cleanly (the API's rule), otherwise the saved items land and the rest come back.
2. **Redact**: turn text and ids pass `schemas.redaction` (`redact`, `redact_id`); the input of
   the memory tools (``upsert_graph_triples``, ``retract_facts``) is redacted as JSON; the input
   of every other tool is not written at all (the pipeline never stores it). A retraction
   handed in as an ordinary turn is refused: its ``by`` must be the caller, which only
   `retract` sets.
3. **Land**: one file through `memflow.landing_writer` (directory descriptors, no symlinks,
   hidden write, fsync, check, rename).
4. **Re-read**: the check of step 3 is the landing reader itself (`read_landing_file`) on the
   hidden file with the ingestion time window, so what is landed is exactly what ingestion
   accepts; a reject answers with its index and reason and nothing is landed.
5. **Ingest**: the `recall.ports.IngestTrigger` given (if any) is asked for the tenant's run;
   its `IngestRequest` goes into the answer (`ingest`), so the caller knows when the data is
   expected to be recallable, or why nothing will ingest it on its own.

Errors are `WriteRefused` (status, stable code, message, details): the API answers them as its
error body, the MCP server as a tool error.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

import orjson

from memflow.landing import RETRACT_TOOL, UPSERT_TOOL, read_landing_file
from memflow.landing_writer import (
    Landed,
    LandingUnsafe,
    LandingWriter,
    LineTooLong,
    explicit_turn,
    iso_utc,
)
from recall.ports import IngestRequest, IngestTrigger
from recall.requests import (
    IngestInfo,
    RetractionAccepted,
    RetractItemOut,
    TripleAccepted,
    TripleRejected,
    TriplesAccepted,
    TurnsAccepted,
)
from schemas import ids, rules
from schemas.redaction import redact, redact_id, redact_json
from schemas.rules import DEFAULT_TIME_WINDOW, SEVERITY_WARNING, TimeWindow
from schemas.scope import Scope
from schemas.triples import TurnContext, clean_name, items_to_triples

log = logging.getLogger("memflow.writes")

Status = Literal["saved", "saved_with_warning", "rejected"]
NO_TRIGGER = (
    "this server has no ingest trigger: the landing sensor (memflow up / memflow dev) or "
    "`memflow run` ingests the file"
)
MEMORY_TOOLS = frozenset({UPSERT_TOOL, RETRACT_TOOL})


class WriteRefused(Exception):
    """A write that was not landed; `code` is stable (the API's error codes)."""

    def __init__(
        self, status: int, code: str, message: str, details: list[dict[str, Any]] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.details = details


@dataclass(frozen=True, slots=True)
class ItemResult:
    """What the contract made of one input item (`index` is its place in the input)."""

    index: int
    status: Status
    item: dict[str, Any] | None = None  # the landing item, for saved ones
    reason: str | None = None
    detail: str | None = None


def tool_base(name: str | None) -> str:
    """A tool name as the memory tools are compared: qualification and case removed
    (``mcp__memflow__upsert_graph_triples`` and ``UPSERT_GRAPH_TRIPLES`` are the upsert)."""
    if not isinstance(name, str):
        return ""
    for sep in ("__", ".", "/"):
        name = name.rsplit(sep, 1)[-1]
    return name.strip().lower()


def turn_context(scope: Scope, session_id: str, client: str, prefix: str) -> TurnContext:
    """The provenance of an explicit write made now, as ingestion will record it (ids are
    redacted as the landing reader redacts them, so the ids answered are the stored ones)."""
    now = datetime.now(UTC)
    return TurnContext(
        tenant_id=scope.tenant_id,
        ns=scope.ns,
        day=now.date().isoformat(),
        session_id=redact_id(session_id),
        turn_id=f"{prefix}-{uuid.uuid4().hex}",
        ts=now,
        client=redact_id(client),
        model="explicit",
        source="explicit",
    )


def check_triples(items: Sequence[Any], ctx: TurnContext) -> list[ItemResult]:
    """One result per item, in input order: each item goes through the pipeline's contract
    alone, so every result is tied to its own index (an item that is saved with a warning is
    saved, never also listed as rejected)."""
    results: list[ItemResult] = []
    for index, item in enumerate(items):
        rows, bad = items_to_triples([item], ctx)
        errors = [b for b in bad if b.get("severity") != SEVERITY_WARNING]
        if rows and not errors:
            warning = next(iter(bad), None)
            results.append(
                ItemResult(
                    index,
                    "saved_with_warning" if warning else "saved",
                    _landable(rows[0]),
                    warning["reason"] if warning else None,
                    warning["detail"] if warning else None,
                )
            )
        else:
            first = (errors or bad)[0]
            results.append(ItemResult(index, "rejected", None, first["reason"], first["detail"]))
    return results


def _landable(row: Mapping[str, Any]) -> dict[str, Any]:
    """A contract-clean triple as a landing item: redacted names, normalised predicate,
    explicit confidence and validity start; nothing else of the client's item survives."""
    item: dict[str, Any] = {
        "subject": row["subject"],
        "predicate": row["predicate"],
        "object": row["object"],
        "confidence": row["confidence"],
        "valid_from": iso_utc(row["valid_from"]),
    }
    for key in ("supersedes", "subject_type", "object_type"):
        if row.get(key):
            item[key] = row[key]
    return item


def accepted_triple(
    index: int, scope: Scope, row: Mapping[str, Any], result: ItemResult | None = None
) -> TripleAccepted:
    s_id = ids.entity_id(scope.tenant_id, scope.ns, ids.norm_key(row["subject"]))
    o_id = ids.entity_id(scope.tenant_id, scope.ns, ids.norm_key(row["object"]))
    return TripleAccepted(
        index=index,
        status="saved" if result is None else result.status,
        warning=None if result is None or result.reason is None else result.reason,
        warning_detail=None if result is None else result.detail,
        triple_id=row["triple_id"],
        fact_id=ids.fact_id(scope.tenant_id, scope.ns, s_id, row["predicate"], o_id),
        subject_id=s_id,
        object_id=o_id,
        subject=row["subject"],
        predicate=row["predicate"],
        object=row["object"],
    )


def _rejected(results: Sequence[ItemResult]) -> list[dict[str, Any]]:
    return [
        {"index": r.index, "reason": r.reason, "detail": r.detail}
        for r in results
        if r.status == "rejected"
    ]


class Writes:
    """Writes into one landing zone (`landing_dir`), checked with ingestion's `window`."""

    def __init__(
        self,
        landing_dir: str | Path,
        *,
        window: TimeWindow = DEFAULT_TIME_WINDOW,
        trigger: IngestTrigger | None = None,
    ) -> None:
        self.writer = LandingWriter(landing_dir)
        self.window = window
        self.trigger = trigger

    @property
    def root(self) -> Path:
        return self.writer.root

    # -- triples ---------------------------------------------------------------------------

    def save_triples(
        self,
        scope: Scope,
        items: Sequence[Any],
        *,
        session_id: str | None,
        client: str,
        strict: bool,
        prefix: str = "api",
    ) -> TriplesAccepted:
        """Land the items that pass the contract as one ``upsert_graph_triples`` turn. With
        `strict`, any item not saved cleanly refuses the whole request (422
        ``triples_rejected``, every reason); without, saved items land and the answer gives
        every input's result. Nothing saved (every item rejected) lands nothing."""
        ctx = turn_context(scope, session_id or f"{prefix}-{uuid.uuid4().hex}", client, prefix)
        results = check_triples(items, ctx)
        refused = [r for r in results if r.status != "saved"] if strict else []
        if refused:
            details = [{"index": r.index, "reason": r.reason, "detail": r.detail} for r in refused]
            raise WriteRefused(
                422,
                "triples_rejected",
                f"{len(refused)} of {len(items)} triples do not meet the contract; "
                "nothing was saved",
                details,
            )
        saved = [r for r in results if r.item is not None]
        answer = TriplesAccepted(
            tenant=scope.key,
            accepted=len(saved),
            session_id=ctx.session_id,
            turn_id=ctx.turn_id,
            rejected=[TripleRejected.model_validate(d) for d in _rejected(results)],
        )
        if not saved:
            answer.notice = "nothing was saved: every item was rejected"
            return answer
        cleaned = [r.item for r in saved if r.item is not None]
        # The pipeline re-validates exactly what is landed: the ids it computes are these.
        rows, again = items_to_triples(cleaned, ctx)
        if again or len(rows) != len(saved):
            raise WriteRefused(500, "internal_error", "triples changed on re-validation")
        turn = explicit_turn(
            session_id=ctx.session_id,
            turn_id=ctx.turn_id,
            ts=ctx.ts,
            client=ctx.client,
            triples=cleaned,
        )
        landed = self.land(scope, [turn])
        answer.landing_file = landed.name
        answer.triples = [
            accepted_triple(r.index, scope, row, r) for r, row in zip(saved, rows, strict=True)
        ]
        answer.ingest = self.ingest(scope, landed)
        return answer

    # -- turns -----------------------------------------------------------------------------

    def save_turns(self, scope: Scope, turns: Sequence[Mapping[str, Any]]) -> TurnsAccepted:
        """Land conversation turns, redacted: text and ids through the redactor, the input of
        the memory tools redacted as JSON, any other tool's input left out (never stored)."""
        cleaned = [self._clean_turn(i, t) for i, t in enumerate(turns)]
        landed = self.land(scope, cleaned)
        dropped = sum(
            1
            for t, c in zip(turns, cleaned, strict=True)
            if t.get("tool_input") is not None and "tool_input" not in c
        )
        return TurnsAccepted(
            tenant=scope.key,
            accepted=landed.lines,
            landing_file=landed.name,
            tool_inputs_left_out=dropped,
            ingest=self.ingest(scope, landed),
        )

    @staticmethod
    def _clean_turn(index: int, turn: Mapping[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in turn.items():
            if value is None:
                continue
            if key in ("session_id", "turn_id", "client", "tool_name") and isinstance(value, str):
                out[key] = redact_id(value)
            elif key == "content" and isinstance(value, str):
                out[key] = redact(value)
            elif key != "tool_input":
                out[key] = value
        tool = tool_base(turn.get("tool_name"))
        if tool == RETRACT_TOOL:
            raise WriteRefused(
                422,
                "turns_rejected",
                "a retraction is not an ordinary turn: use POST /v1/retractions (MCP: "
                "retract_fact, forget), which records who asked",
                [{"index": index, "reason": "retraction_not_a_turn"}],
            )
        if tool in MEMORY_TOOLS and turn.get("tool_input") is not None:
            out["tool_input"] = redact_json(turn["tool_input"])
        return out

    # -- retractions -----------------------------------------------------------------------

    def retract(
        self,
        scope: Scope,
        items: Sequence[Mapping[str, Any]],
        *,
        reason: str | None,
        by: str,
        client: str,
        session_id: str | None = None,
        prefix: str = "api",
    ) -> RetractionAccepted:
        """Land one ``retract_facts`` turn (the format of shared contract: ``tool_input``
        ``{"retract": [...], "reason", "by"}``). Items are normalised as the facts stage keys
        them: names redacted, predicates in UPPER_SNAKE_CASE; a triple item also answers the
        fact id it names. The facts stage applies it at the turn's ``ts``."""
        ctx = turn_context(scope, session_id or f"{prefix}-{uuid.uuid4().hex}", client, prefix)
        landing_items: list[dict[str, str]] = []
        answered: list[RetractItemOut] = []
        problems: list[dict[str, Any]] = []
        for index, item in enumerate(items):
            made = _retract_item(scope, item)
            if isinstance(made, str):
                problems.append({"index": index, "reason": made})
                continue
            landing, out = made
            landing_items.append(landing)
            answered.append(out)
        if problems:
            raise WriteRefused(
                422, "retractions_rejected", "some items name nothing that can be retracted",
                problems,
            )  # fmt: skip
        tool_input: dict[str, Any] = {"retract": landing_items, "by": redact_id(by)}
        if reason and reason.strip():
            tool_input["reason"] = redact(reason.strip())
        turn = {
            "session_id": ctx.session_id,
            "turn_id": ctx.turn_id,
            "ts": ctx.ts,
            "role": "tool",
            "content": "",
            "client": ctx.client,
            "tool_name": RETRACT_TOOL,
            "tool_input": tool_input,
        }
        landed = self.land(scope, [turn])
        return RetractionAccepted(
            tenant=scope.key,
            accepted=len(answered),
            items=answered,
            by=tool_input["by"],
            at=ctx.ts,
            session_id=ctx.session_id,
            turn_id=ctx.turn_id,
            landing_file=landed.name,
            ingest=self.ingest(scope, landed),
        )

    # -- landing ---------------------------------------------------------------------------

    def land(self, scope: Scope, turns: Sequence[Mapping[str, Any]]) -> Landed:
        """Write the turns as one landing file, checked by the landing reader's own rules
        (with ingestion's time window) before it becomes visible to the sensor."""
        root = self.writer.root

        def check(hidden: Path) -> None:
            read = read_landing_file(hidden, root, window=self.window)
            if read.problem is not None:  # the file just written is not a regular file
                raise WriteRefused(503, "landing_unavailable", "the landing zone refused the write")
            if read.rejects.height:
                details = [
                    {"index": (line or 1) - 1, "reason": reason, "detail": detail}
                    for line, reason, detail in read.rejects.select(
                        "line_no", "reason", "detail"
                    ).iter_rows()
                ]
                raise WriteRefused(
                    422, "turns_rejected", "turns do not meet the landing format", details
                )

        try:
            return self.writer.write(scope, turns, check)
        except LineTooLong as exc:
            raise WriteRefused(413, "payload_too_large", str(exc)) from None
        except LandingUnsafe:
            log.warning("landing directory of %s is not a plain directory", scope.key)
            raise WriteRefused(
                503, "landing_unavailable", "the landing zone refused the write"
            ) from None
        except (orjson.JSONEncodeError, TypeError):
            raise WriteRefused(
                422, "invalid_request", "a turn cannot be written as JSON (nesting or numbers)"
            ) from None

    def ingest(self, scope: Scope, landed: Landed) -> IngestInfo:
        """Ask the trigger for the tenant's run; a trigger that fails never fails the write
        (the file is landed; the sensor or the next run still ingests it)."""
        if self.trigger is None:
            return IngestInfo(requested=False, reason=NO_TRIGGER)
        try:
            request = self.trigger(scope, landed.path)
        except Exception as exc:  # the write stands; say why nothing was started
            log.warning("ingest trigger failed for %s: %s", scope.key, type(exc).__name__)
            return IngestInfo(
                requested=False,
                reason=f"the ingest trigger failed ({type(exc).__name__}); the landing sensor "
                "or the next `memflow run` ingests the file",
            )
        return ingest_info(request)


def ingest_info(request: IngestRequest) -> IngestInfo:
    return IngestInfo(
        requested=request.requested,
        run_id=request.run_id,
        expected_by=request.expected_by,
        reason=redact(request.reason) if request.reason else None,
    )


def _retract_item(
    scope: Scope, item: Mapping[str, Any]
) -> tuple[dict[str, str], RetractItemOut] | str:
    """(landing item, answer item) or the reason it names nothing."""
    fact_id = item.get("fact_id")
    if isinstance(fact_id, str) and fact_id.strip():
        value = fact_id.strip()
        if redact(value) != value:
            return "name_redacted_entirely"
        return {"fact_id": value}, RetractItemOut(fact_id=value)
    entity = item.get("entity")
    if entity is not None:
        name, why = clean_name(entity)
        if name is None:
            return why or "name_empty"
        return {"entity": name}, RetractItemOut(entity=name)
    subject, why_s = clean_name(item.get("subject"))
    obj, why_o = clean_name(item.get("object"))
    raw_predicate = item.get("predicate")
    text = redact(raw_predicate) if isinstance(raw_predicate, str) else None
    predicate = rules.normalize_predicate(text)
    if subject is None or obj is None:
        return why_s or why_o or "name_empty"
    if predicate is None:
        return rules.Reason.PREDICATE_INVALID
    s_id = ids.entity_id(scope.tenant_id, scope.ns, ids.norm_key(subject))
    o_id = ids.entity_id(scope.tenant_id, scope.ns, ids.norm_key(obj))
    fid = ids.fact_id(scope.tenant_id, scope.ns, s_id, predicate, o_id)
    landing = {"subject": subject, "predicate": predicate, "object": obj}
    return landing, RetractItemOut(subject=subject, predicate=predicate, object=obj, fact_id=fid)


def spread(now: datetime, i: int) -> datetime:
    """A distinct time for the i-th turn handed in at `now` without one (order kept)."""
    return now + timedelta(microseconds=i)
