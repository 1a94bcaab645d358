"""Triples of one repo -> validated facts, entities and quarantine rows.

Rules applied here, in this order: the triple contract (`schemas.triples.triage`), entity
resolution (one entity per `norm_key`, other spellings kept as aliases), one fact per
(subject, predicate, object), the per-repo caps (facts already stored always stay; new facts are
admitted oldest first until a cap is reached, the rest are rejected with a reason), and
supersession (the old fact is closed at the replacement's `valid_from` and linked to it).

Every triple given is accounted for, exactly once (`FactsBuild.balanced`):

- ``stored``: it is the source of a fact an earlier run stored (the stage sees the tenant's
  whole triples table on every run);
- ``facts_new``: it became a new fact (the oldest triple of its subject/predicate/object);
- ``merged``: it repeats the subject/predicate/object of a stored fact or of a fact another
  triple of this batch created. Its spellings become aliases of the entities, its confidence
  counts (best wins), its provenance is a row of `FactsBuild.merges` (`FACT_MERGES`);
- ``rejected``: it is in the quarantine with severity ``error`` (contract, caps).

Quarantine rows of severity ``warning`` (a supersedes link that could not be kept) describe
facts that were stored; they are counted in ``warnings``, never in ``rejected``.

Statements are ordered by ``valid_from``, then by when their turn happened (``stated_at``), then
by triple id: a fact's first statement, whose session and turn it carries, is its earliest turn.

Provenance: ``sources`` lists every turn whose triples state the fact (in the tenant's whole
triples table), first statement first, at most ``rules.MAX_FACT_SOURCES``. Facts are never
edited in place (a stored fact keeps its subject, predicate, object, confidence, validity and
first statement for good; only supersession closes it), but a stored fact restated in a later
turn gains that turn at the end of its ``sources``. That is provenance, not content: the new
turn says nothing the fact does not already say (the triple is the same subject, predicate and
object, merged into the fact, and `fact_merges` records it too); it only tells a reader one more
place where the fact was stated, which is what recall answers cite and what evidence is matched
against. The list only grows (a turn once listed stays, in its place), so an answer that cited
a turn can still cite it after later runs. A fact stored before ``sources`` existed starts from
its own first statement, then every other stating turn in statement order.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime

import polars as pl

from memflow.rekey import needs_rekey, rekey_facts, remap_supersedes
from memflow.retractions import ITEM_COLUMNS, apply_retractions, plan_generations, reopen
from schemas import ids, rules
from schemas.redaction import redact
from schemas.rules import MAX_RECORD_CHARS, Reason
from schemas.scope import Scope
from schemas.tables import ENTITIES, FACT_MERGES, FACTS, QUARANTINE, RETRACTIONS, SOURCE, conform
from schemas.triples import triage


@dataclass
class FactsBuild:
    facts: pl.DataFrame
    entities: pl.DataFrame
    rejects: pl.DataFrame  # validation-stage quarantine rows, both severities
    merges: pl.DataFrame = field(default_factory=lambda: conform(pl.DataFrame(), FACT_MERGES))
    new_facts: int = 0
    new_entities: int = 0
    superseded: int = 0
    triples_in: int = 0  # rows of the triples table given
    stored: int = 0  # triples that are the source of a fact stored by an earlier run
    merged: int = 0  # triples merged into a stored fact or a fact of this batch
    rejected: int = 0  # triples quarantined with severity error
    warnings: int = 0  # quarantine rows of severity warning (their facts were stored)
    rejects_by_reason: dict[str, int] = field(default_factory=dict)  # errors, by triple
    warnings_by_reason: dict[str, int] = field(default_factory=dict)
    # Stored rows re-resolved because the resolution rule changed (`memflow.rekey`).
    rekeyed: dict[str, int] = field(default_factory=dict)
    # Closures made by the tenant's retraction requests (`memflow.retractions`).
    retractions: pl.DataFrame = field(default_factory=lambda: conform(pl.DataFrame(), RETRACTIONS))
    retracted: int = 0  # facts closed by a retraction
    retract_unknown: int = 0  # requests that closed nothing (quarantined)

    @property
    def counts(self) -> dict[str, int]:
        """triples_in = facts_stored + facts_new + merged + rejects, plus warnings."""
        return {
            "triples_in": self.triples_in,
            "facts_stored": self.stored,
            "facts_new": self.new_facts,
            "merged": self.merged,
            "rejects": self.rejected,
            "warnings": self.warnings,
        }

    @property
    def balanced(self) -> bool:
        return self.triples_in == self.stored + self.new_facts + self.merged + self.rejected


def _reject_rows(
    scope: Scope,
    rows: list[dict],
    reason_of: str | None = None,
    severity: str = rules.SEVERITY_ERROR,
    record_keys: tuple[str, ...] = ("subject", "predicate", "object", "confidence"),
) -> list[dict]:
    """Quarantine rows of the validation stage; a row's own `detail` (redacted) wins over the
    reason's, and its triple or request id makes the reject id."""
    out = []
    for row in rows:
        reason = reason_of or row["reason"]
        record = json.dumps(
            {k: row.get(k) for k in record_keys},
            default=str,
            sort_keys=True,
        )
        record = (redact(record) or "")[:MAX_RECORD_CHARS]
        out.append(
            {
                "reject_id": ids.stable_id(
                    "q_",
                    scope.tenant_id,
                    scope.ns,
                    "validation",
                    reason,
                    row.get("triple_id") or row.get("request_id") or record,
                ),
                "tenant_id": scope.tenant_id,
                "ns": scope.ns,
                "stage": "validation",
                "reason": reason,
                "detail": redact(row["detail"]) if row.get("detail") else _detail(reason),
                "source_file": None,
                "line_no": None,
                "session_id": row.get("session_id"),
                "turn_id": row.get("turn_id"),
                "record": record,
                "severity": severity,
            }
        )
    return out


