"""A tenant's stored facts, filtered and paged: what `GET /v1/facts` and the MCP tool
``list_facts`` answer.

    page = list_facts(service, scope, entity="payments-service", status="valid", limit=20)
    page.total, page.more, page.next_cursor

Facts come from the recall service's snapshot of the scope (`recall.cache.ScopeIndex`, the same
graph store recall reads), newest ``valid_from`` first, ties by fact id. Filters: ``entity`` (an
entity id, or a name: its id and any fact whose subject or object is spelled so, case and
spacing aside), ``predicate`` (normalised like the contract: ``uses`` is ``USES``) and
``status`` at ``as_of`` (default now): ``valid`` (valid_from <= as_of < valid_to), ``closed``
(closed by as_of: retracted or superseded), ``all``. The cursor is opaque (it names the last
fact shown), so a page is stable while facts are added.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from recall.answers import FactPage, Provenance, RecalledFact, RecallError, Source
from recall.cache import to_us
from schemas import ids, rules
from schemas.records import FactRecord
from schemas.scope import Scope

if TYPE_CHECKING:
    from recall.service import RecallService

MAX_PAGE = 100


class BadCursor(RecallError):
    code = "invalid_cursor"


def _cursor(f: FactRecord) -> str:
    raw = f"{to_us(f.valid_from)}:{f.fact_id}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _after(cursor: str) -> tuple[int, str]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        us, _, fact_id = raw.partition(":")
        return -int(us), fact_id  # as `_sort_key` orders
    except (ValueError, UnicodeDecodeError):
        raise BadCursor("the cursor is not one this API gave") from None


def _sort_key(f: FactRecord) -> tuple[int, str]:
    return (-to_us(f.valid_from), f.fact_id)


def _entity_matcher(scope: Scope, entity: str) -> set[str]:
    spelled = " ".join(entity.split()).casefold()
    return {entity, ids.entity_id(scope.tenant_id, scope.ns, ids.norm_key(entity)), spelled}


def _matches(f: FactRecord, wanted: set[str]) -> bool:
    return bool(
        {f.subject_id, f.object_id} & wanted
        or {" ".join(f.subject.split()).casefold(), " ".join(f.object.split()).casefold()} & wanted
    )


def _status_ok(f: FactRecord, status: str, as_of: datetime) -> bool:
    if status == "all":
        return True
    closed = f.valid_to is not None and f.valid_to <= as_of
    if status == "closed":
        return closed
    return f.valid_at(as_of)


def select_facts(
    facts: Iterable[FactRecord],
    scope: Scope,
    *,
    entity: str | None = None,
    predicate: str | None = None,
    status: str = "valid",
    as_of: datetime,
) -> list[FactRecord]:
    """The matching facts in page order (newest valid_from first)."""
    wanted = _entity_matcher(scope, entity) if entity else None
    pred = None
    if predicate:
        pred = rules.normalize_predicate(predicate)
        if pred is None:
            raise RecallError("predicate is not a predicate (UPPER_SNAKE_CASE, e.g. USES)")
    out = [
        f
        for f in facts
        if (pred is None or f.predicate == pred)
        and (wanted is None or _matches(f, wanted))
        and _status_ok(f, status, as_of)
    ]
    out.sort(key=_sort_key)
    return out


_FACT_FIELDS = ("fact_id", "subject_id", "subject", "predicate", "object_id", "object")
_PROVENANCE_FIELDS = ("session_id", "turn_id", "client", "model")


def _fact(f: FactRecord) -> RecalledFact:
    """A stored fact in the answers' shape (no hop, no score: nothing was asked)."""
    turns = f.sources or ((f.session_id, f.turn_id),)
    sources = [Source(session_id=s, turn_id=t) for s, t in turns]
    provenance = Provenance(**{k: getattr(f, k) for k in _PROVENANCE_FIELDS}, sources=sources)
    values = {k: getattr(f, k) for k in (*_FACT_FIELDS, "confidence", "valid_from", "valid_to")}
    return RecalledFact(**values, provenance=provenance, hop=None, score=None)


def page_of(
    facts: Iterable[FactRecord],
    scope: Scope,
    *,
    entity: str | None = None,
    predicate: str | None = None,
    status: str = "valid",
    as_of: datetime | None = None,
    limit: int = 20,
    cursor: str | None = None,
) -> FactPage:
    """One page of `facts` (any iterable of the scope's records)."""
    if not 1 <= limit <= MAX_PAGE:
        raise RecallError(f"limit must be between 1 and {MAX_PAGE}")
    if status not in ("valid", "closed", "all"):
        raise RecallError("status is one of valid, closed, all")
    at = (as_of or datetime.now(UTC)).astimezone(UTC)
    matched = select_facts(
        facts, scope, entity=entity, predicate=predicate, status=status, as_of=at
    )
    start = 0
    if cursor:
        after = _after(cursor)
        start = next((i for i, f in enumerate(matched) if _sort_key(f) > after), len(matched))
    shown = matched[start : start + limit]
    rest = len(matched) - start - len(shown)
    return FactPage(
        scope=scope.key,
        as_of=at,
        status=status,  # type: ignore[arg-type]
        total=len(matched),
        more=rest,
        next_cursor=_cursor(shown[-1]) if rest and shown else None,
        facts=[_fact(f) for f in shown],
    )


def list_facts(service: RecallService, scope: Scope, **options: Any) -> FactPage:
    """A page of the scope's facts from the recall service's snapshot of the scope."""
    return page_of(service.indexes.get(scope).facts, scope, **options)
