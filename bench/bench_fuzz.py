"""The fuzz suite at its big profile, with the counts it ran up.

    python bench/bench_fuzz.py [--workers 2] [--out bench/results/fuzz.json] [PYTEST_ARGS...]

Runs ``pytest tests/fuzz`` with ``HYPOTHESIS_PROFILE=fuzz`` (many more generated zones and
requests, every seed of the combinatorial generator, several runs through `memflow run`; random,
not derandomized) and ``MEMFLOW_FUZZ_TALLY`` set, then adds up what every check saw and prints,
per group (domain functions, in-process pipeline runs, the CLI, the write endpoints):

- inputs tried: landing zones (domain, pipeline, cli), requests (api), accepted writes
  (api_pipeline), schema-generated requests (api_schemathesis);
- lines: the landing lines (JSONL lines, Parquet rows) the inputs held, and how many were
  accounted for (a stored turn, a quarantined line, or a line of a listed landing problem);
- turns, landing rejects, triples, facts, landing problems;
- secrets planted, and secrets found in any output (must be 0).

Exit status: pytest's. Raw numbers go to bench/results/fuzz.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "fuzz.json"
COLUMNS = [
    ("inputs", "inputs tried"),
    ("lines", "lines"),
    ("accounted", "accounted for"),
    ("turns", "turns"),
    ("rejects", "rejects"),
    ("triples", "triples"),
    ("facts", "facts"),
    ("problems", "problems"),
    ("secrets_planted", "secrets planted"),
    ("secrets_found", "secrets found"),
]


def _sum(tallies: list[dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for tally in tallies:
        for group, counts in tally.items():
            into = out.setdefault(group, {"reasons": {}})
            for key, value in counts.items():
                if key in ("reasons", "planted_by_channel", "found_by_channel"):
                    into.setdefault(key, {})
                    for reason, n in value.items():
                        into[key][reason] = into[key].get(reason, 0) + n
                elif key == "leaks":  # secret -> where it was found
                    for secret, places in value.items():
                        into.setdefault("leaks", {}).setdefault(secret, []).extend(places)
                else:
                    into[key] = into.get(key, 0) + value
    return out


def _table(groups: dict[str, dict[str, Any]]) -> str:
    head = "| group | " + " | ".join(label for _, label in COLUMNS) + " |"
    rule = "|---|" + "---:|" * len(COLUMNS)
    rows = [head, rule]
    total = {key: 0 for key, _ in COLUMNS}
    for group in sorted(groups):
        counts = groups[group]
        cells = [f"{counts.get(key, 0):,}" for key, _ in COLUMNS]
        rows.append(f"| {group} | " + " | ".join(cells) + " |")
        for key, _ in COLUMNS:
            total[key] += counts.get(key, 0)
    rows.append("| **all** | " + " | ".join(f"**{total[k]:,}**" for k, _ in COLUMNS) + " |")
    return "\n".join(rows)


def _channels(groups: dict[str, dict[str, Any]]) -> str:
    """Secrets planted and found per channel (where they were planted) and source (a family
    the redactor claims, or gitleaks' held-out rule tests), over every group."""
    planted: dict[str, int] = {}
    found: dict[str, int] = {}
    for counts in groups.values():
        for key, n in counts.get("planted_by_channel", {}).items():
            planted[key] = planted.get(key, 0) + n
        for key, n in counts.get("found_by_channel", {}).items():
            found[key] = found.get(key, 0) + n
    rows = ["| channel | source | planted | found |", "|---|---|---:|---:|"]
    for key in sorted(planted):
        channel, _, source = key.partition("|")
        rows.append(f"| {channel} | {source} | {planted[key]:,} | {found.get(key, 0):,} |")
    total_p, total_f = sum(planted.values()), sum(found.values())
    rows.append(f"| **all** | | **{total_p:,}** | **{total_f:,}** |")
    return "\n".join(rows)


def _versions() -> dict[str, str]:
    import hypothesis
    import polars

    return {
        "python": platform.python_version(),
        "polars": polars.__version__,
        "hypothesis": hypothesis.__version__,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args, pytest_args = parser.parse_known_args()
    with tempfile.TemporaryDirectory(prefix="memflow-fuzz-tally-") as tally_dir:
        env = {k: v for k, v in os.environ.items() if k != "CI"}
        env.update(HYPOTHESIS_PROFILE="fuzz", MEMFLOW_FUZZ_TALLY=tally_dir)
        command = [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-n",
            str(args.workers),
            "tests/fuzz",
            *pytest_args,
        ]
        started = time.time()
        run = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
        seconds = time.time() - started
        tallies = [json.loads(p.read_text()) for p in sorted(Path(tally_dir).glob("*.json"))]
    summary = next(
        (line for line in reversed(run.stdout.splitlines()) if " in " in line), "no summary"
    )
    groups = _sum(tallies)
    print(run.stdout[-4000:] if run.returncode else summary)
    if run.returncode:
        print(run.stderr[-2000:], file=sys.stderr)
    print()
    print(_table(groups))
    print()
    print(_channels(groups))
    print(f"\n{seconds / 60:.1f} min on {os.cpu_count()} CPUs, pytest exit {run.returncode}")
    result = {
        "command": "HYPOTHESIS_PROFILE=fuzz " + " ".join(["python", *command[1:]]),
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "seconds": round(seconds, 1),
        "cpus": os.cpu_count(),
        "machine": platform.platform(),
        "versions": _versions(),
        "pytest_exit": run.returncode,
        "pytest_summary": summary.strip("= "),
        "pytest_output_tail": run.stdout[-3000:] if run.returncode else "",
        "groups": groups,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    return run.returncode


if __name__ == "__main__":
    sys.exit(main())
