"""Sensor -> daemon -> recallable, on PostgreSQL: latency and runs per minute sustained.

    python bench/bench_daemon.py                   # 20 tenants, a file every 3 s for 180 s
    python bench/bench_daemon.py --duration 300 --interval 2 --tenants 40

The production deployment in a temp directory (tests/support/daemon.py): `dagster-daemon run`
on the repository's code location with deploy/dagster.yaml (queued run coordinator, one run
per tenant block, run retries, run monitoring, LocalRunLauncher), run storage and event logs in
a database of its own on the PostgreSQL that scripts/postgres.sh starts (MEMFLOW_POSTGRES_PORT,
default 18350; started here if nothing answers, and stopped again if it was started here).
Extractor and embedder `none`, SQLite graph.

Steady load: every `--interval` seconds a new landing file for the next tenant (round robin
over `--tenants`), holding one turn that saves one fact; each fact's latency is the time from
the file's rename into the landing zone until the fact is in the graph store that recall reads.
Runs per minute: ingest runs that succeeded from the start of the load until the last run
the load caused ended. Results:
bench/results/daemon.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

RESULTS = ROOT / "bench" / "results" / "daemon.json"


def land(landing: Path, tenant: str, n: int) -> tuple[str, float]:
    """A file with one turn saving `svc-<n> USES db-<n>`; returns (subject, landed at)."""
    org, repo = tenant.split("/")
    folder = landing / org / repo
    folder.mkdir(parents=True, exist_ok=True)
    subject = f"svc-{n}"
    line = {
        "org": org,
        "repo": repo,
        "session_id": f"bench-{n}",
        "turn_id": "1",
        "ts": datetime.now(UTC).isoformat(),
        "role": "tool",
        "content": "",
        "client": "bench",
        "tool_name": "upsert_graph_triples",
        "tool_input": {"triples": [{"subject": subject, "predicate": "USES", "object": f"db-{n}"}]},
    }
    tmp = folder / f".f{n:05d}.jsonl.tmp"
    tmp.write_text(json.dumps(line) + "\n")
    tmp.rename(folder / f"f{n:05d}.jsonl")
    return subject, time.monotonic()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tenants", type=int, default=20)
    parser.add_argument("--interval", type=float, default=3.0)
    parser.add_argument("--duration", type=float, default=180.0)
    parser.add_argument("--drain-timeout", type=float, default=400.0)
    args = parser.parse_args(argv)

    from resources.graph.sqlite import SqliteGraphStore
    from schemas.scope import Scope
    from tests.support import postgres
    from tests.support.daemon import DaemonWorld

    server = postgres.acquire().replace("postgresql://", "postgresql+psycopg2://", 1)
    tenants = [f"bench/t{i:03d}" for i in range(args.tenants)]
    result: dict[str, Any] = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "tenants": args.tenants,
        "interval_s": args.interval,
        "duration_s": args.duration,
        "load_avg_at_start": os.getloadavg(),
    }
    pending: dict[str, tuple[str, float]] = {}  # subject -> (tenant, landed)
    latencies: dict[str, float] = {}
    lock = threading.Lock()
    stop = threading.Event()
    try:
        root = Path(tempfile.mkdtemp(prefix="memflow-bench-daemon-"))
        with DaemonWorld.create(root, server) as w:

            def poll() -> None:
                while not stop.is_set():
                    graph_path = w.data / "graph.sqlite"
                    if graph_path.exists():
                        store = SqliteGraphStore(graph_path)
                        try:
                            with lock:
                                wanted = dict(pending)
                            by_tenant: dict[str, set[str]] = {}
                            for subject, (tenant, _) in wanted.items():
                                by_tenant.setdefault(tenant, set()).add(subject)
                            for tenant, subjects in by_tenant.items():
                                have = {f.subject for f in store.facts(Scope.parse(tenant))}
                                now = time.monotonic()
                                with lock:
                                    for s in subjects & have:
                                        latencies[s] = now - pending.pop(s)[1]
                        finally:
                            store.close()
                    time.sleep(0.5)

            started = time.monotonic()
            w.start_daemon()
            poller = threading.Thread(target=poll, daemon=True)
            poller.start()
            # Cold: the first file, right after the daemon started.
            subject, at = land(w.landing, tenants[0], 0)
            with lock:
                pending[subject] = (tenants[0], at)
            while subject not in latencies:
                if time.monotonic() - started > args.drain_timeout:
                    raise RuntimeError(f"the first fact never arrived\n{w.log_tail()}")
                time.sleep(0.5)
            result["cold_s"] = round(latencies.pop(subject), 1)
            print(f"cold: {result['cold_s']} s (daemon start to first fact)", flush=True)

            load_start = time.monotonic()
            load_start_epoch = time.time()
            n = 1
            while time.monotonic() - load_start < args.duration:
                tenant = tenants[n % len(tenants)]
                subject, at = land(w.landing, tenant, n)
                with lock:
                    pending[subject] = (tenant, at)
                n += 1
                time.sleep(args.interval)
            load_end_epoch = time.time()
            deadline = time.monotonic() + args.drain_timeout
            while pending and time.monotonic() < deadline:
                time.sleep(1.0)
            stop.set()
            poller.join(10)
            drained_epoch = time.time()
            # Every ingest run that ended from the start of the load until the last fact was
            # recallable: the rate the deployment sustained for this load.
            runs = [
                r
                for r in w.runs()
                if r["job"] == "ingest_job"
                and r["status"] == "SUCCESS"
                and r["end"]
                and r["end"] >= load_start_epoch
            ]
            window_s = max([r["end"] for r in runs] + [load_end_epoch]) - load_start_epoch
            durations = [r["end"] - r["start"] for r in runs if r["start"]]
            values = sorted(latencies.values())
            result.update(
                {
                    "files_landed": n - 1,
                    "facts_recallable": len(values),
                    "never_recallable": len(pending),
                    "latency_s": {
                        "median": round(statistics.median(values), 1) if values else None,
                        "p95": round(values[int(0.95 * (len(values) - 1))], 1) if values else None,
                        "max": round(values[-1], 1) if values else None,
                    },
                    "runs": len(runs),
                    "window_s": round(window_s, 1),
                    "drained_after_load_s": round(drained_epoch - load_end_epoch, 1),
                    "runs_per_minute": round(len(runs) / (window_s / 60), 2),
                    "run_seconds_median": round(statistics.median(durations), 1)
                    if durations
                    else None,
                    "facts_per_minute": round(len(values) / (window_s / 60), 1),
                    "tenants_per_run": round((n - 1) / max(len(runs), 1), 2),
                    "all_runs": len(w.runs()),
                    "load_avg_at_end": os.getloadavg(),
                }
            )
    finally:
        stop.set()
        postgres.release()
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0 if result.get("never_recallable") == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
