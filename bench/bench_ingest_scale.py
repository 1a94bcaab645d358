"""Ingestion at scale: `memflow run` against memflow's own functions, the cost of a new day,
re-runs and kill -9.

    python bench/bench_ingest_scale.py                  # both parts
    python bench/bench_ingest_scale.py --part batch     # (a) only
    python bench/bench_ingest_scale.py --part newday    # (b) only
    python bench/bench_ingest_scale.py --part rerun     # (c) only

(a) **batch**: a landing zone of 40 tenants x 10 days x 40 turns (16,000 turns; a quarter are
agents' tool calls saving 2 triples each, the rest text turns that wait for an extractor, since
the extractor is `none`). Side by side, in one process tree each, alternating:
`memflow run` (every asset under Dagster, recorded in a Dagster instance) and `direct`, the same
work through memflow's own functions with no Dagster, stage by stage over every tenant:
`ingest_turns` -> the turn contract -> `extract_tenant` -> `build_facts` -> the fact and entity
contracts -> (embeddings: none) -> `sync_graph` (SQLite), writing the same tables, with the
garbage collector set as `memflow run` sets it (`pipelines.cli.RUN_GC_THRESHOLD`). A third
kind, `direct_no_contracts`, skips the contracts (the baseline of earlier rounds, whose tables
equal memflow run's only for input that breaks no contract). With `--with-direct-full`, a fourth
kind, `direct_full`: `direct` plus the domain work memflow run does and `direct` leaves out
(the blocking contract checks, the graph check, the landing survey, the facts' summaries, the
two retraction tables; see `direct_main`), so that the ratio to it is framework overhead only.
Reported: wall and CPU seconds,
turns/s, peak RSS of the process (wait4), runs launched. Target: wall ratio (memflow run /
direct) <= 1.5 with <= 50 runs; the ratio to the baseline without contracts is reported too.

(b) **newday**: one tenant with 60 days of history against one with 5 (40 turns a day, each
already ingested by `memflow run`); then a new day lands for both and `memflow run --tenant`
runs, alternating, three rounds. Reported: the run's own seconds (what `memflow run` reports,
imports excluded) and the command's wall time. Target: 60-day / 5-day <= 1.2.

(c) **rerun** (`--part rerun`): `memflow run` on a fresh data directory, then again with
nothing new (reported: seconds and the Delta commits it made; target 0); then, on fresh data
directories, `memflow run` SIGKILLed (process group) once 2, 4, 6, 7 Delta tables exist
(`--kill-at`), and run again: every table's rows (clock columns `read_at`, `extracted_at` left
out) must equal the clean run's.

All use embedder `none` and the SQLite graph, every setting explicit (the repository's .env
does not leak in). Results: bench/results/ingest_scale.json and a table on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

RESULTS = ROOT / "bench" / "results" / "ingest_scale.json"
BIN = Path(sys.executable).parent
START = datetime(2026, 6, 1, 9, 0, tzinfo=UTC)
TARGET_RATIO = 1.5
TARGET_RUNS = 50
TARGET_NEWDAY = 1.2


# ---------------------------------------------------------------------------- landing zones


def day_lines(org: str, repo: str, day: int, turns: int = 40) -> list[dict[str, Any]]:
    """A day of one tenant: `turns` turns, every 4th a tool call saving 2 triples."""
    ts0 = START + timedelta(days=day)
    out = []
    for i in range(turns):
        ts = (ts0 + timedelta(minutes=i)).isoformat()
        sid = f"d{day:03d}-s{i // 10}"
        base = {
            "org": org,
            "repo": repo,
            "session_id": sid,
            "turn_id": str(i),
            "ts": ts,
            "client": "claude-code",
        }
        if i % 4 == 3:
            k = day * 40 + i
            triples = [
                {"subject": f"svc-{k % 97}", "predicate": "DEPENDS_ON", "object": f"lib-{k % 53}"},
                {"subject": f"svc-{k % 97}", "predicate": "OWNED_BY", "object": f"team-{k % 7}"},
            ]
            out.append(
                {
                    **base,
                    "role": "tool",
                    "content": "",
                    "tool_name": "upsert_graph_triples",
                    "tool_input": {"triples": triples},
                }
            )
        else:
            role = "user" if i % 2 == 0 else "assistant"
            text = f"Day {day}, step {i}: svc-{i} calls lib-{day % 11} before deploying to stage."
            out.append({**base, "role": role, "content": text})
    return out


def write_day(landing: Path, tenant: str, day: int, turns: int = 40) -> None:
    org, repo = tenant.split("/")
    folder = landing / org / repo
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".day-{day:03d}.jsonl.tmp"
    with tmp.open("w") as fh:
        for line in day_lines(org, repo, day, turns):
            fh.write(json.dumps(line) + "\n")
    tmp.rename(folder / f"day-{day:03d}.jsonl")


# ---------------------------------------------------------------------------- processes


def env_for(landing: Path, data: Path) -> dict[str, str]:
    from resources.settings import DEFAULTS

    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMFLOW_", "DAGSTER_"))}
    # Python as deployed: modules load from their cached bytecode (a sandbox that sets this
    # recompiles every module in every process, which costs `memflow run` seconds of imports).
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.update(DEFAULTS)
    env.update(
        {
            "MEMFLOW_LANDING_DIR": str(landing),
            "MEMFLOW_DATA_DIR": str(data),
            "MEMFLOW_EXTRACTOR": "none",
            "MEMFLOW_EMBEDDER": "none",
            "MEMFLOW_GRAPH_BACKEND": "sqlite",
            "PYTHONPATH": str(ROOT),
        }
    )
    return env


def measured(cmd: list[str], env: dict[str, str], cwd: Path) -> dict[str, Any]:
    """Wall and CPU seconds and peak RSS (MiB) of one process tree (wait4 of the child)."""
    out_path = cwd / f"out-{time.monotonic_ns()}.txt"
    with out_path.open("w") as out:
        started = time.perf_counter()
        proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    text = out_path.read_text()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{text[-3000:]}")
    return {
        "wall_s": round(wall, 2),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
        "peak_rss_mib": round(usage.ru_maxrss / 1024, 1),
        "output": text,
    }


def memflow_run(
    landing: Path, data: Path, cwd: Path, *tenants: str, env: dict[str, str] | None = None
) -> dict[str, Any]:
    cmd = [str(BIN / "memflow"), "run", "--landing", str(landing), "--data", str(data)]
    for t in tenants:
        cmd += ["--tenant", t]
    got = measured(cmd, {**env_for(landing, data), **(env or {})}, cwd)
    m = re.search(r"memflow run: (\d+) tenant\(s\), (\d+) run\(s\), ([\d.]+) s", got["output"])
    if not m:
        raise RuntimeError(f"no summary line in memflow run's output:\n{got['output'][-2000:]}")
    got.update(tenants=int(m.group(1)), runs=int(m.group(2)), run_s=float(m.group(3)))
    return got


def direct(
    landing: Path, data: Path, cwd: Path, contracts: bool = True, full: bool = False
) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--direct", str(landing), str(data)]
    cmd += ([] if contracts else ["--no-contracts"]) + (["--full"] if full else [])
    got = measured(cmd, env_for(landing, data), cwd)
    m = re.search(r"direct: (\d+) tenants, ([\d.]+) s", got["output"])
    if not m:
        raise RuntimeError(f"no summary line in the direct run's output:\n{got['output'][-2000:]}")
    got.update(tenants=int(m.group(1)), runs=0, run_s=float(m.group(2)))
    stages = re.search(r"^stages: (.*)$", got["output"], re.MULTILINE)
    if stages:
        got["stages"] = json.loads(stages.group(1))
    return got


def direct_main(landing: Path, data: Path, contracts: bool = True, full: bool = False) -> int:
    """The whole pipeline through memflow's functions, no Dagster (runs in a child process),
    stage by stage over every tenant as the assets go. With `contracts`, each stage's rows go
    through the same pandera contracts the assets quarantine by
    (`schemas.contracts.quarantine_contract_failures`, the run's tenants as one frame: no Dagster
    in it), so the turns, facts and entities stored are the ones
    `memflow run` stores for any input (the contract rejects themselves are not written here);
    without, contract-breaking rows would be stored (the baseline of earlier rounds).

    With `full` (the kind `direct_full`), also the domain work `memflow run` does that the
    plain direct path leaves out, each through the function the asset calls: the two
    retraction tables, the landing survey (`landing_problems`), the validated facts'
    summaries (one commit), the blocking contract checks on the stored frames
    (`schemas.contracts.split_valid`, as `assets.metadata.contract_check` runs it) and the
    graph sink's check (`sync_and_check` instead of `sync_graph`). Still not done here: the
    per-tenant metadata (previews, counts by reason), the landing index of what is up to
    date, settings resolution and the summary `memflow run` prints."""
    started = time.perf_counter()
    import gc

    from pipelines.cli import RUN_GC_THRESHOLD

    gc.set_threshold(*RUN_GC_THRESHOLD)  # the collector setting `memflow run` runs with
    import polars as pl

    from memflow import landing as landing_mod
    from memflow.extract import ExtractionTables, extract_tenant
    from memflow.facts import build_facts
    from memflow.turns import TurnTables, ingest_turns
    from resources.configurable import Storage
    from resources.graph.sqlite import SqliteGraphStore
    from resources.graph.sync import sync_and_check, sync_graph
    from resources.tables import TableStore
    from schemas.contracts import split_valid
    from schemas.tables import QUARANTINE, TABLES, Asset, conform

    storage = Storage(landing_dir=str(landing), data_dir=str(data))
    window = storage.window()
    tables = TableStore(data)
    found = landing_mod.discover(landing)
    now = datetime.now(UTC)
    graph = SqliteGraphStore(data / "graph.sqlite")

    stages = {"turns": 0.0, "extract": 0.0, "facts": 0.0, "contracts": 0.0, "sink": 0.0,
              "write": 0.0, "checks": 0.0, "survey": 0.0}  # fmt: skip
    units = {"turns": 0, "triples": 0, "facts": 0, "entities": 0, "sink_rows": 0}

    pending: dict[str, dict] = {}

    def write(df: pl.DataFrame, asset: str, scope) -> None:
        t = time.perf_counter()
        pending.setdefault(asset, {})[scope] = conform(df, TABLES[asset])
        stages["write"] += time.perf_counter() - t

    def flush() -> None:
        """Each table's tenants in one commit, as the IO manager writes a step's output."""
        t = time.perf_counter()
        for asset, frames in pending.items():
            tables.write_tenants(asset, frames)
        pending.clear()
        stages["write"] += time.perf_counter() - t

    def valid(frames: dict, contract) -> dict:
        """Each tenant's rows that meet `contract`, the tenants validated as one frame (the
        function the assets quarantine with; its quarantine rows are not written here)."""
        if not contracts:
            return frames
        from schemas.contracts import quarantine_contract_failures

        t = time.perf_counter()
        good, _ = quarantine_contract_failures(
            {s.key: df for s, df in frames.items()}, contract, "bench"
        )
        stages["contracts"] += time.perf_counter() - t
        return {s: good[s.key] for s in frames}

    from schemas.contracts import EntityContract, FactContract, TurnContract

    def check(frames: dict, contract) -> None:
        """The blocking contract check on the stored frames (`full` only)."""
        if not full:
            return
        t = time.perf_counter()
        stored = [df for df in frames.values() if df.height]
        if stored:
            _, violations = split_valid(pl.concat(stored, how="vertical_relaxed"), contract)
            if violations:
                raise RuntimeError(f"{contract.__name__} check failed: {violations[:3]}")
        stages["checks"] += time.perf_counter() - t

    # What `memflow run` loads: collected as `pipelines.run_gc.run_gc_setup` does after its own.
    gc.freeze()
    try:
        if full:
            t = time.perf_counter()
            tables.write_zone(landing_mod.landing_problems(landing), Asset.LANDING_PROBLEMS)
            stages["survey"] += time.perf_counter() - t
        turns_by = {}
        for scope, files in found.items():
            t = time.perf_counter()
            turns_by[scope] = ingest_turns(
                landing, scope, files, TurnTables.empty(), now, window
            ).tables
            stages["turns"] += time.perf_counter() - t
        good = valid({s: t.turns for s, t in turns_by.items()}, TurnContract)
        extracted = {}
        for scope, turns in turns_by.items():
            turns.turns = good[scope]
            units["turns"] += turns.turns.height
            write(turns.turns, Asset.RAW_TURNS, scope)
            write(turns.rejects, Asset.TURN_REJECTS, scope)
            write(turns.files, Asset.LANDING_FILES, scope)
            t = time.perf_counter()
            done = extract_tenant(
                scope, turns.turns, ExtractionTables.of(None, None, None), None, "none"
            )
            stages["extract"] += time.perf_counter() - t
            ex = extracted[scope] = done.tables
            units["triples"] += ex.triples.height
            write(ex.triples, Asset.EXTRACTED_TRIPLES, scope)
            write(ex.rejects, Asset.EXTRACTION_REJECTS, scope)
            write(ex.log, Asset.EXTRACTION_LOG, scope)
            if full:
                write(ex.requests, Asset.RETRACTION_REQUESTS, scope)
        check({s: t.turns for s, t in turns_by.items()}, TurnContract)
        flush()
        built_by = {}
        for scope, ex in extracted.items():
            t = time.perf_counter()
            built_by[scope] = build_facts(scope, ex.triples, None, None)
            stages["facts"] += time.perf_counter() - t
        facts = valid({s: b.facts for s, b in built_by.items()}, FactContract)
        entities = valid({s: b.entities for s, b in built_by.items()}, EntityContract)
        for scope, built in built_by.items():
            units["facts"] += facts[scope].height
            units["entities"] += entities[scope].height
            write(facts[scope], Asset.VALIDATED_FACTS, scope)
            write(entities[scope], Asset.ENTITIES, scope)
            write(
                pl.concat(
                    [
                        conform(turns_by[scope].rejects, QUARANTINE),
                        conform(extracted[scope].rejects, QUARANTINE),
                        built.rejects,
                    ]
                ),
                Asset.QUARANTINE,
                scope,
            )
            write(built.merges, Asset.FACT_MERGES, scope)
            if full:
                write(built.retractions, Asset.RETRACTIONS, scope)
        check(facts, FactContract)
        check(entities, EntityContract)
        if full:
            t = time.perf_counter()
            tables.record_summaries(
                Asset.VALIDATED_FACTS,
                {
                    s: {"facts": facts[s].height, "entities": entities[s].height, **b.counts}
                    for s, b in built_by.items()
                },
            )
            stages["write"] += time.perf_counter() - t
        flush()
        for scope in built_by:
            t = time.perf_counter()
            if full:
                report, equal, _ = sync_and_check(graph, scope, entities[scope], facts[scope])
                if not equal:
                    raise RuntimeError(f"the graph store does not equal the tables of {scope}")
            else:
                report = sync_graph(graph, scope, entities[scope], facts[scope])
            stages["sink"] += time.perf_counter() - t
            units["sink_rows"] += report.entities_written + report.facts_written
    finally:
        graph.close()
    print("stages: " + json.dumps({"seconds": stages, "units": units}))
    print(f"direct: {len(found)} tenants, {time.perf_counter() - started:.2f} s")
    return 0


def counts(data: Path) -> dict[str, int]:
    """Rows per table over every tenant (the two runs must agree)."""
    from resources.tables import TableStore
    from schemas.tables import Asset

    store = TableStore(data)
    assets = (Asset.RAW_TURNS, Asset.EXTRACTED_TRIPLES, Asset.VALIDATED_FACTS, Asset.ENTITIES)
    return {asset: store.total_rows(asset) for asset in assets}


# ---------------------------------------------------------------------------- the parts


def warm_up(work: Path) -> None:
    """One small run of each kind first: bytecode cached, files in the page cache."""
    landing = work / "landing-warm"
    write_day(landing, "warm/up", 0, turns=8)
    for kind in (direct, memflow_run):
        data = work / "data-warm"
        kind(landing, data, work)  # type: ignore[operator]
        shutil.rmtree(data, ignore_errors=True)


def part_batch(
    work: Path, tenants: int, days: int, rounds: int, full: bool = False
) -> dict[str, Any]:
    landing = work / "landing-batch"
    names = [f"org{t // 10:02d}/repo{t:03d}" for t in range(tenants)]
    for name in names:
        for d in range(days):
            write_day(landing, name, d)
    total_turns = tenants * days * 40
    kinds: tuple[str, ...] = ("direct", "direct_no_contracts", "memflow_run")
    if full:
        kinds = ("direct", "direct_no_contracts", "direct_full", "memflow_run")
    results: dict[str, list[dict[str, Any]]] = {k: [] for k in kinds}
    for r in range(rounds):
        order = kinds if r % 2 == 0 else tuple(reversed(kinds))
        for kind in order:
            data = work / f"data-{kind}-{r}"
            shutil.rmtree(data, ignore_errors=True)
            if kind == "memflow_run":
                got = memflow_run(landing, data, work)
            else:
                got = direct(
                    landing, data, work, kind != "direct_no_contracts", kind == "direct_full"
                )
            got["rows"] = counts(data)
            got.pop("output")
            got["turns_per_s"] = round(total_turns / got["wall_s"], 1)
            results[kind].append(got)
            print(f"  {kind:20} round {r}: {got['wall_s']:.1f} s wall, {got['cpu_s']:.1f} s CPU, "
                  f"{got['peak_rss_mib']:.0f} MiB, {got['runs']} runs", flush=True)  # fmt: skip
            shutil.rmtree(data, ignore_errors=True)
    best = {k: min(v, key=lambda g: g["wall_s"]) for k, v in results.items()}
    pairs = list(zip(results["memflow_run"], results["direct"], strict=True))
    pair_ratios = [round(m["wall_s"] / d["wall_s"], 3) for m, d in pairs]
    pair_cpu_ratios = [round(m["cpu_s"] / d["cpu_s"], 3) for m, d in pairs]
    # The figure of record: the median over rounds of the ratio within a round (the two ran
    # next to each other, so they saw the same load); the ratio of the best of each is beside.
    ratio = statistics.median(pair_ratios)
    cpu_ratio = statistics.median(pair_cpu_ratios)
    best_ratio = best["memflow_run"]["wall_s"] / best["direct"]["wall_s"]
    same = all(g["rows"] == results["direct"][0]["rows"] for v in results.values() for g in v)
    return {
        "tenants": tenants,
        "days": days,
        "turns": total_turns,
        "rounds": results,
        "best": best,
        "wall_ratio": round(ratio, 3),
        "cpu_ratio": round(cpu_ratio, 3),
        "best_wall_ratio": round(best_ratio, 3),
        "pair_wall_ratios": pair_ratios,
        "pair_cpu_ratios": pair_cpu_ratios,
        "wall_ratio_no_contracts": round(
            statistics.median(
                m["wall_s"] / p["wall_s"]
                for m, p in zip(results["memflow_run"], results["direct_no_contracts"], strict=True)
            ),
            3,
        ),
        "cpu_ratio_no_contracts": round(
            statistics.median(
                m["cpu_s"] / p["cpu_s"]
                for m, p in zip(results["memflow_run"], results["direct_no_contracts"], strict=True)
            ),
            3,
        ),
        **_full_ratios(results),
        "same_rows": same,
        "runs": best["memflow_run"]["runs"],
        "target_met": ratio <= TARGET_RATIO and best["memflow_run"]["runs"] <= TARGET_RUNS and same,
    }


def _full_ratios(results: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """memflow run against `direct_full` (the direct path with the domain work it otherwise
    leaves out), when that kind ran."""
    if "direct_full" not in results:
        return {}
    pairs = list(zip(results["memflow_run"], results["direct_full"], strict=True))
    return {
        "pair_wall_ratios_full": [round(m["wall_s"] / d["wall_s"], 3) for m, d in pairs],
        "pair_cpu_ratios_full": [round(m["cpu_s"] / d["cpu_s"], 3) for m, d in pairs],
        "wall_ratio_full": round(statistics.median(m["wall_s"] / d["wall_s"] for m, d in pairs), 3),
        "cpu_ratio_full": round(statistics.median(m["cpu_s"] / d["cpu_s"] for m, d in pairs), 3),
    }


def part_newday(work: Path, rounds: int) -> dict[str, Any]:
    setups = {"history_60": ("acme/long", 60), "history_5": ("acme/short", 5)}
    for label, (tenant, days) in setups.items():
        landing, data = work / f"landing-{label}", work / f"data-{label}"
        shutil.rmtree(landing, ignore_errors=True)
        shutil.rmtree(data, ignore_errors=True)
        for d in range(days):
            write_day(landing, tenant, d)
        memflow_run(landing, data, work)  # the history, ingested
    runs: dict[str, list[dict[str, Any]]] = {k: [] for k in setups}
    for r in range(rounds):
        order = list(setups) if r % 2 == 0 else list(reversed(setups))
        for label in order:
            tenant, days = setups[label]
            landing, data = work / f"landing-{label}", work / f"data-{label}"
            write_day(landing, tenant, days + r)  # a new day
            got = memflow_run(landing, data, work, tenant)
            got.pop("output")
            runs[label].append(got)
            print(f"  {label:10} new day {r}: run {got['run_s']:.2f} s, command "
                  f"{got['wall_s']:.1f} s", flush=True)  # fmt: skip
    med = {k: statistics.median(g["run_s"] for g in v) for k, v in runs.items()}
    med_wall = {k: statistics.median(g["wall_s"] for g in v) for k, v in runs.items()}
    med_cpu = {k: statistics.median(g["cpu_s"] for g in v) for k, v in runs.items()}
    ratio = med["history_60"] / med["history_5"]
    return {
        "rounds": runs,
        "median_run_s": med,
        "median_command_s": med_wall,
        "run_ratio": round(ratio, 3),
        "command_ratio": round(med_wall["history_60"] / med_wall["history_5"], 3),
        "median_command_cpu_s": med_cpu,
        "command_cpu_ratio": round(med_cpu["history_60"] / med_cpu["history_5"], 3),
        "target_met": ratio <= TARGET_NEWDAY,
    }


# Columns a rerun sets anew by design (when a file was read, when a turn was extracted): left
# out when a killed-and-rerun data directory is compared with a clean one.
CLOCK_COLUMNS = ("read_at", "extracted_at")


def table_state(data: Path) -> dict[str, dict[str, Any]]:
    """Each Delta table of a data directory: its version and a digest of its rows (sorted, the
    clock columns left out)."""
    import hashlib

    import polars as pl
    from deltalake import DeltaTable

    out: dict[str, dict[str, Any]] = {}
    root = data / "tables"
    for path in sorted([*root.iterdir(), *root.glob("_summaries/*")]):
        if not (path / "_delta_log").is_dir():
            continue
        table = DeltaTable(str(path))
        df = pl.read_delta(str(path))
        df = df.drop([c for c in CLOCK_COLUMNS if c in df.columns])
        rows = sorted(repr(row) for row in df.select(sorted(df.columns)).iter_rows())
        digest = hashlib.sha256()
        for row in rows:
            digest.update(row.encode())
        out[str(path.relative_to(root))] = {
            "version": table.version(),
            "rows": df.height,
            "sha256": digest.hexdigest(),
        }
    return out


def killed_run(landing: Path, data: Path, cwd: Path, tables: int) -> dict[str, Any]:
    """`memflow run` started and SIGKILLed (its whole process group) once `tables` Delta tables
    exist under the data directory (a point of the run that does not move with the load)."""
    cmd = [str(BIN / "memflow"), "run", "--landing", str(landing), "--data", str(data)]
    started = time.perf_counter()
    proc = subprocess.Popen(
        cmd,
        env=env_for(landing, data),
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    root = data / "tables"
    while proc.poll() is None:
        made = sum(1 for p in root.glob("*/_delta_log")) if root.is_dir() else 0
        if made >= tables:
            os.killpg(proc.pid, 9)
            proc.wait(30)
            return {"killed": True, "after_s": round(time.perf_counter() - started, 2)}
        time.sleep(0.05)
    return {"killed": False, "after_s": round(time.perf_counter() - started, 2)}


def part_rerun(work: Path, tenants: int, days: int, points: list[int]) -> dict[str, Any]:
    """An idempotent re-run (nothing new landed) and kill -9 at points of a run, then a re-run:
    commits made, seconds, and whether the tables equal a clean run's."""
    landing = work / "landing-rerun"
    shutil.rmtree(landing, ignore_errors=True)
    for t in range(tenants):
        for d in range(days):
            write_day(landing, f"org{t // 10:02d}/repo{t:03d}", d)
    clean = work / "data-rerun-clean"
    shutil.rmtree(clean, ignore_errors=True)
    first = memflow_run(landing, clean, work)
    first.pop("output")
    before = table_state(clean)
    again = memflow_run(landing, clean, work)
    again.pop("output")
    after = table_state(clean)
    commits = sum(after[t]["version"] - before[t]["version"] for t in before)
    print(f"  clean run {first['wall_s']:.1f} s; re-run {again['wall_s']:.1f} s wall, "
          f"{again['cpu_s']:.1f} s CPU, {commits} commits", flush=True)  # fmt: skip
    kills = []
    for point in points:
        data = work / f"data-rerun-kill-{point}"
        shutil.rmtree(data, ignore_errors=True)
        killed = killed_run(landing, data, work, point)
        partial = table_state(data) if (data / "tables").is_dir() else {}
        rerun = memflow_run(landing, data, work)
        rerun.pop("output")
        state = table_state(data)
        # The summaries hold the last run's step counts (facts new against already stored),
        # so after a kill they equal the clean run's or its re-run's; every other table the
        # clean run's.
        equal = {
            t: state.get(t, {}).get("sha256")
            in {before[t]["sha256"], *([after[t]["sha256"]] if t.startswith("_summaries") else [])}
            for t in before
        }
        kills.append(
            {
                "once_tables_exist": point,
                **killed,
                "tables_committed_before_kill": sum(1 for t in partial.values() if t["rows"]),
                "rerun": rerun,
                "tables_equal_clean": all(equal.values()) and set(state) == set(before),
                "unequal": sorted(t for t, ok in equal.items() if not ok),
            }
        )
        print(f"  kill -9 once {point} tables exist ({killed['after_s']:.1f} s; killed: "
              f"{killed['killed']}): "
              f"re-run {rerun['wall_s']:.1f} s, tables equal a clean run's: "
              f"{kills[-1]['tables_equal_clean']}", flush=True)  # fmt: skip
        shutil.rmtree(data, ignore_errors=True)
    return {
        "tenants": tenants,
        "days": days,
        "clean": first,
        "rerun": again,
        "rerun_commits": commits,
        "rerun_wall_ratio": round(again["wall_s"] / first["wall_s"], 3),
        "tables": before,
        "kills": kills,
        "target_met": commits == 0 and all(k["tables_equal_clean"] for k in kills),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=("all", "batch", "newday", "rerun"), default="all")
    parser.add_argument("--tenants", type=int, default=40)
    parser.add_argument("--days", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=4, help="rounds of (a)")
    parser.add_argument("--newday-rounds", type=int, default=3)
    parser.add_argument(
        "--kill-at", default="2,4,6,7", help="(c): kill -9 once this many tables exist"
    )
    parser.add_argument("--direct", nargs=2, metavar=("LANDING", "DATA"), help=argparse.SUPPRESS)
    parser.add_argument("--no-contracts", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--full", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--with-direct-full",
        action="store_true",
        help="(a): a fourth kind, direct_full: the direct path with the domain work memflow run "
        "does beyond it (checks, survey, summaries, retraction tables)",
    )
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args(argv)
    if args.direct:
        return direct_main(
            Path(args.direct[0]), Path(args.direct[1]), not args.no_contracts, args.full
        )

    work = Path(tempfile.mkdtemp(prefix="memflow-bench-scale-"))
    result: dict[str, Any] = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load_avg_at_start": os.getloadavg(),
        },
    }
    if RESULTS.exists():  # keep the other part's last figures when running one part
        try:
            previous = json.loads(RESULTS.read_text())
            result.update({k: previous[k] for k in ("batch", "newday", "rerun") if k in previous})
        except ValueError:
            pass
    try:
        warm_up(work)
        if args.part in ("all", "batch"):
            print(f"(a) {args.tenants} tenants x {args.days} days x 40 turns", flush=True)
            result["batch"] = part_batch(
                work, args.tenants, args.days, args.rounds, args.with_direct_full
            )
        if args.part in ("all", "newday"):
            print("(b) a new day: 60 days of history vs 5", flush=True)
            result["newday"] = part_newday(work, args.newday_rounds)
        if args.part in ("all", "rerun"):
            print("(c) an idempotent re-run; kill -9 during a run, then a re-run", flush=True)
            points = [int(x) for x in args.kill_at.split(",") if x]
            result["rerun"] = part_rerun(work, args.tenants, args.days, points)
    finally:
        result["machine"]["load_avg_at_end"] = os.getloadavg()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2, default=str) + "\n")
    ok = True
    if "batch" in result and args.part in ("all", "batch"):
        b = result["batch"]
        print(
            f"(a) memflow run / direct, median of the rounds' pairs: wall {b['wall_ratio']}x, "
            f"CPU {b['cpu_ratio']}x (best of each: {b['best_wall_ratio']}x) "
            f"(direct without contracts: {b['wall_ratio_no_contracts']}x, "
            f"{b['cpu_ratio_no_contracts']}x), {b['runs']} runs; "
            f"turns/s {b['best']['memflow_run']['turns_per_s']} vs "
            f"{b['best']['direct']['turns_per_s']}; peak RSS "
            f"{b['best']['memflow_run']['peak_rss_mib']} vs {b['best']['direct']['peak_rss_mib']} "
            f"MiB; same rows: {b['same_rows']}; target met: {b['target_met']}"
        )
        if "cpu_ratio_full" in b:
            print(
                f"(a) memflow run / direct_full (the same checks, survey, summaries and tables "
                f"through memflow's functions): wall {b['wall_ratio_full']}x, "
                f"CPU {b['cpu_ratio_full']}x"
            )
        ok &= b["target_met"]
    if "newday" in result and args.part in ("all", "newday"):
        n = result["newday"]
        print(
            f"(b) new day, 60 days / 5 days of history: run {n['run_ratio']}x "
            f"({n['median_run_s']}), command {n['command_ratio']}x, command CPU "
            f"{n['command_cpu_ratio']}x; target met: {n['target_met']}"
        )
        ok &= n["target_met"]
    if "rerun" in result and args.part in ("all", "rerun"):
        c = result["rerun"]
        print(
            f"(c) re-run with nothing new: {c['rerun']['wall_s']} s ({c['rerun_wall_ratio']}x the "
            f"first run), {c['rerun_commits']} commits; kill -9 then re-run, tables equal a clean "
            f"run's: {[k['tables_equal_clean'] for k in c['kills']]}; target met: {c['target_met']}"
        )
        ok &= c["target_met"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
