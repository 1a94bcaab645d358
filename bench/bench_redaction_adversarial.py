"""Redaction on hostile text: does its time grow linearly with the text, and what does that
cost on ordinary text?

    POLARS_MAX_THREADS=1 python bench/bench_redaction_adversarial.py [--n 16384] [--top 8]
        [--baseline-ref main ...] [--rounds 3] [--out PATH]

A landing line may hold a mebibyte, and one turn built (or broken) to make a scan start again
at each place inside a run would stall its tenant's ingestion. Each input here repeats a unit
to n and to 4n characters; `redact` and `redact_series` (a one-value column: the polars
prefilter, then the detectors) are timed on both, in CPU seconds (steadier than wall time on a
shared machine). Linear time gives a ratio near 4, quadratic near 16. The units are derived
from the module's own tables, so a new gate or keyword is covered without editing this file:

- each gate's literal start (`key`, `pass`, `--`, `<`, `env`, `密码`, `://` ...), and each
  keyword, alone and followed by `_`, `-`, a space, `=` and `:`;
- separators and quotes alone (`-`, `<`, `\\`, `"`, `«` ...);
- each ASCII keyword JSON-escaped (`\\u0070assword=`, `\\"password\\": \\"`);
- shapes that chain one match into the next (`password=password=...`, `PW=$(PW=$(...`,
  `Passwort: «`, `Set-Cookie: a=b; `, `zip zip ... -P`, `eyJ`, `sk-`, PEM headers next to
  placeholders, mixed CJK ...).

Each timing is the best of two. The slowest `--top` units are then timed at 1 MiB. Ordinary
text (the `content` of every turn in `landing-sample/`, and every line of the repository's
Python files) is redacted with this module and with the module at each `--baseline-ref`
(`git show REF:schemas/redaction.py`; main by default), side by side and best of `--rounds`,
to give the cost of the change on normal data; each baseline is also timed on a few hostile
units at small sizes (main is quadratic: 64 KB of `-` took it 45 s).

Results go to bench/results/redaction_adversarial.json unless --out says otherwise.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

os.environ.setdefault("POLARS_MAX_THREADS", "1")  # one core, before polars is imported

import polars as pl

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from schemas import redaction  # noqa: E402
from schemas.redaction import (  # noqa: E402
    _gates,
    engine,
    keywords,
    prose,
)
from schemas.redaction.ruleset import RULES  # noqa: E402

# This tree's redactor, as the functions a baseline module (one file) offers.
THIS = SimpleNamespace(
    _cut=engine._cut, redact=redaction.redact, redact_series=redaction.redact_series
)

RESULTS = ROOT / "bench" / "results" / "redaction_adversarial.json"
MIB = 1 << 20
SUFFIXES = ("", "_", "-", " ", "=", ":")
SEPARATORS = (
    "-", "<", ">", "\\", '"', "'", "`", " ", "\t", "\n", ":", "=", "@", ".", "/", "&", ";", "|",
    "(", "[", "{", "$(", "«", "“", "„", "「", "『", "\u00a0", "a", "密", "aA1", "\\\\\\",
)  # fmt: skip
# Shapes that chain one match into the next, per detector family.
SHAPES = (
    "env ", "ENV PASSWORD ", "password=password=", "PASSWORD=$(", "password='", 'password="',
    "password=`", "password=\\'", "PW=a,", "api_key: str = ", "password=&x=", "--password ",
    "--password '", "password is ", "password is '", "password Hunter2RT ", "Passwort: ",
    "Passwort:", "Passwort: «", "Passwort: “", "Passwort: „", "пароль — ", "mot de passe est ",
    "密码是", "密码：“", "パスワードは", "パスワード「", "비밀번호는 ", "密码=a", "数据库密码是x",
    "Cookie: a=b; ", "cookie:a=", "Set-Cookie: a=b; Path=/; ", "Set-Cookie: a=b, ",
    '{"name": "Cookie", "value": "a=b; ', "curl ", "curl -b a=", "curl -u a:", "zip ", "zip -P ",
    "mysql -p", "docker login ", "echo a | ", "htpasswd -b", "sshpass -p", "openssl -pass pass:",
    "smbclient -U a%", "gh secret set x ", "<token ", "<password>", '<add key="password" ',
    'key="a" ', "login a password ", '"auth": "', "authorization: ", "Authorization: Bearer ",
    "bearer ", "eyJ", "eyJhbGciOiJIUzI1NiJ9.", "sk-", "sk-ant-", "hf_", "AKIA", "ghp_",
    "glpat-", "xoxb-1-", "//a/:_authToken=npm_", "-----BEGIN PRIVATE KEY-----",
    "-----BEGIN PRIVATE KEY-----[REDACTED]", "PuTTY-User-Key-File-2: [REDACTED]",
    "https://a:b@", "postgres://", "a@", "a@a.", "mailto:a@a.co ", "?sig=", "x:5432:db:user:",
    ":1:", "\\:1:", "db:5432:pay:app:pw pgpass ", "\t", "a\tTRUE\t/\tTRUE\t0\tn\t",
    "[REDACTED]", "password=[REDACTED]", "İ", "İkey=", "\\u0070assword=\\u0070",
    '\\"password\\": \\"', '\\\\\\"password\\\\\\": \\\\\\"', "\\n", "\\t", "\\/", "a\\u00fc",
    "\\u0041", "@x\\u0041",
)  # fmt: skip


# Chains of the families the rule-set change added: URL users whose password runs on,
# `@`s after a user, PEM heads, base64 key heads, JWK members, Kubernetes data maps,
# `%40`, single-dash flags, foreign prose.
EXTRA_SHAPES = (
    "://a:", "://a:@", "@", "a@", "://u:p/", "-----BEGIN%20PRIVATE%20KEY-----", "MIIEvQIBADAN",
    "b3BlbnNzaC1rZXktdjE", '"d":"AAAAAAAAAAAAAAAAAAAA",', '"kty"', "kind: Secret\ndata:\n",
    "  data:\n", "  k: v\n", "%40", "a%40b.", "-storepass ", "-password -password ",
    "mật khẩu là ", "كلمة المرور هي ", "heslo je ", "Authorization: Bearer 1|",
    "-----END PRIVATE KEY-----\n", "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\n",
)  # fmt: skip


def _units() -> dict[str, str]:
    """Every unit a hostile text repeats, named for the table."""
    literals: set[str] = set()
    for gate in _gates._GATES:
        literal = _gates._literal_prefix(gate)[0]
        if literal:
            literals.add(literal)
    words = set(keywords._KEYWORD_GATE) | set(prose._INTL_STEMS) | set(prose._CJK_GATE)
    units: dict[str, str] = {}
    for word in sorted(literals | words):
        for suffix in SUFFIXES:
            units.setdefault(f"{word}{suffix}", word + suffix)
    for sep in SEPARATORS:
        units.setdefault(sep, sep)
    for word in sorted(w for w in words if w.isascii() and w.isalpha()):
        escaped = f"\\u{ord(word[0]):04x}{word[1:]}"
        units.setdefault(f"{escaped}=", f"{escaped}=")
        units.setdefault(f'\\"{word}\\": \\"', f'\\"{word}\\": \\"')
    for shape in SHAPES:
        units.setdefault(shape, shape)
    # the rule set's keywords (RE2 runs its regexes in linear time; its filters, the token
    # tail and the placeholder checks are memflow's), each alone and before `=` and `_`
    for word in RULES.keywords:
        for suffix in ("", "=", "_"):
            units.setdefault(f"{word}{suffix}", word + suffix)
    # the families added with it
    for shape in EXTRA_SHAPES:
        units.setdefault(shape, shape)
    return units


def _text(unit: str, n: int) -> str:
    return (unit * (n // len(unit) + 1))[:n]


def _cpu(fn: Callable[[], Any]) -> float:
    start = time.process_time()
    fn()
    return time.process_time() - start


def _timings(
    module: Any, unit: str, sizes: tuple[int, ...], repeat: int = 2
) -> dict[str, list[float]]:
    """Best-of-`repeat` CPU seconds of `redact` (uncached) and `redact_series` at each size."""
    out: dict[str, list[float]] = {"redact": [], "series": []}
    for n in sizes:
        text = _text(unit, n)
        series = pl.Series("content", [text])
        cut = functools.partial(module._cut, text)
        column = functools.partial(module.redact_series, series)
        out["redact"].append(min(_cpu(cut) for _ in range(repeat)))
        out["series"].append(min(_cpu(column) for _ in range(repeat)))
    return out


def _ratio(small: float, big: float) -> float | None:
    """big / small, where the small time is long enough to mean something (2 ms)."""
    return round(big / small, 2) if small >= 0.002 else None


def _load_baseline(ref: str) -> ModuleType | None:
    try:
        source = subprocess.run(
            ["git", "show", f"{ref}:schemas/redaction.py"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    path = Path(tempfile.mkdtemp()) / "redaction_baseline.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("redaction_baseline", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _ordinary_texts() -> dict[str, list[str]]:
    """Turn contents of the landing sample, and the lines of the repository's Python files."""
    contents: list[str] = []
    for path in sorted((ROOT / "landing-sample").rglob("*")):
        if path.suffix == ".jsonl":
            for line in path.read_text().splitlines():
                try:
                    value = json.loads(line).get("content")
                except (json.JSONDecodeError, AttributeError):
                    continue  # the sample holds broken lines on purpose
                if isinstance(value, str):
                    contents.append(value)
        elif path.suffix == ".parquet":
            frame = pl.read_parquet(path)
            if "content" in frame.columns:
                contents.extend(v for v in frame["content"].to_list() if isinstance(v, str))
    lines: list[str] = []
    for path in sorted(ROOT.rglob("*.py")):
        if any(part.startswith(".") or part == "node_modules" for part in path.parts):
            continue
        lines.extend(line for line in path.read_text().splitlines() if line.strip())
    return {"landing_sample_turns": contents, "repo_python_lines": lines}


