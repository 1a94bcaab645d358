"""Re-keying stored state when the rules behind its ids change (README "Stable ids").

Entity resolution (`schemas.ids.norm_key`) decides which spellings are one entity, and every
entity and fact id hashes that key. When the rule changes (issue 16: operators, signs and a
leading dot now separate names; invisible and typographic variants now merge), a tenant's
stored facts and entities carry ids of the old rule. `rekey_facts` notices it (a stored
entity whose name or alias no longer has its stored key) and re-resolves them with the rule
in force, before the facts stage does anything else:

- every stored fact keeps its content (first statement, spelling, confidence, validity) and
  takes the id its own subject/object spelling gets now; two stored facts that now share an
  id become one (the earlier statement stays, the other's statement becomes a merge);
- supersession links follow the ids; a stored fact keeps, in `sources`, only the turns whose
  triples still state it (a turn that said ``>3.12`` is no longer cited for ``<3.12``), and
  turns the triples table no longer holds;
- entities are rebuilt from the stored names, aliases and fact spellings, grouped by the key
  each has now (a stored name stays the name; spellings of another key leave its aliases).

Triples that the old rule had merged into a fact and that now state another fact become new
facts in the same run, under the caps like any new fact. Nothing stored is lost.

`rekey_turn_keys` moves stored turn keys over to the injective id encoding (only ids holding
\\x1f or \\x1e change; `schemas.ids.encode_parts`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

import polars as pl

from schemas import ids
from schemas.rules import Reason
from schemas.scope import Scope
from schemas.tables import ENTITIES, FACTS, conform


@dataclass
class Rekeyed:
    facts: pl.DataFrame
    entities: pl.DataFrame
    fact_ids: dict[str, str]  # old fact id -> new, for every stored fact whose id changed
    facts_rekeyed: int = 0  # stored facts whose id changed
    facts_joined: int = 0  # stored facts that became part of another stored fact
    entities_rekeyed: int = 0  # stored entities whose id or key changed


def needs_rekey(entities: pl.DataFrame, key: Callable[[str], str]) -> bool:
    """Whether a stored entity's name or one of its aliases has another key than the one
    stored: the rule changed since these rows were written."""
    for name, stored_key, aliases in entities.select("name", "norm_key", "aliases").iter_rows():
        own = key(name)
        if own != stored_key or any(key(a) != own for a in aliases or ()):
            return True
    return False


def rekey_facts(
    scope: Scope,
    facts: pl.DataFrame,
    entities: pl.DataFrame,
    key: Callable[[str], str],
    stating: dict[str, set[tuple[str, str]]],
    turns_with_triples: set[tuple[str, str]],
    request_ids: Sequence[str] = (),
) -> Rekeyed:
    """Stored `facts` and `entities` re-resolved under the rule in force (module docstring).

    `key` is `norm_key` (cached by the caller); `stating` maps a fact id of the current rule
    to the (session_id, turn_id) whose triples state it, and `turns_with_triples` is every
    turn holding a triple, so sources the triples table can no longer judge are kept.
    """
    eid = {}

    def entity_of(name: str) -> str:
        if name not in eid:
            eid[name] = ids.entity_id(scope.tenant_id, scope.ns, key(name))
        return eid[name]

    rows = facts.to_dicts()
    for row in rows:
        row["_old"] = row["fact_id"]
        old_base = ids.fact_id(
            scope.tenant_id, scope.ns, row["subject_id"], row["predicate"], row["object_id"]
        )
        row["subject_id"] = entity_of(row["subject"])
        row["object_id"] = entity_of(row["object"])
        row["fact_id"] = ids.fact_id(
            scope.tenant_id, scope.ns, row["subject_id"], row["predicate"], row["object_id"]
        )
        if row["_old"] != old_base:  # reopened after a retraction: keep it apart
            row["fact_id"] = _reopened(scope, old_base, row["_old"], row["fact_id"], request_ids)
    mapping = {r["_old"]: r["fact_id"] for r in rows if r["_old"] != r["fact_id"]}

    # Stored facts that now share an id: the earliest statement stays (as a clean run would
    # make it the first statement); a closure of any of them closes the survivor.
    groups: dict[str, list[dict]] = {}
    for row in sorted(rows, key=lambda r: (r["valid_from"], r["_old"])):
        groups.setdefault(row["fact_id"], []).append(row)
    kept: list[dict] = []
    for group in groups.values():
        survivor = group[0]
        closed = [r for r in group if r["valid_to"] is not None]
        if closed:
            first = min(closed, key=lambda r: r["valid_to"])
            if survivor["valid_to"] is None or first["valid_to"] < survivor["valid_to"]:
                survivor["valid_to"] = first["valid_to"]
                survivor["superseded_by"] = first["superseded_by"]
        survivor["sources"] = _still_stating(group, stating, turns_with_triples)
        kept.append(survivor)
    for row in kept:
        for link in ("supersedes", "superseded_by"):
            if row[link]:
                row[link] = mapping.get(row[link], row[link])
        if row["supersedes"] == row["fact_id"]:
            row["supersedes"] = None
        if row["superseded_by"] == row["fact_id"]:
            row["superseded_by"] = None
        del row["_old"]
    new_facts = (
        conform(pl.DataFrame(kept, schema_overrides=FACTS, infer_schema_length=None), FACTS)
        if kept
        else conform(pl.DataFrame(), FACTS)
    )
    new_entities, changed = _rekey_entities(scope, entities, new_facts, key, entity_of)
    return Rekeyed(
        facts=new_facts,
        entities=new_entities,
        fact_ids=mapping,
        facts_rekeyed=len(mapping),
        facts_joined=len(rows) - len(kept),
        entities_rekeyed=changed,
    )


def _reopened(
    scope: Scope, old_base: str, old_id: str, new_base: str, request_ids: Sequence[str]
) -> str:
    """The id of a fact reopened after a retraction (`schemas.ids.reopened_fact_id`), moved
    from the old base id to the new one; the old id when the request is no longer known."""
    for request_id in request_ids:
        if ids.reopened_fact_id(scope.tenant_id, scope.ns, old_base, request_id) == old_id:
            return ids.reopened_fact_id(scope.tenant_id, scope.ns, new_base, request_id)
    return old_id


def _still_stating(
    group: list[dict],
    stating: dict[str, set[tuple[str, str]]],
    turns_with_triples: set[tuple[str, str]],
) -> list[dict]:
    """The group's sources, survivor's first statement first: each turn that still states
    the fact, or that holds no triple any more (nothing to judge it by)."""
    fact_id = group[0]["fact_id"]
    now = stating.get(fact_id, set())
    out: list[dict] = []
    seen: set[tuple[str, str]] = set()
    for row in group:
        held = row["sources"] or [{"session_id": row["session_id"], "turn_id": row["turn_id"]}]
        for turn in held:
            t = (turn["session_id"], turn["turn_id"])
            if t in seen:
                continue
            first = row is group[0] and not out
            if first or t in now or t not in turns_with_triples:
                seen.add(t)
                out.append({"session_id": t[0], "turn_id": t[1]})
    return out


def _rekey_entities(
    scope: Scope,
    entities: pl.DataFrame,
    facts: pl.DataFrame,
    key: Callable[[str], str],
    entity_of: Callable[[str], str],
) -> tuple[pl.DataFrame, int]:
    """Entity rows for every endpoint of `facts`, from the stored names, aliases and types and
    the facts' own spellings, grouped by the id each spelling has now."""
    names: dict[str, tuple[datetime, str]] = {}  # new id -> (first_seen, stored name)
    spellings: dict[str, set[str]] = {}
    types: dict[str, set[str]] = {}
    first_seen: dict[str, datetime] = {}
    changed = 0
    for row in entities.to_dicts():
        new = entity_of(row["name"])
        changed += new != row["entity_id"] or key(row["name"]) != row["norm_key"]
        held = names.get(new)
        if held is None or (row["first_seen"], row["name"]) < held:
            names[new] = (row["first_seen"], row["name"])
        types.setdefault(new, set()).update(row["types"] or ())
        for spelling in (row["name"], *(row["aliases"] or ())):
            spellings.setdefault(entity_of(spelling), set()).add(spelling)
        seen = first_seen.get(new)
        first_seen[new] = row["first_seen"] if seen is None else min(seen, row["first_seen"])
    fact_names: dict[str, tuple[datetime, str]] = {}
    for subject, object_, valid_from in facts.select("subject", "object", "valid_from").rows():
        for name in (subject, object_):
            new = entity_of(name)
            spellings.setdefault(new, set()).add(name)
            held = fact_names.get(new)
            if held is None or (valid_from, name) < held:
                fact_names[new] = (valid_from, name)
    used = set(facts["subject_id"].to_list()) | set(facts["object_id"].to_list())
    out = []
    for entity_id in sorted(used):
        name = (names.get(entity_id) or fact_names[entity_id])[1]
        out.append(
            {
                "entity_id": entity_id,
                "tenant_id": scope.tenant_id,
                "ns": scope.ns,
                "name": name,
                "norm_key": key(name),
                "aliases": sorted(spellings.get(entity_id, set()) - {name}),
                "types": sorted(types.get(entity_id, set())),
                "first_seen": first_seen.get(entity_id) or fact_names[entity_id][0],
            }
        )
    if not out:
        return conform(pl.DataFrame(), ENTITIES), changed
    frame = pl.DataFrame(out, schema_overrides=ENTITIES, infer_schema_length=None)
    return conform(frame, ENTITIES), changed


