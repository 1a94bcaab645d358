"""`memflow status` and the CLI's run summary: per tenant, table rows, the two balances, rejects
by reason, what each store holds, embedding coverage and, when asked, store-equals-table.

What every tenant gets is read in bulk: row counts from the Delta logs, the figures the
balances need from the small tables the writes record them in (`TableStore.figures`), the
graph's and the vector store's counts in grouped reads (`counts_many`, `models_many`). That
stays fast at 10,000 tenants (BENCHMARKS.md, "Tenants at scale"). Whether each store holds
exactly its tables' rows (ids and content) is a comparison per tenant that costs ~15 ms each:
it runs with `verify` (`memflow status --verify`, and for the tenants named with `--tenant`);
without it a store is reported "not verified", never equal. Counts that differ are a
difference all the same, so a store whose counts disagree with its tables is flagged without
verifying.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import polars as pl

from resources.settings import Settings
from resources.tables import TableStore, open_tables
from schemas.scope import Scope
from schemas.tables import TABLES, Asset, conform, empty

# Tenants verified together: one read of their entities and facts, and no more of them in
# memory at once.
STATUS_CHUNK = 200
_BALANCE = ("triples_in", "facts_stored", "facts_new", "merged", "rejects")

Progress = Callable[[int, int], None]


# ------------------------------------------------------------------------ the accounting


def tenant_summary(
    tables: TableStore, scope: Scope, facts_summaries: dict[str, dict[str, int]] | None = None
) -> dict[str, Any]:
    """Rows per stage and the two balances: landing lines in = turns + landing rejects, and
    triples in = facts (stored earlier + new) + merged + rejects (as of the last run)."""
    return tenant_summaries(tables, [scope], facts_summaries)[0]


def tenant_summaries(
    tables: TableStore,
    scopes: list[Scope],
    facts_summaries: dict[str, dict[str, int]] | None = None,
    rows: dict[str, dict[Scope, int]] | None = None,
) -> list[dict[str, Any]]:
    """`tenant_summary` of many tenants: row counts from the tables' logs (`rows`, the
    `rows_per_tenant` of every table, when the caller has them) and the figures recorded
    beside the tables whose columns a balance needs (`TableStore.figures`: one small table
    each, not every tenant's files). `facts_summaries`: `tables.summaries(validated_facts)`
    (of these tenants at least) when the caller has it."""
    if facts_summaries is None:
        facts_summaries = tables.summaries(Asset.VALIDATED_FACTS, scopes)
    counted = (
        Asset.RAW_TURNS,
        Asset.EXTRACTED_TRIPLES,
        Asset.VALIDATED_FACTS,
        Asset.ENTITIES,
        Asset.TURN_REJECTS,
    )
    n = {a: rows[a] if rows is not None else tables.rows_per_tenant(a, scopes) for a in counted}
    awaiting = awaiting_per_tenant(tables, scopes)
    lines = tables.figures(Asset.LANDING_FILES, scopes)
    quarantined = tables.figures(Asset.QUARANTINE, scopes)
    out = []
    for scope in scopes:
        lines_in = lines[scope]["records"]
        turns, landing_rejects = n[Asset.RAW_TURNS][scope], n[Asset.TURN_REJECTS][scope]
        last = facts_summaries.get(scope.key, {})
        triples = {k: last.get(k, 0) for k in _BALANCE}
        q = quarantined[scope]
        total, warnings = q["rows"], q["warnings"]
        out.append(
            {
                "tenant": scope.key,
                "lines_in": lines_in,
                "turns": turns,
                "landing_rejects": landing_rejects,
                "lines_accounted": lines_in == turns + landing_rejects,
                "triples": n[Asset.EXTRACTED_TRIPLES][scope],
                "triples_balance": triples,
                "triples_accounted": triples["triples_in"]
                == triples["facts_stored"]
                + triples["facts_new"]
                + triples["merged"]
                + triples["rejects"],
                "facts": n[Asset.VALIDATED_FACTS][scope],
                "entities": n[Asset.ENTITIES][scope],
                "rejects": total - warnings,
                "warnings": warnings,
                "rejects_by_reason": _by_reason(q, "reject:"),
                "warnings_by_reason": _by_reason(q, "warning:"),
                "text_turns_awaiting_extraction": awaiting.get(scope, 0),
            }
        )
    return out


def _by_reason(figures: dict[str, int], prefix: str) -> dict[str, int]:
    return {k[len(prefix) :]: v for k, v in sorted(figures.items()) if k.startswith(prefix)}


def awaiting_per_tenant(tables: TableStore, scopes: list[Scope]) -> dict[Scope, int]:
    """Text turns of each tenant that wait for an extractor: the extraction log's rows of the
    model `none` (recorded with each write of the log, `TableStore.figures`)."""
    return {s: f["awaiting"] for s, f in tables.figures(Asset.EXTRACTION_LOG, scopes).items()}


def awaiting_extraction(cfg: Settings) -> int:
    """Text turns of every tenant that wait for an extractor."""
    tables = TableStore(cfg.data_dir)
    scopes = tables.scopes(Asset.EXTRACTION_LOG)
    return sum(awaiting_per_tenant(tables, scopes).values()) if scopes else 0


def store_counts(scopes: list[Scope], cfg: Settings) -> dict[str, dict]:
    """What the graph and the vector store hold for each tenant, as the run summary prints it
    (counted in bulk)."""
    graph = cfg.open_graph()
    vectors = cfg.open_vectors()
    try:
        counts = graph.counts_many(scopes)
        models = vectors.models_many(scopes)
        return {
            scope.key: {
                "graph": f"{counts[scope]['entities']} entities, {counts[scope]['facts']} facts "
                f"({graph.backend})",
                "vectors": ", ".join(f"{m}: {n} x {d}-dim" for m, (d, n) in models[scope].items())
                or "none",
            }
            for scope in dict.fromkeys(scopes)
        }
    finally:
        graph.close()
        vectors.close()


# ------------------------------------------------------------------------------ the system


def system_status(cfg: Settings, awaiting: int | None = None) -> dict[str, Any]:
    """The state home's view: what it records, which memflow processes run, and every one that
    works on another data directory or landing zone than these settings. `awaiting`: the text
    turns waiting for an extractor, when the caller counted them."""
    from resources import home

    try:
        record = home.read_record(cfg.home)
        recorded = (
            None
            if record is None
            else {
                "data_dir": record.data_dir,
                "landing_dir": record.landing_dir,
                "api_url": record.api_url,
                "ui_url": record.ui_url,
                "written_by": record.written_by,
            }
        )
        record_problem = None
    except home.RecordError as exc:
        recorded, record_problem = None, str(exc)
    running = home.running(cfg.home)
    return {
        "home": str(cfg.home),
        "landing_dir": str(cfg.landing_dir),
        "data_dir": str(cfg.data_dir),
        "recorded": recorded,
        "record_problem": record_problem,
        "processes": [
            {
                "role": e.role,
                "pid": e.pid,
                "data_dir": e.data_dir,
                "landing_dir": e.landing_dir,
                "api_url": e.api_url,
                "ui_url": e.ui_url,
            }
            for e in running
        ],
        "conflicts": home.conflicts(running, str(cfg.data_dir), str(cfg.landing_dir)),
        "extractor": cfg["MEMFLOW_EXTRACTOR"].strip().lower() or "none",
        "text_turns_awaiting_extraction": (
            awaiting_extraction(cfg) if awaiting is None else awaiting
        ),
    }


# ------------------------------------------------------------------------------ the report


def known_tenants(tables: TableStore) -> list[Scope]:
    """Every tenant with turns or facts, in key order (as `TableStore.scopes` of the two,
    each pair made a scope once)."""
    pairs: set[tuple[str, str]] = set()
    for asset in (Asset.VALIDATED_FACTS, Asset.RAW_TURNS):
        index = tables.file_index(asset)
        if index is not None:
            pairs.update(index[0].select("tenant_id", "ns").drop_nulls().unique().iter_rows())
    found = []
    for org, repo in pairs:
        try:
            found.append(Scope(org, repo))
        except ValueError:  # not a name memflow writes: `scopes` leaves it out too
            continue
    return sorted(found, key=lambda s: s.key)


def status(
    cfg: Settings,
    *,
    verify: bool = False,
    tenants: list[Scope] | None = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Every tenant's tables, balances and stores (or only `tenants`, verified). `verify`:
    compare each tenant's stores with its tables, reporting `progress(done, total)` after
    each chunk of tenants."""
    data_dir = cfg["MEMFLOW_DATA_DIR"]
    tables = open_tables(cfg)
    scopes = known_tenants(tables) if tenants is None else list(dict.fromkeys(tenants))
    verify = verify or tenants is not None
    model = cfg.embedding_model
    rows = {a: tables.rows_per_tenant(a, scopes) for a in TABLES}
    accounting = tenant_summaries(tables, scopes, rows=rows)
    graph, vectors = cfg.open_graph(), cfg.open_vectors()
    try:
        graph_counts = graph.counts_many(scopes)
        held = vectors.models_many(scopes)
        entries = [
            _tenant_entry(
                scope,
                {a: rows[a][scope] for a in TABLES},
                acc,
                graph.backend,
                graph_counts[scope],
                held[scope],
                model,
            )
            for scope, acc in zip(scopes, accounting, strict=True)
        ]
        if verify:
            _verify(cfg, tables, graph, vectors, scopes, entries, model, progress)
    finally:
        graph.close()
        vectors.close()
    for entry in entries:
        entry["attention"] = attention(entry)
    from resources.vector.legacy import find_legacy

    legacy = find_legacy(data_dir)
    awaiting = sum(a["text_turns_awaiting_extraction"] for a in accounting)
    return {
        "data_dir": data_dir,
        "embedding_model": model,
        "verified": verify,
        "system": system_status(cfg, awaiting if tenants is None else None),
        "totals": totals(entries, model),
        "attention": [e["tenant"] for e in entries if e["attention"]],
        "tenants": entries,
        "notes": [legacy.note()] if legacy is not None else [],
    }


def _tenant_entry(
    scope: Scope,
    rows: dict[str, int],
    accounting: dict[str, Any],
    backend: str,
    graph_counts: dict[str, int],
    models: dict[str, tuple[int, int]],
    model: str | None,
) -> dict[str, Any]:
    """A tenant as counted, stores not compared: `equals_table` and `vectors_equal_table` are
    None (not verified) unless the counts already differ (then they cannot be equal)."""
    tables_say = {"entities": rows[Asset.ENTITIES], "facts": rows[Asset.VALIDATED_FACTS]}
    graph_agrees = graph_counts == tables_say
    entry: dict[str, Any] = {
        "tenant": scope.key,
        "tables": rows,
        "accounting": accounting,
        "graph": {
            "backend": backend,
            **graph_counts,
            "counts_equal_tables": graph_agrees,
            "equals_table": None if graph_agrees else False,
        },
        "vectors": {m: {"dim": d, "vectors": n} for m, (d, n) in models.items()},
        "embedding_model": model,
        "verified": False,
    }
    if model:
        from resources.vector.base import fact_vectors_key

        held = {
            "entities": models.get(model, (0, 0))[1],
            "facts": models.get(fact_vectors_key(model), (0, 0))[1],
        }
        embedded = {
            "entities": rows[Asset.ENTITY_EMBEDDINGS],
            "facts": rows[Asset.FACT_EMBEDDINGS],
        }
        entry["embedded"] = embedded
        covered = {k: min(held[k], embedded[k]) for k in held}
        entry["coverage"] = _share(covered["entities"], tables_say["entities"])
        entry["fact_coverage"] = _share(covered["facts"], tables_say["facts"])
        entry["vector_counts_equal_tables"] = held == embedded
        entry["vectors_equal_table"] = None if held == embedded else False
    return entry


def _share(part: int, whole: int) -> float:
    return round(min(part, whole) / whole, 4) if whole else 1.0


def attention(entry: dict[str, Any]) -> list[str]:
    """Why a tenant needs a look (empty: it balances, is covered and its stores agree)."""
    acc, g = entry["accounting"], entry["graph"]
    why = []
    if not acc["lines_accounted"]:
        why.append("lines not accounted")
    if not acc["triples_accounted"]:
        why.append("triples not accounted")
    if g["equals_table"] is False:
        why.append("graph differs from its tables")
    if entry.get("vectors_equal_table") is False:
        why.append("vectors differ from the tables")
    if entry.get("coverage", 1.0) < 1.0 or entry.get("fact_coverage", 1.0) < 1.0:
        why.append("embedding coverage below 100%")
    return why


def totals(entries: list[dict[str, Any]], model: str | None) -> dict[str, Any]:
    """Sums over every tenant, and how many tenants fall short of each check."""
    acc = [e["accounting"] for e in entries]
    out: dict[str, Any] = {"tenants": len(entries)}
    for key in ("lines_in", "turns", "landing_rejects", "triples", "facts", "entities"):
        out[key] = sum(a[key] for a in acc)
    for key in ("rejects", "warnings", "text_turns_awaiting_extraction"):
        out[key] = sum(a[key] for a in acc)
    out["triples_balance"] = {k: sum(a["triples_balance"][k] for a in acc) for k in _BALANCE}
    out["graph"] = {k: sum(e["graph"][k] for e in entries) for k in ("entities", "facts")}
    vectors: dict[str, dict[str, int]] = {}
    for e in entries:
        for m, v in e["vectors"].items():
            held = vectors.setdefault(m, {"dim": v["dim"], "vectors": 0})
            held["vectors"] += v["vectors"]
    out["vectors"] = vectors
    out["lines_not_accounted"] = sum(not a["lines_accounted"] for a in acc)
    out["triples_not_accounted"] = sum(not a["triples_accounted"] for a in acc)
    out["graph_counts_differ"] = sum(not e["graph"]["counts_equal_tables"] for e in entries)
    out["graph_verified"] = sum(e["graph"]["equals_table"] is not None for e in entries)
    out["graph_not_equal"] = sum(e["graph"]["equals_table"] is False for e in entries)
    if model:
        out["below_full_coverage"] = sum(
            e["coverage"] < 1.0 or e["fact_coverage"] < 1.0 for e in entries
        )
        out["vector_counts_differ"] = sum(not e["vector_counts_equal_tables"] for e in entries)
        out["vectors_verified"] = sum(e["vectors_equal_table"] is not None for e in entries)
        out["vectors_not_equal"] = sum(e["vectors_equal_table"] is False for e in entries)
    out["needing_attention"] = sum(bool(e.get("attention")) for e in entries)
    return out


# ------------------------------------------------------------------------ verification


def _read_chunk(tables: TableStore, asset: str, scopes: list[Scope]) -> dict[Scope, pl.DataFrame]:
    """Each tenant's table in its declared layout (empty when none), from one snapshot."""
    found = tables.read_many(asset, scopes)
    return {
        s: conform(found[s], TABLES[asset]) if s in found else empty(TABLES[asset]) for s in scopes
    }


def _verify(
    cfg: Settings,
    tables: TableStore,
    graph,
    vectors,
    scopes: list[Scope],
    entries: list[dict[str, Any]],
    model: str | None,
    progress: Progress | None,
) -> None:
    """Compare each tenant's stores with its tables, a chunk of tenants at a time (their
    tables read once, the vector store's ids of the chunk in one read)."""
    from resources.vector.ledger import EmbeddingLedger

    ledger = EmbeddingLedger(cfg["MEMFLOW_DATA_DIR"])
    by_key = {e["tenant"]: e for e in entries}
    for start in range(0, len(scopes), STATUS_CHUNK):
        chunk = scopes[start : start + STATUS_CHUNK]
        entities_of = _read_chunk(tables, Asset.ENTITIES, chunk)
        facts_of = _read_chunk(tables, Asset.VALIDATED_FACTS, chunk)
        _verify_graph(graph, chunk, entities_of, facts_of, by_key)
        if model:
            _verify_vectors(vectors, ledger, model, chunk, entities_of, facts_of, by_key)
        for scope in chunk:
            by_key[scope.key]["verified"] = True
        if progress is not None:
            progress(start + len(chunk), len(scopes))


def _verify_graph(graph, chunk, entities_of, facts_of, by_key) -> None:
    from resources.graph.sync import graph_equals_table

    for scope in chunk:
        equal, diff = graph_equals_table(graph, scope, entities_of[scope], facts_of[scope])
        by_key[scope.key]["graph"].update(equals_table=equal, diff=diff)


def _verify_vectors(vectors, ledger, model, chunk, entities_of, facts_of, by_key) -> None:
    """What the vector sink makes the store equal to (`memflow.vector_sync.wanted_vectors`:
    the ledger's vectors of the current names and fact texts), against the store's ids; the
    coverage from the same sets."""
    from memflow.fact_embedding import fact_texts
    from memflow.vector_sync import wanted_vectors
    from resources.vector.base import fact_vectors_key
    from resources.vector.sync import diff_ids

    keys = {"entities": model, "facts": fact_vectors_key(model)}
    held = {kind: vectors.ids_many(key, chunk) for kind, key in keys.items()}
    for scope in chunk:
        entry = by_key[scope.key]
        texts = {
            "entities": entities_of[scope].select("entity_id", "name"),
            "facts": fact_texts(facts_of[scope]),
        }
        rows_of = {"entities": entities_of[scope].height, "facts": facts_of[scope].height}
        diffs, covered = {}, {}
        for kind, key in keys.items():
            wanted = wanted_vectors(ledger, key, scope, texts[kind])
            diffs[kind] = diff_ids(wanted, held[kind][scope])
            covered[kind] = _share(min(len(held[kind][scope]), len(wanted)), rows_of[kind])
        entry["coverage"], entry["fact_coverage"] = covered["entities"], covered["facts"]
        entry["vectors_equal_table"] = all(d.empty for d in diffs.values())
        entry["vectors_diff"] = {kind: d.summary() for kind, d in diffs.items()}
