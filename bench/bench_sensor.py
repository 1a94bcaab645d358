"""The landing sensor and the turns stage at 100, 1,000 and 10,000 tenant directories.

    python bench/bench_sensor.py                    # 100, 1,000, 10,000 tenants
    python bench/bench_sensor.py --sizes 100 1000   # fewer

Each size is a landing zone in a temp directory: N tenant directories (`org<i // 50>/repo<i>`,
50 repos an org), each with two small JSONL files (two turns each). For each size:

- **tick**: `pipelines.sensors.scan_landing` with the cursor of the previous tick, nothing
  changed (what every 5 s tick of a quiet zone costs): median of 5 and the best, wall and CPU;
  beside it, the same zone through the per-file scan the sensor did before (`old_scan`, the
  code of main before this change: each file opened and its hash reused by size and mtime).
- **opens**: one such tick in a child process under ``strace -f -e trace=openat,open``: the
  files and the directories it opened (a tick that opens a landing file fails the bench).
- **cursor**: the size of the new cursor (JSON) against the old per-file cursor.
- **first tick after `memflow run`**: no cursor, every tenant's landing index stored; the
  seeding reads each index (`SEED_PER_TICK` a tick), timed per tenant.
- **raw_turns, one tenant**: `memflow.turns.ingest_turns` for one new file of one tenant as
  the asset now calls it (the tenant's own directory listed), against the same call after a
  `discover` of the whole zone (what the asset did before).

Results go to bench/results/sensor.json.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

RESULTS = ROOT / "bench" / "results" / "sensor.json"
NOW = datetime(2026, 11, 5, tzinfo=UTC)


def build_zone(root: Path, tenants: int) -> list[tuple[str, str]]:
    keys = []
    for i in range(tenants):
        org, repo = f"org{i // 50:04d}", f"repo{i:05d}"
        folder = root / org / repo
        folder.mkdir(parents=True)
        for day in (1, 2):
            lines = [
                json.dumps(
                    {
                        "org": org,
                        "repo": repo,
                        "session_id": f"s{day}",
                        "turn_id": str(t),
                        "ts": f"2026-11-0{day}T10:00:0{t}Z",
                        "role": "user",
                        "content": f"turn {t} of day {day}",
                        "client": "bench",
                    }
                )
                for t in range(2)
            ]
            (folder / f"2026-11-0{day}.jsonl").write_text("\n".join(lines) + "\n")
        keys.append((org, repo))
    return keys


def old_scan(root: Path, cursor: dict[str, dict]) -> dict[str, dict]:
    """The sensor's scan before this change (main at bc5929a): a fingerprint per file."""
    from memflow import landing

    found = landing.discover(root)
    new: dict[str, dict] = {}
    for _scope, files in found.items():
        for path in files:
            rel = landing.relative_name(path, root)
            previous = cursor.get(rel)
            fp = landing.fingerprint(
                path, root, landing.FileFingerprint.from_dict(previous) if previous else None
            )
            new[rel] = fp.as_dict()
    return new


def timed(fn, repeat: int = 5) -> dict:
    walls, cpus = [], []
    for _ in range(repeat):
        w, c = time.perf_counter(), time.process_time()
        fn()
        walls.append(time.perf_counter() - w)
        cpus.append(time.process_time() - c)
    return {
        "wall_median_s": round(statistics.median(walls), 4),
        "wall_best_s": round(min(walls), 4),
        "cpu_median_s": round(statistics.median(cpus), 4),
    }


_TICK_CHILD = """
import sys, json
sys.path.insert(0, {root!r})
from pathlib import Path
from pipelines.sensors import ZoneCursor, scan_landing
cursor = ZoneCursor.parse(Path({cursor!r}).read_text())
print("TICK-START", flush=True)
scan = scan_landing(Path({zone!r}), cursor, set(json.loads(Path({known!r}).read_text())))
print("TICK-END", len(scan.changed), flush=True)
"""


def strace_tick(zone: Path, cursor_text: str, known: list[str], work: Path) -> dict:
    """openat calls of one tick (between the markers), by kind."""
    if not shutil.which("strace"):
        return {"error": "strace not installed"}
    (work / "cursor.json").write_text(cursor_text)
    (work / "known.json").write_text(json.dumps(known))
    script = _TICK_CHILD.format(
        root=str(ROOT), cursor=str(work / "cursor.json"), zone=str(zone),
        known=str(work / "known.json"),
    )  # fmt: skip
    trace = work / "trace.txt"
    child = subprocess.run(
        ["strace", "-f", "-qq", "-e", "trace=openat,open,write", "-o", str(trace),
         sys.executable, "-c", script],
        capture_output=True, text=True, timeout=3600,
    )  # fmt: skip
    if child.returncode != 0:
        return {"error": child.stderr[-2000:]}
    text = trace.read_text(errors="replace").splitlines()
    start = next(i for i, line in enumerate(text) if "TICK-START" in line)
    end = next(i for i, line in enumerate(text) if "TICK-END" in line)
    opens = [line for line in text[start:end] if re.search(r"\bopen(at)?\(", line)]
    zone_text = str(zone)
    in_zone = [line for line in opens if zone_text in line or "AT_FDCWD" not in line]
    directories = [line for line in in_zone if "O_DIRECTORY" in line]
    files = [line for line in in_zone if "O_DIRECTORY" not in line]
    landing_files = [line for line in files if re.search(r"\.(jsonl|parquet)\"", line)]
    return {
        "opens_in_zone": len(in_zone),
        "directories": len(directories),
        "files": len(files),
        "landing_files": len(landing_files),
        "file_examples": files[:5],
    }


