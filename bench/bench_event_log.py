"""What the local event log and the planned-events switch are worth to `memflow run`,
measured side by side (BENCHMARKS.md, "The local event log").

    python bench/bench_event_log.py [--tenants 40] [--days 3] [--rounds 2]

One landing zone (tenants x days x 40 turns, as bench_ingest_scale.py writes them); per
round, in alternating order, a fresh data directory and `memflow run` with:

- ``local_log``: the instance memflow writes (`pipelines.event_log.LocalSqliteEventLogStorage`)
  and the planned-events switch `pipelines.runner` sets;
- ``default_log``: Dagster's own SQLite storage (an instance file without the event-log
  entry), everything else the same;
- ``no_planned_switch``: the local event log without the switch (one planned event per
  asset and tenant instead of one per asset).

Per-tenant metadata goes through the public `add_asset_metadata(partition_key=...)` in all
three. Reported: the run's own seconds, the command's wall and CPU seconds (medians).
Results: bench/results/event_log.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.bench_ingest_scale import memflow_run, write_day  # noqa: E402

PLANNED_EVENTS_ENV = "DAGSTER_EMIT_PARTITION_SUBSET_IN_PLANNED_EVENTS"
RESULTS = ROOT / "bench" / "results" / "event_log.json"
DEFAULT_INSTANCE = "telemetry:\n  enabled: false\n"
VARIANTS = ("local_log", "default_log", "no_planned_switch")


def one(kind: str, landing: Path, data: Path, work: Path) -> dict[str, Any]:
    home = data / "dagster"
    home.mkdir(parents=True)
    if kind == "default_log":
        (home / "dagster.yaml").write_text(DEFAULT_INSTANCE)
    # an explicit value wins over the runner's default (os.environ.setdefault)
    env = {PLANNED_EVENTS_ENV: "false"} if kind == "no_planned_switch" else {}
    got = memflow_run(landing, data, work, env=env)
    got.pop("output")
    return got


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tenants", type=int, default=40)
    parser.add_argument("--days", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="memflow-bench-eventlog-"))
    landing = work / "landing"
    for t in range(args.tenants):
        for d in range(args.days):
            write_day(landing, f"org{t // 10:02d}/repo{t:03d}", d)
    runs: dict[str, list[dict[str, Any]]] = {k: [] for k in VARIANTS}
    load = [os.getloadavg()]
    try:
        for r in range(args.rounds):
            for kind in VARIANTS if r % 2 == 0 else tuple(reversed(VARIANTS)):
                data = work / f"data-{kind}-{r}"
                got = one(kind, landing, data, work)
                runs[kind].append(got)
                print(f"  {kind:18} round {r}: run {got['run_s']:.2f} s, wall {got['wall_s']} s, "
                      f"CPU {got['cpu_s']} s", flush=True)  # fmt: skip
                shutil.rmtree(data, ignore_errors=True)
    finally:
        load.append(os.getloadavg())
        shutil.rmtree(work, ignore_errors=True)
    med = {
        k: {m: statistics.median(g[m] for g in v) for m in ("run_s", "wall_s", "cpu_s")}
        for k, v in runs.items()
    }
    base = med["local_log"]["cpu_s"]
    for kind, m in med.items():
        print(f"{kind:18} run {m['run_s']:.2f} s  wall {m['wall_s']:.2f} s  CPU {m['cpu_s']:.2f} s"
              f"  CPU / local_log {m['cpu_s'] / base:.2f}x")  # fmt: skip
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "when": datetime.now(UTC).isoformat(timespec="seconds"),
                "tenants": args.tenants,
                "days": args.days,
                "load_avg": load,
                "median": med,
                "runs": runs,
            },
            indent=2,
        )
        + "\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