def remap_supersedes(triples: pl.DataFrame, mapping: dict[str, str]) -> pl.DataFrame:
    """Triples whose `supersedes` names a stored fact by an id of the old rule, pointed at the
    fact's id now (the triple was resolved when it was extracted)."""
    if not mapping or triples.is_empty():
        return triples
    return triples.with_columns(pl.col("supersedes").replace(mapping).alias("supersedes"))


# ------------------------------------------------------------------------------- turn keys


def rekey_turn_keys(df: pl.DataFrame) -> tuple[pl.DataFrame, dict[str, str]]:
    """`df` (rows with tenant_id, ns, session_id, turn_id and turn_key) with every turn's key
    computed by `schemas.ids.turn_key`, and the mapping from the key each such turn had under
    the \x1f join (`schemas.ids.legacy_turn_key`) to its key now, for tables keyed by
    turn_key alone (`rekey_log`). Only ids holding \x1f or \x1e have a different key, so
    most calls look at no row. Two turns that shared a legacy key never both reached
    raw_turns (the second was a `duplicate_turn`), so on stored data the mapping is one to
    one."""
    if df.is_empty() or "turn_key" not in df.columns:
        return df, {}
    odd = pl.col("session_id").str.contains("[\x1e\x1f]") | pl.col("turn_id").str.contains(
        "[\x1e\x1f]"
    )
    if not df.select(odd.any()).item():
        return df, {}
    keys = df["turn_key"].to_list()
    mapping: dict[str, str] = {}
    rows = df.select("tenant_id", "ns", "session_id", "turn_id", odd.alias("_odd")).rows()
    for i, (tenant_id, ns, session_id, turn_id, is_odd) in enumerate(rows):
        if is_odd:
            keys[i] = ids.turn_key(tenant_id, ns, session_id, turn_id)
            mapping.setdefault(ids.legacy_turn_key(tenant_id, ns, session_id, turn_id), keys[i])
    return df.with_columns(pl.Series("turn_key", keys, dtype=pl.String)), mapping