def seed_zone(root: Path, data: Path, keys: list[tuple[str, str]]) -> None:
    """Each tenant's landing index as a run stores it (size and mtime of each file)."""
    import polars as pl

    from memflow import landing
    from resources.tables import TableStore
    from schemas.scope import Scope
    from schemas.tables import LANDING_FILES, Asset, conform

    tables = TableStore(data)
    for org, repo in keys:
        scope = Scope(org, repo)
        files, _ = landing.tenant_files(root, scope)
        rows = []
        for path in files:
            st = path.stat()
            rows.append(
                {
                    "tenant_id": org, "ns": repo, "source_file": landing.source_name(path, root),
                    "size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": "0" * 64,
                    "records": 2, "turns": 2, "rejects": 0, "read_at": NOW,
                }
            )  # fmt: skip
        tables.write_table(conform(pl.DataFrame(rows), LANDING_FILES), Asset.LANDING_FILES, scope)


def one_tenant(root: Path, keys: list[tuple[str, str]]) -> dict:
    """raw_turns' domain call for one tenant with one new file, listing only that tenant
    (now) against after a discover of the whole zone (before)."""
    from memflow import landing
    from memflow.turns import TurnTables, ingest_turns
    from schemas.scope import Scope

    org, repo = keys[len(keys) // 2]
    scope = Scope(org, repo)
    previous = ingest_turns(root, scope, None, TurnTables.empty(), NOW).tables
    extra = root / org / repo / "2026-11-03.jsonl"
    extra.write_text(
        json.dumps({"org": org, "repo": repo, "session_id": "s3", "turn_id": "0",
                    "ts": "2026-11-03T10:00:00Z", "role": "user", "content": "new",
                    "client": "bench"}) + "\n"
    )  # fmt: skip
    try:
        now = timed(lambda: ingest_turns(root, scope, None, previous, NOW))
        before = timed(
            lambda: ingest_turns(root, scope, landing.discover(root).get(scope, []), previous, NOW)
        )
    finally:
        extra.unlink()
    return {"tenant_listing_only": now, "whole_zone_discover": before}


def measure(size: int, work: Path) -> dict:
    from pipelines.sensors import scan_landing

    zone, data = work / "landing", work / "data"
    zone.mkdir()
    t = time.perf_counter()
    keys = build_zone(zone, size)
    out: dict = {"tenants": size, "files": 2 * size, "build_s": round(time.perf_counter() - t, 1)}
    known = {f"{o}/{r}" for o, r in keys}
    first = scan_landing(zone, None, set())
    out["tick"] = timed(lambda: scan_landing(zone, first.cursor, known))
    assert not scan_landing(zone, first.cursor, known).changed
    old_cursor = old_scan(zone, {})
    out["old_tick"] = timed(lambda: old_scan(zone, old_cursor))
    out["tick_vs_old"] = round(out["tick"]["wall_median_s"] / out["old_tick"]["wall_median_s"], 3)
    cursor_text = first.cursor.dumps()
    out["cursor_bytes"] = len(cursor_text.encode())
    out["old_cursor_bytes"] = len(json.dumps(old_cursor, sort_keys=True).encode())
    out["strace"] = strace_tick(zone, cursor_text, sorted(known), work)
    t = time.perf_counter()
    seed_zone(zone, data, keys)
    out["seed_write_s"] = round(time.perf_counter() - t, 1)
    from resources.tables import TableStore
    from schemas.tables import Asset

    tables = TableStore(data)
    t = time.perf_counter()
    seeded = scan_landing(
        zone, None, known, lambda s: tables.read_table(Asset.LANDING_FILES, s), seed_limit=size
    )
    spent = time.perf_counter() - t
    out["first_tick_seeded"] = {
        "wall_s": round(spent, 3),
        "per_tenant_ms": round(1000 * spent / size, 3),
        "asked_for": len(seeded.changed),
    }
    out["raw_turns_one_tenant"] = one_tenant(zone, keys)
    ratio = (
        out["raw_turns_one_tenant"]["tenant_listing_only"]["wall_median_s"]
        / out["raw_turns_one_tenant"]["whole_zone_discover"]["wall_median_s"]
    )
    out["raw_turns_one_tenant"]["now_vs_before"] = round(ratio, 3)
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1_000, 10_000])
    args = parser.parse_args()
    results = {
        "machine": {"cpus": os.cpu_count(), "load_before": os.getloadavg()},
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
        "sizes": [],
    }
    for size in args.sizes:
        work = Path(tempfile.mkdtemp(prefix=f"memflow-sensor-{size}-"))
        try:
            row = measure(size, work)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        results["sizes"].append(row)
        print(json.dumps(row, indent=1), flush=True)
    results["load_after"] = os.getloadavg()
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=1) + "\n")
    bad = [r["tenants"] for r in results["sizes"] if r["strace"].get("landing_files")]
    if bad:
        print(f"a quiet tick opened landing files at {bad} tenants", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