def _detail(reason: str) -> str:
    return {
        Reason.FACT_CAP: f"the repo already holds {rules.MAX_FACTS_PER_REPO} facts",
        Reason.ENTITY_CAP: f"the repo already holds {rules.MAX_ENTITIES_PER_REPO} entities",
        Reason.SUPERSEDES_UNKNOWN: "the fact named in supersedes is not stored in this repo; "
        "the new fact was kept without the link",
        Reason.SUPERSEDES_OUT_OF_ORDER: "the replacement is older than the fact it supersedes; "
        "the new fact was kept without the link",
    }.get(reason, reason.replace("_", " "))


def build_facts(
    scope: Scope,
    triples: pl.DataFrame,
    previous_facts: pl.DataFrame | None = None,
    previous_entities: pl.DataFrame | None = None,
    requests: pl.DataFrame | None = None,
) -> FactsBuild:
    prev_f = (
        conform(previous_facts, FACTS)
        if previous_facts is not None
        else conform(pl.DataFrame(), FACTS)
    )
    prev_e = (
        conform(previous_entities, ENTITIES)
        if previous_entities is not None
        else conform(pl.DataFrame(), ENTITIES)
    )
    foreign = triples.filter((pl.col("tenant_id") != scope.tenant_id) | (pl.col("ns") != scope.ns))
    if foreign.height:
        raise ValueError(f"{foreign.height} triples of another scope reached {scope}")

    good, bad = triage(triples)
    reject_rows = _reject_rows(scope, bad.to_dicts())
    rejected: Counter[str] = Counter(bad["reason"].to_list())

    # Entity resolution over every spelling seen (new triples and stored entities).
    # Statement order: valid_from, then the turn's time (null, in triples written before it was
    # kept, sorts first), then the triple id to break exact ties.
    good = good.sort("valid_from", "stated_at", "triple_id")
    names = pl.concat([good["subject"], good["object"]]).unique().to_list()
    key_of = {n: ids.norm_key(n) for n in names}

    def key(name: str) -> str:
        found = key_of.get(name)
        if found is None:
            found = key_of[name] = ids.norm_key(name)
        return found

    good = good.with_columns(
        pl.col("subject").replace_strict(key_of, return_dtype=pl.String).alias("_skey"),
        pl.col("object").replace_strict(key_of, return_dtype=pl.String).alias("_okey"),
    )
    eid_of = {k: ids.entity_id(scope.tenant_id, scope.ns, k) for k in set(key_of.values())}
    good = good.with_columns(
        pl.col("_skey").replace_strict(eid_of, return_dtype=pl.String).alias("subject_id"),
        pl.col("_okey").replace_strict(eid_of, return_dtype=pl.String).alias("object_id"),
    )
    fact_ids = [
        ids.fact_id(scope.tenant_id, scope.ns, s, p, o)
        for s, p, o in good.select("subject_id", "predicate", "object_id").iter_rows()
    ]
    good = good.with_columns(pl.Series("fact_id", fact_ids, dtype=pl.String))
    rekeyed = None
    if needs_rekey(prev_e, key):  # stored under an earlier resolution rule (memflow.rekey)
        rekeyed = rekey_facts(
            scope,
            prev_f,
            prev_e,
            key,
            _stating(_stated_turns(good)),
            set(triples.select("session_id", "turn_id").unique().rows()),
            _request_ids(requests),
        )
        prev_f, prev_e = rekeyed.facts, rekeyed.entities
        good = remap_supersedes(good, rekeyed.fact_ids)
    # Retractions split a fact's statements: those made after one belong to a reopened fact.
    plan = plan_generations(scope, good, prev_f, requests, key)
    if plan.generations:
        good = reopen(good, plan).sort("valid_from", "stated_at", "triple_id")
    good = good.with_columns(pl.int_range(pl.len()).over("fact_id").alias("_rank"))
    stated = _stated_turns(good)

    # One fact per id: the first statement (oldest) carries provenance; best confidence wins;
    # every stating turn, in statement order, is a source.
    firsts = (
        good.group_by("fact_id", maintain_order=True)
        .agg(pl.all().first(), pl.col("confidence").max().alias("_best"))
        .with_columns(pl.col("_best").alias("confidence"))
        .drop("_best", "_rank")
        .join(stated, on="fact_id", how="left", maintain_order="left")
    )

    stored_ids = set(prev_f["fact_id"].to_list())
    stored_entities = {r["entity_id"]: r for r in prev_e.to_dicts()}
    entity_count = len(stored_entities)
    fact_count = len(stored_ids)

    admitted: list[dict] = []
    new_entity_ids: set[str] = set()
    capped: dict[str, str] = {}  # fact_id -> reason
    for row in firsts.to_dicts():
        if row["fact_id"] in stored_ids:
            continue
        if fact_count >= rules.MAX_FACTS_PER_REPO:
            capped[row["fact_id"]] = Reason.FACT_CAP
            continue
        needed = {row["subject_id"], row["object_id"]} - stored_entities.keys() - new_entity_ids
        if entity_count + len(new_entity_ids) + len(needed) > rules.MAX_ENTITIES_PER_REPO:
            capped[row["fact_id"]] = Reason.ENTITY_CAP
            continue
        new_entity_ids |= needed
        admitted.append(row)
        fact_count += 1
    if capped:
        # Every triple of a capped fact is a reject, not only the one that would have stored it.
        over = good.filter(pl.col("fact_id").is_in(list(capped))).with_columns(
            pl.col("fact_id").replace_strict(capped, return_dtype=pl.String).alias("reason")
        )
        for row in over.to_dicts():
            reject_rows.extend(_reject_rows(scope, [row]))
        rejected.update(over["reason"].to_list())

    # A stored fact's own source triple comes back on every run (the stage sees the tenant's
    # whole triples table): it is that fact, not a merge.
    stored_sources = set(prev_f["triple_id"].drop_nulls().to_list())
    # The rest repeat a stored fact or a fact admitted from this batch: merged, not lost.
    merges = good.filter(
        (
            pl.col("fact_id").is_in(list(stored_ids))
            | ((pl.col("_rank") > 0) & ~pl.col("fact_id").is_in(list(capped)))
        )
        & ~pl.col("triple_id").is_in(list(stored_sources))
    )

    new = (
        conform(pl.DataFrame(admitted, infer_schema_length=None), FACTS)
        if admitted
        else (conform(pl.DataFrame(), FACTS))
    )
    new = new.with_columns(pl.lit(None, dtype=pl.String).alias("superseded_by"))
    facts = pl.concat([_extend_sources(prev_f, stated), new], how="vertical")

    facts, superseded, link_problems = _apply_supersession(facts, {r["fact_id"] for r in admitted})
    for reason, row in link_problems:
        # The fact is stored without the link: a warning, not a reject.
        reject_rows.extend(_reject_rows(scope, [row], reason, rules.SEVERITY_WARNING))
    applied = apply_retractions(facts, plan, requests)
    facts = applied.facts
    reject_rows.extend(
        _reject_rows(scope, applied.unknown, Reason.RETRACT_UNKNOWN, record_keys=ITEM_COLUMNS)
    )

    entities = _entities(scope, good, prev_e, facts)
    rejects = conform(
        pl.DataFrame(reject_rows, schema_overrides=QUARANTINE, infer_schema_length=None)
        if reject_rows
        else pl.DataFrame(),
        QUARANTINE,
    ).unique("reject_id", keep="first", maintain_order=True)
    warnings = Counter(reason for reason, _ in link_problems)
    return FactsBuild(
        facts=facts.sort("valid_from", "fact_id"),
        entities=entities,
        rejects=rejects,
        merges=conform(merges, FACT_MERGES),
        new_facts=len(admitted),
        new_entities=entities.height - prev_e.height,
        superseded=superseded,
        triples_in=triples.height,
        stored=good.filter(pl.col("triple_id").is_in(list(stored_sources))).height,
        merged=merges.height,
        rejected=sum(rejected.values()),
        warnings=sum(warnings.values()),
        rejects_by_reason=dict(rejected),
        warnings_by_reason=dict(warnings),
        retractions=applied.retractions,
        retracted=applied.closed,
        retract_unknown=len(applied.unknown),
        rekeyed={}
        if rekeyed is None
        else {
            "facts": rekeyed.facts_rekeyed,
            "facts_joined": rekeyed.facts_joined,
            "entities": rekeyed.entities_rekeyed,
        },
    )


