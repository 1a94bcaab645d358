"""schemas.contracts.quarantine_contract_failures validates a run's tenants as one frame: each
tenant's verdict (rows kept, quarantine rows) must be the one it gets validated alone."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memflow.facts import build_facts
from schemas.contracts import EntityContract, FactContract, quarantine_contract_failures
from schemas.scope import Scope
from schemas.triples import TurnContext, items_to_triples, triples_frame

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
SECRET = "AKIA" + "IOSFODNN7EXAMPLE"

# Ways to break a stored fact after triage (what the contract is the last guard against).
BREAKS = {
    "long_subject": ("subject", "x" * 121),
    "secret_object": ("object", f"key {SECRET}"),
    "confidence": ("confidence", 7.5),
    "predicate": ("predicate", "uses lowercase"),
    "tenant": ("tenant_id", "Not A Tenant!"),
}


def built(scope: Scope, n: int):
    ctx = TurnContext(
        scope.tenant_id, scope.ns, "2026-11-01", "s1", "t1", T0, "codex", "explicit", "explicit"
    )
    items = [
        {"subject": f"svc-{i}", "predicate": "USES", "object": f"lib-{i % 3}"} for i in range(n)
    ]
    rows, rejects = items_to_triples(items, ctx)
    assert rejects == []
    return build_facts(scope, triples_frame(rows))


def broken(df: pl.DataFrame, rows: list[tuple[int, str]]) -> pl.DataFrame:
    out = df.to_dicts()
    for i, kind in rows:
        if not out:
            break
        column, value = BREAKS[kind]
        out[i % len(out)][column] = value
    return pl.DataFrame(out, schema=df.schema)


tenant_plan = st.lists(
    st.tuples(
        st.integers(0, 6),  # triples of the tenant (0: an empty frame)
        st.lists(st.tuples(st.integers(0, 10), st.sampled_from(sorted(BREAKS))), max_size=3),
        st.booleans(),  # duplicate a fact row (the unique fact_id check)
    ),
    min_size=1,
    max_size=5,
)


def _same(a: pl.DataFrame, b: pl.DataFrame) -> bool:
    return a.equals(b) if a.columns == b.columns else False


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tenant_plan)
def test_a_run_validated_as_one_frame_gives_each_tenant_its_own_verdict(plan) -> None:
    frames: dict[str, pl.DataFrame] = {}
    for t, (n, breaks, duplicate) in enumerate(plan):
        scope = Scope("org", f"repo{t}")
        facts = built(scope, n).facts
        if duplicate and facts.height:
            facts = pl.concat([facts, facts.head(1)])
        frames[scope.key] = broken(facts, breaks)

    good, rejects = quarantine_contract_failures(frames, FactContract, "validation", ("fact_id",))
    assert set(good) == set(rejects) == set(frames)
    for key, df in frames.items():
        alone_good, alone_rejects = quarantine_contract_failures(
            {key: df}, FactContract, "validation", ("fact_id",)
        )
        assert _same(good[key], alone_good[key]), key
        assert _same(rejects[key], alone_rejects[key]), key
        assert (good[key].height < df.height) == (rejects[key].height > 0)
        kept = set(good[key]["fact_id"].to_list()) if good[key].height else set()
        assert kept.isdisjoint(
            {r["fact_id"] for r in df.to_dicts() if r["tenant_id"] == "Not A Tenant!"}
        )
        assert (rejects[key]["tenant_id"] == Scope.parse(key).tenant_id).all()
        assert (rejects[key]["ns"] == Scope.parse(key).ns).all()
        assert not rejects[key]["record"].is_not_null().any()
        assert not any(SECRET in str(v) for v in rejects[key].to_dicts())


def test_a_row_breaking_the_contract_is_quarantined_with_its_reason_in_its_own_tenant() -> None:
    a, b = Scope("org", "a"), Scope("org", "b")
    fa = built(a, 4).facts
    fb = broken(built(b, 4).facts, [(1, "long_subject"), (2, "secret_object")])
    good, rejects = quarantine_contract_failures(
        {a.key: fa, b.key: fb}, FactContract, "validation", ("fact_id",)
    )
    assert good[a.key].equals(fa) and rejects[a.key].height == 0
    assert good[b.key].height == 2
    assert sorted(rejects[b.key]["reason"].to_list()) == [
        "contract:object:redacted",
        "contract:subject:str_length",
    ]
    assert set(rejects[b.key]["stage"].to_list()) == {"validation"}


def test_frames_whose_columns_differ_are_validated_one_by_one() -> None:
    a, b = Scope("org", "a"), Scope("org", "b")
    ea = built(a, 3).entities
    eb = built(b, 3).entities.with_columns(pl.lit("extra").alias("extra"))
    first = pl.int_range(pl.len()) == 0
    eb = eb.with_columns(pl.when(first).then(pl.lit("y" * 121)).otherwise("name").alias("name"))
    good, rejects = quarantine_contract_failures(
        {a.key: ea, b.key: eb}, EntityContract, "validation", ("entity_id",)
    )
    assert good[a.key].equals(ea) and rejects[a.key].height == 0
    assert good[b.key].height == eb.height - 1
    assert rejects[b.key]["reason"].to_list() == ["contract:name:str_length"]


def test_a_tenant_holding_copies_of_another_tenants_rows_never_costs_that_tenant_a_fact() -> None:
    """Red team F1: `acme/api` renamed `acme/api-v2` by copying its table folders, so the
    copy's stored facts carry `acme/api`'s scope and ids. Validated as one frame, the unique
    fact_id check would see both tenants' rows and quarantine the innocent tenant's facts."""
    a, b = Scope("acme", "api"), Scope("acme", "api-v2")
    stored_a = built(a, 3).facts
    frames = {a.key: stored_a, b.key: pl.concat([stored_a.clone(), built(b, 1).facts])}
    good, rejects = quarantine_contract_failures(frames, FactContract, "validation", ("fact_id",))
    for key, df in frames.items():
        alone_good, alone_rejects = quarantine_contract_failures(
            {key: df}, FactContract, "validation", ("fact_id",)
        )
        assert rejects[key].height == alone_rejects[key].height == 0, key
        assert good[key].equals(alone_good[key]) and good[key].equals(df), key


_REASONS_AFTER = """
import json, sys
from datetime import UTC, datetime
from schemas import contracts
from tests.unit.test_contract_quarantine import BREAKS, built, broken
from schemas.contracts import quarantine_contract_failures
from schemas.scope import Scope
getattr(contracts, sys.argv[1]).to_schema()  # this process builds that contract first
scope = Scope("org", "a")
facts = broken(built(scope, 4).facts, [(1, "secret_object"), (2, "long_subject")])
_, rejects = quarantine_contract_failures({scope.key: facts}, contracts.FactContract, "validation")
print(json.dumps(sorted(rejects[scope.key]["reason"].to_list())))
"""


@pytest.mark.parametrize("first", ["TripleContract", "FactContract", "EntityContract"])
def test_a_reason_does_not_depend_on_which_contract_the_process_built_first(first) -> None:
    """pandera pops a check's `name` when it first builds it; FactContract inherits
    TripleContract's redaction check, so a process that had validated triples first used to
    quarantine a secret fact name as `contract:object:names_redacted`."""
    done = subprocess.run(
        [sys.executable, "-c", _REASONS_AFTER, first],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert json.loads(done.stdout) == ["contract:object:redacted", "contract:subject:str_length"]
