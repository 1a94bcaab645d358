"""Which collection layout answers fastest on Milvus Lite's gRPC server (the embedded default)?

    python bench/bench_milvus_layout.py [--tenants 100] [--big 5000] [--small 200] [--dim 384]

Loads one tenant at the cap (5,000 entities) and `tenants - 1` small ones into a fresh Lite server
started by memflow's supervisor, then times `nearest` (k=8, cosine >= 0.4) for queries near
stored vectors, on the big tenant and on random small ones, for:

- `partition_key`: one collection per model, tenant as partition key (the Milvus server layout)
- `partition_per_scope`: one collection, an explicit partition per scope (raw pymilvus)
- `collection_per_scope`: a collection per (model, scope), server-side search
- `collection_per_scope+cache`: the same collections through the embedded default
  (`open_vector_store(None, data_dir)`), answered from the in-process cache

Also the sink costs at the cap: the first upsert of 5,000 vectors and a no-change `ids` read.
Writes `bench/results/milvus_layout.json` and prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from resources.vector.factory import open_vector_store  # noqa: E402
from resources.vector.lite_server import ensure_lite_server, stop_lite_server  # noqa: E402
from resources.vector.milvus import Layout, MilvusVectorStore, scope_filter  # noqa: E402
from schemas.scope import Scope  # noqa: E402

MODEL = "bench-model"
RESULTS = ROOT / "bench" / "results" / "milvus_layout.json"


def percentiles(samples: list[float]) -> dict[str, float]:
    ms = np.asarray(samples) * 1000
    return {
        "p50_ms": round(float(np.percentile(ms, 50)), 2),
        "p95_ms": round(float(np.percentile(ms, 95)), 2),
    }


def make_data(tenants: int, big: int, small: int, dim: int) -> dict[Scope, np.ndarray]:
    rng = np.random.default_rng(7)
    data = {}
    for t in range(tenants):
        n = big if t == 0 else small
        data[Scope(f"org{t:03d}", "repo")] = rng.standard_normal((n, dim), dtype=np.float32)
    return data


def queries(data: dict[Scope, np.ndarray], n: int) -> list[tuple[Scope, np.ndarray, str]]:
    """Half on the big tenant, half on random small ones; each near a stored vector."""
    rng = np.random.default_rng(11)
    scopes = list(data)
    out = []
    for i in range(n):
        scope = scopes[0] if i % 2 == 0 else scopes[1 + int(rng.integers(len(scopes) - 1))]
        row = int(rng.integers(len(data[scope])))
        noise = rng.standard_normal(data[scope].shape[1]).astype(np.float32) * 0.01
        out.append((scope, data[scope][row] + noise, f"e{row}"))
    return out


def time_queries(
    label: str,
    search: Callable[[Scope, np.ndarray], list[str]],
    qs: list[tuple[Scope, np.ndarray, str]],
    big: Scope,
) -> dict[str, Any]:
    first: dict[Scope, float] = {}
    for scope, vec, _ in qs:  # warm-up: every scope once (cold cache loads, collection loads)
        if scope not in first:
            started = time.perf_counter()
            search(scope, vec)
            first[scope] = time.perf_counter() - started
    by_kind: dict[str, list[float]] = {"big": [], "small": []}
    found = 0
    for scope, vec, expected in qs:
        started = time.perf_counter()
        ids = search(scope, vec)
        by_kind["big" if scope == big else "small"].append(time.perf_counter() - started)
        found += bool(ids) and ids[0] == expected
    row = {
        "layout": label,
        "big": percentiles(by_kind["big"]),
        "small": percentiles(by_kind["small"]),
        "top1": round(found / len(qs), 3),
        "first_query_big_ms": round(first[big] * 1000, 1),
    }
    print(f"  {label}: {row}", flush=True)
    return row


def load_store(store: MilvusVectorStore, data: dict[Scope, np.ndarray]) -> dict[str, float]:
    timings: dict[str, float] = {}
    for i, (scope, vectors) in enumerate(data.items()):
        items = [(f"e{j}", f"h{j}", vectors[j]) for j in range(len(vectors))]
        started = time.perf_counter()
        store.upsert(MODEL, vectors.shape[1], scope, items)
        if i == 0:
            timings["upsert_cap_s"] = round(time.perf_counter() - started, 3)
            started = time.perf_counter()
            held = store.ids(MODEL, scope)
            timings["ids_cap_s"] = round(time.perf_counter() - started, 3)
            assert len(held) == len(vectors)
    return timings


def store_search(store: MilvusVectorStore) -> Callable[[Scope, np.ndarray], list[str]]:
    return lambda scope, vec: [h.entity_id for h in store.nearest(MODEL, scope, vec, k=8)]


def partition_per_scope(
    uri: str, data: dict[Scope, np.ndarray], qs: list[tuple[Scope, np.ndarray, str]], big: Scope
) -> dict[str, Any]:
    from pymilvus import DataType, MilvusClient

    client = MilvusClient(uri=uri)
    name = "bench_partitions"
    dim = next(iter(data.values())).shape[1]
    schema = client.create_schema(auto_id=False)
    schema.add_field("pk", DataType.VARCHAR, max_length=64, is_primary=True)
    schema.add_field("tenant_id", DataType.VARCHAR, max_length=128)
    schema.add_field("ns", DataType.VARCHAR, max_length=128)
    schema.add_field("entity_id", DataType.VARCHAR, max_length=256)
    schema.add_field("vector", DataType.FLOAT_VECTOR, dim=dim)
    index = client.prepare_index_params()
    index.add_index("vector", index_type="FLAT", metric_type="COSINE")
    client.create_collection(name, schema=schema, index_params=index)
    for scope, vectors in data.items():
        part = f"p_{scope.tenant_id}"
        client.create_partition(name, part)
        rows = [
            {
                "pk": f"{part}_{j}",
                "tenant_id": scope.tenant_id,
                "ns": scope.ns,
                "entity_id": f"e{j}",
                "vector": vectors[j],
            }
            for j in range(len(vectors))
        ]
        client.insert(name, rows, partition_name=part)
        client.flush(name)

    def search(scope: Scope, vec: np.ndarray) -> list[str]:
        res = client.search(
            name,
            [vec.tolist()],
            limit=8,
            partition_names=[f"p_{scope.tenant_id}"],
            filter=scope_filter(scope),
            output_fields=["entity_id", "tenant_id", "ns"],
        )
        return [h["entity"]["entity_id"] for h in res[0] if h["distance"] >= 0.4]

    try:
        return time_queries("partition_per_scope", search, qs, big)
    finally:
        client.drop_collection(name)
        client.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--tenants", type=int, default=100)
    parser.add_argument("--big", type=int, default=5000)
    parser.add_argument("--small", type=int, default=200)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--queries", type=int, default=400)
    parser.add_argument("--skip", nargs="*", default=[], help="layouts to leave out")
    args = parser.parse_args(argv)

    data = make_data(args.tenants, args.big, args.small, args.dim)
    qs = queries(data, args.queries)
    big = next(iter(data))
    rows: list[dict[str, Any]] = []
    sinks: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="memflow-layout-") as tmp:
        root = Path(tmp)
        uri = ensure_lite_server(root)
        try:
            if "collection_per_scope" not in args.skip:
                print("loading: collection per scope", flush=True)
                with MilvusVectorStore(uri, layout=Layout.SCOPE) as store:
                    sinks["collection_per_scope"] = load_store(store, data)
                    rows.append(time_queries("collection_per_scope", store_search(store), qs, big))
                with open_vector_store(None, root) as cached:
                    assert isinstance(cached, MilvusVectorStore)
                    rows.append(
                        time_queries("collection_per_scope+cache", store_search(cached), qs, big)
                    )
            if "partition_key" not in args.skip:
                print("loading: partition key", flush=True)
                with MilvusVectorStore(uri, layout=Layout.PARTITION_KEY) as store:
                    sinks["partition_key"] = load_store(store, data)
                    rows.append(time_queries("partition_key", store_search(store), qs, big))
            if "partition_per_scope" not in args.skip:
                print("loading: partition per scope", flush=True)
                rows.append(partition_per_scope(uri, data, qs, big))
        finally:
            stop_lite_server(root)
    result = {
        "setup": {
            "tenants": args.tenants,
            "big_tenant_rows": args.big,
            "small_tenant_rows": args.small,
            "dim": args.dim,
            "queries": args.queries,
            "cpus": os.cpu_count(),
            "loadavg_at_end": [round(x, 2) for x in os.getloadavg()],
        },
        "nearest": rows,
        "sink_at_cap": sinks,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print()
    print(
        f"{args.tenants} tenants ({args.big:,} rows in one, {args.small} in each), {args.dim} dims"
    )
    print()
    print(
        "| layout | big tenant p50 / p95 ms | small tenant p50 / p95 ms | top-1 | first query ms |"
    )
    print("|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['layout']} | {r['big']['p50_ms']} / {r['big']['p95_ms']} | "
            f"{r['small']['p50_ms']} / {r['small']['p95_ms']} | {r['top1']} | "
            f"{r['first_query_big_ms']} |"
        )
    for layout, t in sinks.items():
        print(f"\nsink at the cap ({layout}): first upsert {t['upsert_cap_s']} s, ", end="")
        print(f"no-change ids {t['ids_cap_s']} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
