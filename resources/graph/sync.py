"""Make a graph store equal the ENTITIES and FACTS tables of one scope, idempotently.

The tables are the source of truth. Each row gets a `row_hash` over its stored content; a sync
compares those with `store.row_hashes(scope)`, writes only new or changed rows and deletes ids
the table no longer has, so a second run writes nothing.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import Counter
from dataclasses import asdict, dataclass, replace
from typing import Any

import polars as pl

from resources.graph.base import GraphStore
from resources.graph.common import from_micros, to_micros
from resources.records import EntityRecord, FactRecord
from resources.scope import Scope

_HASH_VERSION = "memflow-graph-row-v1"  # change it to make every store rewrite every row
_SAMPLE = 5


@dataclass(frozen=True, slots=True)
class GraphSyncReport:
    entities_written: int
    facts_written: int
    entities_deleted: int
    facts_deleted: int
    unchanged: int
    seconds: float

    @property
    def changed(self) -> bool:
        return any(
            (self.entities_written, self.facts_written, self.entities_deleted, self.facts_deleted)
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def entity_hash(e: EntityRecord) -> str:
    return _digest([e.entity_id, e.name, list(e.aliases), list(e.types)])


def fact_hash(f: FactRecord) -> str:
    return _digest(
        [
            f.fact_id,
            f.subject_id,
            f.subject,
            f.predicate,
            f.object_id,
            f.object,
            float(f.confidence),
            to_micros(f.valid_from),
            None if f.valid_to is None else to_micros(f.valid_to),
            f.supersedes or None,
            f.superseded_by or None,
            f.session_id,
            f.turn_id,
            f.client,
            f.model,
            f.source,
        ]
    )


def _digest(values: list[Any]) -> str:
    text = json.dumps([_HASH_VERSION, *values], ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def records_from_tables(
    entities_df: pl.DataFrame, facts_df: pl.DataFrame, *, scope: Scope | None = None
) -> tuple[list[EntityRecord], list[FactRecord]]:
    """Store records (with row hashes) from the ENTITIES and FACTS tables.

    With `scope`, a row of any other scope is an error. Duplicate ids and facts whose subject or
    object is not in the entities table are errors too: the store could not equal such tables.
    """
    if scope is not None:
        for name, df in (("entities", entities_df), ("facts", facts_df)):
            _check_scope(name, df, scope)
    entities = [
        _entity_record(*row)
        for row in entities_df.select(
            pl.col("entity_id"),
            pl.col("name"),
            pl.col("aliases").fill_null([]),
            pl.col("types").fill_null([]),
        ).iter_rows()
    ]
    facts = [
        _fact_record(*row)
        for row in facts_df.select(
            "fact_id",
            "subject_id",
            "subject",
            "predicate",
            "object_id",
            "object",
            "confidence",
            pl.col("valid_from").dt.epoch("us"),
            pl.col("valid_to").dt.epoch("us"),
            "supersedes",
            "superseded_by",
            *(pl.col(c).fill_null("") for c in ("session_id", "turn_id", "client", "model")),
            pl.col("source").fill_null(""),
        ).iter_rows()
    ]
    _check_unique("entity_id", [e.entity_id for e in entities])
    _check_unique("fact_id", [f.fact_id for f in facts])
    known = {e.entity_id for e in entities}
    dangling = sorted({x for f in facts for x in (f.subject_id, f.object_id)} - known)
    if dangling:
        raise ValueError(
            f"{len(dangling)} fact endpoints are not in the entities table: {dangling[:_SAMPLE]}"
        )
    return entities, facts


def sync_graph(
    store: GraphStore, scope: Scope, entities_df: pl.DataFrame, facts_df: pl.DataFrame
) -> GraphSyncReport:
    started = time.perf_counter()
    entities, facts = records_from_tables(entities_df, facts_df, scope=scope)
    stored_entities, stored_facts = store.row_hashes(scope)
    new_entities = [e for e in entities if stored_entities.get(e.entity_id) != e.row_hash]
    new_facts = [f for f in facts if stored_facts.get(f.fact_id) != f.row_hash]
    gone_facts = sorted(set(stored_facts) - {f.fact_id for f in facts})
    gone_entities = sorted(set(stored_entities) - {e.entity_id for e in entities})

    # Entities first so that new facts find both ends; stale entities last, after the facts
    # that pointed at them are gone.
    entities_written = store.upsert_entities(scope, new_entities) if new_entities else 0
    facts_deleted = store.delete_facts(scope, gone_facts) if gone_facts else 0
    facts_written = store.upsert_facts(scope, new_facts) if new_facts else 0
    entities_deleted = store.delete_entities(scope, gone_entities) if gone_entities else 0
    return GraphSyncReport(
        entities_written=entities_written,
        facts_written=facts_written,
        entities_deleted=entities_deleted,
        facts_deleted=facts_deleted,
        unchanged=len(entities) - len(new_entities) + len(facts) - len(new_facts),
        seconds=round(time.perf_counter() - started, 6),
    )


def graph_equals_table(
    store: GraphStore, scope: Scope, entities_df: pl.DataFrame, facts_df: pl.DataFrame
) -> tuple[bool, dict[str, Any]]:
    """Whether the store holds exactly the tables' rows for `scope`, content included.

    The store's rows are re-hashed from what it returns (not from the hashes it keeps), so an
    edit made behind the sink's back shows up as `changed`.
    """
    entities, facts = records_from_tables(entities_df, facts_df, scope=scope)
    table_e = {e.entity_id: e.row_hash for e in entities}
    table_f = {f.fact_id: f.row_hash for f in facts}
    store_e = {e.entity_id: entity_hash(e) for e in store.entities(scope)}
    store_f = {f.fact_id: fact_hash(f) for f in store.facts(scope)}
    details: dict[str, Any] = {
        "table_entities": len(table_e),
        "store_entities": len(store_e),
        "table_facts": len(table_f),
        "store_facts": len(store_f),
    }
    sample: dict[str, list[str]] = {}
    for kind, table, stored in (("entities", table_e, store_e), ("facts", table_f, store_f)):
        diffs = {
            "missing": sorted(set(table) - set(stored)),
            "extra": sorted(set(stored) - set(table)),
            "changed": sorted(k for k in set(table) & set(stored) if table[k] != stored[k]),
        }
        for what, ids in diffs.items():
            details[f"{what}_{kind}"] = len(ids)
            if ids:
                sample[f"{what}_{kind}"] = ids[:_SAMPLE]
    details["sample"] = sample
    return not sample, details


def _entity_record(entity_id: str, name: str, aliases: list[str], types: list[str]) -> EntityRecord:
    record = EntityRecord(
        entity_id=_required("entity_id", entity_id),
        name=_required("name", name),
        aliases=tuple(aliases),
        types=tuple(types),
    )
    return replace(record, row_hash=entity_hash(record))


def _fact_record(
    fact_id: str,
    subject_id: str,
    subject: str,
    predicate: str,
    object_id: str,
    object_: str,
    confidence: float | None,
    valid_from: int | None,
    valid_to: int | None,
    supersedes: str | None,
    superseded_by: str | None,
    session_id: str,
    turn_id: str,
    client: str,
    model: str,
    source: str,
) -> FactRecord:
    if confidence is None or valid_from is None:
        raise ValueError(f"fact {fact_id!r} has no confidence or valid_from")
    record = FactRecord(
        fact_id=_required("fact_id", fact_id),
        subject_id=_required("subject_id", subject_id),
        subject=_required("subject", subject),
        predicate=_required("predicate", predicate),
        object_id=_required("object_id", object_id),
        object=_required("object", object_),
        confidence=float(confidence),
        valid_from=from_micros(valid_from),
        valid_to=None if valid_to is None else from_micros(valid_to),
        supersedes=supersedes or None,
        superseded_by=superseded_by or None,
        session_id=session_id,
        turn_id=turn_id,
        client=client,
        model=model,
        source=source,
    )
    return replace(record, row_hash=fact_hash(record))


def _required(column: str, value: str | None) -> str:
    if value is None or value == "":
        raise ValueError(f"column {column} has an empty value")
    return value


def _check_scope(name: str, df: pl.DataFrame, scope: Scope) -> None:
    other = df.filter(
        (pl.col("tenant_id") != scope.tenant_id)
        | (pl.col("ns") != scope.ns)
        | pl.col("tenant_id").is_null()
        | pl.col("ns").is_null()
    )
    if other.height:
        found = sorted({f"{t}/{n}" for t, n in other.select("tenant_id", "ns").iter_rows()})
        raise ValueError(
            f"{other.height} {name} rows are not in scope {scope} (found {found[:_SAMPLE]})"
        )


def _check_unique(column: str, ids: list[str]) -> None:
    dupes = sorted(i for i, n in Counter(ids).items() if n > 1)
    if dupes:
        raise ValueError(f"duplicate {column} values: {dupes[:_SAMPLE]}")
