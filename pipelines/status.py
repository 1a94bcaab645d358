"""`memflow status` and the CLI's run summary: per tenant, table rows, rejects by reason, what
each store holds, embedding coverage and store-equals-table."""

from __future__ import annotations

from collections import Counter
from typing import Any

import polars as pl

from resources.settings import Settings
from resources.tables import TableStore, open_tables
from schemas.rules import SEVERITY_WARNING
from schemas.scope import Scope
from schemas.tables import TABLES, Asset, conform, empty


def _read(tables: TableStore, asset: str, scope: Scope) -> pl.DataFrame:
    """A tenant's table in its declared layout (empty when never written, and whatever columns
    a run killed half-way left behind)."""
    df = tables.read_table(asset, scope)
    return conform(df, TABLES[asset]) if df is not None else empty(TABLES[asset])


def table_rows(tables: TableStore, scope: Scope) -> dict[str, int]:
    return {asset: tables.count_rows(asset, scope) for asset in TABLES}


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
) -> list[dict[str, Any]]:
    """`tenant_summary` of many tenants, one read per table for all of them (a per-tenant read
    of each table costs seconds at hundreds of tenants). `facts_summaries`:
    `tables.summaries(validated_facts)` when the caller has it."""
    if facts_summaries is None:
        facts_summaries = tables.summaries(Asset.VALIDATED_FACTS)
    rows = {
        a: _rows_per_tenant(tables, a, scopes)
        for a in (
            Asset.RAW_TURNS,
            Asset.EXTRACTED_TRIPLES,
            Asset.VALIDATED_FACTS,
            Asset.ENTITIES,
            Asset.TURN_REJECTS,
        )
    }
    awaiting = _rows_per_tenant(tables, Asset.EXTRACTION_LOG, scopes, pl.col("model") == "none")
    quarantine = _per_tenant(tables, Asset.QUARANTINE, scopes, ["reason", "severity"])
    files = _per_tenant(tables, Asset.LANDING_FILES, scopes, ["records"])
    out = []
    for scope in scopes:
        key = scope.key
        q = quarantine[key]
        warning = pl.col("severity") == SEVERITY_WARNING
        reasons = Counter(q.filter(~warning)["reason"].to_list())
        warnings = Counter(q.filter(warning)["reason"].to_list())
        lines_in = int(files[key]["records"].sum() or 0)
        turns, landing_rejects = rows[Asset.RAW_TURNS][key], rows[Asset.TURN_REJECTS][key]
        last = facts_summaries.get(key, {})
        triples = {k: last.get(k, 0) for k in ("triples_in", "facts_stored", "facts_new", "merged")}
        triples["rejects"] = last.get("rejects", 0)
        out.append(
            {
                "tenant": key,
                "lines_in": lines_in,
                "turns": turns,
                "landing_rejects": landing_rejects,
                "lines_accounted": lines_in == turns + landing_rejects,
                "triples": rows[Asset.EXTRACTED_TRIPLES][key],
                "triples_balance": triples,
                "triples_accounted": triples["triples_in"]
                == triples["facts_stored"]
                + triples["facts_new"]
                + triples["merged"]
                + triples["rejects"],
                "facts": rows[Asset.VALIDATED_FACTS][key],
                "entities": rows[Asset.ENTITIES][key],
                "rejects": q.height - sum(warnings.values()),
                "warnings": sum(warnings.values()),
                "rejects_by_reason": dict(sorted(reasons.items())),
                "warnings_by_reason": dict(sorted(warnings.items())),
                "text_turns_awaiting_extraction": awaiting[key],
            }
        )
    return out


def _rows_per_tenant(
    tables: TableStore, asset: str, scopes: list[Scope], where: pl.Expr | None = None
) -> dict[str, int]:
    """Each tenant's row count of `asset` (of its rows matching `where`)."""
    return {s.key: n for s, n in tables.rows_per_tenant(asset, scopes, where).items()}


def _per_tenant(
    tables: TableStore, asset: str, scopes: list[Scope], columns: list[str]
) -> dict[str, pl.DataFrame]:
    """`columns` of `asset` for each tenant (empty where none), from one snapshot."""
    layout = {c: TABLES[asset][c] for c in columns}
    found = tables.read_many(asset, scopes, columns=columns)
    return {
        s.key: conform(found[s], layout) if s in found else pl.DataFrame(schema=layout)
        for s in scopes
    }


