"""The embedded vector store, measured: search, sink, memory, cold start, and 1,000 / 10,000
tenants (how it was chosen, and what it costs).

    python bench/bench_vector_store.py                       # the embedded default, all phases
    python bench/bench_vector_store.py --backends embedded,lancedb --tenants 1000
    python bench/bench_vector_store.py --phases search,caps --backends embedded

Backends: `embedded` is whatever `open_vector_store(None, data_dir)` opens in the code tree the
script runs in (this tree: `resources.vector.local`, numpy over Arrow files; run
in an export of an older tree it is that tree's Milvus Lite server with its search cache, which
is how the "before" figures of BENCHMARKS.md were taken); `lancedb` is LanceDB (from PyPI, not a
memflow dependency: put it on PYTHONPATH) behind the same interface: one table per model key,
tenant and namespace columns, a prefiltered brute-force search (below 5,000 rows a scope a
vector index buys nothing), written through `merge_insert`; `lancedb-indexed` is the same after
`optimize()` and a bitmap index on tenant_id (its best case for search, which a store written
tenant by tenant would have to keep up).

Phases (each figure is measured in the process named, the others are set up before):

- `search`: 100 tenants (one with 5,000 vectors, 99 with 200), 384 dims, loaded through the
  sink path (`sync_vectors`). In a fresh process: the first `nearest` of the big scope (cold
  start: nothing loaded), then 300 queries on it and on small scopes, k=8: p50/p95.
- `caps`: a tenant at the caps (5,000 entity-name and 10,000 fact vectors): the first sync, a
  no-change re-sync; in a fresh process, the resident memory one query on each key adds.
- `scale` (embedded only): N tenants of small histories (30 entities, 40 facts each, the
  40-tenant generator's size) written to the embedding ledger, then the vector sink's work
  (`memflow.vector_sync.sync_tenants`, per block of 200 tenants as a run does it): seconds per
  tenant and peak RSS per block, first and again with nothing changed; then, in a fresh
  process, the API's cache: every tenant asked once in turn (a query on each key), RSS and the
  cache's bytes every 1,000 tenants.

Writes `bench/results/vector_store.json` and prints markdown tables.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import psutil

ROOT = Path(os.environ.get("MEMFLOW_BENCH_TREE") or Path(__file__).resolve().parents[1])
sys.path.insert(0, str(ROOT))

from resources.vector.base import VectorStore, fact_vectors_key  # noqa: E402
from resources.vector.factory import open_vector_store  # noqa: E402
from resources.vector.sync import sync_vectors  # noqa: E402
from schemas.records import VectorHit  # noqa: E402
from schemas.scope import Scope  # noqa: E402

MODEL = "bench-model"
DIM = 384
RESULTS = Path(__file__).resolve().parents[1] / "bench" / "results" / "vector_store.json"
BLOCK = 200
SMALL_ENTITIES, SMALL_FACTS = 30, 40


def rss_mib() -> float:
    return psutil.Process().memory_info().rss / 2**20


def percentiles(samples: Sequence[float]) -> dict[str, float]:
    ms = np.asarray(samples) * 1000
    return {
        "p50_ms": round(float(np.percentile(ms, 50)), 3),
        "p95_ms": round(float(np.percentile(ms, 95)), 3),
    }


def table_of(ids: Sequence[str], vectors: np.ndarray) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "entity_id": list(ids),
            "text_hash": [f"h-{i}" for i in ids],
            "dim": [vectors.shape[1]] * len(ids),
            "vector": vectors,
        },
        schema_overrides={"dim": pl.Int32},
    ).with_columns(pl.col("vector").cast(pl.List(pl.Float32)))


# -- LanceDB behind the VectorStore interface (a candidate, measured; not shipped) --------------


def _sql(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


class LanceVectorStore(VectorStore):
    backend = "lancedb"

    def __init__(self, root: Path) -> None:
        import lancedb

        self.db = lancedb.connect(str(root))
        self._tables: dict[str, Any] = {}

    def _table(self, model: str, dim: int | None = None) -> Any:
        import pyarrow as pa

        name = "t_" + "".join(c if c.isalnum() else "_" for c in model)
        if name not in self._tables:
            if name in self.db.table_names():
                self._tables[name] = self.db.open_table(name)
            elif dim is None:
                return None
            else:
                schema = pa.schema(
                    [
                        ("tenant_id", pa.string()),
                        ("ns", pa.string()),
                        ("entity_id", pa.string()),
                        ("text_hash", pa.string()),
                        ("vector", pa.list_(pa.float32(), dim)),
                    ]
                )
                self._tables[name] = self.db.create_table(name, schema=schema)
        return self._tables[name]

    @staticmethod
    def _where(scope: Scope) -> str:
        return f"tenant_id = {_sql(scope.tenant_id)} AND ns = {_sql(scope.ns)}"

    def upsert(self, model: str, dim: int, scope: Scope, items: Sequence[tuple]) -> int:  # type: ignore[type-arg]
        import pyarrow as pa

        if not items:
            return 0
        ids = [i[0] for i in items]
        matrix = np.asarray([i[2] for i in items], dtype=np.float32)
        data = pa.table(
            {
                "tenant_id": [scope.tenant_id] * len(ids),
                "ns": [scope.ns] * len(ids),
                "entity_id": ids,
                "text_hash": [i[1] for i in items],
                "vector": pa.FixedSizeListArray.from_arrays(pa.array(matrix.reshape(-1)), dim),
            }
        )
        table = self._table(model, dim)
        (
            table.merge_insert(["tenant_id", "ns", "entity_id"])
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .execute(data)
        )
        return len(ids)

    def nearest(self, model, scope, vector, *, k=8, min_cosine=0.4) -> list[VectorHit]:  # type: ignore[no-untyped-def]
        table = self._table(model)
        if table is None:
            return []
        rows = (
            table.search(np.asarray(vector, dtype=np.float32))
            .metric("cosine")
            .where(self._where(scope), prefilter=True)
            .select(["entity_id", "tenant_id", "ns"])
            .limit(k)
            .to_list()
        )
        hits = [
            VectorHit(r["entity_id"], 1.0 - float(r["_distance"]))
            for r in rows
            if (r["tenant_id"], r["ns"]) == (scope.tenant_id, scope.ns)
        ]
        return [h for h in hits if h.score >= min_cosine]

    def ids(self, model: str, scope: Scope) -> dict[str, str]:
        table = self._table(model)
        if table is None:
            return {}
        got = (
            table.search()
            .where(self._where(scope))
            .select(["entity_id", "text_hash"])
            .limit(None)
            .to_arrow()
        )
        return dict(zip(got["entity_id"].to_pylist(), got["text_hash"].to_pylist(), strict=True))

    def missing(self, model, scope, wanted) -> list[str]:  # type: ignore[no-untyped-def]
        held = self.ids(model, scope)
        return [e for e, h in wanted.items() if held.get(e) != h]

    def delete(self, model: str, scope: Scope, entity_ids: Sequence[str]) -> int:
        table = self._table(model)
        if table is None or not entity_ids:
            return 0
        listed = ", ".join(_sql(e) for e in entity_ids)
        table.delete(f"{self._where(scope)} AND entity_id IN ({listed})")
        return len(entity_ids)

    def models(self, scope: Scope) -> dict[str, tuple[int, int]]:
        raise NotImplementedError

    def delete_scope(self, scope: Scope) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self._tables.clear()


def open_backend(name: str, root: Path) -> VectorStore:
    if name.startswith("lancedb"):
        return LanceVectorStore(root / "lancedb")
    if name == "milvus":  # a server: MEMFLOW_BENCH_MILVUS_URI
        return open_vector_store(os.environ["MEMFLOW_BENCH_MILVUS_URI"], root)
    return open_vector_store(None, root)


def server_rss_mib(root: Path) -> float | None:
    """The resident memory of the store's server process (an older tree's Milvus Lite server);
    None when the store has none."""
    try:
        from resources.vector.lite_server import running_lite_server  # type: ignore[import-not-found]
    except ImportError:
        return None
    server = running_lite_server(root)
    return round(psutil.Process(server.pid).memory_info().rss / 2**20, 1) if server else None


def stop_servers(root: Path) -> None:
    """An older tree's embedded store was a Milvus Lite server: stop it."""
    try:
        from resources.vector.lite_server import stop_lite_server  # type: ignore[import-not-found]
    except ImportError:
        return
    stop_lite_server(root)


