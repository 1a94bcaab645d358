"""Delta column statistics on or off: what a process pays to open and commit to memflow's
tables as the tenants grow (issue 19; `resources/table_log.py`, STATS_PROPERTY).

    python bench/bench_delta_stats.py [--tenants 100,10000] [--rounds 3]

For each size, two roots hold the same raw_turns table (the real layout, written through
`TableStore.write_tenants` in blocks of 200 tenants, one commit a block, as a first ingest
writes it; 2 days x 10 turns a tenant, ~400-character contents): `stats`, created as memflow
created its tables before (per-file min, max and null counts of every column in the log), and
`nostats`, created as memflow creates them now (row counts only). Then, side by side in each
round, a fresh process per operation (the cost a `memflow run --tenant` process pays):

- `open`: the table's first use in a process: the row count and the rows of one tenant
  (`rows_per_tenant`, `read`);
- `write`: the same, then one tenant's new day committed (`write_tenants`).

CPU seconds of each process after imports (`getrusage`), the RSS it added at its peak (the
peak reset after imports through /proc/self/clear_refs), the log's size on disk. Results:
bench/results/delta_stats.json and a table on stdout (median of the rounds).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

RESULTS = ROOT / "bench" / "results" / "delta_stats.json"
MODES = ("stats", "nostats")
OPS = ("open", "write")
BLOCK = 200
ASSET = "raw_turns"


def _scope(i: int):
    from schemas.scope import Scope

    return Scope(f"org{i // 50:04d}", f"repo{i:05d}")


def _rows(i: int, days: range):
    from bench.bench_table_layout import tenant_rows

    s = _scope(i)
    return tenant_rows(s.tenant_id, s.ns, days, per_day=10)


def build(root: Path, mode: str, tenants: int) -> float:
    """The table at `root` with `tenants` tenants; seconds it took."""
    from deltalake import DeltaTable

    from resources.table_log import CHECKPOINT_INTERVAL, CHECKPOINT_PROPERTY
    from resources.tables import TableStore

    started = time.perf_counter()
    store = TableStore(root)
    if mode == "stats":  # as memflow created its tables before 2026-12-08
        uri = store.uri(ASSET)
        Path(uri).mkdir(parents=True)
        DeltaTable.create(
            uri,
            schema=_rows(0, range(1)).to_arrow().schema,
            partition_by=["tenant_id", "ns"],
            configuration={CHECKPOINT_PROPERTY: str(CHECKPOINT_INTERVAL)},
        )
    for first in range(0, tenants, BLOCK):
        block = range(first, min(first + BLOCK, tenants))
        store.write_tenants(ASSET, {_scope(i): _rows(i, range(2)) for i in block})
    return time.perf_counter() - started


def child(root: str, op: str, tenant: int, day: int) -> dict[str, float]:
    """One operation in this fresh process: CPU and peak RSS after imports."""
    import polars

    from resources.tables import TableStore

    rss_before = _rss_mib("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # the peak from here (Linux)
    before = resource.getrusage(resource.RUSAGE_SELF)
    store = TableStore(root)
    scope = _scope(tenant)
    rows = store.rows_per_tenant(ASSET, [scope])[scope]
    df = store.read(ASSET, scope)
    assert df is not None and df.height == rows, (rows, df)
    if op == "write":
        new = _rows(tenant, range(day, day + 1))
        store.write_tenants(ASSET, {scope: polars.concat([df, new])})
    after = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "cpu_s": after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime,
        "rss_mib_added": _rss_mib("VmHWM") - rss_before,
        "rss_mib_peak": _rss_mib("VmHWM"),
    }


def _rss_mib(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise LookupError(field)


def measure(root: Path, op: str, tenant: int, day: int) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, __file__, "--child", str(root), op, str(tenant), str(day)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def log_bytes(root: Path) -> int:
    log = root / "tables" / ASSET / "_delta_log"
    return sum(p.stat().st_size for p in log.iterdir() if p.is_file())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tenants", default="100,10000")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--work", help="work directory (default: a new temp directory)")
    parser.add_argument("--out", default=str(RESULTS))
    parser.add_argument("--child", nargs=4, metavar=("ROOT", "OP", "TENANT", "DAY"))
    args = parser.parse_args(argv)
    if args.child:
        root, op, tenant, day = args.child
        print(json.dumps(child(root, op, int(tenant), int(day))))
        return 0

    sizes = [int(x) for x in args.tenants.split(",") if x]
    work = Path(args.work or tempfile.mkdtemp(prefix="memflow-delta-stats-"))
    result: dict[str, Any] = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": "python bench/bench_delta_stats.py " + " ".join(argv or sys.argv[1:]),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load_avg_at_start": [round(x, 2) for x in os.getloadavg()],
        },
        "sizes": {},
    }
    try:
        for n in sizes:
            size: dict[str, Any] = {"build_s": {}, "log_bytes": {}, "runs": {}}
            roots = {m: work / f"{m}-{n}" for m in MODES}
            for mode, root in roots.items():
                size["build_s"][mode] = round(build(root, mode, n), 1)
                size["log_bytes"][mode] = log_bytes(root)
            runs: dict[str, list[dict[str, float]]] = {f"{m}/{o}": [] for m in MODES for o in OPS}
            for r in range(args.rounds):  # interleaved: each round measures every pair
                tenant = (r * 7919) % n
                for op in OPS:
                    for mode in MODES:
                        runs[f"{mode}/{op}"].append(measure(roots[mode], op, tenant, 10 + r))
            size["runs"] = runs
            size["median"] = {
                k: {m: round(statistics.median(x[m] for x in v), 3) for m in v[0]}
                for k, v in runs.items()
            }
            result["sizes"][str(n)] = size
            for root in roots.values():
                shutil.rmtree(root, ignore_errors=True)
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    result["machine"]["load_avg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(f"{'tenants':>8} {'op':>6} {'stats CPU s':>12} {'nostats CPU s':>14} {'ratio':>6} "
          f"{'stats +MiB':>11} {'nostats +MiB':>13} {'log MiB stats/nostats':>22}")  # fmt: skip
    for n, size in result["sizes"].items():
        logs = size["log_bytes"]
        for op in OPS:
            a, b = size["median"][f"stats/{op}"], size["median"][f"nostats/{op}"]
            print(
                f"{n:>8} {op:>6} {a['cpu_s']:>12.3f} {b['cpu_s']:>14.3f} "
                f"{a['cpu_s'] / b['cpu_s']:>6.2f} {a['rss_mib_added']:>11.1f} "
                f"{b['rss_mib_added']:>13.1f} "
                f"{logs['stats'] / 2**20:>10.1f} / {logs['nostats'] / 2**20:.1f}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
