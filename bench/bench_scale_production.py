"""Tenants at scale on the production stack (issue 19): bench/bench_scale.py's shape through the
daemon, the landing sensor, PostgreSQL, JanusGraph and the Milvus server.

    python bench/bench_scale.py --stack production --tenants 100,1000
    nice -n 10 python bench/bench_scale_production.py --tenants 100 --keep

The stack is the one the tests start, on the ports MEMFLOW_POSTGRES_PORT,
MEMFLOW_JANUSGRAPH_PORT and MEMFLOW_MILVUS_PORT: `dagster-daemon run` with deploy/dagster.yaml
on a PostgreSQL database of its own (tests/support/daemon.py: the queued run coordinator, one
run per block of 200 tenants, run retries and monitoring, LocalRunLauncher), JanusGraph on
BerkeleyDB JE (scripts/gremlin-server.sh janusgraph) and the Milvus standalone server
(tests/support/milvus_server.py). The bundled ONNX embedder, extractor `none`, every other
setting its declared default. JanusGraph and Milvus get an empty data directory for each size
(their disk is that size's), PostgreSQL a new database. Tenants and histories as in
bench_scale.py (`org<i // 50>/repo<i>`, 2 days x 10 turns by default).

For each size:

1. **first ingest as the daemon does it**: the daemon is started on an empty zone, and once its
   landing sensor has ticked the whole landing zone is moved into place in one rename; the
   sensor adds the tenant partitions and asks for ingest runs per block of 200 tenants. Done
   when every run is over and every tenant's facts are in JanusGraph and its vectors in Milvus
   (read back once at the end, with a real `memflow recall` for two tenants); its time is the
   end of the last run. Meanwhile: CPU seconds of every process (the daemon, its code server,
   the run workers, PostgreSQL, JanusGraph's JVM, Milvus; from /proc, each process's own time
   and the time of the children it reaped, so a run worker that exited still counts), peak RSS
   of every process (sampled every second), Dagster runs and events, disk per tenant
   (PostgreSQL's database, JanusGraph's and Milvus's data directories, the tables).
2. **one new file for one tenant among all**: a new day for the tenant in the middle of the
   zone; the seconds until its new facts are in JanusGraph and its new vectors in Milvus, and
   the same accounting of every process, run and event until the last run it caused ended.
3. **`memflow status`** against the stack (the CLI with the same settings): wall and CPU, and
   the servers' CPU meanwhile.

Then the cost of Dagster's partition listing on PostgreSQL (`--listing`, on by default):
`add_asset_metadata(partition_key=...)` checks its key against the run's range, which asks the
instance for the range's ends (`has_dynamic_partition`, twice) and for every tenant partition
(`get_dynamic_partitions`): timed on a scratch database holding 100, 1,000 and 10,000 tenant
partitions (this process's CPU and PostgreSQL's), and multiplied by the calls a tenant's first
ingest makes (its partitioned materializations, counted from the event log).

Results go to bench/results/scale-production.json after each step (a partial run keeps what it
measured), with the machine (CPUs, memory, load average at each step). The machine is shared:
CPU seconds are the figures of record; wall times move with the load.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.bench_ingest_scale import write_day  # noqa: E402
from bench.scale_shapes import disk, per_tenant, tenant_name  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "scale-production.json"
BIN = Path(sys.executable).parent
GOAL_FIRST_GROWTH = 1.2  # first ingest, CPU per tenant, largest size / smallest
GOAL_NEW_FILE = 1.2
GOAL_STATUS_S = 5.0
LISTING_SIZES = (100, 1000, 10_000)
EVENT_LOGS = ("dagster", "memflow")
# Where each event log's sizes go in the results: memflow's is what deploy/dagster.yaml runs.
BUCKETS = {"memflow": "sizes", "dagster": "sizes_with_dagsters_event_log"}
SAMPLE_S = 1.0
POLL_S = 5.0

# -- processes ------------------------------------------------------------------------------

DAEMON, CODE_SERVER, WORKERS, OTHER = (
    "dagster-daemon",
    "code server",
    "run workers",
    "daemon (other)",
)
POSTGRES, JANUSGRAPH, MILVUS = "postgresql", "janusgraph", "milvus"
CATEGORIES = (DAEMON, CODE_SERVER, WORKERS, OTHER, POSTGRES, JANUSGRAPH, MILVUS)
# Whose CPU the children a process reaped used: a run worker that exited is in its code
# server's children times, a code server that exited in the daemon's.
REAPED_INTO = {DAEMON: CODE_SERVER, CODE_SERVER: WORKERS, WORKERS: WORKERS, OTHER: OTHER}


def _category(parent: str, cmdline: list[str]) -> str:
    """A process of the daemon's session by its parent's category and its command: the code
    servers are the daemon's `dagster api grpc` children, a run worker is a code server's
    multiprocessing child (and what it starts: the compute-log tails)."""
    text = " ".join(cmdline)
    if parent == DAEMON:
        return CODE_SERVER if "grpc" in text or "code-server" in text else OTHER
    if parent == CODE_SERVER:
        return WORKERS if "spawn_main" in text or "execute_run" in text else CODE_SERVER
    return parent


@dataclass(frozen=True)
class ProcRow:
    pid: int
    category: str
    cmd: str
    own_s: float  # user + system of the process
    reaped_s: float  # user + system of the children it waited for
    rss: int
    started: float


def _row(p: Any, category: str) -> ProcRow | None:
    import psutil

    try:
        with p.oneshot():
            t = p.cpu_times()
            return ProcRow(
                p.pid,
                category,
                " ".join(p.cmdline()[:4])[-140:],
                t.user + t.system,
                t.children_user + t.children_system,
                p.memory_info().rss,
                p.create_time(),
            )
    except psutil.Error:
        return None


class Processes:
    """The stack's processes: the daemon's session (daemon, code servers, run workers) and the
    three servers, each with every process under it."""

    def __init__(self, daemon_pid: Callable[[], int | None], servers: dict[str, int]) -> None:
        self.daemon_pid, self.servers = daemon_pid, servers

    def snapshot(self) -> dict[tuple[int, float], ProcRow]:
        import psutil

        rows: list[ProcRow | None] = []
        pid = self.daemon_pid()
        if pid is not None:
            with contextlib.suppress(psutil.Error):
                todo = [(psutil.Process(pid), DAEMON)]
                while todo:
                    proc, category = todo.pop()
                    rows.append(_row(proc, category))
                    with contextlib.suppress(psutil.Error):
                        for child in proc.children():
                            with contextlib.suppress(psutil.Error):
                                todo.append((child, _category(category, child.cmdline())))
        for category, spid in self.servers.items():
            with contextlib.suppress(psutil.Error):
                root = psutil.Process(spid)
                rows.append(_row(root, category))
                rows.extend(_row(c, category) for c in root.children(recursive=True))
        return {(r.pid, r.started): r for r in rows if r is not None}


def cpu_by_category(
    before: dict[tuple[int, float], ProcRow], after: dict[tuple[int, float], ProcRow]
) -> dict[str, float]:
    """CPU seconds each category used between two snapshots: own time of the processes alive
    at the end, plus the reaped children's time moved to the children's category, minus the
    same at the start (a process that exited in between is in its parent's reaped time)."""
    out = dict.fromkeys(CATEGORIES, 0.0)
    for sign, snap in ((1, after), (-1, before)):
        for r in snap.values():
            out[r.category] += sign * r.own_s
            out[REAPED_INTO.get(r.category, r.category)] += sign * r.reaped_s
    return {k: round(v, 2) for k, v in out.items()}


class Sampler(threading.Thread):
    """Peak RSS of every process and of every category's sum, every `SAMPLE_S` seconds."""

    def __init__(self, procs: Processes) -> None:
        super().__init__(daemon=True)
        self.procs = procs
        self.halt = threading.Event()
        self.peaks: dict[tuple[int, float], ProcRow] = {}
        self.category_peaks: dict[str, int] = dict.fromkeys(CATEGORIES, 0)
        self.workers_seen: set[tuple[int, float]] = set()
        self.last: dict[tuple[int, float], ProcRow] = {}  # each process as last sampled
        self.samples = 0

    def run(self) -> None:
        while not self.halt.is_set():
            snap = self.procs.snapshot()
            self.samples += 1
            sums: Counter[str] = Counter()
            self.last.update(snap)
            for key, r in snap.items():
                sums[r.category] += r.rss
                if r.category == WORKERS:
                    self.workers_seen.add(key)
                if key not in self.peaks or r.rss > self.peaks[key].rss:
                    self.peaks[key] = r
            for c, v in sums.items():
                self.category_peaks[c] = max(self.category_peaks[c], v)
            self.halt.wait(SAMPLE_S)

    def report(self) -> dict[str, Any]:
        by_cat: dict[str, list[ProcRow]] = {}
        for r in self.peaks.values():
            by_cat.setdefault(r.category, []).append(r)
        out: dict[str, Any] = {"samples": self.samples, "run_workers_seen": len(self.workers_seen)}
        for c in CATEGORIES:
            rows = sorted(by_cat.get(c, []), key=lambda r: -r.rss)
            if not rows:
                continue
            out[c] = {
                "processes": len(rows),
                "peak_rss_mib_largest": round(rows[0].rss / 2**20, 1),
                "peak_rss_mib_sum": round(self.category_peaks[c] / 2**20, 1),
                "largest": rows[0].cmd,
            }
        return out


def own_by_category(
    before: dict[tuple[int, float], ProcRow], seen: dict[tuple[int, float], ProcRow]
) -> dict[str, float]:
    """Each category's own CPU from the processes as last seen (sampled every `SAMPLE_S`):
    a process is counted in its own category however it ended and whoever reaped it, less
    its last second if it exited between samples."""
    out = dict.fromkeys(CATEGORIES, 0.0)
    for key, r in seen.items():
        out[r.category] += r.own_s - (before[key].own_s if key in before else 0.0)
    return out


SESSION = (DAEMON, CODE_SERVER, WORKERS, OTHER)
SERVERS = (POSTGRES, JANUSGRAPH, MILVUS)


@contextlib.contextmanager
def accounted(procs: Processes) -> Iterator[dict[str, Any]]:
    """CPU by category, peak RSS by process and this process's own CPU over the block."""
    got: dict[str, Any] = {}
    sampler = Sampler(procs)
    before = procs.snapshot()
    me = resource.getrusage(resource.RUSAGE_SELF)
    sampler.start()
    try:
        yield got
    finally:
        sampler.halt.set()
        sampler.join(30)
        after = procs.snapshot()
        me_after = resource.getrusage(resource.RUSAGE_SELF)
        # Totals from the processes' own and reaped times (exact: every process of the tree
        # is reaped by one that lives on). The daemon's session is split by sampling instead:
        # a code server that exits after its run workers carries their time to the daemon.
        reaped = cpu_by_category(before, after)
        sampled = own_by_category(before, {**sampler.last, **after})
        cpu = {**{c: sampled[c] for c in SESSION}, **{c: reaped[c] for c in SERVERS}}
        got["cpu_s_by_process"] = {k: round(v, 2) for k, v in cpu.items()}
        got["cpu_s_by_process_reaped"] = reaped
        got["cpu_s"] = round(sum(reaped.values()), 2)
        got["cpu_s_dagster"] = round(sum(reaped[c] for c in SESSION), 2)
        got["cpu_s_dagster_sampled"] = round(sum(sampled[c] for c in SESSION), 2)
        got["cpu_s_servers"] = round(sum(reaped[c] for c in SERVERS), 2)
        got["bench_process_cpu_s"] = round(
            me_after.ru_utime + me_after.ru_stime - me.ru_utime - me.ru_stime, 2
        )
        got["peak_rss"] = sampler.report()


# -- the servers -----------------------------------------------------------------------------


def _script(args: list[str], env: dict[str, str], timeout: float) -> str:
    done = subprocess.run(
        args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"{' '.join(args)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
        )
    return done.stdout


class Stack:
    """JanusGraph and Milvus on the size's own data directories, PostgreSQL shared."""

    def __init__(self, work: Path, n: int) -> None:
        from tests.support.milvus_server import MilvusServer

        self.janus_data = work / f"janusgraph-{n}"
        self.milvus = MilvusServer.default(data_dir=work / f"milvus-{n}")
        self.janus_port = int(os.environ.get("MEMFLOW_JANUSGRAPH_PORT", "18303"))
        self.gremlin_url = f"ws://127.0.0.1:{self.janus_port}/gremlin"
        self.milvus_uri = self.milvus.uri

    def _janus_env(self) -> dict[str, str]:
        return {**os.environ, "MEMFLOW_JANUSGRAPH_DATA": str(self.janus_data)}

    def start(self) -> None:
        shutil.rmtree(self.janus_data, ignore_errors=True)
        self.janus_data.mkdir(parents=True)
        _script(
            ["bash", "scripts/gremlin-server.sh", "janusgraph", "start"], self._janus_env(), 900
        )
        self.milvus.start(fresh=True)

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            _script(
                ["bash", "scripts/gremlin-server.sh", "janusgraph", "stop"], self._janus_env(), 120
            )
        with contextlib.suppress(Exception):
            self.milvus.stop()

    def janus_pid(self) -> int:
        return int((ROOT / ".janusgraph" / f"server-{self.janus_port}.pid").read_text().strip())

    def milvus_pid(self) -> int:
        pid = self.milvus.pid()
        if pid is None:
            raise RuntimeError("the Milvus server is not running")
        return pid


def postgres_pid(url: str) -> int:
    import psycopg2

    conn = psycopg2.connect(f"{url}/postgres", connect_timeout=10)
    with contextlib.closing(conn), conn.cursor() as cur:
        cur.execute("SHOW data_directory")
        data = cur.fetchone()[0]
    return int(Path(data, "postmaster.pid").read_text().splitlines()[0])


def database_bytes(url: str, database: str) -> int:
    import psycopg2

    conn = psycopg2.connect(f"{url}/postgres", connect_timeout=10)
    with contextlib.closing(conn), conn.cursor() as cur:
        cur.execute("SELECT pg_database_size(%s)", (database,))
        return int(cur.fetchone()[0])


def du(path: Path) -> int:
    total = 0
    for p in [path] if path.is_file() else path.rglob("*"):
        with contextlib.suppress(OSError):
            if p.is_file() and not p.is_symlink():
                total += p.stat().st_blocks * 512
    return total


# -- what the stores hold --------------------------------------------------------------------


def graph_facts_by_ns(url: str) -> Counter[str]:
    """Facts JanusGraph holds per tenant repo (`ns`; the bench's repo names are unique)."""
    from gremlin_python.driver.driver_remote_connection import DriverRemoteConnection
    from gremlin_python.driver.serializer import GraphBinarySerializersV1
    from gremlin_python.process.anonymous_traversal import traversal

    conn = DriverRemoteConnection(
        url,
        "g",
        message_serializer=GraphBinarySerializersV1(),
        pool_size=1,
        max_content_length=256 * 1024 * 1024,
    )
    try:
        g = traversal().with_(conn)
        got = g.E().has_label("fact").has("row_hash").values("ns").group_count().next()
        return Counter({str(k): int(v) for k, v in got.items()})
    finally:
        conn.close()


def milvus_rows_by_ns(uri: str) -> dict[str, Counter[str]]:
    """Vectors the Milvus server holds per collection and tenant repo."""
    from pymilvus import MilvusClient

    client = MilvusClient(uri=uri, timeout=120)
    out: dict[str, Counter[str]] = {}
    try:
        for name in client.list_collections():
            if not name.startswith("mf_"):
                continue
            counts: Counter[str] = Counter()
            it = client.query_iterator(
                name,
                batch_size=16384,
                filter="",
                output_fields=["ns"],
                consistency_level="Strong",
            )
            try:
                while batch := it.next():
                    counts.update(row["ns"] for row in batch)
            finally:
                it.close()
            out[name] = counts
    finally:
        client.close()
    return out


def milvus_count(uri: str, org: str, repo: str) -> int:
    from pymilvus import MilvusClient

    from resources.vector.milvus import literal

    client = MilvusClient(uri=uri, timeout=60)
    try:
        total = 0
        for name in client.list_collections():
            if name.startswith("mf_"):
                rows = client.query(
                    name,
                    filter=f"tenant_id == {literal(org)} and ns == {literal(repo)}",
                    output_fields=["count(*)"],
                    consistency_level="Strong",
                )
                total += int(rows[0]["count(*)"]) if rows else 0
        return total
    finally:
        client.close()


def graph_fact_count(url: str, org: str, repo: str) -> int:
    from resources.graph.gremlin import GremlinGraphStore
    from schemas.scope import Scope

    store = GremlinGraphStore(url)
    try:
        return store.counts(Scope(org, repo))["facts"]
    finally:
        store.close()


# -- Dagster ---------------------------------------------------------------------------------


class Observer:
    """The bench's own view of the instance: Dagster's own PostgreSQL storage on the world's
    database whichever event log the stack runs, so its reads cost PostgreSQL the same in
    both (they are in PostgreSQL's CPU; `POLL_S` apart)."""

    def __init__(self, db_url: str) -> None:
        from dagster import DagsterInstance

        from tests.support.postgres import instance_yaml as dagster_yaml

        self.home = Path(tempfile.mkdtemp(prefix="memflow-observer-"))
        (self.home / "dagster.yaml").write_text(dagster_yaml(db_url))
        self.instance = DagsterInstance.from_config(str(self.home))

    def runs(self) -> list[dict[str, Any]]:
        return [
            {
                "run_id": r.dagster_run.run_id,
                "job": r.dagster_run.job_name,
                "status": r.dagster_run.status.value,
                "tags": dict(r.dagster_run.tags),
                "created": r.create_timestamp.timestamp(),
                "start": r.start_time,
                "end": r.end_time,
            }
            for r in self.instance.get_run_records()
        ]

    def close(self) -> None:
        self.instance.dispose()
        shutil.rmtree(self.home, ignore_errors=True)


def runs_since(world: Any, since: float) -> dict[str, Any]:
    """The runs created since `since` (epoch s), their events by type, and the totals."""
    from pipelines.batches import BLOCK_TAG, RANGE_END_TAG, RANGE_START_TAG, SOURCE_TAG

    instance = world.instance
    runs = []
    types: Counter[str] = Counter()
    for r in world.runs():
        if r["created"] < since:
            continue
        logs = instance.all_logs(r["run_id"])
        kinds = Counter(
            e.dagster_event.event_type_value if e.dagster_event else "log" for e in logs
        )
        types.update(kinds)
        tags = r["tags"]
        started: dict[str, float] = {}
        steps: dict[str, float] = {}
        for e in logs:  # each step's seconds, from its STEP_START to its STEP_SUCCESS
            kind = e.dagster_event.event_type_value if e.dagster_event else None
            if kind == "STEP_START" and e.step_key:
                started[e.step_key] = e.timestamp
            elif kind == "STEP_SUCCESS" and e.step_key in started:
                steps[e.step_key] = e.timestamp - started[e.step_key]
        runs.append(
            {
                "job": r["job"],
                "status": r["status"],
                "block": r["tags"].get(BLOCK_TAG),
                "source": r["tags"].get(SOURCE_TAG),
                "range": f"{tags.get(RANGE_START_TAG, '')}..{tags.get(RANGE_END_TAG, '')}",
                "queued_s": round((r["start"] or r["created"]) - r["created"], 1),
                "seconds": round(r["end"] - r["start"], 1) if r["end"] and r["start"] else None,
                "events": len(logs),
                "materializations": kinds.get("ASSET_MATERIALIZATION", 0),
                "step_seconds": {k: round(v, 1) for k, v in steps.items()},
            }
        )
    return {
        "runs": len(runs),
        "runs_by_job_status": dict(Counter(f"{r['job']}:{r['status']}" for r in runs)),
        "events": sum(r["events"] for r in runs),
        "events_by_type": dict(types.most_common()),
        "run_list": runs,
    }


def covered(world: Any, since: float) -> tuple[set[str], bool, list[dict[str, Any]]]:
    """Tenants in successful ingest runs created since `since`, whether a run is in flight,
    and the runs that failed."""
    from pipelines.batches import RANGE_END_TAG, RANGE_START_TAG
    from tests.support.daemon import in_flight

    runs = [r for r in world.runs() if r["created"] >= since]
    busy = any(map(in_flight, runs))
    failed = [r for r in runs if r["status"] == "FAILURE"]
    if busy:
        return set(), busy, failed
    ordered = world.instance.get_dynamic_partitions("tenants")
    position = {k: i for i, k in enumerate(ordered)}
    done: set[str] = set()
    for r in runs:
        if r["job"] != "ingest_job" or r["status"] != "SUCCESS":
            continue
        a, b = r["tags"].get(RANGE_START_TAG), r["tags"].get(RANGE_END_TAG)
        if a in position and b in position:
            done.update(ordered[position[a] : position[b] + 1])
    return done, busy, failed


def wait_sensor_ticked(world: Any, timeout: float) -> float:
    """Seconds until the daemon's log shows the landing sensor evaluated."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if world.daemon.poll() is not None:
            raise RuntimeError(f"the daemon exited\n{world.log_tail()}")
        text = "".join(p.read_text(errors="replace") for p in world.root.glob("daemon-*.log"))
        if re.search(r"sensor[^\n]*landing_sensor|landing_sensor[^\n]*(skip|tick)", text, re.I):
            return time.monotonic() - started
        time.sleep(1.0)
    raise RuntimeError(f"the landing sensor did not tick in {timeout:.0f} s\n{world.log_tail()}")


# -- one size --------------------------------------------------------------------------------


def one_size(
    work: Path,
    n: int,
    days: int,
    turns: int,
    pg_url: str,
    result: dict[str, Any],
    save,
    timeout_s: float,
    event_log: str,
    status_profile: str | None = None,
) -> dict[str, Any]:
    from resources.settings import DEFAULTS
    from tests.support.daemon import DaemonWorld

    size: dict[str, Any] = result[BUCKETS[event_log]].setdefault(str(n), {})
    size.update(
        tenants=n, days=days, turns_per_day=turns, turns=n * days * turns, event_log=event_log
    )
    stack = Stack(work, n)
    root = work / f"world-{n}"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    staged = work / f"landing-{n}"
    shutil.rmtree(staged, ignore_errors=True)
    t = time.perf_counter()
    names = [tenant_name(i) for i in range(n)]
    for name in names:
        for d in range(days):
            write_day(staged, name, d, turns)
    print(
        f"[{n}] landing zone written ({n * days} files) in {time.perf_counter() - t:.1f} s",
        flush=True,
    )

    t = time.perf_counter()
    stack.start()
    size["servers_started_s"] = round(time.perf_counter() - t, 1)
    settings = {
        "MEMFLOW_EMBEDDER": DEFAULTS["MEMFLOW_EMBEDDER"],
        "MEMFLOW_GRAPH_BACKEND": "gremlin",
        "MEMFLOW_GREMLIN_URL": stack.gremlin_url,
        "MEMFLOW_MILVUS_URI": stack.milvus_uri,
        # What the README asks of the production code server: a step's per-tenant
        # materializations written as one batch.
        "DAGSTER_EVENT_BATCH_SIZE": "500",
    }
    size["settings"] = settings
    plain = pg_url.replace("postgresql+psycopg2://", "postgresql://")
    try:
        with DaemonWorld.create(root, pg_url, **settings) as world:
            world.landing.rmdir()  # moved into place in one rename, once the sensor ticked
            if event_log == "dagster":  # Dagster's own PostgreSQL storage, for comparison
                (world.home / "dagster.yaml").write_text(dagster_event_log_yaml(world.db_url))
            servers = {
                POSTGRES: postgres_pid(plain),
                JANUSGRAPH: stack.janus_pid(),
                MILVUS: stack.milvus_pid(),
            }
            procs = Processes(lambda: world.daemon.pid if world.daemon else None, servers)
            world.start_daemon()
            size["daemon_ready_s"] = round(wait_sensor_ticked(world, 900), 1)
            time.sleep(6)  # past one more tick of the sensor (minimum interval 5 s)
            observer = Observer(world.db_url)
            try:
                first_ingest(world, observer, procs, stack, staged, names, size, save, timeout_s)
                new_file(world, observer, procs, stack, names, days, turns, size, save)
            finally:
                observer.close()
            status_step(world, procs, size, save, profile=status_profile)
            size["disk_bytes"] = disk_parts(world, stack, plain)
            size["disk_bytes_per_tenant"] = {k: round(v / n) for k, v in size["disk_bytes"].items()}
            save()
            print(
                f"[{n}] disk per tenant (KiB): "
                f"{ {k: round(v / 1024, 1) for k, v in size['disk_bytes_per_tenant'].items()} }",
                flush=True,
            )
    finally:
        stack.stop()
    return size


def dagster_event_log_yaml(db_url: str) -> str:
    """deploy/dagster.yaml with Dagster's own PostgreSQL storage instead of memflow's event log."""
    import yaml

    from tests.support.daemon import STORAGES, instance_config

    config = instance_config(db_url)
    for key in STORAGES:
        config.pop(key)
    config = {"storage": {"postgres": {"postgres_url": db_url}}, **config}
    return yaml.safe_dump(config, sort_keys=False)


def first_ingest(
    world: Any,
    observer: Observer,
    procs: Processes,
    stack: Stack,
    staged: Path,
    names: list[str],
    size: dict[str, Any],
    save,
    timeout_s: float,
) -> None:
    n = len(names)
    got: dict[str, Any] = {}
    with accounted(procs) as acc:
        since = time.time() - 1
        landed = time.time()
        staged.rename(world.landing)
        done: set[str] = set()
        busy = True
        while time.time() - landed < timeout_s:
            time.sleep(POLL_S)
            done, busy, failed = covered(observer, since)
            if failed:
                got.setdefault("failed_runs_seen", len(failed))
            if len(done) >= n and not busy:
                break
        else:
            raise RuntimeError(
                f"first ingest: {len(done)} of {n} tenants after {timeout_s:.0f} s"
                f"\n{world.log_tail()}"
            )
        finished = time.time()
    runs = runs_since(observer, since)
    ends = [r for r in observer.runs() if r["created"] >= since and r["end"]]
    last_end = max(r["end"] for r in ends)
    got.update(acc)
    got["wall_s"] = round(last_end - landed, 2)  # the landing rename to the last run's end
    got["wall_s_observed"] = round(finished - landed, 2)
    first_start = min((r["start"] for r in ends if r["start"]), default=landed)
    got["first_run_started_after_s"] = round(first_start - landed, 2)
    got["dagster"] = runs
    got["cpu_s_per_tenant"] = per_tenant(got["cpu_s"], n)
    got["cpu_s_per_tenant_by_process"] = {
        k: per_tenant(v, n) for k, v in got["cpu_s_by_process"].items()
    }
    got["wall_s_per_tenant"] = per_tenant(got["wall_s"], n)
    got["load_avg"] = [round(x, 2) for x in os.getloadavg()]
    # Every tenant recallable: its facts in JanusGraph, its vectors in Milvus (read back).
    t = time.perf_counter()
    facts = graph_facts_by_ns(stack.gremlin_url)
    vectors = milvus_rows_by_ns(stack.milvus_uri)
    repos = {name.split("/")[1] for name in names}
    got["recallable"] = {
        "tenants_with_facts_in_janusgraph": len(repos & set(facts)),
        "facts_in_janusgraph": sum(facts.values()),
        "tenants_with_vectors_in_milvus": {k: len(repos & set(v)) for k, v in vectors.items()},
        "vectors_in_milvus": {k: sum(v.values()) for k, v in vectors.items()},
        "read_back_s": round(time.perf_counter() - t, 1),
        "recall": [recall_check(world, names[i]) for i in (0, n - 1)],
    }
    size["first_ingest"] = got
    save()
    cpu = got["cpu_s_by_process"]
    print(
        f"[{n}] first ingest: wall {got['wall_s']:.1f} s, CPU {got['cpu_s']:.1f} s "
        f"({got['cpu_s_per_tenant'] * 1000:.0f} ms/tenant) by process {cpu}; runs "
        f"{runs['runs']} {runs['runs_by_job_status']}, events {runs['events']}; recallable "
        f"{got['recallable']['tenants_with_facts_in_janusgraph']}/{n} in the graph, "
        f"{got['recallable']['tenants_with_vectors_in_milvus']}; load {got['load_avg']}",
        flush=True,
    )
    print(f"[{n}] peak RSS: {json.dumps(got['peak_rss'])}", flush=True)


def recall_check(world: Any, tenant: str) -> dict[str, Any]:
    """A real `memflow recall` (hybrid: JanusGraph and Milvus) for one tenant."""
    env = {k: v for k, v in world.env().items() if k not in ("MEMFLOW_API_KEY", "MEMFLOW_API_URL")}
    question = "what does svc-3 depend on?"
    t = time.perf_counter()
    done = subprocess.run(
        [
            str(BIN / "memflow"),
            "recall",
            "--data",
            str(world.data),
            "--tenant",
            tenant,
            "--ranking",
            "hybrid",
            "--json",
            question,
        ],
        env=env,
        cwd=world.root,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    out: dict[str, Any] = {
        "tenant": tenant,
        "rc": done.returncode,
        "wall_s": round(time.perf_counter() - t, 1),
    }
    try:
        answer = json.loads(done.stdout)
    except ValueError:
        out["error"] = (done.stderr or done.stdout)[-500:]
        return out
    facts = answer.get("facts") or []
    out["facts"] = len(facts)
    out["svc_3_found"] = any(f.get("subject") == "svc-3" for f in facts)
    out["ranking"] = answer.get("ranking")
    return out


def new_file(
    world: Any,
    observer: Observer,
    procs: Processes,
    stack: Stack,
    names: list[str],
    days: int,
    turns: int,
    size: dict[str, Any],
    save,
) -> None:
    n = len(names)
    target = names[n // 2]
    org, repo = target.split("/")
    facts0 = graph_fact_count(stack.gremlin_url, org, repo)
    vectors0 = milvus_count(stack.milvus_uri, org, repo)
    got: dict[str, Any] = {"tenant": target, "facts_before": facts0, "vectors_before": vectors0}
    with accounted(procs) as acc:
        since = time.time() - 1
        landed = time.time()
        write_day(world.landing, target, days, turns)
        at_graph = at_vectors = None
        deadline = landed + 1800
        while time.time() < deadline and at_graph is None:
            time.sleep(0.5)
            if graph_fact_count(stack.gremlin_url, org, repo) > facts0:
                at_graph = time.time()
        while time.time() < deadline and at_vectors is None:
            if milvus_count(stack.milvus_uri, org, repo) > vectors0:
                at_vectors = time.time()
            else:
                time.sleep(0.5)
        while time.time() < deadline and covered(observer, since)[1]:
            time.sleep(1.0)
        finished = time.time()
    if at_graph is None or at_vectors is None:
        raise RuntimeError(f"the new file never became recallable\n{world.log_tail()}")
    runs = runs_since(observer, since)
    ends = [r["end"] for r in observer.runs() if r["created"] >= since and r["end"]]
    got.update(acc)
    got.update(
        facts_after=graph_fact_count(stack.gremlin_url, org, repo),
        vectors_after=milvus_count(stack.milvus_uri, org, repo),
        facts_in_graph_after_s=round(at_graph - landed, 2),
        vectors_in_milvus_after_s=round(at_vectors - landed, 2),
        wall_s=round(max([*ends, at_vectors]) - landed, 2),
        wall_s_observed=round(finished - landed, 2),
        dagster=runs,
        load_avg=[round(x, 2) for x in os.getloadavg()],
    )
    size["new_file"] = got
    save()
    print(
        f"[{n}] new file for {target}: facts in JanusGraph after {got['facts_in_graph_after_s']}"
        f" s, vectors in Milvus after {got['vectors_in_milvus_after_s']} s; CPU "
        f"{got['cpu_s']:.1f} s by process {got['cpu_s_by_process']}; runs {runs['runs']} "
        f"{runs['runs_by_job_status']}, events {runs['events']}; load {got['load_avg']}",
        flush=True,
    )


def status_step(
    world: Any,
    procs: Processes,
    size: dict[str, Any],
    save,
    timeout: float = 3600,
    profile: str | None = None,
) -> None:
    env = world.env()
    log = world.root / "status.log"
    cmd = [str(BIN / "memflow"), "status", "--data", str(world.data)]
    if profile:  # where the time goes (wall included: cProfile counts time waited in calls)
        Path(profile).mkdir(parents=True, exist_ok=True)
        prof = Path(profile) / f"status-{size['tenants']}.prof"
        cmd = [str(BIN / "python"), "-m", "cProfile", "-o", str(prof), "-m", "pipelines.cli",
               *cmd[1:]]  # fmt: skip
    with accounted(procs) as acc, log.open("w") as out:
        t = time.perf_counter()
        proc = subprocess.Popen(
            cmd,
            env=env,
            cwd=world.root,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        timer = threading.Timer(timeout, proc.kill)
        timer.start()
        _, code, usage = os.wait4(proc.pid, 0)
        timer.cancel()
        wall = time.perf_counter() - t
    got: dict[str, Any] = {
        "rc": os.waitstatus_to_exitcode(code),
        "timed_out": wall >= timeout,
        "wall_s": round(wall, 2),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
        "max_rss_mib": round(usage.ru_maxrss / 1024, 1),
        "servers_cpu_s": {k: acc["cpu_s_by_process"][k] for k in (POSTGRES, JANUSGRAPH, MILVUS)},
        "load_avg": [round(x, 2) for x in os.getloadavg()],
    }
    if got["rc"] != 0:
        got["output_tail"] = log.read_text(errors="replace")[-1500:]
    size["status"] = got
    save()
    print(f"[{size['tenants']}] status: {json.dumps(got)}", flush=True)


def disk_parts(world: Any, stack: Stack, pg_url: str) -> dict[str, int]:
    tables = disk(world.data)
    return {
        "postgresql_database": database_bytes(pg_url, world.database),
        "janusgraph_data": du(stack.janus_data),
        "milvus_data": du(stack.milvus.data_dir),
        "tables": tables.pop("total"),
        "landing": du(world.landing),
    }


# -- the partition listing on PostgreSQL ------------------------------------------------------


def instance_yaml(db_url: str, event_log: str) -> str:
    """A dagster.yaml on `db_url` with Dagster's event log (`dagster`) or memflow's
    (`memflow`: pipelines/pg_event_log.py, as deploy/dagster.yaml sets it)."""
    from tests.support.postgres import instance_yaml as dagster_yaml

    if event_log == "dagster":
        return dagster_yaml(db_url)
    blocks = [
        ("run_storage", "dagster_postgres.run_storage", "PostgresRunStorage"),
        ("event_log_storage", "pipelines.pg_event_log", "PostgresEventLog"),
        ("schedule_storage", "dagster_postgres.schedule_storage", "PostgresScheduleStorage"),
    ]
    return "telemetry:\n  enabled: false\n" + "".join(
        f"{key}:\n  module: {module}\n  class: {cls}\n  config:\n    postgres_url: {db_url}\n"
        for key, module, cls in blocks
    )


def listing_cost(pg_url: str, sizes: tuple[int, ...], calls: int = 40) -> dict[str, Any]:
    """CPU of what one `add_asset_metadata(partition_key=...)` asks the instance (two
    `has_dynamic_partition`, one `get_dynamic_partitions`) with `k` tenant partitions stored,
    in this process and in PostgreSQL, on a scratch database; with Dagster's event log and
    with memflow's (pipelines/pg_event_log.py), one after the other at each size."""
    import psutil
    from dagster import DagsterInstance

    from tests.support.postgres import create_database, drop_database

    plain = pg_url.replace("postgresql+psycopg2://", "postgresql://")
    database = create_database(plain, "memflow_listing")
    homes = {e: Path(tempfile.mkdtemp(prefix=f"memflow-listing-{e}-")) for e in EVENT_LOGS}
    out: dict[str, Any] = {"calls_timed": calls}
    instances: dict[str, Any] = {}
    try:
        for event_log, home in homes.items():
            (home / "dagster.yaml").write_text(instance_yaml(f"{pg_url}/{database}", event_log))
            instances[event_log] = DagsterInstance.from_config(str(home))
        pg = psutil.Process(postgres_pid(plain))
        stored = 0
        for k in sorted(sizes):
            keys = [tenant_name(i) for i in range(stored, k)]
            for start in range(0, len(keys), 1000):
                instances["dagster"].add_dynamic_partitions("tenants", keys[start : start + 1000])
            stored = k
            first, last = tenant_name(0), tenant_name(min(199, k - 1))
            out[str(k)] = {}
            for event_log, instance in instances.items():
                instance.get_dynamic_partitions("tenants")  # warm
                server0 = _tree_cpu(pg)
                me0 = time.process_time()
                wall0 = time.perf_counter()
                for _ in range(calls):
                    instance.has_dynamic_partition("tenants", first)
                    instance.has_dynamic_partition("tenants", last)
                    got = instance.get_dynamic_partitions("tenants")
                wall = time.perf_counter() - wall0
                me = time.process_time() - me0
                server = _tree_cpu(pg) - server0
                assert list(got) == [tenant_name(i) for i in range(k)]
                out[str(k)][event_log] = {
                    "client_cpu_ms_per_call": round(me / calls * 1000, 3),
                    "postgres_cpu_ms_per_call": round(server / calls * 1000, 3),
                    "wall_ms_per_call": round(wall / calls * 1000, 3),
                }
            print(f"listing at {k} partitions: {out[str(k)]}", flush=True)
    finally:
        for instance in instances.values():
            instance.dispose()
        for home in homes.values():
            shutil.rmtree(home, ignore_errors=True)
        with contextlib.suppress(Exception):
            drop_database(plain, database)
    return out


def _tree_cpu(p: Any) -> float:
    total = 0.0
    for q in [p, *p.children(recursive=True)]:
        with contextlib.suppress(Exception):
            t = q.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
    return total


def listing_share(result: dict[str, Any]) -> dict[str, Any]:
    """What the metadata checks of one tenant cost at each timed size (CPU ms a tenant: the
    calls per tenant times the CPU a call), by event log, with the share of the first ingest's
    CPU a tenant measured at the smallest size with that event log."""
    cost = result.get("listing") or {}
    out: dict[str, Any] = {}
    for event_log, bucket in BUCKETS.items():
        sizes = sorted(
            (int(k), v) for k, v in result.get(bucket, {}).items() if "first_ingest" in v
        )
        if not cost or not sizes:
            continue
        lo, first = sizes[0]
        events = first["first_ingest"]["dagster"]["events_by_type"]
        calls = events.get("ASSET_MATERIALIZATION", 0) / lo
        base = first["first_ingest"]["cpu_s_per_tenant"]
        got: dict[str, Any] = {"calls_per_tenant": round(calls, 2), "base_size": lo,
                               "base_cpu_s_per_tenant": base}  # fmt: skip
        for k, v in cost.items():
            if k.isdigit() and event_log in v:
                ms = (
                    v[event_log]["client_cpu_ms_per_call"]
                    + v[event_log]["postgres_cpu_ms_per_call"]
                )
                got[k] = {
                    "cpu_ms_per_tenant": round(calls * ms, 1),
                    "share_of_base": round(calls * ms / 1000 / base, 4) if base else None,
                }
        out[event_log] = got
    return out


# -- the run ---------------------------------------------------------------------------------


def ratios(result: dict[str, Any]) -> dict[str, Any]:
    sizes = sorted(
        (int(k), v) for k, v in result["sizes"].items() if "first_ingest" in v and "new_file" in v
    )
    if len(sizes) < 2:
        return {}
    (lo, a), (hi, b) = sizes[0], sizes[-1]

    def r(x: float, y: float) -> float | None:
        return round(x / y, 3) if y else None

    fa, fb = a["first_ingest"], b["first_ingest"]
    out: dict[str, Any] = {
        "from": lo,
        "to": hi,
        "first_ingest_cpu_per_tenant": r(fb["cpu_s_per_tenant"], fa["cpu_s_per_tenant"]),
        "first_ingest_cpu_per_tenant_by_process": {
            k: r(fb["cpu_s_per_tenant_by_process"][k], fa["cpu_s_per_tenant_by_process"][k])
            for k in fa["cpu_s_per_tenant_by_process"]
            if fa["cpu_s_per_tenant_by_process"][k] > 0
        },
        "first_ingest_wall_per_tenant": r(fb["wall_s_per_tenant"], fa["wall_s_per_tenant"]),
        "new_file_cpu": r(b["new_file"]["cpu_s"], a["new_file"]["cpu_s"]),
        "new_file_facts_in_graph_s": r(
            b["new_file"]["facts_in_graph_after_s"], a["new_file"]["facts_in_graph_after_s"]
        ),
    }
    if "status" in a and "status" in b:
        out["status_wall_s"] = {str(lo): a["status"]["wall_s"], str(hi): b["status"]["wall_s"]}
    out["goals_met"] = {
        "first_ingest_growth_le_1.2": (out["first_ingest_cpu_per_tenant"] or 99)
        <= GOAL_FIRST_GROWTH,
        "new_file_le_1.2": (out["new_file_cpu"] or 99) <= GOAL_NEW_FILE,
        "status_le_5s": all(
            v.get("status", {}).get("wall_s", 99) <= GOAL_STATUS_S for _, v in sizes
        ),
    }
    return out


def event_log_comparison(result: dict[str, Any]) -> dict[str, Any]:
    """At each size measured with both event logs: Dagster's over memflow's, CPU a tenant."""
    out: dict[str, Any] = {}
    ours, theirs = result.get(BUCKETS["memflow"], {}), result.get(BUCKETS["dagster"], {})
    for k in sorted(set(ours) & set(theirs), key=int):
        a, b = ours[k].get("first_ingest"), theirs[k].get("first_ingest")
        if not a or not b:
            continue
        out[k] = {
            "cpu_s_per_tenant": {
                "memflow": a["cpu_s_per_tenant"],
                "dagster": b["cpu_s_per_tenant"],
            },
            "dagster_over_memflow": round(b["cpu_s_per_tenant"] / a["cpu_s_per_tenant"], 3),
            "by_process_dagster_over_memflow": {
                p: round(b["cpu_s_by_process"][p] / a["cpu_s_by_process"][p], 2)
                for p in a["cpu_s_by_process"]
                if a["cpu_s_by_process"][p] > 0
            },
        }
    return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--timeout", type=float, default=6 * 3600, help="seconds a first ingest may take"
    )
    parser.add_argument(
        "--event-log",
        choices=EVENT_LOGS,
        default="memflow",
        help="the instance's event log: memflow's (deploy/dagster.yaml) or Dagster's own",
    )
    parser.add_argument(
        "--no-listing", action="store_true", help="skip timing the partition listing on PostgreSQL"
    )
    parser.add_argument(
        "--status-profile",
        metavar="DIR",
        help="run `memflow status` under cProfile, one status-<tenants>.prof a size in DIR",
    )


