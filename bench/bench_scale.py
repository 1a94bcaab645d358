"""Tenants at scale (issue 19): the cost per tenant of `memflow run` from 100 to 10,000 tenants.

    python bench/bench_scale.py                          # 100, 1,000, 10,000 tenants
    python bench/bench_scale.py --tenants 100,1000       # fewer
    nice -n 10 python bench/bench_scale.py --tenants 100 --keep
    python bench/bench_scale.py --stack production --tenants 100,1000

`--stack production` measures the same shape through the daemon, the landing sensor,
PostgreSQL, JanusGraph and the Milvus server instead (bench/bench_scale_production.py; results
in bench/results/scale-production.json).

Each size is a fresh landing zone and data directory in a temp directory: N tenants
(`org<i // 50>/repo<i>`, 50 repos an org) with small histories in the shape of the 40-tenant
benchmark (`bench_ingest_scale.day_lines`: every 4th turn a tool call saving 2 triples, the rest
text turns), by default 2 days x 10 turns. On the embedded default (the declared defaults: the
bundled ONNX embedder, the embedded vector store, the SQLite graph, a SQLite Dagster instance
under the data directory; extractor `none`), every setting explicit so the repository's .env
does not leak in. For each size, in order:

1. **first ingest**: `memflow run` over the whole zone: wall and CPU seconds (wait4 of the
   process tree) and per tenant; the peak RSS of every process of the tree (psutil, sampled
   every 0.2 s: the largest, by command, and the tree's sum); Dagster runs and events (read
   back from the instance); disk per tenant (the data directory, by part).
2. **one new file**: a new day for one tenant in the middle of the zone, then `memflow run`
   over the whole zone (what a user types; the issue's measurement), then another new day and
   `memflow run --tenant ORG/REPO`: wall, CPU, runs and events of each. The work should not
   grow with the other tenants.
3. **status**: `memflow status` (wall, CPU).

Results go to bench/results/scale.json after each step of each size (a partial run keeps what
it measured), with the machine (CPUs, memory, load average at each step). Wall times on a
shared machine are distorted by the load: CPU seconds are the figure of record.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import shutil
import subprocess
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

from bench.bench_ingest_scale import write_day  # noqa: E402
from bench.scale_shapes import disk, per_tenant, tenant_name  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "scale.json"
BIN = Path(sys.executable).parent
# The goals of issue 19.
GOAL_FIRST_GROWTH = 1.2  # first ingest, CPU per tenant, largest size / smallest
GOAL_NEW_FILE = 1.2  # one new file's work, largest size / smallest
GOAL_STATUS_S = 5.0


def env_for(landing: Path, data: Path) -> dict[str, str]:
    from resources.settings import DEFAULTS

    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMFLOW_", "DAGSTER_"))}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.update(DEFAULTS)  # the embedded default: onnx embedder, embedded vectors, SQLite graph
    env.update(
        {
            "MEMFLOW_LANDING_DIR": str(landing),
            "MEMFLOW_DATA_DIR": str(data),
            "MEMFLOW_SETTINGS_FILE": str(data.parent / "no-settings.env"),
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "PYTHONPATH": str(ROOT),
        }
    )
    return env


class TreeSampler(threading.Thread):
    """The peak RSS of every process of a tree (psutil, every `interval` s), by pid."""

    def __init__(self, pid: int, interval: float = 0.2, log: Path | None = None) -> None:
        super().__init__(daemon=True)
        self.pid, self.interval, self.log = pid, interval, log
        self.peaks: dict[int, dict[str, Any]] = {}
        self.peak_sum = 0
        # The tree's peak while each tenant block's run was the last one started (from the
        # progress lines `memflow run` writes to its log: "run <id> ... block N ...: started").
        self.block_peaks: dict[int, int] = {}
        self._block: int | None = None
        self._log_at = 0
        self.stop = threading.Event()

    def _follow_log(self) -> None:
        if self.log is None:
            return
        with contextlib.suppress(OSError), self.log.open("rb") as f:
            f.seek(self._log_at)
            text = f.read().decode("utf-8", "replace")
            end = text.rfind("\n") + 1
            self._log_at += len(text[:end].encode())
            for m in _BLOCK_STARTED.finditer(text[:end]):
                self._block = int(m.group(1))

    def run(self) -> None:
        import psutil

        try:
            root = psutil.Process(self.pid)
        except psutil.Error:
            return
        while not self.stop.is_set():
            try:
                procs = [root, *root.children(recursive=True)]
            except psutil.Error:
                break
            total = 0
            for p in procs:
                try:
                    rss = p.memory_info().rss
                    if p.pid not in self.peaks:
                        cmd = " ".join(p.cmdline()[:3])[-120:]
                        self.peaks[p.pid] = {"cmd": cmd, "rss": 0}
                except psutil.Error:
                    continue
                total += rss
                if rss > self.peaks[p.pid]["rss"]:
                    self.peaks[p.pid]["rss"] = rss
            self.peak_sum = max(self.peak_sum, total)
            self._follow_log()
            if self._block is not None:
                self.block_peaks[self._block] = max(self.block_peaks.get(self._block, 0), total)
            self.stop.wait(self.interval)

    def report(self) -> dict[str, Any]:
        procs = sorted(self.peaks.values(), key=lambda p: -p["rss"])
        return {
            "processes": len(procs),
            "peak_rss_mib_by_process": [
                {"cmd": p["cmd"], "peak_rss_mib": round(p["rss"] / 2**20, 1)} for p in procs[:8]
            ],
            "peak_tree_rss_mib": round(self.peak_sum / 2**20, 1),
            "peak_tree_rss_mib_by_block": {
                str(b): round(v / 2**20, 1) for b, v in sorted(self.block_peaks.items())
            },
        }


def measured(cmd: list[str], env: dict[str, str], cwd: Path, log: Path) -> dict[str, Any]:
    """Wall and CPU seconds (wait4: the process and its waited-for children), the peak RSS of
    every process of the tree, and the output."""
    with log.open("w") as out:
        started = time.perf_counter()
        proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
        sampler = TreeSampler(proc.pid, log=log)
        sampler.start()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - started
        sampler.stop.set()
        sampler.join(5)
    code = os.waitstatus_to_exitcode(status)
    text = log.read_text()
    if code != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({code}):\n{text[-3000:]}")
    return {
        "wall_s": round(wall, 2),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
        "user_s": round(usage.ru_utime, 2),
        "sys_s": round(usage.ru_stime, 2),
        "wait4_max_rss_mib": round(usage.ru_maxrss / 1024, 1),
        **sampler.report(),
        "load_avg": [round(x, 2) for x in os.getloadavg()],
        "output": text,
    }


def memflow(
    sub: list[str], landing: Path, data: Path, cwd: Path, log: Path, **extra: str
) -> dict[str, Any]:
    cmd = [str(BIN / "memflow"), *sub]
    return measured(cmd, {**env_for(landing, data), **extra}, cwd, log)


def memflow_run(landing: Path, data: Path, cwd: Path, log: Path, *tenants: str) -> dict[str, Any]:
    sub = ["run", "--landing", str(landing), "--data", str(data)]
    for t in tenants:
        sub += ["--tenant", t]
    got = memflow(sub, landing, data, cwd, log)
    m = re.search(r"memflow run: (\d+) tenant\(s\), (\d+) run\(s\), ([\d.]+) s", got["output"])
    if not m:
        raise RuntimeError(f"no summary line in memflow run's output:\n{got['output'][-2000:]}")
    got.update(tenants=int(m.group(1)), runs=int(m.group(2)), run_s=float(m.group(3)))
    return got


_DAGSTER_COUNTS = """
import json, os, sys
from dagster import DagsterInstance, RunsFilter
inst = DagsterInstance.get()
runs = inst.get_runs()
after = float(sys.argv[1])
out = {"runs_total": len(runs), "runs": [], "events": 0}
for r in runs:
    rec = inst.get_run_record_by_id(r.run_id)
    if rec.create_timestamp.timestamp() < after:
        continue
    n = len(inst.all_logs(r.run_id))
    stats = inst.get_run_stats(r.run_id)
    took = (stats.end_time or 0) - (stats.start_time or 0)
    out["runs"].append({"job": r.job_name, "status": str(r.status.value), "events": n,
                        "block": r.tags.get("memflow/block"), "seconds": round(took, 2),
                        "partitions": r.tags.get("dagster/asset_partition_range_start", "")
                        + ".." + r.tags.get("dagster/asset_partition_range_end", "")})
    out["events"] += n
