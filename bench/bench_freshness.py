"""Freshness: seconds from `POST /v1/triples` until the fact is recallable, with the sensors on.

    python bench/bench_freshness.py                       # embedder none (names-only recall)
    python bench/bench_freshness.py --embedder st         # MiniLM: entities are embedded too

Everything runs as in production, in a temp directory: `dagster-daemon run` on `workspace.yaml`
(its own DAGSTER_HOME; the `landing_sensor` and the automation sensor `tenant_automation` run
the ingest and per-tenant jobs, at the intervals `pipelines.definitions` gives them), the API as
a subprocess (`recall.server.serve` on loopback, embedded stores: SQLite graph + the embedded
vector store). The bench posts one triple,
then polls `POST /v1/recall` every second until the fact's id comes back (404 until the
tenant's sinks have run once), giving up after `--timeout` seconds (180).

Two measurements: `cold`, a new tenant right after the daemon started (the first runs load the
code location), and `warm`, a second fact for the same tenant. Each reports the seconds and a
timeline of the Dagster runs (job, status, start and end relative to the POST).
Results go to `bench/results/freshness.json`; exit status 1 when a fact never became recallable
or the warm one took longer than the 60 s target.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
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
TARGET_S = 60.0
BIN = Path(sys.executable).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def environment(root: Path, embedder: str) -> dict[str, str]:
    from resources.settings import DEFAULTS

    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMFLOW_")}
    env.update(DEFAULTS)  # every setting explicit: the repository's .env must not leak in
    env.update(
        {
            "DAGSTER_HOME": str(root / "dagster"),
            "MEMFLOW_DATA_DIR": str(root / "data"),
            "MEMFLOW_LANDING_DIR": str(root / "landing"),
            "MEMFLOW_API_KEYS_FILE": str(root / "api-keys.json"),
            "MEMFLOW_EXTRACTOR": "none",
            "MEMFLOW_EMBEDDER": "sentence-transformers" if embedder == "st" else "none",
            "MEMFLOW_GRAPH_BACKEND": "sqlite",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false",
        }
    )
    return env


def start(cmd: Sequence[str], env: dict[str, str], log: Path, cwd: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as fh:
        return subprocess.Popen(
            list(cmd), env=env, cwd=cwd, stdout=fh, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip


def workspace(root: Path) -> Path:
    """The repository's code location, loaded from a directory without a `.env`: Dagster's CLI
    lets a `.env` in its working directory override the real environment, and the repository's
    `.env` points at `.memflow` and `landing-sample`."""
    path = root / "workspace.yaml"
    path.write_text(
        "load_from:\n  - python_module:\n      module_name: pipelines.definitions\n"
        f"      working_directory: {ROOT}\n"
    )
    return path


def wait_runs_done(env: dict[str, str], timeout: float) -> None:
    """Let runs in flight finish, so stopping the daemon does not fail them."""
    os.environ["DAGSTER_HOME"] = env["DAGSTER_HOME"]
    from dagster import DagsterInstance, DagsterRunStatus, RunsFilter

    busy = [DagsterRunStatus.QUEUED, DagsterRunStatus.STARTING, DagsterRunStatus.STARTED]
    deadline = time.monotonic() + timeout
    with DagsterInstance.get() as instance:
        while time.monotonic() < deadline:
            if not instance.get_runs(RunsFilter(statuses=busy)):
                return
            time.sleep(2.0)


def stop(proc: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGINT)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def wait_healthy(url: str, proc: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the API exited with {proc.returncode}")
        try:
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise RuntimeError("the API did not become healthy")


def wait_daemon(env: dict[str, str], timeout: float) -> float:
    """Seconds until the daemon's sensor loop has reported a heartbeat."""
    started = time.monotonic()
    os.environ["DAGSTER_HOME"] = env["DAGSTER_HOME"]
    from dagster import DagsterInstance

    with DagsterInstance.get() as instance:
        while time.monotonic() - started < timeout:
            beats = instance.get_daemon_heartbeats()
            if "SENSOR" in beats and "ASSET" in beats:
                return time.monotonic() - started
            time.sleep(1.0)
    raise RuntimeError("the Dagster daemon did not report a heartbeat")


