"""One new file for one tenant among N, side by side (issue 19 item 3): `memflow run --tenant`
on data directories that bench_scale.py kept, the sizes interleaved in each round.

    python bench/bench_scale.py --tenants 100,10000 --keep --work W
    python bench/bench_one_file.py --work W --tenants 100,10000 --rounds 3

Each round, for each size in turn: a new day (10 turns, bench_scale.py's shape) for a tenant
that has no extra day yet, then `memflow run --tenant ORG/REPO --landing L --data D` in a fresh
process. Its CPU (with the children it reaped, `wait4`) and peak RSS are the figures;
the ratio of the largest size to the smallest is of the rounds' sums. Run on copies if the
kept directories must stay as the first ingest left them (`--copy`).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.bench_ingest_scale import env_for, write_day  # noqa: E402
from bench.scale_shapes import tenant_name  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "one_file.json"
MEMFLOW = ROOT / ".venv" / "bin" / "memflow"


def one_run(landing: Path, data: Path, tenant: str, day: int, turns: int) -> dict[str, Any]:
    write_day(landing, tenant, day, turns)
    started = time.perf_counter()
    proc = subprocess.Popen(
        [str(MEMFLOW), "run", "--tenant", tenant, "--landing", str(landing), "--data", str(data)],
        env=env_for(landing, data),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    err = proc.stderr.read() if proc.stderr else ""
    _, status, usage = os.wait4(proc.pid, 0)  # this process and the children it reaped
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - started
    if proc.returncode:
        raise RuntimeError(f"memflow run --tenant {tenant} failed:\n{err[-2000:]}")
    return {
        "tenant": tenant,
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
        "wall_s": round(wall, 2),
        "max_rss_mib": round(usage.ru_maxrss / 1024, 1),
        "load_avg": round(os.getloadavg()[0], 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", required=True, help="bench_scale.py's kept work directory")
    parser.add_argument("--tenants", default="100,10000")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--copy", action="store_true", help="run on copies of the directories")
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args(argv)
    sizes = [int(x) for x in args.tenants.split(",") if x]
    work = Path(args.work)
    dirs = {}
    for n in sizes:
        landing, data = work / f"landing-{n}", work / f"data-{n}"
        if args.copy:
            for src in (landing, data):
                shutil.copytree(src, src.with_name(src.name + "-copy"), dirs_exist_ok=True)
            landing, data = (
                landing.with_name(landing.name + "-copy"),
                data.with_name(data.name + "-copy"),
            )
        dirs[n] = (landing, data)
    result: dict[str, Any] = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": "python bench/bench_one_file.py " + " ".join(argv or sys.argv[1:]),
        "machine": {"cpus": os.cpu_count(), "load_avg_at_start": os.getloadavg()},
        "rounds": [],
    }
    for r in range(args.rounds):
        row = {}
        for n in sizes:
            landing, data = dirs[n]
            tenant = tenant_name((n // 2 + 37 * (r + 1)) % n)
            row[str(n)] = one_run(landing, data, tenant, 100 + r, args.turns)
            print(f"round {r + 1} {n:>6} tenants: {row[str(n)]}", flush=True)
        result["rounds"].append(row)
    sums = {str(n): sum(r[str(n)]["cpu_s"] for r in result["rounds"]) for n in sizes}
    result["cpu_s_sum"] = sums
    result["ratio_largest_to_smallest"] = round(sums[str(max(sizes))] / sums[str(min(sizes))], 2)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(f"CPU sums {sums}: {result['ratio_largest_to_smallest']}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
