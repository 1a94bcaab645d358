"""Freshness: seconds from `POST /v1/triples` until the fact is recallable, with memflow up.

    python bench/bench_freshness.py                          # warm, queue and off, side by side
    python bench/bench_freshness.py --modes warm --facts 20
    python bench/bench_freshness.py --embedder st            # MiniLM: entities embedded too

Each mode is the real system in a temp state home: `memflow up --ingest MODE` (the recall API,
`dagster-daemon`, `dagster-webserver`, all on `<home>/data`), exactly as a user starts it:

- `warm` (the default of memflow up): the write's tenant is ingested at once by the API's warm
  worker (pipelines/trigger.py), the code location loaded once;
- `queue`: the write submits its tenant's run to the daemon's run queue (a run worker process
  per run, as every run the daemon launches);
- `off`: nothing is asked; the landing sensor finds the file (what memflow did before).

The bench posts one fact for a new tenant (`cold`: the tenant's first run), then `--facts`
facts one after the other for the same tenant, each polled with `POST /v1/recall` every 0.25 s
until its fact id comes back (404 until the tenant's sinks ran once), giving up after
`--timeout` s. It reports per mode the seconds of each fact, p50 and p95 of the warm ones, how
far the write's `expected_by` was from the truth, the runs (job, source, status), the load
average, and the CPU seconds the whole system (memflow up's process tree, runs it reaped
included) spent from each write until its fact came back: on a shared, loaded machine the wall
seconds say how busy the host was, the CPU seconds what one fact costs. It writes
`bench/results/freshness.json`. Exit status 1 when a fact never became
recallable. Modes run one after the other in the order given; on a shared machine compare them
within one run only.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "freshness.json"
TENANT = "fresh/bench"
TARGET_P50_S, TARGET_P95_S = 10.0, 30.0
SUMMARY = ("up_ready_s", "p50_s", "p95_s", "cpu_p50_s", "cpu_p95_s", "expected_by_median_late_s")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def environment(home: Path, embedder: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMFLOW_", "DAGSTER_"))}
    env.update(
        MEMFLOW_HOME=str(home),
        MEMFLOW_EXTRACTOR="none",
        MEMFLOW_EMBEDDER="sentence-transformers" if embedder == "st" else "none",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
        PYTHONPATH=str(ROOT),
    )
    return env


def memflow(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pipelines.cli", *args],
        env=env, cwd=cwd, capture_output=True, text=True, timeout=600, check=True,
    )  # fmt: skip


def percentile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))], 2)


def tree_cpu_s(pid: int) -> float:
    """CPU seconds of a process and every descendant, those it already reaped included."""
    import psutil

    total = 0.0
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return total
    for proc in procs:
        try:
            t = proc.cpu_times()
        except psutil.Error:
            continue
        total += t.user + t.system + t.children_user + t.children_system
    return total


def post_and_wait(
    client: httpx.Client, subject: str, obj: str, timeout: float, pid: int
) -> dict[str, Any]:
    """One fact: seconds until recallable (None if never), the system's CPU seconds meanwhile,
    and what the write answered."""
    cpu0 = tree_cpu_s(pid)
    t0 = time.monotonic()
    posted = datetime.now(UTC)
    try:
        r = client.post(
            "/v1/triples",
            json={
                "tenant": TENANT,
                "triples": [{"subject": subject, "predicate": "USES", "object": obj}],
                "client": "bench",
            },
        )
        r.raise_for_status()
    except httpx.HTTPError as exc:
        return {"seconds": None, "error": f"the write failed: {type(exc).__name__}"}
    body = r.json()
    fact = body["triples"][0]["fact_id"]
    ingest = body.get("ingest") or {}
    seconds = None
    while time.monotonic() - t0 < timeout:
        try:
            answer = client.post(
                "/v1/recall", json={"tenant": TENANT, "query": f"what does {subject} use"}
            )
        except httpx.HTTPError:
            time.sleep(0.25)
            continue
        if answer.status_code == 200 and fact in {f["fact_id"] for f in answer.json()["facts"]}:
            seconds = round(time.monotonic() - t0, 2)
            break
        if answer.status_code not in (200, 404):
            answer.raise_for_status()
        time.sleep(0.25)
    expected = ingest.get("expected_by")
    error = None
    if seconds is not None and expected:
        promised = (datetime.fromisoformat(expected) - posted).total_seconds()
        error = round(seconds - promised, 2)
    return {"seconds": seconds, "cpu_s": round(tree_cpu_s(pid) - cpu0, 2),
            "requested": ingest.get("requested"), "reason": ingest.get("reason"),
            "late_by_s": error, "load": os.getloadavg()[0]}  # fmt: skip


def runs_of(home: Path) -> list[dict[str, Any]]:
    from dagster import DagsterInstance

    os.environ["DAGSTER_HOME"] = str(home / "data" / "dagster")
    with DagsterInstance.get() as instance:
        out = []
        for record in instance.get_run_records():
            run = record.dagster_run
            took = None
            if record.end_time and record.create_timestamp:
                took = round(record.end_time - record.create_timestamp.timestamp(), 1)
            out.append({"job": run.job_name, "source": run.tags.get("memflow/source"),
                        "status": run.status.value, "seconds": took})  # fmt: skip
    return out


def measure(mode: str, args: argparse.Namespace) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix=f"memflow-bench-fresh-{mode}-"))
    home = root / "home"
    env = environment(home, args.embedder)
    key = memflow("keys", "add", "--org", TENANT.split("/")[0], env=env, cwd=root).stdout.strip()
    port, ui_port = _free_port(), _free_port()
    log = root / "up.log"
    started = time.monotonic()
    with open(log, "wb") as fh:
        up = subprocess.Popen(
            [sys.executable, "-m", "pipelines.cli", "up", "--port", str(port), "--ui-port",
             str(ui_port), "--ingest", mode],
            env=env, cwd=root, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    result: dict[str, Any] = {"mode": mode, "home": str(root)}
    try:
        while "ready;" not in log.read_text():
            if up.poll() is not None or time.monotonic() - started > args.start_timeout:
                raise RuntimeError(f"memflow up did not come up:\n{log.read_text()[-3000:]}")
            time.sleep(1.0)
        result["up_ready_s"] = round(time.monotonic() - started, 1)
        print(f"[{mode}] up in {result['up_ready_s']} s ({root})", flush=True)
        with httpx.Client(
            base_url=f"http://127.0.0.1:{port}",
            headers={"Authorization": f"Bearer {key}"},
            timeout=30,
        ) as client:
            result["load_before"] = os.getloadavg()
            result["cold"] = post_and_wait(
                client, "ledger-service", "PostgreSQL", args.timeout, up.pid
            )
            print(f"[{mode}] cold: {result['cold']['seconds']} s", flush=True)
            warm = []
            for i in range(args.facts):
                one = post_and_wait(client, f"worker-{i}", f"queue-{i}", args.timeout, up.pid)
                warm.append(one)
                print(
                    f"[{mode}] fact {i + 1}: {one['seconds']} s, CPU {one['cpu_s']} s, "
                    f"load {one['load']:.1f}",
                    flush=True,
                )
                if one["seconds"] is None:
                    break
                time.sleep(args.pause)
            result["load_after"] = os.getloadavg()
        seconds = [w["seconds"] for w in warm if w["seconds"] is not None]
        result["warm"] = warm
        result["p50_s"] = percentile(seconds, 0.5)
        result["p95_s"] = percentile(seconds, 0.95)
        cpu = [w["cpu_s"] for w in warm if w["seconds"] is not None]
        result["cpu_p50_s"] = percentile(cpu, 0.5)
        result["cpu_p95_s"] = percentile(cpu, 0.95)
        late = [w["late_by_s"] for w in warm if w["late_by_s"] is not None]
        result["expected_by_median_late_s"] = round(statistics.median(late), 2) if late else None
        result["all_recallable"] = (
            result["cold"]["seconds"] is not None and len(seconds) == len(warm) == args.facts
        )
    finally:
        if up.poll() is None:
            up.send_signal(signal.SIGTERM)
            try:
                up.wait(300)
            except subprocess.TimeoutExpired:
                os.killpg(up.pid, signal.SIGKILL)
        result["up_exit"] = up.returncode
    result["runs"] = runs_of(home)
    return result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--modes", default="warm,queue,off")
    parser.add_argument("--facts", type=int, default=10, help="facts after the cold one")
    parser.add_argument("--embedder", choices=("none", "st"), default="none")
    parser.add_argument("--timeout", type=float, default=300.0, help="per fact")
    parser.add_argument("--pause", type=float, default=1.0, help="seconds between facts")
    parser.add_argument("--start-timeout", type=float, default=900.0)
    args = parser.parse_args(argv)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    report: dict[str, Any] = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": "python bench/bench_freshness.py " + " ".join(argv or sys.argv[1:]),
        "cpus": os.cpu_count(),
        "embedder": args.embedder,
        "targets": {"p50_s": TARGET_P50_S, "p95_s": TARGET_P95_S},
        "modes": {},
    }
    for mode in modes:
        report["modes"][mode] = measure(mode, args)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    summary = {
        m: {k: r.get(k) for k in SUMMARY} | {"cold_s": r.get("cold", {}).get("seconds")}
        for m, r in report["modes"].items()
    }
    print(json.dumps(summary, indent=2))
    return 0 if all(r.get("all_recallable") for r in report["modes"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