# -- phases ------------------------------------------------------------------------------------


def search_world(tenants: int = 100, big: int = 5000, small: int = 200) -> dict[Scope, np.ndarray]:
    """`tenants` queried in turn (the first one big), and 21 more asked once each, cold: one
    big (`cold000`) and 20 small."""
    rng = np.random.default_rng(7)
    sizes = {Scope(f"org{t:03d}", "repo"): big if t == 0 else small for t in range(tenants)}
    sizes.update({Scope(f"cold{t:03d}", "repo"): big if t == 0 else small for t in range(21)})
    return {s: rng.standard_normal((n, DIM)).astype(np.float32) for s, n in sizes.items()}


def phase_search(backend: str, root: Path) -> dict[str, Any]:
    world = search_world()
    started = time.perf_counter()
    with open_backend(backend, root) as store:
        for scope, vectors in world.items():
            ids = [f"e{i}" for i in range(len(vectors))]
            sync_vectors(store, MODEL, scope, table_of(ids, vectors))
        if backend == "lancedb-indexed":  # its best case: compacted, a bitmap index on tenant
            assert isinstance(store, LanceVectorStore)
            table = store._table(MODEL)
            table.optimize()
            table.create_scalar_index("tenant_id", index_type="BITMAP")
    loaded_s = time.perf_counter() - started
    out = child(backend, root, "search-queries")
    return {"load_s": round(loaded_s, 1), "vectors": sum(len(v) for v in world.values()), **out}


