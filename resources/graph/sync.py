"""Make a graph store equal the ENTITIES and FACTS tables of one scope, idempotently.

The tables are the source of truth. Each row gets a `row_hash` over its stored content; a sync
compares those with `store.row_hashes(scope)`, writes only new or changed rows and deletes ids
the table no longer has, so a second run writes nothing. A fact's hash covers its `sources`
too: a stored fact restated in a new turn (`memflow.facts`) is rewritten with the longer list.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass
from typing import Any

import polars as pl

from resources.graph.base import GraphStore
from resources.graph.common import (
    FACT_FIELDS,
    NO_SOURCES,
    encode_sources,
    entity_content,
    fact_from_row,
    fact_row,
)
from schemas.records import EntityRecord, FactRecord
from schemas.scope import Scope
from schemas.tables import SOURCE

_HASH_VERSION = "memflow-graph-row-v1"  # change it to make every store rewrite every row
_SAMPLE = 5
_OPTIONAL_TEXT = ("session_id", "turn_id", "client", "model", "source")


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
    return _digest(list(entity_content(e)))


def fact_hash(f: FactRecord) -> str:
    return _digest(list(fact_row(f)))


# One encoder: json.dumps with options would build a new one per row.
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def _digest(values: list[Any]) -> str:
    text = _ENCODER.encode([_HASH_VERSION, *values])
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def records_from_tables(
    entities_df: pl.DataFrame, facts_df: pl.DataFrame, *, scope: Scope | None = None
) -> tuple[list[EntityRecord], list[FactRecord]]:
    """Store records (with row hashes) from the ENTITIES and FACTS tables.

    With `scope`, a row of any other scope is an error. Empty required values, duplicate ids and
    facts whose subject or object is not in the entities table are errors too: a store could not
    equal such tables.
    """
    rows = _TableRows.read(entities_df, facts_df, scope)
    return (
        [_entity(r, h) for r, h in zip(rows.entities, rows.entity_hashes, strict=True)],
        [fact_from_row(r, h) for r, h in zip(rows.facts, rows.fact_hashes, strict=True)],
    )


def sync_graph(
    store: GraphStore, scope: Scope, entities_df: pl.DataFrame, facts_df: pl.DataFrame
) -> GraphSyncReport:
    started = time.perf_counter()
    return _sync(store, scope, _TableRows.read(entities_df, facts_df, scope), started)


def sync_and_check(
    store: GraphStore, scope: Scope, entities_df: pl.DataFrame, facts_df: pl.DataFrame
) -> tuple[GraphSyncReport, bool, dict[str, Any]]:
    """`sync_graph`, then `graph_equals_table` on the same tables, reading and hashing the
    tables once (the graph sink's step: the table side is most of a check's cost)."""
    started = time.perf_counter()
    rows = _TableRows.read(entities_df, facts_df, scope)
    report = _sync(store, scope, rows, started)
    equal, details = _compare(store, scope, rows)
    return report, equal, details


def _sync(store: GraphStore, scope: Scope, rows: _TableRows, started: float) -> GraphSyncReport:
    stored_entities, stored_facts = store.row_hashes(scope)
    # Records are built only for rows that need writing: a no-change sync only hashes.
    new_entities = [
        _entity(r, h)
        for r, h in zip(rows.entities, rows.entity_hashes, strict=True)
        if stored_entities.get(r[0]) != h
    ]
    new_facts = [
        fact_from_row(r, h)
        for r, h in zip(rows.facts, rows.fact_hashes, strict=True)
        if stored_facts.get(r[0]) != h
    ]
    gone_facts = sorted(set(stored_facts).difference(r[0] for r in rows.facts))
    gone_entities = sorted(set(stored_entities).difference(r[0] for r in rows.entities))

    # Entities first so that new facts find both ends; stale entities last, after the facts
    # that pointed at them are gone.
    entities_written = store.upsert_entities(scope, new_entities) if new_entities else 0
    facts_deleted = store.delete_facts(scope, gone_facts) if gone_facts else 0
    facts_written = store.upsert_facts(scope, new_facts) if new_facts else 0
    entities_deleted = store.delete_entities(scope, gone_entities) if gone_entities else 0
    total = len(rows.entities) + len(rows.facts)
    return GraphSyncReport(
        entities_written=entities_written,
        facts_written=facts_written,
        entities_deleted=entities_deleted,
        facts_deleted=facts_deleted,
        unchanged=total - len(new_entities) - len(new_facts),
        seconds=round(time.perf_counter() - started, 6),
    )


def graph_equals_table(
    store: GraphStore, scope: Scope, entities_df: pl.DataFrame, facts_df: pl.DataFrame
) -> tuple[bool, dict[str, Any]]:
    """Whether the store holds exactly the tables' rows for `scope`, content included.

    The store's rows are re-hashed from what it returns (not from the hashes it keeps), so an
    edit made behind the sink's back shows up as `changed`.
    """
    return _compare(store, scope, _TableRows.read(entities_df, facts_df, scope))


def _compare(store: GraphStore, scope: Scope, rows: _TableRows) -> tuple[bool, dict[str, Any]]:
    table_e = dict(zip((r[0] for r in rows.entities), rows.entity_hashes, strict=True))
    table_f = dict(zip((r[0] for r in rows.facts), rows.fact_hashes, strict=True))
    stored_entities, stored_facts = store.content_rows(scope)
    store_e = {row[0]: _digest(list(row)) for row in stored_entities}
    store_f = {row[0]: _digest(list(row)) for row in stored_facts}
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


@dataclass(frozen=True, slots=True)
class _TableRows:
    """Validated table rows in hashing order (times as epoch microseconds), with their hashes."""

    entities: list[tuple[Any, ...]]
    entity_hashes: list[str]
    facts: list[tuple[Any, ...]]
    fact_hashes: list[str]

    @classmethod
    def read(
        cls, entities_df: pl.DataFrame, facts_df: pl.DataFrame, scope: Scope | None
    ) -> _TableRows:
        if scope is not None:
            _check_scope("entities", entities_df, scope)
            _check_scope("facts", facts_df, scope)
        ents = entities_df.select(
            "entity_id",
            "name",
            pl.col("aliases").fill_null(pl.lit([], dtype=pl.List(pl.String()))),
            pl.col("types").fill_null(pl.lit([], dtype=pl.List(pl.String()))),
        )
        if "sources" not in facts_df.columns:  # a table written before facts kept sources
            facts_df = facts_df.with_columns(pl.lit(None, dtype=pl.List(SOURCE)).alias("sources"))
        facts = facts_df.select(
            *(
                pl.col(c).dt.epoch("us")
                if c in ("valid_from", "valid_to")
                else pl.col(c).cast(pl.Float64())
                if c == "confidence"
                else pl.when(pl.col(c) != "").then(pl.col(c))  # "" and null: no link
                if c in ("supersedes", "superseded_by")
                else pl.col(c).fill_null("")
                if c in _OPTIONAL_TEXT
                else pl.col(c)
                for c in FACT_FIELDS
            )
        )
        facts = facts.with_columns(
            pl.Series("sources", _sources_text(facts["sources"]), dtype=pl.String())
        )
        _check_required("entities", ents, ("entity_id", "name"))
        _check_required("facts", facts, (*FACT_FIELDS[:6], "confidence", "valid_from"))
        _check_unique("entity_id", ents["entity_id"])
        _check_unique("fact_id", facts["fact_id"])
        ends = pl.concat([facts["subject_id"], facts["object_id"]]).unique()
        dangling = ends.filter(~ends.is_in(ents["entity_id"].implode())).sort()
        if dangling.len():
            raise ValueError(
                f"{dangling.len()} fact endpoints are not in the entities table: "
                f"{dangling.head(_SAMPLE).to_list()}"
            )
        entity_rows = ents.rows()
        fact_rows = facts.rows()
        return cls(
            entities=entity_rows,
            entity_hashes=[_digest(list(r)) for r in entity_rows],
            facts=fact_rows,
            fact_hashes=[_digest(list(r)) for r in fact_rows],
        )


def _sources_text(column: pl.Series) -> list[str]:
    """The table's `sources` (lists of {session_id, turn_id}) as the stores keep and hash them
    (`resources.graph.common.encode_sources`); null is no sources."""
    return [
        encode_sources((t["session_id"] or "", t["turn_id"] or "") for t in turns)
        if turns
        else NO_SOURCES
        for turns in column.to_list()
    ]


def _entity(row: tuple[Any, ...], row_hash: str) -> EntityRecord:
    entity_id, name, aliases, types = row
    return EntityRecord(entity_id, name, tuple(aliases), tuple(types), row_hash)


def _check_required(name: str, df: pl.DataFrame, columns: tuple[str, ...]) -> None:
    empty = [
        c
        for c in columns
        if df[c].is_null().any() or (df[c].dtype == pl.String and (df[c] == "").any())
    ]
    if empty:
        raise ValueError(f"{name} table has empty values in required columns {empty}")


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


def _check_unique(column: str, ids: pl.Series) -> None:
    dupes = ids.filter(ids.is_duplicated()).unique().sort()
    if dupes.len():
        raise ValueError(f"duplicate {column} values: {dupes.head(_SAMPLE).to_list()}")