def run(args: argparse.Namespace, argv: list[str]) -> int:
    from tests.support import postgres

    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)  # the daemon's processes as deployed
    sizes = [int(x) for x in args.tenants.split(",") if x]
    out = Path(args.out)
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="memflow-scale-prod-"))
    work.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {bucket: {} for bucket in BUCKETS.values()}
    if out.exists():  # keep what an earlier run measured and this one does not redo
        with contextlib.suppress(ValueError, AttributeError):
            old = json.loads(out.read_text())
            for event_log, bucket in BUCKETS.items():
                redo = sizes if event_log == args.event_log else []
                result[bucket] = {
                    k: v for k, v in old.get(bucket, {}).items() if int(k) not in redo
                }
            if args.no_listing and old.get("listing"):
                result["listing"] = old["listing"]
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    result.update(
        when=datetime.now(UTC).isoformat(timespec="seconds"),
        command="python bench/bench_scale.py " + " ".join(argv),
        stack="production: dagster-daemon + landing_sensor on PostgreSQL (deploy/dagster.yaml), "
        "JanusGraph (BerkeleyDB JE), Milvus standalone server; ONNX embedder, extractor none",
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
        result["listing_per_tenant"] = listing_share(result)
        result["event_logs_side_by_side"] = event_log_comparison(result)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=2, default=str) + "\n")

    pg_url = postgres.acquire().replace("postgresql://", "postgresql+psycopg2://", 1)
    try:
        if not args.no_listing:
            result["listing"] = listing_cost(pg_url, LISTING_SIZES)
            save()
        for n in sizes:
            one_size(
                work, n, args.days, args.turns, pg_url, result, save, args.timeout,
                args.event_log, args.status_profile,
            )  # fmt: skip
            if not args.keep:
                for part in ("world", "landing", "janusgraph", "milvus"):
                    shutil.rmtree(work / f"{part}-{n}", ignore_errors=True)
    finally:
        save()
        postgres.release()
        if not args.keep and not args.work:
            shutil.rmtree(work, ignore_errors=True)
    print(
        json.dumps(
            {"ratios": result["ratios"], "listing_per_tenant": result["listing_per_tenant"]},
            indent=2,
        )
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tenants", default="100,1000", help="sizes, comma-separated")
    parser.add_argument("--days", type=int, default=2)
    parser.add_argument("--turns", type=int, default=10, help="turns a day")
    parser.add_argument("--work", help="work directory (default: a new temp directory)")
    parser.add_argument("--keep", action="store_true", help="keep the data directories")
    parser.add_argument("--out", default=str(RESULTS))
    add_arguments(parser)
    argv = sys.argv[1:] if argv is None else argv
    return run(parser.parse_args(argv), ["--stack", "production", *argv])


if __name__ == "__main__":
    sys.exit(main())