def child_search_queries(backend: str, root: Path) -> dict[str, Any]:
    world = search_world()
    big = Scope("org000", "repo")
    rng = np.random.default_rng(11)
    rss0 = rss_mib()
    store = open_backend(backend, root)
    opened = rss_mib()
    query = world[big][0] + 0.1 * rng.standard_normal(DIM).astype(np.float32)
    t = time.perf_counter()
    first = store.nearest(MODEL, big, query.tolist(), k=8)
    cold = time.perf_counter() - t
    assert first and first[0].entity_id == "e0", first
    timings: dict[str, list[float]] = {"big": [], "small": []}
    smalls = [s for s in world if s != big and s.tenant_id.startswith("org")]
    for i in range(300):
        for label, scope in (("big", big), ("small", smalls[i % len(smalls)])):
            row = int(rng.integers(len(world[scope])))
            q = (world[scope][row] + 0.1 * rng.standard_normal(DIM)).astype(np.float32).tolist()
            t = time.perf_counter()
            hits = store.nearest(MODEL, scope, q, k=8)
            timings[label].append(time.perf_counter() - t)
            assert hits and hits[0].entity_id == f"e{row}", (label, hits[:1], row)
    cold_scopes: dict[str, list[float]] = {"big": [], "small": []}
    for scope in (s for s in world if s.tenant_id.startswith("cold")):
        q = (world[scope][0] + 0.1 * rng.standard_normal(DIM)).astype(np.float32).tolist()
        t = time.perf_counter()
        hits = store.nearest(MODEL, scope, q, k=8)
        cold_scopes["big" if len(world[scope]) > 1000 else "small"].append(time.perf_counter() - t)
        assert hits and hits[0].entity_id == "e0", hits[:1]
    store.close()
    return {
        "cold_first_query_ms": round(cold * 1000, 2),
        "cold_scope_in_warm_process_ms": {
            "big_5000": round(cold_scopes["big"][0] * 1000, 2),
            "small_200_p50": round(float(np.median(cold_scopes["small"])) * 1000, 2),
        },
        "big_5000": percentiles(timings["big"]),
        "small_200": percentiles(timings["small"]),
        "rss_open_mib": round(opened - rss0, 1),
        "rss_after_queries_mib": round(rss_mib() - rss0, 1),
        "server_rss_mib": server_rss_mib(root),
    }


CAPS = Scope("caps", "repo")
WARM = Scope("warm", "repo")


def caps_tables() -> dict[str, pl.DataFrame]:
    rng = np.random.default_rng(3)
    return {
        MODEL: table_of([f"e{i}" for i in range(5000)], rng.standard_normal((5000, DIM))),
        fact_vectors_key(MODEL): table_of(
            [f"f{i}" for i in range(10000)], rng.standard_normal((10000, DIM))
        ),
    }


