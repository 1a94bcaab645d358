"""The vendor token rules are data: the committed JSON is what the script makes of the
committed upstream rule file, and every rule in it loads and runs."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import re
import sys
from pathlib import Path

import re2

from schemas.redaction import redact
from schemas.redaction.ruleset import DATA, RULES, RuleSet

ROOT = Path(__file__).resolve().parents[2]


def _script():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("secret_rules", ROOT / "scripts/secret_rules.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["secret_rules"] = module
    spec.loader.exec_module(module)
    return module


def test_the_rules_json_is_what_the_script_makes_of_the_upstream_file() -> None:
    script = _script()
    upstream = script.UPSTREAM.read_text()
    assert DATA.read_text() == script.render(script.translate(upstream))
    data = json.loads(DATA.read_text())
    assert data["upstream_sha256"] == hashlib.sha256(upstream.encode()).hexdigest()


def test_the_licence_travels_with_the_rules() -> None:
    licence = DATA.with_name("LICENSE.betterleaks").read_text()
    assert "MIT License" in licence and "Betterleaks" in licence


def test_every_rule_compiles_in_re2_and_names_a_placeholder_kind() -> None:
    for rule in RULES.rules:
        assert re.fullmatch(r"[a-z0-9_]+", rule.kind), rule.id
        compiled = rule.compiled()
        assert rule.group <= compiled.groups, rule.id
    assert len(RULES.rules) > 300


def test_a_rule_finds_only_its_group_and_its_filter_discards() -> None:
    rules = RuleSet(
        {
            "global_filter": [{"matches": ["^x+$"], "target": "secret", "negated": False}],
            "rules": [
                {
                    "id": "t",
                    "kind": "t_key",
                    "regex": r"tkey=(?P<key>[a-z0-9]{8,})",
                    "group": 1,
                    "keywords": ["tkey="],
                    "filter": [{"entropy_below": 2.5, "or_equal": False}],
                }
            ],
        }
    )
    text = "a tkey=q7w3e9r1t5y2 b tkey=aaaaaaaaaaaa c tkey=xxxxxxxxxx"
    found = list(rules.find(text, rules.rules_for(text.lower()), []))
    assert [text[s:e] for s, e, _, _ in found] == ["q7w3e9r1t5y2"]
    assert rules.rules_for("nothing here") == ()


def test_rules_run_in_linear_time_engine() -> None:
    # RE2 has no backtracking: a pattern Python's engine would take exponential time on is
    # answered at once (here a classic `(a+)+$` over a long run that fails at its end).
    pattern = re2.compile(r"(a+)+$")
    assert pattern.search("a" * 50_000 + "!") is None


def test_a_placeholder_is_an_atom_for_the_rules_too() -> None:
    token = "dckr_pat_" + "Zq9Xw8Vu7Ts6Rq5Po4Nm3Lk2Ji1"
    once = redact(f"docker token {token} used")
    assert once == "docker token [REDACTED:dockerhub_personal_access_token] used"
    assert redact(once) == once


def test_text_with_lone_surrogates_is_read_by_re2_too() -> None:
    # Undecodable bytes read with `surrogateescape` reach the redactor as lone surrogates,
    # which RE2 (UTF-8) cannot take: each is read as one U+FFFD, positions unchanged.
    token = "dckr_pat_" + "Zq9Xw8Vu7Ts6Rq5Po4Nm3Lk2Ji1"
    text = f"\udcff bad \udc80 byte {token} and password=Hunter2RT \udcfe"
    out = redact(text)
    assert out == (
        "\udcff bad \udc80 byte [REDACTED:dockerhub_personal_access_token] and "
        "password=[REDACTED:password] \udcfe"
    )
