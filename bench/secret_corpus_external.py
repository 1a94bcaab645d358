"""A second secret corpus from other scanners' own test data (read locally, never shipped).

    python bench/secret_corpus_external.py --kingfisher DIR --credsweeper DIR [--out PATH]

DIR is a git checkout (or bare git directory) of each project: Kingfisher (Apache-2.0, its
rules' `examples`, data/rules/*.yml) and CredSweeper (MIT, tests/data/output.json: the line and
value of every finding its ML stage keeps over tests/samples). Neither was used to tune memflow
before this corpus (the first corpus is gitleaks' rule tests, `bench/secret_corpus.py`).

The lines are other projects' test data: they are written under bench/data/external/ (which
git ignores) and never committed. `bench/bench_redaction_rulesets.py --external PATH` scores
them; memflow's own corpus of real configuration formats (`bench/secret_corpus_formats.py`)
is the shipped one.

Each row: source, rule, label `tp`, text (the example, one or more lines), secret (what the
rule extracts: Kingfisher's pattern's first group, CredSweeper's `value`) and split: half the
rules are `held_out` by a hash of the rule's name, never looked at while fixing memflow, and
reported apart.

Left out: what names no secret (public keys and recipients, ids, UUIDs, bucket and domain
names, nonces, salts, Salesforce org ids, OAuth client ids), secrets of fewer than 6
characters and examples whose secret the rule does not find again.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from secret_corpus import write_corpus

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "data" / "external" / "secret_corpus_external.jsonl"

# Kingfisher rules whose name says they find no secret.
_NOT_SECRET_NAME = re.compile(
    r"public key|recipient|\bid\b|identifier|client id|app id|account id|user ?name|username"
    r"|email|url\b|domain|hostname|bucket|uuid|organization id|tenant id|project id|region",
    re.IGNORECASE,
)
# CredSweeper rules that find no secret.
_CREDSWEEPER_NOT_SECRET = frozenset(
    {"UUID", "AWS S3 Bucket", "Firebase Domain", "Tencent WeChat API App ID", "Nonce", "Salt",
     "Salesforce Credentials", "IPv4", "IPv6", "Google Multi", "Certificate", "Jira 2FA"}
)  # fmt: skip
_MIN_SECRET = 6


def split_of(rule: str) -> str:
    """Half the rules, by a hash of their name, are held out."""
    return "held_out" if int(hashlib.sha256(rule.encode()).hexdigest(), 16) % 2 else "tuning"


def _git_files(repo: Path, under: str) -> Iterator[tuple[str, str]]:
    """(path, text) of each file under `under` at HEAD of the checkout or git directory."""
    names = subprocess.run(
        ["git", "-C", str(repo), "ls-tree", "-r", "--name-only", "HEAD", under],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    for name in names:
        text = subprocess.run(
            ["git", "-C", str(repo), "show", f"HEAD:{name}"], capture_output=True, check=True
        ).stdout.decode("utf-8", "replace")
        yield name, text


def _licence(repo: Path) -> str:
    for name in ("LICENSE", "LICENSE.txt", "LICENSE.md"):
        done = subprocess.run(
            ["git", "-C", str(repo), "show", f"HEAD:{name}"], capture_output=True, text=True
        )
        if done.returncode == 0:
            return done.stdout
    return ""


def _compile(pattern: str) -> re.Pattern[str] | None:
    # Kingfisher writes Rust/Hyperscan syntax; what Python's engine reads alike is kept.
    try:
        return re.compile(pattern)
    except re.error:
        return None


def kingfisher(repo: Path) -> Iterator[dict[str, Any]]:
    for path, text in _git_files(repo, "data/rules"):
        if not path.endswith((".yml", ".yaml")):
            continue
        try:
            rules = (yaml.safe_load(text) or {}).get("rules") or []
        except yaml.YAMLError:
            continue
        for rule in rules:
            name, rid = str(rule.get("name", "")), str(rule.get("id", ""))
            if _NOT_SECRET_NAME.search(name) or not rule.get("examples"):
                continue
            pattern = _compile(str(rule.get("pattern", "")))
            if pattern is None:
                continue
            for example in rule["examples"]:
                example = str(example).strip("\n")
                m = pattern.search(example)
                if m is None:
                    continue
                secret = next((g for g in m.groups() if g), m.group(0))
                if len(secret) < _MIN_SECRET:
                    continue
                yield {
                    "source": "kingfisher",
                    "rule": rid,
                    "label": "tp",
                    "text": example,
                    "secret": secret,
                    "split": split_of(f"kingfisher:{rid}"),
                }


def credsweeper(repo: Path) -> Iterator[dict[str, Any]]:
    found = subprocess.run(
        ["git", "-C", str(repo), "show", "HEAD:tests/data/output.json"],
        capture_output=True, check=True,
    ).stdout  # fmt: skip
    seen: set[tuple[str, str]] = set()
    for finding in json.loads(found):
        rule = finding["rule"]
        if rule in _CREDSWEEPER_NOT_SECRET:
            continue
        for line in finding["line_data_list"]:
            secret, text = line["value"], line["line"]
            if len(secret) < _MIN_SECRET or secret not in text or (text, secret) in seen:
                continue
            seen.add((text, secret))
            sample = line["path"].rsplit("/", 1)[-1]
            yield {
                "source": "credsweeper",
                "rule": f"{rule} ({sample})",
                "label": "tp",
                "text": text,
                "secret": secret,
                "split": split_of(f"credsweeper:{rule}"),
            }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kingfisher", type=Path, required=True)
    parser.add_argument("--credsweeper", type=Path, required=True)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    rows = [*kingfisher(args.kingfisher), *credsweeper(args.credsweeper)]
    notice = {
        "notice": "Test data of Kingfisher (Apache-2.0) and CredSweeper (MIT), read locally; "
        "not for redistribution with memflow.",
        "licences": {"kingfisher": _licence(args.kingfisher)[:400],
                     "credsweeper": _licence(args.credsweeper)},
    }  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    ignore = args.out.parent / ".gitignore"
    if args.out.parent.name == "external" and not ignore.exists():
        ignore.write_text("*\n")
    write_corpus(args.out, notice, rows)
    by = {s: sum(r["source"] == s for r in rows) for s in ("kingfisher", "credsweeper")}
    print(f"{len(rows)} lines {by} -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
