"""Transcript import throughput: turns per second, and the ratio to a bare JSON loop.

    python bench/bench_import.py                 # 300 copies of every public sample
    python bench/bench_import.py --copies 50     # quicker

Corpus: the public samples in tests/fixtures/transcripts (Claude Code sessions with subagents,
summaries and compaction; Codex rollouts of both shapes, one with a malformed line), each copied
`--copies` times under new session ids into a temporary ``~/.claude/projects`` and
``~/.codex/sessions`` layout. Lines are kept as they are (tool results of up to 56 KB included).

Measured on the same files, one process, sequentially:

- ``bare``: read every line and ``orjson.loads`` it (the floor for any JSONL reader);
- ``parse``: the importers' readers (bounding, redaction, tool-name tracking) without landing;
- ``import``: `import_claude_code` + `import_codex` with their default settings into an empty
  landing zone (one file per session, written as a dot file and renamed);
- ``import_checked``: the same, each file read back by the landing reader first
  (``check_files=True``);
- ``import_durable``: the same as ``import`` with an fsync per landing file (``durable=True``);
- ``reimport``: the same files again into the filled landing zone (idempotent: nothing written).

Turns per second count landed turns; the ratio is the import's time over the bare loop's. Results
go to ``bench/results/import.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import orjson  # noqa: E402

from memflow.importers.claude_code import import_claude_code, read_claude_code_file  # noqa: E402
from memflow.importers.codex import import_codex, read_codex_file  # noqa: E402
from memflow.importers.common import ImportReport, ImportSettings  # noqa: E402
from memflow.importers.tenant import TenantMapper  # noqa: E402

SAMPLES = ROOT / "tests" / "fixtures" / "transcripts"
RESULTS = ROOT / "bench" / "results" / "import.json"


def _rename_claude(line: bytes, suffix: str) -> bytes:
    try:
        rec = orjson.loads(line)
    except orjson.JSONDecodeError:
        return line
    if isinstance(rec, dict):
        for key in ("sessionId", "uuid", "parentUuid"):
            if isinstance(rec.get(key), str):
                rec[key] = f"{rec[key]}-{suffix}"
        if isinstance(rec.get("cwd"), str):
            rec["cwd"] = f"/work/project-{int(suffix) % 20}"
    return orjson.dumps(rec)


def _rename_codex(line: bytes, suffix: str) -> bytes:
    try:
        rec = orjson.loads(line)
    except orjson.JSONDecodeError:
        return line
    if isinstance(rec, dict):
        payload = rec.get("payload")
        if rec.get("type") == "session_meta" and isinstance(payload, dict):
            payload["id"] = f"{payload.get('id')}-{suffix}"
            payload["cwd"] = f"/work/project-{int(suffix) % 20}"
        elif "id" in rec and "timestamp" in rec and "type" not in rec:
            rec["id"] = f"{rec['id']}-{suffix}"
    return orjson.dumps(rec)


def build_corpus(root: Path, copies: int) -> tuple[Path, Path]:
    claude = root / "claude" / "projects"
    codex = root / "codex" / "sessions"
    claude_samples = sorted((SAMPLES / "claude-code").rglob("*.jsonl"))
    codex_samples = sorted((SAMPLES / "codex").rglob("*.jsonl"))
    for n in range(copies):
        suffix = f"{n:05d}"
        project = claude / f"-work-project-{n % 20}"
        project.mkdir(parents=True, exist_ok=True)
        for i, sample in enumerate(claude_samples):
            lines = sample.read_bytes().splitlines()
            out = b"\n".join(_rename_claude(x, suffix) for x in lines if x.strip()) + b"\n"
            (project / f"s{i}-{suffix}.jsonl").write_bytes(out)
        day = codex / "2026" / "01" / f"{n % 28 + 1:02d}"
        day.mkdir(parents=True, exist_ok=True)
        for i, sample in enumerate(codex_samples):
            lines = sample.read_bytes().splitlines()
            out = b"\n".join(_rename_codex(x, suffix) for x in lines if x.strip()) + b"\n"
            (day / f"rollout-2026-01-01T00-00-00-{i}-{suffix}.jsonl").write_bytes(out)
    return claude, codex


def files_of(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*.jsonl"))


def bare(files: list[Path]) -> tuple[float, int, int]:
    started = time.perf_counter()
    lines = objects = 0
    for path in files:
        with path.open("rb") as fh:
            for line in fh:
                lines += 1
                try:
                    orjson.loads(line)
                    objects += 1
                except orjson.JSONDecodeError:
                    pass
    return time.perf_counter() - started, lines, objects


def parse_only(claude: list[Path], codex: list[Path]) -> tuple[float, int]:
    report = ImportReport("bench")
    started = time.perf_counter()
    turns = 0
    for path in claude:
        turns += sum(len(s.turns) for s in read_claude_code_file(path, report))
    for path in codex:
        session = read_codex_file(path, report)
        turns += len(session.turns) if session else 0
    return time.perf_counter() - started, turns


def import_all(
    claude: Path, codex: Path, landing: Path, check: bool, durable: bool = False
) -> dict[str, Any]:
    tenants = TenantMapper(default_org="bench")
    settings = ImportSettings(landing, tenants, check_files=check, durable=durable)
    started = time.perf_counter()
    a = import_claude_code([claude], settings)
    b = import_codex([codex], settings)
    seconds = time.perf_counter() - started
    report = a.merge(b)
    return {
        "seconds": round(seconds, 3),
        "turns_written": report.turns_written,
        "turns_already_landed": report.turns_already_landed,
        "turns_found": report.turns_found,
        "files": report.files,
        "records": report.records,
        "errors": report.errors_total,
        "landing_files": len(report.landed),
    }


def rate(turns: int, seconds: float) -> float:
    return round(turns / seconds, 1) if seconds > 0 else 0.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--copies", type=int, default=300)
    args = parser.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="memflow-bench-import-"))
    try:
        claude, codex = build_corpus(tmp, args.copies)
        claude_files, codex_files = files_of(claude), files_of(codex)
        all_files = claude_files + codex_files
        size = sum(p.stat().st_size for p in all_files)
        print(f"corpus: {len(all_files)} files, {size / 1e6:.1f} MB in {tmp}")
        bare(all_files)  # warm the page cache
        bare_s, lines, objects = bare(all_files)
        parse_s, parsed_turns = parse_only(claude_files, codex_files)
        full = import_all(claude, codex, tmp / "landing", check=False)
        again = import_all(claude, codex, tmp / "landing", check=False)
        checked = import_all(claude, codex, tmp / "landing-checked", check=True)
        durable = import_all(claude, codex, tmp / "landing-durable", check=False, durable=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    turns = full["turns_written"]
    result = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "load_avg_1_5_15": os.getloadavg()},
        "corpus": {
            "copies": args.copies,
            "files": len(all_files),
            "bytes": size,
            "lines": lines,
            "json_objects": objects,
            "turns": turns,
        },
        "bare_json_loop": {"seconds": round(bare_s, 3), "lines_per_s": rate(lines, bare_s)},
        "parse": {"seconds": round(parse_s, 3), "turns_per_s": rate(parsed_turns, parse_s)},
        "import": {**full, "turns_per_s": rate(turns, full["seconds"])},
        "import_checked": {**checked, "turns_per_s": rate(turns, checked["seconds"])},
        "import_durable": {**durable, "turns_per_s": rate(turns, durable["seconds"])},
        "reimport": {**again, "turns_per_s": rate(again["turns_already_landed"], again["seconds"])},
        "ratio_to_bare": {
            "parse": round(parse_s / bare_s, 1),
            "import": round(full["seconds"] / bare_s, 1),
            "import_checked": round(checked["seconds"] / bare_s, 1),
            "import_durable": round(durable["seconds"] / bare_s, 1),
            "reimport": round(again["seconds"] / bare_s, 1),
        },
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print("| measure | seconds | rate | x bare loop |")
    print("|---|---:|---:|---:|")
    print(f"| bare JSON loop | {bare_s:.2f} | {rate(lines, bare_s):,.0f} lines/s | 1.0 |")
    ratio = result["ratio_to_bare"]
    print(f"| parse (bound, redact) | {parse_s:.2f} | {rate(parsed_turns, parse_s):,.0f} turns/s "
          f"| {ratio['parse']} |")  # fmt: skip
    for name in ("import", "import_checked", "import_durable", "reimport"):
        r = result[name]
        print(f"| {name} | {r['seconds']:.2f} | {r['turns_per_s']:,.0f} turns/s | {ratio[name]} |")
    print(f"written {RESULTS.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
