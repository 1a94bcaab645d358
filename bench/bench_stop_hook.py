"""Codex's Stop hook on a large rollout: a whole re-read after every turn against an incremental
read from the file's offset (`memflow.importers.offsets`), side by side in one run.

    python bench/bench_stop_hook.py [--mb 1.1] [--turns 20]

The rollout is built from the public Codex sample's lines (tests/fixtures/transcripts/codex,
codemie-code) repeated to the size asked; then, `--turns` times, one exchange (a user message and
an answer) is appended and both imports run, each into its own landing zone: `full` reads the
whole file (what the hook did), `incremental` reads from where the last import stopped (what it
does now). Prints the p50 and p95 per turn of each and their ratio, as JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from memflow.importers.codex import import_codex  # noqa: E402
from memflow.importers.common import ImportSettings  # noqa: E402
from memflow.importers.tenant import TenantMapper  # noqa: E402

SAMPLE = ROOT / "tests/fixtures/transcripts/codex/codemie-code/rollout-turn-2.jsonl"
NAME = "rollout-2026-05-11T13-28-45-019e1695-0522-7c83-8b39-0dd379793f80.jsonl"


def exchange(n: int) -> str:
    ts = f"2026-05-12T11:{n // 60 % 60:02d}:{n % 60:02d}.000Z"
    user = {
        "timestamp": ts,
        "type": "event_msg",
        "payload": {"type": "user_message", "message": f"next step {n}: run the tests"},
    }
    answer = {
        "timestamp": ts,
        "type": "response_item",
        "payload": {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": f"Step {n} passed."}],
        },
    }
    return json.dumps(user) + "\n" + json.dumps(answer) + "\n"  # fmt: skip


def build(path: Path, size: int) -> None:
    lines = SAMPLE.read_text().splitlines(keepends=True)
    head, body = lines[:2], lines[2:]
    out = list(head)
    total = sum(len(x) for x in out)
    while total < size:
        for line in body:
            out.append(line)
            total += len(line)
    path.write_text("".join(out))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=float, default=1.1)
    parser.add_argument("--turns", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        rollout = root / NAME
        build(rollout, int(args.mb * 1_000_000))
        full = ImportSettings(root / "full", TenantMapper())
        incremental = ImportSettings(root / "incremental", TenantMapper(), incremental=True)
        import_codex([rollout], full)  # both start from a file already imported once
        import_codex([rollout], incremental)
        times: dict[str, list[float]] = {"full": [], "incremental": []}
        for n in range(args.turns):
            with rollout.open("a") as fh:
                fh.write(exchange(n))
            for name, settings in (("full", full), ("incremental", incremental)):
                started = time.perf_counter()
                report = import_codex([rollout], settings)
                times[name].append(time.perf_counter() - started)
                assert report.turns_written == 2, report.summary()
        size = rollout.stat().st_size

    def stats(xs: list[float]) -> dict[str, float]:
        xs = sorted(xs)
        return {
            "p50_ms": round(statistics.median(xs) * 1000, 1),
            "p95_ms": round(xs[max(0, int(len(xs) * 0.95) - 1)] * 1000, 1),
        }

    out = {"file_bytes": size, "turns": args.turns, **{k: stats(v) for k, v in times.items()}}
    out["ratio_p50"] = round(out["full"]["p50_ms"] / max(out["incremental"]["p50_ms"], 0.01), 1)
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
