"""Rules every graph backend shares: time encoding and how an expansion is assembled.

Backends only fetch rows; ordering, hop bookkeeping and the cut at `limit` live here so that
every backend answers `expand` identically.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import fields
from datetime import datetime, timedelta
from typing import Any

from resources.graph.base import MAX_HOPS
from schemas.records import EntityRecord, ExpandedFact, FactRecord
from schemas.rules import EPOCH

_MICRO = timedelta(microseconds=1)

# 9999-12-31T23:59:59.999999Z: stands for an open `valid_to` where a backend cannot compare
# against null portably (Gremlin property predicates).
OPEN_END_MICROS = 253_402_300_799_999_999

# Every content field (all but `row_hash`) in declaration order: the stores' column order and
# the order the row hash covers. A new record field needs a store column and changes every
# row hash.
ENTITY_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(EntityRecord) if f.name != "row_hash")
FACT_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(FactRecord) if f.name != "row_hash")

# (entity ids, how many rows at most) -> facts valid at the expansion time touching any of them,
# in expansion order (confidence descending, then fact_id).
FetchTouching = Callable[[Sequence[str], int], list[FactRecord]]


def to_micros(value: datetime) -> int:
    """Integer microseconds since the Unix epoch, UTC. Naive datetimes are refused."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"datetime {value.isoformat()} has no timezone; use UTC")
    return (value - EPOCH) // _MICRO


def from_micros(value: int) -> datetime:
    return EPOCH + timedelta(microseconds=value)


# One encoder for `sources` everywhere it is stored or hashed: the same turns, the same text.
_SOURCES_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
NO_SOURCES = "[]"


def encode_sources(sources: Iterable[Sequence[str]]) -> str:
    """A fact's `sources` as stored (a SQLite column, a Gremlin property) and hashed: a JSON
    array of [session_id, turn_id] pairs, in order."""
    return _SOURCES_ENCODER.encode([[s, t] for s, t in sources])


def decode_sources(text: str | None) -> tuple[tuple[str, str], ...]:
    """The inverse of `encode_sources`; a missing value (a row written before facts kept
    sources) is no sources."""
    if not text:
        return ()
    return tuple((str(s), str(t)) for s, t in json.loads(text))


def fact_row(f: FactRecord) -> tuple[Any, ...]:
    """`f`'s content in FACT_FIELDS order as stored and hashed: confidence a float, times in
    epoch microseconds (open end None), an empty supersession link None, sources as JSON."""
    values = {name: getattr(f, name) for name in FACT_FIELDS}
    values.update(
        confidence=float(f.confidence),
        valid_from=to_micros(f.valid_from),
        valid_to=None if f.valid_to is None else to_micros(f.valid_to),
        supersedes=f.supersedes or None,
        superseded_by=f.superseded_by or None,
        sources=encode_sources(f.sources),
    )
    return tuple(values.values())


def entity_content(e: EntityRecord) -> tuple[Any, ...]:
    """`e`'s content in ENTITY_FIELDS order as hashed: aliases and types as lists."""
    return (e.entity_id, e.name, list(e.aliases), list(e.types))


_VALID_FROM = FACT_FIELDS.index("valid_from")
_VALID_TO = FACT_FIELDS.index("valid_to")
_CONFIDENCE = FACT_FIELDS.index("confidence")
_LINKS = (FACT_FIELDS.index("supersedes"), FACT_FIELDS.index("superseded_by"))
_SOURCES = FACT_FIELDS.index("sources")


def _micros_again(value: Any) -> Any:
    """`to_micros(from_micros(value))`, skipped for the integer every store writes."""
    return value if type(value) is int else to_micros(from_micros(value))


def stored_fact_content(row: Sequence[Any]) -> tuple[Any, ...]:
    """`fact_row(fact_from_row(row, ...))` of a stored row (FACT_FIELDS order) without
    building the record: what the graph check hashes of each stored fact (the two are equal
    for any row, tested; the check's cost was mostly the records)."""
    values = list(row)
    values[_CONFIDENCE] = float(values[_CONFIDENCE])
    values[_VALID_FROM] = _micros_again(values[_VALID_FROM])
    if values[_VALID_TO] is not None:
        values[_VALID_TO] = _micros_again(values[_VALID_TO])
    for i in _LINKS:
        values[i] = values[i] or None
    values[_SOURCES] = encode_sources(decode_sources(values[_SOURCES]))
    return tuple(values)


def fact_from_row(row: Iterable[Any], row_hash: str) -> FactRecord:
    """The inverse of `fact_row` (with the row's hash)."""
    values = dict(zip(FACT_FIELDS, row, strict=True))
    values["valid_from"] = from_micros(values["valid_from"])
    if values["valid_to"] is not None:
        values["valid_to"] = from_micros(values["valid_to"])
    values["sources"] = decode_sources(values["sources"])
    return FactRecord(**values, row_hash=row_hash)


def fact_order(fact: FactRecord) -> tuple[float, str]:
    return (-fact.confidence, fact.fact_id)


def check_expand_args(seeds: Sequence[str], hops: int, limit: int) -> list[str]:
    if isinstance(seeds, str):
        raise TypeError("seeds must be a sequence of entity ids, not one string")
    if hops not in range(1, MAX_HOPS + 1):
        raise ValueError(f"hops must be between 1 and {MAX_HOPS}, got {hops}")
    if limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit}")
    return sorted(set(seeds))


def assemble_expansion(
    seeds: Sequence[str], *, hops: int, limit: int, fetch: FetchTouching
) -> list[ExpandedFact]:
    """Hop 1: facts touching a seed. Hop 2: facts touching a hop-1 neighbour, not already seen.

    `ExpandedFact.seeds` names the seeds a fact was reached from: the seeds it touches (hop 1),
    or the seeds of the neighbours it touches (hop 2).
    """
    seed_list = check_expand_args(seeds, hops, limit)
    if not seed_list:
        return []
    seed_set = set(seed_list)
    hop1 = fetch(seed_list, limit)
    out = [
        ExpandedFact(fact=f, hop=1, seeds=_touching(f, seed_set))
        for f in sorted(hop1, key=fact_order)
    ]
    # A full first hop already fills the answer; a shorter one is every hop-1 fact there is.
    if hops == 1 or len(hop1) >= limit:
        return out[:limit]

    via: dict[str, set[str]] = {}
    for fact in hop1:
        touched = set(_touching(fact, seed_set))
        for end in (fact.subject_id, fact.object_id):
            if end not in seed_set:
                via.setdefault(end, set()).update(touched)
    if not via:
        return out
    seen = {f.fact_id for f in hop1}
    # Hop-1 facts touch neighbours too; ask for enough rows to cover them being filtered out.
    hop2 = [f for f in fetch(sorted(via), limit - len(out) + len(seen)) if f.fact_id not in seen]
    for fact in sorted(hop2, key=fact_order)[: limit - len(out)]:
        reached: set[str] = set()
        for end in (fact.subject_id, fact.object_id):
            reached |= via.get(end, set())
        out.append(ExpandedFact(fact=fact, hop=2, seeds=tuple(sorted(reached))))
    return out


def _touching(fact: FactRecord, seeds: set[str]) -> tuple[str, ...]:
    return tuple(sorted({fact.subject_id, fact.object_id} & seeds))


def unique_ids(ids: Iterable[str]) -> list[str]:
    if isinstance(ids, str):
        raise TypeError("expected a collection of ids, not one string")
    return sorted(set(ids))
