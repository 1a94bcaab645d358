"""Plain records exchanged between the tables, the stores and the recall service.

They carry no Dagster types so that `recall/` can use them without importing Dagster.
Times are timezone-aware UTC datetimes; an open `valid_to` is ``None``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime


@dataclass(frozen=True, slots=True)
class EntityRecord:
    entity_id: str
    name: str
    aliases: tuple[str, ...] = ()
    types: tuple[str, ...] = ()
    row_hash: str = ""


@dataclass(frozen=True, slots=True)
class FactRecord:
    fact_id: str
    subject_id: str
    subject: str
    predicate: str
    object_id: str
    object: str
    confidence: float
    valid_from: datetime
    valid_to: datetime | None = None
    supersedes: str | None = None
    superseded_by: str | None = None
    session_id: str = ""
    turn_id: str = ""
    client: str = ""
    model: str = ""
    source: str = ""
    # Every turn that stated the fact as (session_id, turn_id), first statement first (the one
    # above); at most `schemas.rules.MAX_FACT_SOURCES`. Empty for a fact stored before facts
    # kept them.
    sources: tuple[tuple[str, str], ...] = ()
    row_hash: str = ""

    def valid_at(self, t: datetime) -> bool:
        """The one temporal rule: valid_from <= t < valid_to (open end = still valid)."""
        return self.valid_from <= t and (self.valid_to is None or t < self.valid_to)


@dataclass(frozen=True, slots=True)
class ExpandedFact:
    """A fact reached by expansion, with its graph distance from the nearest seed."""

    fact: FactRecord
    hop: int
    seeds: tuple[str, ...] = field(default=())


@dataclass(frozen=True, slots=True)
class VectorHit:
    entity_id: str
    score: float  # cosine similarity in [-1, 1]