def tenant_quarantine(
    earlier: list[pl.DataFrame | None],
    built: FactsBuild,
    contract_rejects: list[pl.DataFrame],
) -> pl.DataFrame:
    """The tenant's whole quarantine after this stage: the rejects of the earlier stages
    (landing and turns, extraction), then this build's, then the rows the contracts turned
    away; a reject met twice is kept once, where it was first met."""
    return pl.concat(
        [
            *(conform(df if df is not None else pl.DataFrame(), QUARANTINE) for df in earlier),
            built.rejects,
            *contract_rejects,
        ]
    ).unique("reject_id", keep="first", maintain_order=True)


def _stated_turns(good: pl.DataFrame) -> pl.DataFrame:
    """fact_id, sources: the distinct (session_id, turn_id) of each fact's triples, in the
    statement order of `good` (already sorted), at most `MAX_FACT_SOURCES`."""
    return (
        good.select("fact_id", pl.struct("session_id", "turn_id").alias("_turn"))
        .group_by("fact_id", maintain_order=True)
        .agg(pl.col("_turn").unique(maintain_order=True).head(rules.MAX_FACT_SOURCES))
        .select("fact_id", pl.col("_turn").cast(pl.List(SOURCE)).alias("sources"))
    )


def _request_ids(requests: pl.DataFrame | None) -> list[str]:
    return [] if requests is None or requests.is_empty() else requests["request_id"].to_list()