def format_summary(rows: list[dict[str, Any]]) -> str:
    lines = [
        f"{'tenant':<28} {'lines':>6} {'turns':>6} {'triples':>8} {'facts':>6} {'entities':>8} "
        f"{'rejects':>8}"
    ]
    for r in rows:
        lines.append(
            f"{r['tenant']:<28} {r['lines_in']:>6} {r['turns']:>6} {r['triples']:>8} "
            f"{r['facts']:>6} {r['entities']:>8} {r['rejects']:>8}"
        )
        if not r["lines_accounted"]:
            lines.append(
                f"    NOT ACCOUNTED: {r['lines_in']} lines read, but {r['turns']} turns + "
                f"{r['landing_rejects']} landing rejects"
            )
        if not r["triples_accounted"]:
            b = r["triples_balance"]
            lines.append(
                f"    NOT ACCOUNTED: {b['triples_in']} triples in, but {b['facts_stored']} + "
                f"{b['facts_new']} facts + {b['merged']} merged + {b['rejects']} rejects"
            )
        if r.get("warnings_by_reason"):
            warned = ", ".join(f"{k} {v}" for k, v in r["warnings_by_reason"].items())
            lines.append(f"    warnings (facts kept): {warned}")
        if r["rejects_by_reason"]:
            reasons = ", ".join(f"{k} {v}" for k, v in r["rejects_by_reason"].items())
            lines.append(f"    rejects by reason: {reasons}")
        if r.get("text_turns_awaiting_extraction"):
            lines.append(
                f"    {r['text_turns_awaiting_extraction']} text turns await extraction "
                "(no extractor configured: set MEMFLOW_EXTRACTOR)"
            )
        for key in ("graph", "vectors"):
            if key in r:
                lines.append(f"    {key}: {r[key]}")
    return "\n".join(lines)


def store_counts(scopes: list[Scope], cfg: Settings) -> dict[str, dict]:
    graph = cfg.open_graph()
    vectors = cfg.open_vectors()
    out: dict[str, dict] = {}
    try:
        for scope in scopes:
            counts = graph.counts(scope)
            models = vectors.models(scope) if vectors is not None else {}
            out[scope.key] = {
                "graph": f"{counts['entities']} entities, {counts['facts']} facts "
                f"({graph.backend})",
                "vectors": ", ".join(f"{m}: {n} x {d}-dim" for m, (d, n) in models.items())
                or "none",
            }
    finally:
        graph.close()
        if vectors is not None:
            vectors.close()
    return out


def awaiting_extraction(cfg: Settings) -> int:
    """Text turns of every tenant that wait for an extractor (the extraction log's rows of the
    model `none`), from the tables' footers and one column."""
    tables = TableStore(cfg.data_dir)
    scopes = tables.scopes(Asset.EXTRACTION_LOG)
    if not scopes:
        return 0
    counts = _rows_per_tenant(tables, Asset.EXTRACTION_LOG, scopes, pl.col("model") == "none")
    return sum(counts.values())


def system_status(cfg: Settings) -> dict[str, Any]:
    """The state home's view: what it records, which memflow processes run, and every one that
    works on another data directory or landing zone than these settings."""
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
        "text_turns_awaiting_extraction": awaiting_extraction(cfg),
    }


def format_system(report: dict[str, Any]) -> list[str]:
    from pipelines.shown import shown

    lines = [
        f"state home: {shown(report['home'])}",
        f"landing zone: {shown(report['landing_dir'])}",
    ]
    if report["record_problem"]:
        lines.append(f"  the state home's record is damaged: {shown(report['record_problem'])}")
    if not report["processes"]:
        lines.append("running: nothing (memflow up starts the API, the UI and the daemon)")
    for p in report["processes"]:
        where = " ".join(f"{k} {p[k]}" for k in ("api_url", "ui_url") if p[k])
        lines.append(f"running: memflow {p['role']} (pid {p['pid']}) {shown(where)}".rstrip())
    for line in report["conflicts"]:
        lines.append(f"  CONFLICT: {shown(line)}")
    waiting = report["text_turns_awaiting_extraction"]
    if report["extractor"] == "none":
        lines.append(
            f"extraction: none; {waiting} text turns wait for an extractor (set "
            "MEMFLOW_EXTRACTOR=openai with MEMFLOW_EXTRACTION_URL and MEMFLOW_EXTRACTION_MODEL "
            "of a local OpenAI-compatible server: docs/agents.md, Extraction)"
        )
    else:
        lines.append(f"extraction: {report['extractor']}; {waiting} text turns wait")
    return lines


# Tenants `memflow status` reads together: one read of each table for them, and no more of
# them in memory at once.
STATUS_CHUNK = 200


def status(cfg: Settings) -> dict[str, Any]:
    from resources.vector.ledger import EmbeddingLedger

    data_dir = cfg["MEMFLOW_DATA_DIR"]
    tables = open_tables(cfg)
    scopes = sorted(
        set(tables.scopes(Asset.VALIDATED_FACTS)) | set(tables.scopes(Asset.RAW_TURNS)),
        key=lambda s: s.key,
    )
    model = cfg.embedding_model
    graph, vectors = cfg.open_graph(), cfg.open_vectors()
    ledger = EmbeddingLedger(data_dir)
    facts_summaries = tables.summaries(Asset.VALIDATED_FACTS)  # read once, not per tenant
    tenants = []
    try:
        for start in range(0, len(scopes), STATUS_CHUNK):
            chunk = scopes[start : start + STATUS_CHUNK]
            # One read of each table for the chunk's tenants: a per-tenant read filters the
            # log's file index of every tenant, so reading tenant by tenant grew with the
            # square of the tenants (bench/bench_scale.py).
            counts = {a: tables.rows_per_tenant(a, chunk) for a in TABLES}
            accounting = tenant_summaries(tables, chunk, facts_summaries)
            entities_of = _read_chunk(tables, Asset.ENTITIES, chunk)
            facts_of = _read_chunk(tables, Asset.VALIDATED_FACTS, chunk)
            for scope, summary in zip(chunk, accounting, strict=True):
                tenants.append(
                    _tenant_status(
                        scope,
                        {a: counts[a][scope] for a in TABLES},
                        summary,
                        entities_of[scope],
                        facts_of[scope],
                        graph,
                        vectors,
                        ledger,
                        model,
                    )
                )
    finally:
        graph.close()
        vectors.close()
    from resources.vector.legacy import find_legacy

    legacy = find_legacy(data_dir)
    notes = [legacy.note()] if legacy is not None else []
    return {
        "data_dir": data_dir,
        "embedding_model": model,
        "system": system_status(cfg),
        "tenants": tenants,
        "notes": notes,
    }


