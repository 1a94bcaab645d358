"""The bundled sample landing zone: deterministic, readable, and carrying what it promises."""

from __future__ import annotations

import base64
import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from memflow.landing import LandingRead, discover, read_landing_file
from schemas.ids import norm_key
from schemas.scope import Scope
from tests.support import sample_landing as sample

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("sample")
    sample.generate(root)
    return root


@pytest.fixture(scope="module")
def reads(generated: Path) -> dict[Scope, list[LandingRead]]:
    return {
        scope: [read_landing_file(f, generated) for f in files]
        for scope, files in discover(generated).items()
    }


def all_turns(reads: dict[Scope, list[LandingRead]]) -> pl.DataFrame:
    return pl.concat([r.turns for rs in reads.values() for r in rs])


def saved_triples(turns: pl.DataFrame) -> list[dict[str, Any]]:
    saved = turns.filter(pl.col("tool_name") == "upsert_graph_triples")
    return [t for raw in saved["tool_input_json"] for t in json.loads(raw)["triples"]]


def files_of(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_generating_twice_gives_identical_bytes(generated: Path, tmp_path: Path) -> None:
    written = sample.generate(tmp_path)
    again = files_of(tmp_path)
    assert again == files_of(generated)
    assert sorted(p.relative_to(tmp_path).as_posix() for p in written) == sorted(again)


def test_regenerating_replaces_stale_landing_files_only(tmp_path: Path) -> None:
    folder = tmp_path / "acme" / "payments-api"
    folder.mkdir(parents=True)
    (folder / "stale.jsonl").write_text("{}\n")
    (folder / "keep.md").write_text("notes")
    (tmp_path / "other" / "repo").mkdir(parents=True)
    (tmp_path / "other" / "repo" / "theirs.jsonl").write_text("{}\n")
    sample.generate(tmp_path)
    assert not (folder / "stale.jsonl").exists()
    assert (folder / "keep.md").exists()
    assert (tmp_path / "other" / "repo" / "theirs.jsonl").exists()


def test_the_committed_sample_is_what_the_generator_writes(generated: Path) -> None:
    committed = REPO_ROOT / "landing-sample"
    ours, theirs = files_of(generated), files_of(committed)
    assert sorted(theirs) == sorted(ours), "run `python -m tests.support.sample_landing` to refresh"
    for name, data in ours.items():
        if name.endswith(".parquet"):  # bytes depend on the Parquet writer's version
            assert pl.read_parquet(committed / name).equals(pl.read_parquet(generated / name))
        else:
            assert theirs[name] == data, name


def test_tenants_turns_clients_and_size(
    generated: Path, reads: dict[Scope, list[LandingRead]]
) -> None:
    assert list(reads) == sorted(sample.SAMPLE_TENANTS, key=lambda s: (s.tenant_id, s.ns))
    assert len({s.tenant_id for s in reads}) >= 3
    assert sample.OVER_CAP_TENANT in reads
    assert discover(generated).problems == []
    turns = all_turns(reads)
    assert 300 <= turns.height <= 1_000
    for scope in reads:
        roles = set(all_turns({scope: reads[scope]})["role"])
        assert roles == {"user", "assistant", "tool"}, scope
    assert {"claude-code", "codex", "cursor"} <= set(turns["client"])
    assert any(p.suffix == ".parquet" for p in generated.rglob("*"))
    total = sum(p.stat().st_size for p in generated.rglob("*") if p.is_file())
    assert total < 5_000_000


def test_only_the_planted_landing_rejects(reads: dict[Scope, list[LandingRead]]) -> None:
    reasons: Counter[str] = Counter()
    for rs in reads.values():
        for r in rs:
            reasons.update(r.rejects_by_reason())
    assert dict(reasons) == sample.EXPECTED_LANDING_REJECTS


def test_days_and_zones(generated: Path, reads: dict[Scope, list[LandingRead]]) -> None:
    turns = all_turns(reads)
    days = set(turns["day"])
    assert len(days) >= 5
    assert all(d.startswith("2026-11-") for d in days)
    assert any(len(r.days) > 1 for rs in reads.values() for r in rs)  # a session past midnight
    zones = set()
    for path in generated.rglob("*.jsonl"):
        for line in path.read_text(encoding="utf-8").splitlines():
            match = re.search(r'"ts":"[^"]*?(Z|[+-]\d\d:\d\d)"', line)
            if match:
                zones.add(match.group(1))
    assert len(zones) >= 4


def test_the_over_cap_tenant_saves_more_facts_than_the_cap(
    reads: dict[Scope, list[LandingRead]],
) -> None:
    triples = saved_triples(all_turns({sample.OVER_CAP_TENANT: reads[sample.OVER_CAP_TENANT]}))
    distinct = {(t["subject"], t["predicate"], t["object"]) for t in triples}
    entities = {t["subject"] for t in triples} | {t["object"] for t in triples}
    assert len(distinct) > 10_000
    assert len(entities) < 4_000  # so the fact cap bites before the entity cap
    for scope in reads:
        if scope != sample.OVER_CAP_TENANT:
            assert len(saved_triples(all_turns({scope: reads[scope]}))) < 100


def test_every_planted_secret_is_in_the_raw_turns(reads: dict[Scope, list[LandingRead]]) -> None:
    turns = all_turns(reads)
    text = "\n".join(turns["content"])
    names = "\n".join(
        str(t.get(k)) for t in saved_triples(turns) for k in ("subject", "predicate", "object")
    )
    for kind, secret in sample.SECRETS.items():
        assert secret in text or secret in names, kind
    in_names = {kind for kind, secret in sample.SECRETS.items() if secret in names}
    assert {
        "aws_access_key_id",
        "github_token",
        "email",
        "openai_api_key",
        "postgres_password",
    } <= in_names
    assert sample.RSA_BLOCK in text


def test_the_secrets_are_format_valid() -> None:
    s = sample.SECRETS
    assert re.fullmatch(r"AKIA[A-Z2-7]{16}", s["aws_access_key_id"])
    assert re.fullmatch(r"ghp_[A-Za-z0-9]{36}", s["github_token"])
    assert re.fullmatch(r"xoxb-\d{10,13}-\d{10,13}-[A-Za-z0-9]{24}", s["slack_bot_token"])
    assert re.fullmatch(r"sk-[A-Za-z0-9]{48}", s["openai_api_key"])
    assert re.fullmatch(r"[a-z.]+@[a-z-]+(\.[a-z]+)+", s["email"])
    header, payload, signature = s["jwt"].split(".")
    assert json.loads(base64.urlsafe_b64decode(header + "==")) == {"alg": "HS256", "typ": "JWT"}
    assert json.loads(base64.urlsafe_b64decode(payload + "=="))["sub"] == "svc-feature-api"
    assert len(base64.urlsafe_b64decode(signature + "=")) == 32
    body = s["rsa_private_key"]
    assert all(len(line) == 64 for line in body.splitlines()[:-1])
    assert base64.b64decode(body.replace("\n", ""))[:2] == b"\x30\x82"  # DER SEQUENCE
    assert f":{s['postgres_password']}@" in sample.PG_DSN
    for kind in (
        "aws_access_key_id",
        "github_token",
        "slack_bot_token",
        "openai_api_key",
        "password",
        "postgres_password",
    ):
        assert "FAKE" in s[kind], kind  # obviously fake to a reader


def test_entity_resolution_and_contract_material(reads: dict[Scope, list[LandingRead]]) -> None:
    turns = all_turns(reads).filter(pl.col("tenant_id") != sample.OVER_CAP_TENANT.tenant_id)
    triples = saved_triples(turns)
    names = {t["subject"] for t in triples} | {t["object"] for t in triples}
    predicates = {t["predicate"] for t in triples}

    assert set(sample.POSTGRES_VARIANTS) <= names
    assert {norm_key(v) for v in sample.POSTGRES_VARIANTS} == {"postgresql"}
    assert sample.POSTGRES_FULLWIDTH_ALIAS in names
    assert {norm_key(n) for n in ("payments-api", "payments_api", "Payments API")} <= {
        norm_key(n) for n in names
    }
    assert set(sample.FIXABLE_PREDICATES) | set(sample.UNFIXABLE_PREDICATES) <= predicates
    assert any(len(n) > 120 for n in names)
    assert sample.LONG_NAME in names
    confidences = [t["confidence"] for t in triples if "confidence" in t]
    assert {0.3, 1.7, "high"} <= set(confidences)


def test_the_supersession_points_at_an_earlier_saved_triple(
    reads: dict[Scope, list[LandingRead]],
) -> None:
    turns = all_turns({sample.PAYMENTS: reads[sample.PAYMENTS]}).sort("ts")
    seen: set[tuple[str, str, str]] = set()
    replacing = []
    for raw in turns.filter(pl.col("tool_name") == "upsert_graph_triples")["tool_input_json"]:
        for t in json.loads(raw)["triples"]:
            if "supersedes" in t:
                old = t["supersedes"]
                assert (old["subject"], old["predicate"], old["object"]) in seen
                replacing.append((t["subject"], t["predicate"], t["object"]))
            seen.add((t["subject"], t["predicate"], t["object"]))
    assert sample.REPLACEMENT_TRIPLE in replacing


def test_main_writes_where_asked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert sample.main(["--out", str(tmp_path / "zone")]) == 0
    assert "wrote" in capsys.readouterr().out
    assert set(discover(tmp_path / "zone")) == set(sample.SAMPLE_TENANTS)