def rekey_log(log: pl.DataFrame, mapping: dict[str, str]) -> pl.DataFrame:
    """A table keyed by turn_key only (the extraction log), moved over with `mapping`."""
    if not mapping or log.is_empty():
        return log
    return log.with_columns(pl.col("turn_key").replace(mapping))


def stale_duplicate_files(turns: pl.DataFrame, rejects: pl.DataFrame) -> set[str]:
    """Landing files holding a `duplicate_turn` reject that only the \x1f join made: ids with
    \x1f or \x1e whose key now matches no stored turn. Their index rows go, so the turns
    stage reads them again and lands the turn, as a clean run would; a true duplicate still
    matches a stored turn, so this settles after one run."""
    if rejects.is_empty() or "session_id" not in rejects.columns:
        return set()
    odd = rejects.filter(
        (pl.col("reason") == Reason.DUPLICATE_TURN)
        & (
            pl.col("session_id").str.contains("[\x1e\x1f]")
            | pl.col("turn_id").str.contains("[\x1e\x1f]")
        )
    )
    if odd.is_empty():
        return set()
    stored = set(turns["turn_key"].to_list())
    return {
        source_file
        for tenant_id, ns, session_id, turn_id, source_file in odd.select(
            "tenant_id", "ns", "session_id", "turn_id", "source_file"
        ).rows()
        if source_file and ids.turn_key(tenant_id, ns, session_id, turn_id) not in stored
    }
