"""Graph sink benchmark: one tenant at the caps (5,000 entities, 10,000 facts).

Measures, per backend, a full sync into an empty store, a no-change re-sync and a re-sync after
a small change (1% of the facts). Targets on the embedded store: full <= 5 s, no-change <= 1 s.
Gremlin is measured with both ways of writing new rows: one fold/coalesce upsert each (the
portable default) and data-driven inject(...).addV/addE inserts (`new_rows="inject"`).

    .venv/bin/python bench/bench_graph_sync.py                      # sqlite + gremlin
    .venv/bin/python bench/bench_graph_sync.py --no-gremlin         # sqlite only
    .venv/bin/python bench/bench_graph_sync.py --gremlin-url ws://127.0.0.1:18182/gremlin

The Gremlin server must be running (scripts/gremlin-server.sh start). Results: a markdown table
on stdout and bench/results/graph_sync.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import polars as pl

from resources.graph.base import GraphStore
from resources.graph.gremlin import GremlinGraphStore
from resources.graph.sqlite import SqliteGraphStore
from resources.graph.sync import graph_equals_table, records_from_tables, sync_graph
from schemas.scope import Scope
from schemas.tables import ENTITIES, FACTS

ROOT = Path(__file__).resolve().parents[1]

TARGETS = {"sqlite": {"full_s": 5.0, "no_change_s": 1.0}}
T0 = datetime(2024, 1, 1, tzinfo=UTC)


def make_tables(
    scope: Scope, n_entities: int, n_facts: int, seed: int = 7
) -> tuple[pl.DataFrame, pl.DataFrame]:
    rnd = random.Random(seed)
    ids = [f"e_{i:06d}" for i in range(n_entities)]
    names = [f"component-{i} {rnd.choice(['service', 'lib', 'db', 'queue'])}" for i in ids]
    entities = pl.DataFrame(
        {
            "entity_id": ids,
            "tenant_id": [scope.tenant_id] * n_entities,
            "ns": [scope.ns] * n_entities,
            "name": names,
            "norm_key": [n.lower().replace(" ", "") for n in names],
            "aliases": [[f"alias-{i}"] if i % 3 == 0 else [] for i in range(n_entities)],
            "types": [[rnd.choice(["service", "library", "database"])] for _ in ids],
            "first_seen": [T0] * n_entities,
        },
        schema=ENTITIES,
    )
    rows: dict[str, list[Any]] = {c: [] for c in FACTS}
    for i in range(n_facts):
        s, o = rnd.randrange(n_entities), rnd.randrange(n_entities)
        start = T0 + timedelta(minutes=i)
        closed = i % 10 == 0
        for column, value in (
            ("fact_id", f"f_{i:06d}"),
            ("tenant_id", scope.tenant_id),
            ("ns", scope.ns),
            ("subject_id", ids[s]),
            ("subject", names[s]),
            ("predicate", rnd.choice(["USES", "DEPENDS_ON", "OWNS", "CALLS"])),
            ("object_id", ids[o]),
            ("object", names[o]),
            ("confidence", round(rnd.uniform(0.6, 1.0), 3)),
            ("valid_from", start),
            ("valid_to", start + timedelta(days=30) if closed else None),
            ("supersedes", None),
            ("superseded_by", f"f_{i + 1:06d}" if closed else None),
            ("session_id", f"s{i // 50}"),
            ("turn_id", str(i)),
            ("client", "claude-code"),
            ("model", "explicit"),
            ("source", "explicit"),
            ("triple_id", f"t_{i:06d}"),
            # the first statement, then 0-3 later turns that restated the fact
            (
                "sources",
                [
                    {"session_id": f"s{(i + k) // 50}", "turn_id": str(i + 97 * k)}
                    for k in range(1 + i % 4)
                ],
            ),
        ):
            rows[column].append(value)
    return entities, pl.DataFrame(rows, schema=FACTS)


def touch_one_percent(facts: pl.DataFrame) -> pl.DataFrame:
    return facts.with_columns(
        pl.when(pl.int_range(pl.len()) % 100 == 0)
        .then(pl.col("confidence") * 0.99)
        .otherwise(pl.col("confidence"))
        .alias("confidence")
    )


def measure(
    store: GraphStore, scope: Scope, entities: pl.DataFrame, facts: pl.DataFrame, repeat: int
) -> dict[str, Any]:
    full = sync_graph(store, scope, entities, facts)
    ok, details = graph_equals_table(store, scope, entities, facts)
    if not ok:
        raise SystemExit(f"{store.backend}: store differs from the table after sync: {details}")
    again = []
    for _ in range(repeat):
        report = sync_graph(store, scope, entities, facts)
        if report.changed:
            raise SystemExit(f"{store.backend}: a no-change re-sync wrote rows: {report}")
        again.append(report.seconds)
    changed = sync_graph(store, scope, entities, touch_one_percent(facts))
    return {
        "backend": store.backend,
        "full_s": round(full.seconds, 3),
        "no_change_s": round(statistics.median(again), 3),
        "no_change_runs_s": [round(s, 4) for s in again],
        "one_percent_changed_s": round(changed.seconds, 3),
        "one_percent_changed_rows": changed.facts_written,
        "entities_written": full.entities_written,
        "facts_written": full.facts_written,
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    default_url = os.environ.get(
        "MEMFLOW_GREMLIN_URL",
        f"ws://127.0.0.1:{os.environ.get('MEMFLOW_GREMLIN_PORT', '18182')}/gremlin",
    )
    parser.add_argument("--gremlin-url", default=default_url)
    parser.add_argument("--no-gremlin", action="store_true", help="measure the embedded store only")
    parser.add_argument("--entities", type=int, default=5000)
    parser.add_argument("--facts", type=int, default=10000)
    parser.add_argument(
        "--repeat", type=int, default=5, help="no-change re-syncs to take the median of"
    )
    parser.add_argument(
        "--gremlin-new-rows",
        default="coalesce,inject",
        help="GremlinGraphStore new_rows modes to measure, comma-separated",
    )
    parser.add_argument(
        "--entity-batch", type=int, default=None, help="gremlin upserts per traversal"
    )
    parser.add_argument(
        "--fact-batch", type=int, default=None, help="gremlin upserts per traversal"
    )
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "graph_sync.json")
    args = parser.parse_args()

    scope = Scope(f"bench{uuid.uuid4().hex[:8]}", "repo")
    started = time.perf_counter()
    entities, facts = make_tables(scope, args.entities, args.facts)
    t = time.perf_counter()
    records_from_tables(entities, facts, scope=scope)
    hashing_s = time.perf_counter() - t
    print(
        f"generated {args.entities} entities, {args.facts} facts in {t - started:.2f}s; "
        f"rows to records + hashes {hashing_s:.3f}s",
        file=sys.stderr,
    )

    results: list[dict[str, Any]] = []
    with (
        tempfile.TemporaryDirectory() as tmp,
        SqliteGraphStore(Path(tmp) / "graph.sqlite") as store,
    ):
        results.append(measure(store, scope, entities, facts, args.repeat))

    if not args.no_gremlin:
        batches = {"entity_batch": args.entity_batch, "fact_batch": args.fact_batch}
        for mode in args.gremlin_new_rows.split(","):
            options = {k: v for k, v in batches.items() if v}
            with GremlinGraphStore(args.gremlin_url, new_rows=mode, **options) as gremlin:
                assert isinstance(gremlin, GremlinGraphStore)
                try:
                    result = measure(gremlin, scope, entities, facts, args.repeat)
                finally:
                    gremlin.delete_scope(scope)
                result["backend"] = f"gremlin ({mode})"
                result["url"] = args.gremlin_url
                result["new_rows"] = mode
                result["entity_batch"] = gremlin.entity_batch
                result["fact_batch"] = gremlin.fact_batch
                result["insert_batch"] = gremlin.insert_batch
            results.append(result)

    for result in results:
        target = TARGETS.get(result["backend"])
        result["target"] = target
        result["meets_target"] = (
            None if target is None else all(result[k] <= v for k, v in target.items())
        )

    print("| backend | full sync (s) | no-change re-sync (s) | 1% changed (s) | target met |")
    print("|---|---:|---:|---:|---|")
    for r in results:
        met = "n/a" if r["meets_target"] is None else ("yes" if r["meets_target"] else "NO")
        print(
            f"| {r['backend']} | {r['full_s']} | {r['no_change_s']} | "
            f"{r['one_percent_changed_s']} | {met} |"
        )

    args.out.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "benchmark": "graph_sync",
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "entities": args.entities,
        "facts": args.facts,
        "records_and_hashes_s": round(hashing_s, 3),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            # Other work on the machine moves these numbers; the Gremlin server shares the CPUs.
            "load_average_1m": round(os.getloadavg()[0], 2),
        },
        "results": results,
    }
    args.out.write_text(json.dumps(payload, indent=2) + "\n")
    print(
        f"wrote {args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out}",
        file=sys.stderr,
    )
    failed = [r["backend"] for r in results if r["meets_target"] is False]
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
