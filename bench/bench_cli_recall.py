"""`memflow recall` without a running API: a lexical question, against the same question with
the default ranking (which loads the embedding model), each a whole command in a new process.

    python bench/bench_cli_recall.py --data DIR [--tenant ORG/REPO] [--rounds 5]

DIR is a data directory `memflow run` wrote (e.g. `make run`'s ./.memflow). Each round runs
both commands one after the other, alternating which goes first, and records the wall time of
the process and which model runtime it imported (torch, onnxruntime) or the API's web stack
(fastapi). The auto ranking uses `--embedder` (default `onnx`, the settings' default). Python
runs as deployed: from cached bytecode (a sandbox's PYTHONDONTWRITEBYTECODE is dropped, and one
unrecorded warm-up round writes the cache). Results go to
`bench/results/cli_recall.json`: p50 and max per kind, and the median ratio within a round.
The target: a lexical answer within 2 s, with no model loaded.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "cli_recall.json"
QUESTION = "which database does the payments service use?"
PROBE = (
    "import sys; from pipelines.cli import main; rc = main(sys.argv[1:]); "
    "print('LOADED=' + ','.join(m for m in ('torch', 'onnxruntime', 'fastapi') "
    "if m in sys.modules), file=sys.stderr); sys.exit(rc)"
)


def once(data: str, tenant: str, ranking: str, env: dict[str, str]) -> dict[str, object]:
    argv = ["recall", "--data", data, "--tenant", tenant, QUESTION, "--ranking", ranking]
    t0 = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *argv], env=env, cwd=ROOT,
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    seconds = time.perf_counter() - t0
    if done.returncode != 0:
        raise RuntimeError(f"memflow recall --ranking {ranking} failed: {done.stderr[-2000:]}")
    loaded = done.stderr.rpartition("LOADED=")[2].split("\n", 1)[0]
    mods = [m for m in loaded.strip().split(",") if m]
    return {"seconds": round(seconds, 3), "torch": "torch" in mods, "imported": mods}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True)
    parser.add_argument("--tenant", default="acme/payments-api")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--embedder", default="onnx", help="for the auto ranking (onnx)")
    args = parser.parse_args(argv)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMFLOW_")}
    env.update(MEMFLOW_EMBEDDER=args.embedder, HF_HUB_OFFLINE="1", PYTHONPATH=str(ROOT))
    env.pop("MEMFLOW_API_KEY", None)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    for kind in ("lexical", "auto"):  # warm-up, not recorded: writes the bytecode cache
        once(args.data, args.tenant, kind, env)
    rows: dict[str, list[dict[str, object]]] = {"lexical": [], "auto": []}
    ratios = []
    for i in range(args.rounds):
        order = ["lexical", "auto"] if i % 2 == 0 else ["auto", "lexical"]
        got = {kind: once(args.data, args.tenant, kind, env) for kind in order}
        for kind, row in got.items():
            rows[kind].append(row)
        ratios.append(got["lexical"]["seconds"] / got["auto"]["seconds"])
        print(
            f"round {i + 1}: lexical {got['lexical']['seconds']} s, auto {got['auto']['seconds']} s"
        )
    report = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": "python bench/bench_cli_recall.py " + " ".join(argv or sys.argv[1:]),
        "cpus": os.cpu_count(),
        "embedder": args.embedder,
        "load": os.getloadavg(),
        "rounds": rows,
        "summary": {
            kind: {
                "p50_s": statistics.median(r["seconds"] for r in found),
                "max_s": max(r["seconds"] for r in found),
                "loaded_torch": any(r["torch"] for r in found),
                "imported": sorted({m for r in found for m in r["imported"]}),
            }
            for kind, found in rows.items()
        },
        "median_ratio_lexical_to_auto": round(statistics.median(ratios), 3),
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    print(
        json.dumps(report["summary"], indent=2), f"ratio {report['median_ratio_lexical_to_auto']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