def _stating(stated: pl.DataFrame) -> dict[str, set[tuple[str, str]]]:
    return {
        fact_id: {(t["session_id"], t["turn_id"]) for t in turns}
        for fact_id, turns in stated.iter_rows()
    }


def _extend_sources(stored: pl.DataFrame, stated: pl.DataFrame) -> pl.DataFrame:
    """Stored facts with the turns that restated them appended to their `sources` (see the
    module docstring: provenance, not content). A fact without sources (stored before they
    existed) starts from its own first statement. Nothing else of a stored fact changes."""
    if stored.is_empty():
        return stored
    turns = dict(zip(stated["fact_id"].to_list(), stated["sources"].to_list(), strict=True))
    out: list[list[dict] | None] = []
    rows = stored.select("fact_id", "session_id", "turn_id", "sources").iter_rows()
    for fact_id, session_id, turn_id, held in rows:
        if held is None:
            held = [{"session_id": session_id, "turn_id": turn_id}]
        seen = {(t["session_id"], t["turn_id"]) for t in held}
        merged = list(held)
        for t in turns.get(fact_id) or ():
            if len(merged) >= rules.MAX_FACT_SOURCES:
                break
            if (t["session_id"], t["turn_id"]) not in seen:
                seen.add((t["session_id"], t["turn_id"]))
                merged.append(t)
        out.append(merged)
    return stored.with_columns(pl.Series("sources", out, dtype=pl.List(SOURCE)))