print("COUNTS " + json.dumps(out))
"""


def dagster_counts(data: Path, after: float) -> dict[str, Any]:
    """The runs made since `after` (epoch s), their events, and the instance's run count."""
    env = {**os.environ, "DAGSTER_HOME": str((data / "dagster").resolve()), "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", _DAGSTER_COUNTS, str(after)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    m = re.search(r"^COUNTS (.*)$", done.stdout, re.MULTILINE)
    if not m:
        return {"error": (done.stderr or done.stdout)[-1000:]}
    return json.loads(m.group(1))


_BLOCK_STARTED = re.compile(r"^run \w+ .*?block (\d+)\b.*: started$", re.MULTILINE)
_STEP = re.compile(r"^run (\w+) .*?block (\d+) .*?: (\w+) done at ([\d.]+) s$", re.MULTILINE)


def step_times(output: str) -> list[dict[str, Any]]:
    """Each run's steps with the second (from the run's start) each was done at, from the
    progress lines `memflow run` prints (`pipelines.progress`), in the order they ran."""
    runs: dict[str, dict[str, Any]] = {}
    for run_id, block, asset, at in _STEP.findall(output):
        runs.setdefault(run_id, {"run": run_id, "block": int(block), "done_at_s": {}})
        runs[run_id]["done_at_s"][asset] = float(at)
    return list(runs.values())


def one_size(
    work: Path, n: int, days: int, turns: int, result: dict[str, Any], save
) -> dict[str, Any]:
    size: dict[str, Any] = result["sizes"].setdefault(str(n), {})
    size.update(tenants=n, days=days, turns_per_day=turns, turns=n * days * turns)
    landing, data = work / f"landing-{n}", work / f"data-{n}"
    shutil.rmtree(landing, ignore_errors=True)
    shutil.rmtree(data, ignore_errors=True)
    t = time.perf_counter()
    names = [tenant_name(i) for i in range(n)]
    for name in names:
        for d in range(days):
            write_day(landing, name, d, turns)
    print(f"[{n}] landing zone written ({n * days} files) in {time.perf_counter() - t:.1f} s",
          flush=True)  # fmt: skip

    def step(label: str, got: dict[str, Any], since: float) -> None:
        got["steps_by_run"] = step_times(got.pop("output", ""))
        got["dagster"] = dagster_counts(data, since)
        got["cpu_s_per_tenant"] = per_tenant(got["cpu_s"], n)
        got["wall_s_per_tenant"] = per_tenant(got["wall_s"], n)
        size[label] = got
        save()
        d = got["dagster"]
        print(f"[{n}] {label}: wall {got['wall_s']:.1f} s, CPU {got['cpu_s']:.1f} s "
              f"({got['cpu_s_per_tenant'] * 1000:.1f} ms CPU/tenant), peak tree RSS "
              f"{got['peak_tree_rss_mib']:.0f} MiB, runs {len(d.get('runs', []))}, events "
              f"{d.get('events')}, load {got['load_avg']}", flush=True)  # fmt: skip
        if got.get("peak_tree_rss_mib_by_block"):
            print(f"[{n}] {label}: peak tree RSS MiB by block "
                  f"{got['peak_tree_rss_mib_by_block']}", flush=True)  # fmt: skip

    # 1. first ingest
    since = time.time() - 1
    got = memflow_run(landing, data, work, work / f"first-{n}.log")
    got["disk_bytes"] = disk(data)
    got["disk_bytes_per_tenant"] = round(got["disk_bytes"]["total"] / n)
    step("first_ingest", got, since)
    print(f"[{n}] disk: {got['disk_bytes_per_tenant'] / 1024:.1f} KiB a tenant "
          f"({ {k: round(v / 2**20, 1) for k, v in got['disk_bytes'].items()} } MiB)",
          flush=True)  # fmt: skip

    # 2. one new file for one tenant among all of them
    target = names[n // 2]
    write_day(landing, target, days, turns)
    since = time.time() - 1
    got = memflow_run(landing, data, work, work / f"newfile-{n}.log")
    got["tenant"] = target
    step("new_file_run", got, since)
    write_day(landing, target, days + 1, turns)
    since = time.time() - 1
    got = memflow_run(landing, data, work, work / f"newfile-tenant-{n}.log", target)
    got["tenant"] = target
    step("new_file_run_tenant", got, since)

    # 3. status
    got = memflow(["status", "--data", str(data)], landing, data, work, work / f"status-{n}.log")
    got.pop("output", None)
    size["status"] = got
    save()
    print(f"[{n}] status: wall {got['wall_s']:.1f} s, CPU {got['cpu_s']:.1f} s", flush=True)
    return size


def ratios(result: dict[str, Any]) -> dict[str, Any]:
    sizes = sorted((int(k), v) for k, v in result["sizes"].items() if "status" in v)
    if len(sizes) < 2:
        return {}
    (lo, a), (hi, b) = sizes[0], sizes[-1]

    def r(x: float, y: float) -> float | None:
        return round(x / y, 3) if y else None

    out = {
        "from": lo,
        "to": hi,
        "first_ingest_cpu_per_tenant": r(
            b["first_ingest"]["cpu_s_per_tenant"], a["first_ingest"]["cpu_s_per_tenant"]
        ),
        "first_ingest_wall_per_tenant": r(
            b["first_ingest"]["wall_s_per_tenant"], a["first_ingest"]["wall_s_per_tenant"]
        ),
        "new_file_run_cpu": r(b["new_file_run"]["cpu_s"], a["new_file_run"]["cpu_s"]),
        "new_file_run_wall": r(b["new_file_run"]["wall_s"], a["new_file_run"]["wall_s"]),
        "new_file_run_tenant_cpu": r(
            b["new_file_run_tenant"]["cpu_s"], a["new_file_run_tenant"]["cpu_s"]
        ),
        "status_wall_s": b["status"]["wall_s"],
    }
    out["goals_met"] = {
        "first_ingest_growth_le_1.2": (out["first_ingest_cpu_per_tenant"] or 99)
        <= GOAL_FIRST_GROWTH,
        "new_file_le_1.2": (out["new_file_run_cpu"] or 99) <= GOAL_NEW_FILE,
        "status_le_5s": all(v["status"]["wall_s"] <= GOAL_STATUS_S for _, v in sizes),
    }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tenants", default="100,1000,10000", help="sizes, comma-separated")
    parser.add_argument("--days", type=int, default=2)
    parser.add_argument("--turns", type=int, default=10, help="turns a day")
    parser.add_argument("--work", help="work directory (default: a new temp directory)")
    parser.add_argument("--keep", action="store_true", help="keep the data directories")
    parser.add_argument("--out", help=f"results (default {RESULTS.name}, or "
                        "scale-production.json with --stack production)")  # fmt: skip
    parser.add_argument("--stack", choices=("embedded", "production"), default="embedded")
    from bench import bench_scale_production as production

    production.add_arguments(parser)
    args = parser.parse_args(argv)
    if args.stack == "production":
        args.out = args.out or str(production.RESULTS)
        return production.run(args, sys.argv[1:] if argv is None else argv)
    args.out = args.out or str(RESULTS)
    sizes = [int(x) for x in args.tenants.split(",") if x]
    out = Path(args.out)

    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="memflow-bench-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"sizes": {}}
    if out.exists():  # keep sizes measured by an earlier run that this one does not redo
        with contextlib.suppress(ValueError, AttributeError):
            result["sizes"] = {
                k: v for k, v in json.loads(out.read_text()).get("sizes", {}).items()
                if int(k) not in sizes
            }  # fmt: skip
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    result.update(
        when=datetime.now(UTC).isoformat(timespec="seconds"),
        command="python bench/bench_scale.py "
        + " ".join(argv if argv is not None else sys.argv[1:]),
        machine={
            "cpus": os.cpu_count(),
            "memory_gib": round(mem / 2**30, 1),
            "python": platform.python_version(),
            "nice": os.nice(0),
            "load_avg_at_start": [round(x, 2) for x in os.getloadavg()],
        },
    )

    def save() -> None:
        result["machine"]["load_avg_now"] = [round(x, 2) for x in os.getloadavg()]
        result["ratios"] = ratios(result)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=2, default=str) + "\n")

    try:
        for n in sizes:
            one_size(work, n, args.days, args.turns, result, save)
            if not args.keep:
                shutil.rmtree(work / f"data-{n}", ignore_errors=True)
                shutil.rmtree(work / f"landing-{n}", ignore_errors=True)
    finally:
        save()
        if not args.keep and not args.work:
            shutil.rmtree(work, ignore_errors=True)
    print("size | first ingest CPU ms/tenant (wall) | one new file: run CPU s (wall) | "
          "--tenant CPU s | status wall s")  # fmt: skip
    for k, v in sorted(result["sizes"].items(), key=lambda kv: int(kv[0])):
        if "status" not in v:
            continue
        f, nf, nt, st = v["first_ingest"], v["new_file_run"], v["new_file_run_tenant"], v["status"]
        print(f"{k} | {f['cpu_s_per_tenant'] * 1000:.1f} ({f['wall_s_per_tenant'] * 1000:.1f})"
              f" | {nf['cpu_s']:.1f} ({nf['wall_s']:.1f}) | {nt['cpu_s']:.1f}"
              f" | {st['wall_s']:.1f}")  # fmt: skip
    if result.get("ratios"):
        print("ratios:", json.dumps(result["ratios"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
