"""Contract validation throughput: 1,000,000 generated triples through triage + the pandera
contract on one core. Target: at least 100,000 triples/s. Reports peak memory.

    POLARS_MAX_THREADS=1 python bench/bench_validation.py [--rows 1000000]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

os.environ.setdefault("POLARS_MAX_THREADS", "1")  # one core, as the target says

import numpy as np
import polars as pl

from schemas.contracts import TripleContract
from schemas.tables import TRIPLES, conform
from schemas.triples import triage

RESULTS = Path(__file__).parent / "results" / "validation.json"


def generate(rows: int, seed: int = 7) -> pl.DataFrame:
    """Realistic shape: 50k distinct names, 40 predicates, 2% bad rows of several kinds."""
    rng = np.random.default_rng(seed)
    names = np.array([f"service-{i}/module-{i % 97}" for i in range(50_000)])
    preds = np.array([f"PRED_{i}" for i in range(38)] + ["USES", "DEPENDS_ON"])
    subject = names[rng.integers(0, len(names), rows)]
    obj = names[rng.integers(0, len(names), rows)]
    predicate = preds[rng.integers(0, len(preds), rows)].astype(object)
    confidence = rng.uniform(0.6, 1.0, rows)
    bad = rng.random(rows)
    predicate[bad < 0.005] = "not upper"
    confidence[(bad >= 0.005) & (bad < 0.01)] = 0.2
    subject = subject.astype(object)
    subject[(bad >= 0.01) & (bad < 0.015)] = "x" * 130
    t0 = datetime(2026, 11, 1, tzinfo=UTC)
    df = pl.DataFrame(
        {
            "triple_id": [f"tr_{i:016x}" for i in range(rows)],
            "tenant_id": "acme",
            "ns": "api",
            "day": "2026-11-01",
            "subject": subject.tolist(),
            "predicate": predicate.tolist(),
            "object": obj.tolist(),
            "confidence": confidence,
            "valid_from": pl.datetime_range(
                t0, t0 + timedelta(seconds=rows - 1), "1s", eager=True, time_zone="UTC"
            ),
            "session_id": "s1",
            "turn_id": "t1",
            "client": "codex",
            "model": "explicit",
            "source": "explicit",
        }
    )
    return conform(df, TRIPLES)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    args = parser.parse_args()
    df = generate(args.rows)
    started = time.perf_counter()
    good, bad = triage(df)
    TripleContract.validate(good, lazy=True)
    seconds = time.perf_counter() - started
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    result = {
        "rows": args.rows,
        "valid": good.height,
        "rejected": bad.height,
        "seconds": round(seconds, 3),
        "triples_per_s": round(args.rows / seconds),
        "target_triples_per_s": 100_000,
        "peak_rss_mib": round(peak_mib, 1),
        "polars_threads": pl.thread_pool_size(),
        "machine": f"{platform.machine()} {os.cpu_count()} cores, Python "
        f"{platform.python_version()}, polars {pl.__version__}",
        "command": "POLARS_MAX_THREADS=1 python bench/bench_validation.py",
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0 if result["triples_per_s"] >= 100_000 else 1


if __name__ == "__main__":
    sys.exit(main())
