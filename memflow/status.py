"""`memflow status`: per tenant, table rows, what each store holds, coverage and equality."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import polars as pl

from memflow.report import table_rows
from resources.scope import Scope
from resources.tables import TableStore


def _settings() -> dict[str, str]:
    from pipelines.resources import SETTINGS

    return {k: os.environ.get(k, v) for k, v in SETTINGS.items()}


def _open_stores(cfg: dict[str, str]):
    from resources.graph.factory import open_graph_store
    from resources.vector.factory import open_vector_store

    data_dir = cfg["MEMFLOW_DATA_DIR"]
    graph = open_graph_store(
        cfg["MEMFLOW_GRAPH_BACKEND"],
        sqlite_path=str(Path(data_dir) / "graph.sqlite"),
        gremlin_url=cfg["MEMFLOW_GREMLIN_URL"],
    )
    vectors = open_vector_store(
        cfg["MEMFLOW_MILVUS_URI"] or None, data_dir, token=cfg["MEMFLOW_MILVUS_TOKEN"] or None
    )
    return graph, vectors


def current_model(cfg: dict[str, str]) -> str | None:
    kind = (cfg.get("MEMFLOW_EMBEDDER") or "none").lower()
    if kind == "none":
        return None
    if kind == "sentence-transformers":
        return cfg.get("MEMFLOW_EMBEDDING_MODEL") or "all-MiniLM-L6-v2"
    return cfg.get("MEMFLOW_EMBEDDING_MODEL") or None


def store_counts(scopes: list[Scope], cfg: dict[str, str] | None = None) -> dict[str, dict]:
    cfg = cfg or _settings()
    graph, vectors = _open_stores(cfg)
    out: dict[str, dict] = {}
    try:
        for scope in scopes:
            counts = graph.counts(scope)
            models = vectors.models(scope)
            out[scope.key] = {
                "graph": f"{counts['entities']} entities, {counts['facts']} facts "
                f"({graph.backend})",
                "vectors": ", ".join(f"{m}: {n} x {d}-dim" for m, (d, n) in models.items())
                or "none",
            }
    finally:
        graph.close()
        vectors.close()
    return out


def status(cfg: dict[str, str] | None = None) -> dict[str, Any]:
    from memflow.embedding import vector_table
    from resources.graph.sync import graph_equals_table
    from resources.vector.ledger import EmbeddingLedger
    from resources.vector.sync import vectors_equal_table

    cfg = cfg or _settings()
    data_dir = cfg["MEMFLOW_DATA_DIR"]
    tables = TableStore(data_dir)
    scopes = sorted(
        set(tables.scopes("validated_facts")) | set(tables.scopes("raw_turns")),
        key=lambda s: s.key,
    )
    model = current_model(cfg)
    graph, vectors = _open_stores(cfg)
    ledger = EmbeddingLedger(data_dir)
    tenants = []
    try:
        for scope in scopes:
            rows = table_rows(tables, scope)
            entities = tables.read("entities", scope)
            facts = tables.read("validated_facts", scope)
            entities = entities if entities is not None else pl.DataFrame()
            facts = facts if facts is not None else pl.DataFrame()
            graph_equal, graph_diff = graph_equals_table(graph, scope, entities, facts)
            models = vectors.models(scope)
            entry: dict[str, Any] = {
                "tenant": scope.key,
                "tables": rows,
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
                    round(min(covered, table.height) / entities.height, 4)
                    if (entities.height)
                    else 1.0
                )
                equal, diff = vectors_equal_table(vectors, model, scope, table)
                entry["vectors_equal_table"] = equal
                entry["vectors_diff"] = diff
            tenants.append(entry)
    finally:
        graph.close()
        vectors.close()
    return {"data_dir": data_dir, "embedding_model": model, "tenants": tenants}


def format_status(report: dict[str, Any]) -> str:
    lines = [f"data: {report['data_dir']}   embedding model: {report['embedding_model'] or 'none'}"]
    for t in report["tenants"]:
        rows = t["tables"]
        g = t["graph"]
        lines.append(f"\n{t['tenant']}")
        lines.append("  tables: " + ", ".join(f"{k} {v}" for k, v in rows.items()))
        lines.append(
            f"  graph ({g['backend']}): {g['entities']} entities, {g['facts']} facts; "
            f"equals table: {'yes' if g['equals_table'] else 'NO'}"
        )
        vec = ", ".join(f"{m} {v['vectors']} x {v['dim']}" for m, v in t["vectors"].items())
        lines.append(f"  vectors: {vec or 'none'}")
        if "coverage" in t:
            lines.append(
                f"  coverage of {t['embedding_model']}: {t['coverage']:.0%}; vectors equal "
                f"table: {'yes' if t['vectors_equal_table'] else 'NO'}"
            )
    return "\n".join(lines)