def _read_chunk(tables: TableStore, asset: str, scopes: list[Scope]) -> dict[Scope, pl.DataFrame]:
    """`_read` of several tenants from one snapshot."""
    found = tables.read_many(asset, scopes)
    return {
        s: conform(found[s], TABLES[asset]) if s in found else empty(TABLES[asset]) for s in scopes
    }


def _tenant_status(
    scope: Scope,
    rows: dict[str, int],
    accounting: dict[str, Any],
    entities: pl.DataFrame,
    facts: pl.DataFrame,
    graph,
    vectors,
    ledger,
    model: str | None,
) -> dict[str, Any]:
    from memflow.fact_embedding import fact_vector_table
    from resources.graph.sync import graph_equals_table
    from resources.vector.base import fact_vectors_key
    from resources.vector.ledger import vector_table
    from resources.vector.sync import vectors_equal_table

    graph_equal, graph_diff = graph_equals_table(graph, scope, entities, facts)
    models = vectors.models(scope)
    entry: dict[str, Any] = {
        "tenant": scope.key,
        "tables": rows,
        "accounting": accounting,
        "graph": {
            "backend": graph.backend,
            **graph.counts(scope),
            "equals_table": graph_equal,
            "diff": graph_diff,
        },
        "vectors": {m: {"dim": d, "vectors": n} for m, (d, n) in models.items()},
        "embedding_model": model,
    }
    if model:
        table = vector_table(
            ledger,
            model,
            scope,
            entities.select("entity_id", "name") if entities.height else None,
        )
        covered = models.get(model, (0, 0))[1]
        entry["coverage"] = (
            round(min(covered, table.height) / entities.height, 4) if (entities.height) else 1.0
        )
        equal, diff = vectors_equal_table(vectors, model, scope, table)
        # Fact vectors (fact_embeddings, under facts:<model>): every fact's text.
        key = fact_vectors_key(model)
        fact_table = fact_vector_table(ledger, model, scope, facts)
        held = models.get(key, (0, 0))[1]
        entry["fact_coverage"] = (
            round(min(held, fact_table.height) / facts.height, 4) if facts.height else 1.0
        )
        facts_equal, facts_diff = vectors_equal_table(vectors, key, scope, fact_table)
        entry["vectors_equal_table"] = equal and facts_equal
        entry["vectors_diff"] = {"entities": diff, "facts": facts_diff}
    return entry


def format_status(report: dict[str, Any]) -> str:
    from pipelines.shown import shown

    lines = [
        f"data: {shown(report['data_dir'])}   embedding model: "
        f"{shown(report['embedding_model'] or 'none')}"
    ]
    lines += [f"note: {shown(note)}" for note in report.get("notes", [])]
    if "system" in report:
        lines.extend(format_system(report["system"]))
    for t in report["tenants"]:
        rows = t["tables"]
        g = t["graph"]
        acc = t["accounting"]
        b = acc["triples_balance"]
        lines.append(f"\n{shown(t['tenant'])}")
        lines.append("  tables: " + ", ".join(f"{k} {v}" for k, v in rows.items()))
        lines.append(
            f"  lines in {acc['lines_in']} = turns {acc['turns']} + rejects "
            f"{acc['landing_rejects']}: {'yes' if acc['lines_accounted'] else 'NO'}; "
            f"triples in {b['triples_in']} = facts {b['facts_stored']}+{b['facts_new']} + "
            f"merged {b['merged']} + rejects {b['rejects']}: "
            f"{'yes' if acc['triples_accounted'] else 'NO'}"
        )
        lines.append(
            f"  graph ({g['backend']}): {g['entities']} entities, {g['facts']} facts; "
            f"equals table: {'yes' if g['equals_table'] else 'NO'}"
        )
        vec = ", ".join(f"{m} {v['vectors']} x {v['dim']}" for m, v in t["vectors"].items())
        lines.append(f"  vectors: {vec or 'none'}")
        if "coverage" in t:
            lines.append(
                f"  coverage of {t['embedding_model']}: entities {t['coverage']:.0%}, facts "
                f"{t['fact_coverage']:.0%}; vectors equal tables: "
                f"{'yes' if t['vectors_equal_table'] else 'NO'}"
            )
    return "\n".join(lines)