def _ordinary(modules: dict[str, Any], rounds: int) -> dict[str, Any]:
    """Best-of-`rounds` CPU seconds per corpus and module, scalar and column; interleaved so
    that a busy moment of the machine falls on both."""
    out: dict[str, Any] = {}
    for corpus, texts in _ordinary_texts().items():
        column = pl.Series("content", texts)
        best: dict[str, dict[str, float]] = {
            name: {"scalar": float("inf"), "series": float("inf")} for name in modules
        }
        for _ in range(rounds):
            for name, module in modules.items():
                cut = module._cut
                scalar = _cpu(lambda cut=cut, texts=texts: [cut(t) for t in texts])
                series = _cpu(lambda m=module, column=column: m.redact_series(column))
                best[name]["scalar"] = min(best[name]["scalar"], scalar)
                best[name]["series"] = min(best[name]["series"], series)
        entry: dict[str, Any] = {
            "texts": len(texts),
            "chars": sum(map(len, texts)),
            "cpu_s": {n: {k: round(v, 4) for k, v in b.items()} for n, b in best.items()},
        }
        entry["this_over"] = {
            ref: {k: round(best["this"][k] / best[ref][k], 3) for k in ("scalar", "series")}
            for ref in best
            if ref != "this"
        }
        out[corpus] = entry
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=16384, help="small size in characters")
    parser.add_argument("--top", type=int, default=8, help="slowest units timed at 1 MiB")
    parser.add_argument(
        "--baseline-ref",
        action="append",
        help="git ref of a baseline module (repeatable; default: main)",
    )
    parser.add_argument("--rounds", type=int, default=3, help="rounds over ordinary text")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where the JSON goes")
    args = parser.parse_args(argv)

    units = _units()
    sizes = (args.n, 4 * args.n)
    print(f"{len(units)} units at {sizes[0]:,} and {sizes[1]:,} characters, one polars thread")
    rows: list[dict[str, Any]] = []
    for name, unit in units.items():
        t = _timings(THIS, unit, sizes)
        rows.append(
            {
                "unit": name,
                "redact_s": [round(x, 5) for x in t["redact"]],
                "series_s": [round(x, 5) for x in t["series"]],
                "redact_ratio": _ratio(*t["redact"]),
                "series_ratio": _ratio(*t["series"]),
            }
        )
    rows.sort(key=lambda r: -max(r["redact_s"][1], r["series_s"][1]))
    ratios = [r[k] for r in rows for k in ("redact_ratio", "series_ratio") if r[k] is not None]
    header = ("redact n", "4n", "ratio", "series n", "4n", "ratio")
    print(f"\n{'unit':<40} " + " ".join(f"{h:>8}" for h in header))
    for r in rows[:25]:
        print(
            f"{r['unit'][:40]!r:<40} {r['redact_s'][0]:>9.4f} {r['redact_s'][1]:>8.4f} "
            f"{r['redact_ratio'] or '-':>6} {r['series_s'][0]:>9.4f} {r['series_s'][1]:>8.4f} "
            f"{r['series_ratio'] or '-':>6}"
        )
    by_ratio = sorted(
        (r for r in rows if r["redact_ratio"] is not None), key=lambda r: -r["redact_ratio"]
    )
    print("\nhighest redact ratios (n -> 4n):")
    for r in by_ratio[:8]:
        print(f"  {r['unit']!r:<40} {r['redact_ratio']:>6}  ({r['redact_s'][1]:.4f} s at 4n)")
    print(
        f"\nratios: median {statistics.median(ratios):.2f}, max {max(ratios):.2f} "
        f"over {len(ratios)} timings of at least 1 ms"
    )

    at_mib: list[dict[str, Any]] = []
    print(f"\nslowest {args.top} units at 1 MiB:")
    for r in rows[: args.top]:
        t = _timings(THIS, units[r["unit"]], (MIB,))
        at_mib.append({"unit": r["unit"], "redact_s": t["redact"][0], "series_s": t["series"][0]})
        print(
            f"  {r['unit']!r:<40} redact {t['redact'][0]:7.3f} s   series {t['series'][0]:7.3f} s"
        )

    modules: dict[str, Any] = {"this": THIS}
    baseline_hostile: dict[str, list[dict[str, Any]]] = {}
    for ref in args.baseline_ref or ["main"]:
        baseline = _load_baseline(ref)
        if baseline is None:
            print(f"\nno baseline: `git show {ref}:schemas/redaction.py` failed")
            continue
        modules[ref] = baseline
        print(f"\nbaseline {ref} on hostile units at 4 KiB and 16 KiB:")
        for unit in ("-", "key", "pw", "token", "pass", "secret", "password=password="):
            t = _timings(baseline, unit, (4096, 16384), repeat=1)
            entry = {
                "unit": unit,
                "redact_s": [round(x, 4) for x in t["redact"]],
                "redact_ratio": _ratio(*t["redact"]),
                # quadratic: 1 MiB is 64 x 16 KiB, so 4096 x the time
                "redact_1mib_extrapolated_s": round(t["redact"][1] * 4096, 1),
            }
            baseline_hostile.setdefault(ref, []).append(entry)
            print(
                f"  {unit!r:<24} {entry['redact_s'][0]:.3f} s -> {entry['redact_s'][1]:.3f} s "
                f"(ratio {entry['redact_ratio']}), "
                f"1 MiB ~ {entry['redact_1mib_extrapolated_s']:,} s"
            )

    ordinary = _ordinary(modules, args.rounds)
    print("\nordinary text, best of", args.rounds, "rounds, CPU seconds:")
    for corpus, entry in ordinary.items():
        print(f"  {corpus}: {entry['texts']:,} texts, {entry['chars']:,} chars")
        for name, cpu in entry["cpu_s"].items():
            print(f"    {name:<9} scalar {cpu['scalar']:.4f} s   series {cpu['series']:.4f} s")
        for ref, ratio in entry["this_over"].items():
            print(f"    this / {ref}: {ratio}")

    results = {
        "command": "POLARS_MAX_THREADS=1 python bench/bench_redaction_adversarial.py",
        "machine": (
            f"{platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}, "
            f"polars {pl.__version__}"
        ),
        "load_average": os.getloadavg(),
        "sizes": sizes,
        "units": len(units),
        "ratio_median": round(statistics.median(ratios), 2),
        "ratio_max": round(max(ratios), 2),
        "slowest_at_1mib": at_mib,
        "baselines": [ref for ref in modules if ref != "this"],
        "baseline_hostile": baseline_hostile,
        "ordinary": ordinary,
        "rows": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