def _apply_supersession(
    facts: pl.DataFrame, new_ids: set[str]
) -> tuple[pl.DataFrame, int, list[tuple[str, dict]]]:
    """Close each fact a new fact supersedes; links to unknown facts are reported, not kept."""
    rows = facts.to_dicts()
    by_id = {r["fact_id"]: r for r in rows}
    problems: list[tuple[str, dict]] = []
    closed = 0
    for row in rows:
        target_id = row["supersedes"]
        if row["fact_id"] not in new_ids or not target_id:
            continue
        target = by_id.get(target_id)
        if target is None or target_id == row["fact_id"]:
            problems.append((Reason.SUPERSEDES_UNKNOWN, row))
            row["supersedes"] = None
            continue
        start: datetime = row["valid_from"]
        if start < target["valid_from"]:
            problems.append((Reason.SUPERSEDES_OUT_OF_ORDER, row))
            row["supersedes"] = None
            continue
        if target["valid_to"] is None or target["valid_to"] > start:
            target["valid_to"] = start
        if target["superseded_by"] is None:
            target["superseded_by"] = row["fact_id"]
        closed += 1
    out = (
        conform(pl.DataFrame(rows, schema_overrides=FACTS, infer_schema_length=None), FACTS)
        if (rows)
        else facts
    )
    return out, closed, problems


def _entities(
    scope: Scope, good: pl.DataFrame, prev: pl.DataFrame, facts: pl.DataFrame
) -> pl.DataFrame:
    """Entities referenced by stored facts. Stored entities keep their canonical name."""
    used = set(facts["subject_id"].to_list()) | set(facts["object_id"].to_list())
    spellings: dict[str, Counter[str]] = {}
    types: dict[str, set[str]] = {}
    first_seen: dict[str, datetime] = {}
    keys: dict[str, str] = {}
    for side in ("subject", "object"):
        for r in good.select(
            f"{side}_id", side, f"{side}_type", f"_{side[0]}key", "valid_from"
        ).iter_rows():
            eid, name, etype, key, ts = r
            if eid not in used:
                continue
            spellings.setdefault(eid, Counter())[name] += 1
            keys[eid] = key
            if etype:
                types.setdefault(eid, set()).add(etype)
            if eid not in first_seen or ts < first_seen[eid]:
                first_seen[eid] = ts
    out: list[dict] = []
    stored = {r["entity_id"]: r for r in prev.to_dicts()}
    for eid in sorted(used):
        old = stored.get(eid)
        counts = spellings.get(eid, Counter())
        if old:
            name = old["name"]
            aliases = set(old["aliases"] or []) | set(counts)
            etypes = set(old["types"] or []) | types.get(eid, set())
            seen = old["first_seen"]
            key = old["norm_key"]
        else:
            if not counts:
                continue
            name = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[0][0]
            aliases = set(counts)
            etypes = types.get(eid, set())
            seen = first_seen[eid]
            key = keys[eid]
        aliases.discard(name)
        out.append(
            {
                "entity_id": eid,
                "tenant_id": scope.tenant_id,
                "ns": scope.ns,
                "name": name,
                "norm_key": key,
                "aliases": sorted(aliases),
                "types": sorted(etypes),
                "first_seen": seen,
            }
        )
    if not out:
        return conform(pl.DataFrame(), ENTITIES)
    return conform(pl.DataFrame(out, schema_overrides=ENTITIES, infer_schema_length=None), ENTITIES)
