"""A secret corpus from outside memflow: gitleaks' own rule tests, and ordinary text and code.

    python bench/secret_corpus.py [--out bench/data/secret_corpus.jsonl]

Positives are the true positives (`tps`) every gitleaks rule is validated against when its
configuration is generated (`cmd/generate/config/rules/*.go`, gitleaks v8.30.1, MIT, from the
Go module proxy: lines such as `ageToken := "AGE-SECRET-KEY-1..."` that its generators and its
authors wrote, in a dozen syntaxes, for 220 rule families, including many formats memflow
does not name). Its false positives (`fps`) are kept as near misses. The Go module is
downloaded by the `go` command into a temporary GOPATH; a copy of it is run there with the
rule validator recording what it is given (two lines added to its `utils/validate.go`), then
deleted. Nothing of gitleaks' code is kept: only the example lines, with the rule id, the
secret its rule extracts from each (its regex and secret group, run by RE2), and gitleaks'
licence notice in the corpus' first line.

Each positive is assigned to a split by a hash of its text: a third is `held_out` (never used
to tune a detector; reported apart), the rest `tuning`.

Negatives are ordinary conversation and code, read at run time: the landing sample's turns,
the LoCoMo conversations under bench/data/locomo and this repository's Python files.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import re2

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "data" / "secret_corpus.jsonl"
MODULE = "github.com/zricethezav/gitleaks/v8"
VERSION = "v8.30.1"

# Added to the validator: each rule's examples go to $CORPUS_OUT as a JSON line.
_RECORDER = """package utils

import (
	"encoding/json"
	"os"
)

func record(rule string, tps []string, fps []string) {
	path := os.Getenv("CORPUS_OUT")
	if path == "" {
		return
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	line, _ := json.Marshal(map[string]any{"rule": rule, "tps": tps, "fps": fps})
	f.Write(append(line, '\\n'))
}
"""


def _go(args: list[str], env: dict[str, str], cwd: Path | None = None) -> str:
    done = subprocess.run(["go", *args], env=env, cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"go {' '.join(args)} failed:\n{done.stderr[-4000:]}")
    return done.stdout


def gitleaks_examples() -> tuple[list[dict[str, Any]], str, str]:
    """(each rule's tps/fps, gitleaks.toml, its LICENSE) from the Go module."""
    with tempfile.TemporaryDirectory() as tmp:
        env = {
            **os.environ,
            "GOPATH": f"{tmp}/gopath",
            "GOMODCACHE": f"{tmp}/gopath/pkg/mod",
            "GOFLAGS": "-mod=mod",
            "CGO_ENABLED": "0",
        }
        info = json.loads(_go(["mod", "download", "-json", f"{MODULE}@{VERSION}"], env))
        src = Path(tmp) / "gitleaks"
        shutil.copytree(info["Dir"], src)
        for path in src.rglob("*"):
            path.chmod(0o755 if path.is_dir() else 0o644)
        utils = src / "cmd" / "generate" / "config" / "utils"
        (utils / "record.go").write_text(_RECORDER)
        validate = utils / "validate.go"
        text = validate.read_text()
        for signature in (
            "func Validate(rule config.Rule, truePositives []string, falsePositives []string)"
            " *config.Rule {\n",
        ):
            text = text.replace(signature, signature + "\trecord(rule.RuleID, truePositives,"
                                " falsePositives)\n")  # fmt: skip
        text = text.replace(
            "func ValidateWithPaths(rule config.Rule, truePositives map[string]string,"
            " falsePositives map[string]string) *config.Rule {\n",
            "func ValidateWithPaths(rule config.Rule, truePositives map[string]string,"
            " falsePositives map[string]string) *config.Rule {\n"
            "\ttps := []string{}\n\tfor _, v := range truePositives {\n\t\ttps = append(tps, v)\n"
            "\t}\n\tfps := []string{}\n\tfor _, v := range falsePositives {\n"
            "\t\tfps = append(fps, v)\n\t}\n\trecord(rule.RuleID, tps, fps)\n",
        )
        validate.write_text(text)
        out = Path(tmp) / "examples.jsonl"
        toml_out = Path(tmp) / "gitleaks.toml"
        _go(
            ["run", ".", str(toml_out)],
            {**env, "CORPUS_OUT": str(out)},
            cwd=src / "cmd" / "generate" / "config",
        )
        rules = [json.loads(line) for line in out.read_text().splitlines()]
        return rules, toml_out.read_text(), (src / "LICENSE").read_text()


def _secret_of(rule: dict[str, Any] | None, line: str) -> str:
    """The secret gitleaks' rule extracts from its example line ('' if none)."""
    if rule is None or "regex" not in rule:
        return ""
    try:
        m = re2.search(rule["regex"], line)
    except re2.error:
        return ""
    if m is None:
        return ""
    group = int(rule.get("secretGroup", 0))
    if group and group <= (m.re.groups or 0) and m.group(group):
        return m.group(group)
    for g in range(1, (m.re.groups or 0) + 1):
        if m.group(g):
            return m.group(g)
    return m.group(0)


def split_of(text: str) -> str:
    return "held_out" if int(hashlib.sha256(text.encode()).hexdigest(), 16) % 3 == 0 else "tuning"


def positives(examples: list[dict[str, Any]], toml: str) -> Iterator[dict[str, Any]]:
    by_id = {r["id"]: r for r in tomllib.loads(toml)["rules"]}
    seen: set[str] = set()
    for entry in examples:
        for kind, lines in (("tp", entry["tps"] or []), ("fp", entry["fps"] or [])):
            for line in lines:
                if line in seen:
                    continue
                seen.add(line)
                yield {
                    "source": "gitleaks",
                    "rule": entry["rule"],
                    "label": kind,
                    "text": line,
                    "secret": _secret_of(by_id.get(entry["rule"]), line) if kind == "tp" else "",
                    "split": split_of(line),
                }


def write_corpus(path: Path, notice: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    """A corpus file: its notice on the first line, then one row a line (the benches and the
    fuzz read it so)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        f.write(json.dumps(notice) + "\n")
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    examples, toml, licence = gitleaks_examples()
    rows = list(positives(examples, toml))
    notice = {
        "notice": f"Example lines from gitleaks {VERSION} (cmd/generate/config/rules), "
        "used under its licence:",
        "licence": licence,
    }
    write_corpus(args.out, notice, rows)
    tps = sum(r["label"] == "tp" for r in rows)
    print(f"{len(rows)} lines ({tps} true positives) -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