def runs_since(env: dict[str, str], since: float) -> list[dict[str, Any]]:
    os.environ["DAGSTER_HOME"] = env["DAGSTER_HOME"]
    from dagster import DagsterInstance, RunsFilter

    out = []
    with DagsterInstance.get() as instance:
        for record in instance.get_run_records(
            RunsFilter(created_after=datetime.fromtimestamp(since, UTC))
        ):
            run = record.dagster_run
            out.append(
                {
                    "job": run.job_name,
                    "status": run.status.value,
                    "partition": run.tags.get("dagster/partition"),
                    "created_s": round(record.create_timestamp.timestamp() - since, 1),
                    "start_s": round(record.start_time - since, 1) if record.start_time else None,
                    "end_s": round(record.end_time - since, 1) if record.end_time else None,
                }
            )
    return sorted(out, key=lambda r: r["created_s"])


def post_and_wait(
    client: httpx.Client, subject: str, obj: str, timeout: float
) -> tuple[float | None, float, str]:
    """(seconds until recallable or None, POST wall time (epoch), fact id)."""
    posted = time.time()
    t0 = time.monotonic()
    r = client.post(
        "/v1/triples",
        json={
            "tenant": TENANT,
            "triples": [{"subject": subject, "predicate": "USES", "object": obj}],
            "client": "bench",
        },
    )
    r.raise_for_status()
    fact = r.json()["triples"][0]["fact_id"]
    while time.monotonic() - t0 < timeout:
        answer = client.post(
            "/v1/recall", json={"tenant": TENANT, "query": f"what does {subject} use"}
        )
        if answer.status_code == 200 and fact in {f["fact_id"] for f in answer.json()["facts"]}:
            return round(time.monotonic() - t0, 1), posted, fact
        if answer.status_code not in (200, 404):
            answer.raise_for_status()
        time.sleep(1.0)
    return None, posted, fact


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--embedder", choices=("none", "st"), default="none")
    parser.add_argument("--timeout", type=float, default=180.0)
    parser.add_argument("--keep", action="store_true", help="keep the temp directory")
    args = parser.parse_args(argv)

    from recall.auth import add_key

    root = Path(tempfile.mkdtemp(prefix="memflow-bench-fresh-"))
    (root / "landing").mkdir()
    (root / "dagster").mkdir()
    (root / "dagster" / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    env = environment(root, args.embedder)
    key = add_key(root / "api-keys.json", *TENANT.split("/", 1))
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    result: dict[str, Any] = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "embedder": args.embedder,
        "target_s": TARGET_S,
        "timeout_s": args.timeout,
        "sensor_intervals_s": sensor_intervals(),
    }
    daemon = start(
        [str(BIN / "dagster-daemon"), "run", "-w", str(workspace(root))],
        env,
        root / "daemon.log",
        root,
    )
    api = start(
        [sys.executable, "-c", f"from recall.server import serve; serve(port={port})"],
        env,
        root / "api.log",
        root,
    )
    try:
        wait_healthy(url, api, 300)
        result["daemon_ready_s"] = round(wait_daemon(env, 300), 1)
        print(f"daemon and API up ({root})")
        with httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=30
        ) as c:
            for label, subject, obj in (
                ("cold", "ledger-service", "PostgreSQL"),
                ("warm", "billing-worker", "RabbitMQ"),
            ):
                seconds, posted, fact = post_and_wait(c, subject, obj, args.timeout)
                result[label] = {
                    "seconds": seconds,
                    "fact_id": fact,
                    "runs": runs_since(env, posted),
                }
                print(f"{label}: {seconds if seconds is not None else 'not recallable'} s")
                if seconds is None:
                    result[label]["daemon_log_tail"] = _tail(root / "daemon.log")
                    break
        wait_runs_done(env, 120)
    finally:
        stop(api)
        stop(daemon)
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    warm = result.get("warm", {}).get("seconds")
    result["target_met"] = warm is not None and warm <= TARGET_S
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(
        json.dumps({k: result[k] for k in ("cold", "warm", "target_met") if k in result}, indent=2)
    )
    return 0 if result["target_met"] else 1


def sensor_intervals() -> dict[str, int | None]:
    from pipelines.definitions import defs

    return {s.name: s.minimum_interval_seconds for s in defs.sensors or []}


def _tail(path: Path, size: int = 3000) -> str:
    try:
        return path.read_text(errors="replace")[-size:]
    except OSError:
        return ""


if __name__ == "__main__":
    sys.exit(main())
