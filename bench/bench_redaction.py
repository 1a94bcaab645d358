"""Redaction throughput on one core: names (clean, dirty, a repeated column) and turn texts.

    POLARS_MAX_THREADS=1 python bench/bench_redaction.py [--rows 1000000] [--out PATH]

Reports CPU seconds (process time, steadier than wall time on a shared machine) and wall
seconds. Data are synthetic and seeded: coding-conversation entity names, mostly clean and
heavily repeated, with 1% carrying a fake secret; turn texts of about 500 characters.
Results go to bench/results/redaction.json (for bench/report.py) unless --out says otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import string
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("POLARS_MAX_THREADS", "1")  # one core, before polars is imported

import polars as pl

from schemas import redaction
from schemas.redaction import engine

RESULTS = Path(__file__).parent / "results" / "redaction.json"
_RNG = random.Random(7)
_ALNUM = string.ascii_letters + string.digits

_WORDS = (
    "auth", "service", "user", "repository", "postgres", "redis", "kafka", "fastapi",
    "pydantic", "retry", "policy", "login", "flow", "cache", "tenant", "schema", "migration",
    "worker", "queue", "scheduler", "dagster", "asset", "sensor", "graph", "vector", "index",
    "embedding", "model", "recall", "gateway", "billing", "invoice", "payment", "webhook",
    "handler", "config", "loader", "parser", "tokenizer", "router", "middleware", "session",
    "cookie", "cors", "rate", "limiter", "dockerfile", "helm", "chart", "terraform", "module",
    "ci", "pipeline", "lint", "test", "fixture", "mock", "benchmark",
)  # fmt: skip


def _token(n: int) -> str:
    return "".join(_RNG.choice(_ALNUM) for _ in range(n))


def _clean_name() -> str:
    shape = _RNG.randrange(6)
    words = [_RNG.choice(_WORDS) for _ in range(_RNG.randint(1, 4))]
    if shape == 0:
        return "".join(w.capitalize() for w in words)
    if shape == 1:
        return "src/" + "/".join(words) + ".py"
    if shape == 2:
        return f"{words[0]} v{_RNG.randint(0, 9)}.{_RNG.randint(0, 30)}.{_RNG.randint(0, 9)}"
    if shape == 3:
        return f"commit {_RNG.getrandbits(28):07x}"
    return " ".join(words)


def _dirty_name() -> str:
    shape = _RNG.randrange(6)
    if shape == 0:
        return f"password={_token(12)}"
    if shape == 1:
        return f"{_RNG.choice(_WORDS)}.{_RNG.choice(_WORDS)}@example.com"
    if shape == 2:
        return "AKIA" + "".join(
            _RNG.choice(string.ascii_uppercase + string.digits) for _ in range(16)
        )
    if shape == 3:
        return f"postgres://app:{_token(10)}@db:5432/{_RNG.choice(_WORDS)}"
    if shape == 4:
        return "ghp_" + _token(36)
    return f"Authorization: Bearer {_token(40)}"


def _turn(dirty: bool) -> str:
    sentences = [
        f"I updated {_clean_name()} so that the {_RNG.choice(_WORDS)} uses the primary key.",
        f"See https://docs.example.org/{_RNG.choice(_WORDS)} for the {_RNG.choice(_WORDS)} API.",
        f"The test in src/{_RNG.choice(_WORDS)}/test_{_RNG.choice(_WORDS)}.py now passes.",
        f"Next, refactor the {_RNG.choice(_WORDS)} {_RNG.choice(_WORDS)} and bump to v1.4.2.",
        f"Commit {_RNG.getrandbits(28):07x} reverts the token refresh change in the gateway.",
        f"The {_RNG.choice(_WORDS)} {_RNG.choice(_WORDS)} keeps a cache key per tenant and user.",
        f"Run `pytest tests/{_RNG.choice(_WORDS)} -q` after the {_RNG.choice(_WORDS)} migration.",
        f"Logs show {_RNG.randint(2, 900)} retries from the {_RNG.choice(_WORDS)} worker today.",
    ]
    text = " ".join(_RNG.sample(sentences, len(sentences)))
    if dirty:
        text += f" I exported {_dirty_name()} before running it."
    return text[:500]


def _timed(fn: Callable[[], Any]) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def _rate(label: str, items: int, fn: Callable[[], Any], results: dict[str, Any]) -> None:
    wall, cpu = _timed(fn)
    results[label] = {
        "items": items,
        "per_s_cpu": round(items / cpu) if cpu else None,
        "per_s_wall": round(items / wall),
    }
    print(
        f"{label:<30} {items:>9,} items  {items / cpu:>12,.0f}/s cpu  {items / wall:>12,.0f}/s wall"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows in the name column")
    parser.add_argument("--distinct", type=int, default=50_000, help="distinct names in it")
    parser.add_argument("--texts", type=int, default=5_000, help="turn texts")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where the JSON goes")
    args = parser.parse_args(argv)

    vocab = [_clean_name() for _ in range(args.distinct)]
    dirty_vocab = [_dirty_name() for _ in range(max(1, args.distinct // 100))]
    column = pl.Series(
        "object",
        [
            _RNG.choice(dirty_vocab) if _RNG.random() < 0.01 else _RNG.choice(vocab)
            for _ in range(args.rows)
        ],
    )
    unique_clean = list(dict.fromkeys(_clean_name() for _ in range(50_000)))
    unique_dirty = list(dict.fromkeys(_dirty_name() for _ in range(5_000)))
    clean_turns = [_turn(False) for _ in range(args.texts)]
    dirty_turns = [_turn(True) for _ in range(args.texts)]
    cut = engine._cut  # uncached: every call does the work

    results: dict[str, Any] = {"polars_threads": pl.thread_pool_size()}
    print(f"polars threads: {pl.thread_pool_size()}, python {sys.version.split()[0]}")
    _rate(
        "series_names_1pct_dirty",
        args.rows,
        lambda: redaction.redact_series(column),
        results,
    )
    _rate(
        "secret_mask_names",
        args.rows,
        lambda: redaction.secret_mask(column),
        results,
    )
    _rate(
        "scalar_clean_names",
        len(unique_clean),
        lambda: [cut(n) for n in unique_clean],
        results,
    )
    _rate(
        "scalar_dirty_names",
        len(unique_dirty),
        lambda: [cut(n) for n in unique_dirty],
        results,
    )
    engine._cut_short.cache_clear()
    sample = column.head(200_000).to_list()
    _rate(
        "scalar_repeated_names_cached",
        len(sample),
        lambda: [redaction.redact(n) for n in sample],
        results,
    )
    _rate(
        "scalar_turns_clean",
        len(clean_turns),
        lambda: [cut(t) for t in clean_turns],
        results,
    )
    _rate(
        "scalar_turns_one_secret",
        len(dirty_turns),
        lambda: [cut(t) for t in dirty_turns],
        results,
    )
    turns = pl.Series("content", clean_turns + dirty_turns)
    _rate(
        "series_turns_half_dirty",
        len(turns),
        lambda: redaction.redact_series_with_count(turns),
        results,
    )
    results["mean_turn_chars"] = round(sum(map(len, clean_turns + dirty_turns)) / len(turns))
    results["machine"] = (
        f"{platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"polars {pl.__version__}"
    )
    results["command"] = "POLARS_MAX_THREADS=1 python bench/bench_redaction.py"

    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
