from __future__ import annotations

import pytest

from schemas import ids, rules
from schemas.scope import Scope, ScopeError


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("USES", "USES"),
        ("uses", "USES"),
        ("depends on", "DEPENDS_ON"),
        ("depends-on", "DEPENDS_ON"),
        ("dependsOn", "DEPENDS_ON"),
        ("  is  a ", "IS_A"),
        ("DEPLOYED_ON", "DEPLOYED_ON"),
        ("runs.on", "RUNS_ON"),
    ],
)
def test_trivially_fixable_predicates_are_normalised(raw: str, expected: str) -> None:
    assert rules.normalize_predicate(raw) == expected


@pytest.mark.parametrize(
    "raw", ["likes!!!", "", "   ", "has-a-very-weird predicate?", "1ST", "x" * 65, None, 3, "é"]
)
def test_other_predicates_are_rejected(raw: object) -> None:
    assert rules.normalize_predicate(raw) is None


def test_spellings_differing_in_case_spacing_punctuation_unicode_share_a_key() -> None:
    same = [
        "PostgreSQL",
        "postgresql",
        "Postgre SQL",
        "ＰｏｓｔｇｒｅＳＱＬ",
        "postgre-sql",
        "POSTGRESQL.",
    ]
    assert len({ids.norm_key(n) for n in same}) == 1
    assert ids.norm_key("C++") != ids.norm_key("C") != ids.norm_key("C#")
    assert ids.norm_key("node.js") == ids.norm_key("Node JS")


def test_ids_are_stable_and_scoped() -> None:
    a = ids.entity_id("acme", "api", ids.norm_key("Redis"))
    assert a == ids.entity_id("acme", "api", ids.norm_key("redis"))
    assert a != ids.entity_id("acme", "web", ids.norm_key("Redis"))
    assert a.startswith("e_") and len(a) == 18
    f = ids.fact_id("acme", "api", a, "USES", a)
    assert f == ids.fact_id("acme", "api", a, "USES", a)
    assert f != ids.fact_id("globex", "api", a, "USES", a)


@pytest.mark.parametrize("bad", ["", "acme", "acme/", "/repo", "a/b/c", "ac me/repo", "../x/y"])
def test_scope_parse_rejects_bad_tenants(bad: str) -> None:
    with pytest.raises(ScopeError):
        Scope.parse(bad)


def test_scope_roundtrip() -> None:
    s = Scope.parse("acme/payments-api")
    assert (s.tenant_id, s.ns, s.key) == ("acme", "payments-api", "acme/payments-api")