def phase_caps(backend: str, root: Path) -> dict[str, Any]:
    tables = caps_tables()
    out: dict[str, Any] = {}
    with open_backend(backend, root) as store:
        for key in (MODEL, fact_vectors_key(MODEL)):  # a small scope the reader warms up on
            store.upsert(key, DIM, WARM, [("w", "h", np.ones(DIM).tolist())])
        for label in ("first_sync_s", "no_change_resync_s"):
            t = time.perf_counter()
            for key, table in tables.items():
                report = sync_vectors(store, key, CAPS, table)
            out[label] = round(time.perf_counter() - t, 3)
        assert report.unchanged == 10000, report
    out.update(child(backend, root, "caps-memory"))
    out["disk_mib"] = round(_disk(root) / 2**20, 1)
    return out


def child_caps_memory(backend: str, root: Path) -> dict[str, Any]:
    store = open_backend(backend, root)
    for key in (MODEL, fact_vectors_key(MODEL)):  # imports and first-call costs, not the tenant's
        assert store.nearest(key, WARM, np.ones(DIM).tolist(), k=8, min_cosine=-1.0)
    gc.collect()
    cache = getattr(store, "cache", None)
    rss0, bytes0 = rss_mib(), cache.bytes if cache is not None else 0
    t = time.perf_counter()
    for key in (MODEL, fact_vectors_key(MODEL)):
        assert store.nearest(key, CAPS, np.ones(DIM).tolist(), k=8, min_cosine=-1.0)
    cold = time.perf_counter() - t
    held = rss_mib() - rss0
    cached = (cache.bytes - bytes0) if cache is not None else None
    store.close()
    return {
        "rss_per_tenant_at_caps_mib": round(held, 1),
        "server_rss_mib": server_rss_mib(root),
        "cache_bytes_mib": round(cached / 2**20, 1) if cached is not None else None,
        "cold_first_queries_both_keys_ms": round(cold * 1000, 1),
    }


