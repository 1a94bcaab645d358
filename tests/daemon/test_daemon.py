"""memflow under a real `dagster-daemon` on PostgreSQL with the production instance
(deploy/dagster.yaml: queued runs, a block per run, run retries, run monitoring with
pipelines.launcher.LocalRunLauncher).

1. landing files -> landing_sensor -> ingest runs -> facts recallable (RecallService over the
   data directory).
2. kill -9 mid-run, twice: the daemon alone (its run goes on in the code server's worker), then
   the daemon with its code server and run worker (as when the machine dies: the run is left
   STARTED, monitoring fails it, run_retries re-executes it); after each restart the work
   completes, and every table and the graph equal a clean `memflow run` of the same landing
   zone: nothing lost, nothing doubled.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest

from recall.service import RecallService
from resources.graph.sqlite import SqliteGraphStore
from schemas.scope import Scope
from tests.pipeline.landing_fixtures import save, small_landing, turn, write_jsonl
from tests.support.daemon import ROOT, DaemonWorld, memflow_env
from tests.support.leftovers import assert_no_process_left

pytestmark = [pytest.mark.slow, pytest.mark.server]

# Shorter than production's 30 s / 180 s so the tests need not wait that long; nothing else
# of deploy/dagster.yaml is changed.
FAST_MONITORING = {"run_monitoring": {"poll_interval_seconds": 3, "start_timeout_seconds": 90}}
TIMEOUT_S = 420
TENANTS = [f"org/r{i}" for i in range(3)]
# Per tenant and day (_land_day): 2 sessions x (a text turn the extractor turns into a USES
# fact + a tool call saving a DEPENDS_ON fact); two days.
FACTS_PER_TENANT = 8
VOLATILE = {"read_at", "extracted_at"}
COMPARED = [
    "raw_turns",
    "turn_rejects",
    "landing_files",
    "extracted_triples",
    "extraction_rejects",
    "extraction_log",
    "validated_facts",
    "entities",
    "quarantine",
    "fact_merges",
    "retraction_requests",
    "retractions",
]


def test_landing_to_recallable_under_the_daemon(tmp_path: Path, postgres_server: str) -> None:
    with DaemonWorld.create(tmp_path, postgres_server, overrides=FAST_MONITORING) as world:
        world.start_daemon()
        small_landing(world.landing)  # two tenants; the sensor finds them once it runs
        world.wait_until(
            lambda: world.facts("acme/api") >= 2 and world.facts("globex/ml") >= 1,
            TIMEOUT_S,
            what="facts of both tenants",
        )
        runs = world.runs()
        ingest = [r for r in runs if r["job"] == "ingest_job"]
        assert ingest and all(r["status"] == "SUCCESS" for r in ingest)
        assert all(r["tags"]["memflow/source"] == "landing_sensor" for r in ingest)
        assert all(r["tags"]["memflow/block"] == "0" for r in ingest)
        assert len(ingest) <= 2  # both tenants in one run (a second only if the files split)

        graph = SqliteGraphStore(world.data / "graph.sqlite")
        try:
            answer = RecallService(graph).recall(
                Scope("acme", "api"), "which database does payments-api use?"
            )
        finally:
            graph.close()
        found = {(f.subject, f.predicate, f.object) for f in answer.facts}
        assert ("payments-api", "USES", "PostgreSQL") in found, found


def _land_day(landing: Path, day: int) -> None:
    for t, tenant in enumerate(TENANTS):
        org, repo = tenant.split("/")
        lines = []
        for s in range(2):
            sid, ts = f"d{day}s{s}", f"2026-11-{day:02d}T10:0{s}:00Z"
            lines.append(turn(org, repo, sid, "1", ts, "user", f"svc-{t}-{s} uses lib-{day}-{s}"))
            lines.append(
                save(
                    org,
                    repo,
                    sid,
                    "2",
                    ts.replace(":00Z", ":30Z"),
                    [{"subject": f"svc-{t}-{s}", "predicate": "DEPENDS_ON", "object": f"db-{day}"}],
                )
            )
        write_jsonl(landing, org, repo, f"day-{day}.jsonl", lines)


def _wait_started(world: DaemonWorld, seen: set[str], timeout: float = TIMEOUT_S) -> str:
    """The id of an ingest run (not in `seen`) once it is STARTED."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for run in world.runs():
            started = run["job"] == "ingest_job" and run["status"] == "STARTED"
            if started and run["run_id"] not in seen:
                return run["run_id"]
        time.sleep(0.3)
    raise AssertionError(f"no ingest run started\n{world.log_tail()}")