def _disk(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


# -- scale -------------------------------------------------------------------------------------


def small_tenant(t: int) -> tuple[Scope, pl.DataFrame, pl.DataFrame]:
    run = os.environ.get("MEMFLOW_BENCH_RUN", "")  # a server's data outlives a run
    scope = Scope(f"org{run}{t // 100:04d}", f"repo{t % 100:02d}")
    entities = pl.DataFrame(
        {
            "entity_id": [f"e{i}" for i in range(SMALL_ENTITIES)],
            "name": [f"{scope.key} entity {i}" for i in range(SMALL_ENTITIES)],
        }
    )
    facts = pl.DataFrame(
        {
            "fact_id": [f"f{i}" for i in range(SMALL_FACTS)],
            "subject": [f"{scope.key} entity {i % SMALL_ENTITIES}" for i in range(SMALL_FACTS)],
            "predicate": ["USES"] * SMALL_FACTS,
            "object": [f"thing {i}" for i in range(SMALL_FACTS)],
        }
    )
    return scope, entities, facts


def fill_ledger(root: Path, n: int, tenants: Sequence[tuple] | None = None) -> float:  # type: ignore[type-arg]
    from memflow.fact_embedding import fact_texts
    from resources.vector.ledger import EmbeddingLedger, with_text_hash

    ledger = EmbeddingLedger(root)
    rng = np.random.default_rng(5)
    started = time.perf_counter()
    for scope, entities, facts in tenants if tenants is not None else map(small_tenant, range(n)):
        for key, texts in ((MODEL, entities), (fact_vectors_key(MODEL), fact_texts(facts))):
            hashed = with_text_hash(texts)
            vectors = rng.standard_normal((hashed.height, DIM)).astype(np.float32)
            for start in range(0, hashed.height, 1024):
                part = hashed.slice(start, 1024)
                rows = zip(
                    part["entity_id"], part["text_hash"], list(vectors[start:]), strict=False
                )
                ledger.append(key, scope, list(rows))
    return time.perf_counter() - started


def caps_tenant() -> tuple[Scope, pl.DataFrame, pl.DataFrame]:
    """A tenant at the caps: 5,000 entities and 10,000 facts."""
    scope = Scope(f"caps{os.environ.get('MEMFLOW_BENCH_RUN', '')}", "repo")
    entities = pl.DataFrame(
        {"entity_id": [f"e{i}" for i in range(5000)], "name": [f"entity {i}" for i in range(5000)]}
    )
    facts = pl.DataFrame(
        {
            "fact_id": [f"f{i}" for i in range(10000)],
            "subject": [f"entity {i % 5000}" for i in range(10000)],
            "predicate": ["DEPENDS_ON"] * 10000,
            "object": [f"thing {i}" for i in range(10000)],
        }
    )
    return scope, entities, facts


def phase_block(backend: str, root: Path) -> dict[str, Any]:
    """The sink's peak memory for a block of 200 tenants holding one at the caps, against the
    caps tenant alone (each in a fresh process, on its own copy of the ledger)."""
    block = [caps_tenant(), *map(small_tenant, range(199))]
    fill_ledger(root / "ledger", 0, block)
    out = {}
    for label in ("caps_alone", "block_of_200_with_it"):
        copy = root / label
        shutil.copytree(root / "ledger", copy)
        out[label] = child(backend, copy, "block-sink", "1" if label == "caps_alone" else "200")
    return out


def child_block_sink(backend: str, root: Path, n: int) -> dict[str, Any]:
    import resource

    from memflow.vector_sync import sync_tenants
    from resources.vector.ledger import EmbeddingLedger

    block = [caps_tenant(), *map(small_tenant, range(n - 1))]
    ledger = EmbeddingLedger(root)
    store = open_backend(backend, root)
    warm = [small_tenant(10_000)]  # imports and first calls, not the block's
    fill_ledger(root, 0, warm)
    assert all(t.equal for t in sync_tenants(store, ledger, MODEL, iter(warm)))
    gc.collect()
    base = rss_mib()
    t = time.perf_counter()
    assert all(t.equal for t in sync_tenants(store, ledger, MODEL, iter(block)))
    seconds = time.perf_counter() - t
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    store.close()
    return {
        "tenants": n,
        "seconds": round(seconds, 2),
        "peak_rss_growth_mib": round(peak - base, 1),
    }


def sink_blocks(store: VectorStore, root: Path, n: int) -> Iterator[tuple[int, float, float]]:
    """(tenants, seconds, peak RSS MiB) per block of 200: the vector sink's work."""
    from resources.vector.ledger import EmbeddingLedger

    ledger = EmbeddingLedger(root)
    try:
        from memflow.vector_sync import sync_tenants
    except ImportError:  # an older tree: the sink synced tenant by tenant from vector_table
        sync_tenants = None
    for start in range(0, n, BLOCK):
        block = [small_tenant(t) for t in range(start, min(n, start + BLOCK))]
        peak = rss_mib()
        t = time.perf_counter()
        if sync_tenants is not None:
            for done in sync_tenants(store, ledger, MODEL, iter(block)):
                assert done.equal, done.mismatches
                peak = max(peak, rss_mib())
        else:
            _old_sink(store, ledger, block)
            peak = max(peak, rss_mib())
        yield len(block), time.perf_counter() - t, peak


def _old_sink(store: VectorStore, ledger: Any, block: list) -> None:  # type: ignore[type-arg]
    from memflow.fact_embedding import fact_vector_table
    from resources.vector.ledger import vector_table

    for scope, entities, facts in block:
        sync_vectors(store, MODEL, scope, vector_table(ledger, MODEL, scope, entities))
        key = fact_vectors_key(MODEL)
        sync_vectors(store, key, scope, fact_vector_table(ledger, MODEL, scope, facts))


def phase_scale(backend: str, root: Path, n: int) -> dict[str, Any]:
    out: dict[str, Any] = {"tenants": n, "ledger_fill_s": round(fill_ledger(root, n), 1)}
    with open_backend(backend, root) as store:
        for label in ("first", "no_change"):
            blocks = list(sink_blocks(store, root, n))
            seconds = sum(b[1] for b in blocks)
            out[label] = {
                "seconds": round(seconds, 1),
                "ms_per_tenant": round(seconds / n * 1000, 2),
                "block_ms_per_tenant_first_last": [
                    round(blocks[0][1] / blocks[0][0] * 1000, 2),
                    round(blocks[-1][1] / blocks[-1][0] * 1000, 2),
                ],
                "peak_rss_mib_per_block_max": round(max(b[2] for b in blocks), 1),
            }
    out["api_cache"] = child(backend, root, "api-cache", str(n))
    out["store_disk_mib"] = (
        round(_disk(root / "vectors") / 2**20, 1) if (root / "vectors").is_dir() else None
    )
    return out


def child_api_cache(backend: str, root: Path, n: int) -> dict[str, Any]:
    store = open_backend(backend, root)
    rng = np.random.default_rng(9)
    rss0 = rss_mib()
    trace = []
    worst = 0.0
    t0 = time.perf_counter()
    for t in range(n):
        scope, _, _ = small_tenant(t)
        q = rng.standard_normal(DIM).tolist()
        for key in (MODEL, fact_vectors_key(MODEL)):
            store.nearest(key, scope, q, k=8, min_cosine=-1.0)
        if (t + 1) % 1000 == 0 or t + 1 == n:
            cache = getattr(store, "cache", None)
            now = rss_mib() - rss0
            worst = max(worst, now)
            trace.append(
                {
                    "tenants_asked": t + 1,
                    "rss_growth_mib": round(now, 1),
                    "cache_mib": round(cache.bytes / 2**20, 1) if cache is not None else None,
                    "cached_scopes": len(cache) if cache is not None else None,
                }
            )
    seconds = time.perf_counter() - t0
    cache = getattr(store, "cache", None)
    store.close()
    return {
        "ms_per_tenant_cold": round(seconds / n * 1000, 3),
        "cache_max_mib": round(cache.max_bytes / 2**20) if cache is not None else None,
        "max_rss_growth_mib": round(worst, 1),
        "server_rss_mib": server_rss_mib(root),
        "trace": trace,
    }


# -- plumbing ----------------------------------------------------------------------------------


def child(backend: str, root: Path, what: str, *args: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, __file__, "--child", what, "--backends", backend, "--root", str(root),
         *args],
        capture_output=True,
        text=True,
        env=os.environ.copy(),
        timeout=3600,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"{what} failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


CHILDREN = {
    "search-queries": child_search_queries,
    "caps-memory": child_caps_memory,
}


def machine() -> dict[str, Any]:
    import platform

    return {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "load_avg_1_5_15_at_start": os.getloadavg(),
    }


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--backends", default="embedded")
    p.add_argument("--phases", default="search,caps,block,scale")
    p.add_argument("--tenants", default="1000,10000")
    p.add_argument("--child")
    p.add_argument("--root")
    p.add_argument("extra", nargs="*")
    p.add_argument("--out", default=str(RESULTS))
    args = p.parse_args(argv)
    os.environ.setdefault(
        "MEMFLOW_BENCH_RUN", f"r{os.getpid()}" if "milvus" in args.backends else ""
    )
    if args.child:
        root = Path(args.root)
        if args.child == "api-cache":
            result = child_api_cache(args.backends, root, int(args.extra[0]))
        elif args.child == "block-sink":
            result = child_block_sink(args.backends, root, int(args.extra[0]))
        else:
            result = CHILDREN[args.child](args.backends, root)
        print(json.dumps(result))
        return 0
    result: dict[str, Any] = {"machine": machine(), "tree": str(ROOT), "backends": {}}
    for backend in args.backends.split(","):
        found: dict[str, Any] = {}
        for phase in args.phases.split(","):
            sizes = [int(x) for x in args.tenants.split(",")] if phase == "scale" else [0]
            for n in sizes:
                root = Path(tempfile.mkdtemp(prefix=f"vbench-{backend}-{phase}-"))
                try:
                    if phase == "search":
                        found["search"] = phase_search(backend, root)
                    elif phase == "caps":
                        found["caps"] = phase_caps(backend, root)
                    elif phase == "block":
                        found["block"] = phase_block(backend, root)
                    else:
                        found.setdefault("scale", {})[str(n)] = phase_scale(backend, root, n)
                    with open_backend(backend, root) as store:
                        found["store"] = f"{type(store).__module__}.{type(store).__name__}"
                finally:
                    stop_servers(root)
                    shutil.rmtree(root, ignore_errors=True)
                print(json.dumps({backend: {phase: found.get(phase)}}, indent=1), flush=True)
        result["backends"][backend] = found
    result["machine"]["load_avg_1_5_15_at_end"] = os.getloadavg()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