def _status(world: DaemonWorld, run_id: str) -> str | None:
    return next((r["status"] for r in world.runs() if r["run_id"] == run_id), None)


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def _wait_for(condition, world: DaemonWorld, timeout: float = TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out\n{world.log_tail()}")
        time.sleep(0.1)


def _frame(df: pl.DataFrame | None) -> pl.DataFrame:
    if df is None:
        return pl.DataFrame()
    df = df.drop([c for c in df.columns if c in VOLATILE])
    return df.sort(df.columns, nulls_last=True) if df.height else df


def _graph(data: Path, tenant: str) -> tuple[dict, tuple]:
    """What the graph holds for a tenant: counts and every row's content hash."""
    store = SqliteGraphStore(data / "graph.sqlite")
    try:
        scope = Scope.parse(tenant)
        return store.counts(scope), store.row_hashes(scope)
    finally:
        store.close()


def test_kill_9_mid_run_then_restart_completes_with_nothing_lost_or_doubled(
    tmp_path: Path, postgres_server: str, request: pytest.FixtureRequest
) -> None:
    calls = tmp_path / "extractor-calls.jsonl"  # a line per extractor call
    command = f"{sys.executable} {ROOT}/tests/support/extractor_cmd.py --sleep 0.5 --log {calls}"
    settings = {"MEMFLOW_EXTRACTOR": "command", "MEMFLOW_EXTRACTION_COMMAND": command}
    with DaemonWorld.create(
        tmp_path / "daemon", postgres_server, overrides=FAST_MONITORING, **settings
    ) as world:
        _land_day(world.landing, 1)
        t0 = time.monotonic()
        world.start_daemon()
        first = _wait_started(world, set())
        print(f"first run started at {time.monotonic() - t0:.0f}s")
        world.kill_daemon()  # the daemon alone: its run goes on in the code server's process
        world.start_daemon()
        _wait_for(lambda: _status(world, first) == "SUCCESS", world)
        before = _lines(calls)  # day 1 is extracted
        _land_day(world.landing, 2)
        _wait_for(lambda: _lines(calls) > before, world)  # a run is extracting day 2: kill now
        second = _wait_started(world, {first}, timeout=10)
        print(f"second run extracting at {time.monotonic() - t0:.0f}s")
        world.kill_daemon(group=True)  # daemon, code server and run worker: the run is orphaned
        deadline = time.monotonic() + 10
        while world.group_pids() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not world.group_pids()
        world.start_daemon()
        world.wait_until(
            lambda: all(world.facts(t) >= FACTS_PER_TENANT for t in TENANTS),
            TIMEOUT_S,
            what="every fact",
        )
        print(f"all facts at {time.monotonic() - t0:.0f}s")
        runs = {r["run_id"]: r for r in world.runs()}
        assert runs[first]["status"] == "SUCCESS", runs[first]
        assert runs[second]["status"] == "FAILURE"  # failed by run monitoring...
        retried = [r for r in runs.values() if r["tags"].get("dagster/parent_run_id") == second]
        assert [r["status"] for r in retried] == ["SUCCESS"]  # ...and re-executed once
        # run_retries owns a crashed run: split_failed_batches must not also rerun its halves.
        assert not [r for r in runs.values() if r["tags"].get("memflow/parent") == second]

        # A clean run of the same landing zone, without the daemon.
        clean = tmp_path / "clean"
        request.addfinalizer(lambda: assert_no_process_left(clean / "data"))
        env = memflow_env(clean, world.landing, clean / "data", clean / "dagster", **settings)
        env.pop("DAGSTER_HOME")
        done = subprocess.run(
            [str(Path(sys.executable).parent / "memflow"), "run"],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        print(f"clean run done at {time.monotonic() - t0:.0f}s")

        clean_world = DaemonWorld(clean, "", "")
        for tenant in TENANTS:
            for asset in COMPARED:
                got, want = world.table(asset, tenant), clean_world.table(asset, tenant)
                assert (got is None) == (want is None), (tenant, asset)
                assert _frame(got).equals(_frame(want)), (tenant, asset)
            assert _graph(world.data, tenant) == _graph(clean / "data", tenant), tenant
        facts = world.table("validated_facts", TENANTS[0])
        assert facts is not None and facts["fact_id"].is_unique().all()
        assert facts.height == FACTS_PER_TENANT
