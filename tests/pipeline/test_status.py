"""`memflow status` at any number of tenants: every tenant counted in bulk, those needing
attention first, and no store called equal to its tables unless it was compared (`--verify`,
`--tenant`). The data directory is one real `memflow run` with an embedder (a real
OpenAI-compatible server), copied before a test changes it behind the sinks' backs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from pipelines import status_text
from pipelines.runner import run_all
from pipelines.settings import resolve
from pipelines.status import status, tenant_summaries
from pipelines.status_text import format_status
from resources.graph.factory import open_graph_store
from resources.settings import DEFAULTS, Settings, graph_path
from resources.tables import TableStore
from resources.vector.base import fact_vectors_key
from resources.vector.factory import open_vector_store
from schemas.scope import Scope
from schemas.tables import Asset
from tests.pipeline.landing_fixtures import small_landing
from tests.support.embeddings_server import EmbeddingsServer
from tests.support.leftovers import assert_no_process_left

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
MODEL = "hash-model"
ACME, GLOBEX = Scope("acme", "api"), Scope("globex", "ml")
SETTINGS = {
    "MEMFLOW_EMBEDDER": "openai",
    "MEMFLOW_EMBEDDING_URL": "http://127.0.0.1:9/v1",  # status embeds nothing
    "MEMFLOW_EMBEDDING_MODEL": MODEL,
    "MEMFLOW_EXTRACTOR": "none",
    "MEMFLOW_GRAPH_BACKEND": "sqlite",
}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    tmp = tmp_path_factory.mktemp("status")
    landing, data = small_landing(tmp / "landing"), tmp / "data"
    with EmbeddingsServer(dim=8, model=MODEL) as server, pytest.MonkeyPatch.context() as mp:
        mp.delenv("DAGSTER_HOME", raising=False)
        for name in DEFAULTS:
            mp.delenv(name, raising=False)
        for name, value in {**SETTINGS, "MEMFLOW_EMBEDDING_URL": server.url}.items():
            mp.setenv(name, value)
        resolve({"MEMFLOW_LANDING_DIR": str(landing), "MEMFLOW_DATA_DIR": str(data)}, tmp / "x")
        outcome = run_all(str(landing), str(data))
        assert_no_process_left(data)
    assert not outcome.failures and len(outcome.tenants) == 2
    return data


@pytest.fixture
def data(world: Path, tmp_path: Path) -> Path:
    """A copy of the world's data directory for a test to change."""
    copy = tmp_path / "data"
    shutil.copytree(world, copy)
    return copy


def settings(data: Path) -> Settings:
    return Settings.from_env({**SETTINGS, "MEMFLOW_DATA_DIR": str(data)})


def by_tenant(report: dict) -> dict[str, dict]:
    return {t["tenant"]: t for t in report["tenants"]}


def memflow(data: Path, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMFLOW_", "DAGSTER_"))}
    env.update(SETTINGS, MEMFLOW_HOME=str(tmp_path / "home"), CI="true")
    return subprocess.run(
        [sys.executable, "-m", "pipelines.cli", "status", "--data", str(data), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_the_default_counts_every_tenant_and_calls_no_store_equal(world: Path) -> None:
    report = status(settings(world))
    assert report["verified"] is False and report["attention"] == []
    tenants = by_tenant(report)
    assert sorted(tenants) == [ACME.key, GLOBEX.key]
    tables = TableStore(world)
    expected = tenant_summaries(tables, [ACME, GLOBEX])
    for scope, acc in zip([ACME, GLOBEX], expected, strict=True):
        t = tenants[scope.key]
        assert t["accounting"] == acc and acc["lines_accounted"] and acc["triples_accounted"]
        assert t["graph"]["entities"] == t["tables"][Asset.ENTITIES] > 0
        assert t["graph"]["facts"] == t["tables"][Asset.VALIDATED_FACTS] > 0
        assert t["graph"]["counts_equal_tables"] and t["graph"]["equals_table"] is None
        assert t["vector_counts_equal_tables"] and t["vectors_equal_table"] is None
        assert t["vectors"][MODEL]["vectors"] == t["tables"][Asset.ENTITIES]
        assert t["vectors"][fact_vectors_key(MODEL)]["vectors"] == t["embedded"]["facts"] > 0
        assert t["coverage"] == t["fact_coverage"] == 1.0
        assert t["verified"] is False and t["attention"] == []
    totals = report["totals"]
    assert totals["tenants"] == 2 and totals["needing_attention"] == 0
    assert totals["facts"] == sum(t["accounting"]["facts"] for t in tenants.values())
    assert totals["graph"]["entities"] == sum(t["graph"]["entities"] for t in tenants.values())
    assert totals["graph_verified"] == totals["vectors_verified"] == 0
    text = format_status(report)
    assert "equals table: not verified" in text and "vectors equal tables: not verified" in text
    assert "equals table: yes" not in text and "vectors equal tables: yes" not in text
    assert "counts match the tables: yes" in text
    assert "stores equal tables: not verified (`memflow status --verify`" in text


def test_the_default_opens_no_tenants_data_file_nor_vector_file(
    world: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What makes it fast at 10,000 tenants: the balances' figures come from what each write
    recorded beside its table, the vector counts from what each write recorded beside its
    file; neither a tenant's Parquet files nor its Arrow files are opened."""
    import resources.table_figures as figures
    import resources.vector.local as local

    before = status(settings(world))

    def opened(*_: object, **__: object):
        raise AssertionError("a tenant's file was opened")

    monkeypatch.setattr(figures, "read_columns", opened)
    monkeypatch.setattr(local, "_count", opened)
    monkeypatch.setattr(local, "_read", opened)
    assert status(settings(world)) == before


def test_verify_compares_every_store_and_says_yes_when_equal(world: Path) -> None:
    fast = by_tenant(status(settings(world)))
    report = status(settings(world), verify=True)
    assert report["verified"] is True and report["attention"] == []
    for key, t in by_tenant(report).items():
        assert t["verified"] and t["graph"]["equals_table"] is True
        assert t["graph"]["diff"]["missing_entities"] == 0 and t["vectors_equal_table"] is True
        assert t["vectors_diff"]["entities"]["missing"]["count"] == 0
        # the coverage the counts give is what the comparison finds
        assert (t["coverage"], t["fact_coverage"]) == (fast[key]["coverage"], 1.0)
    text = format_status(report)
    assert text.count("equals table: yes") == 2 and "not verified" not in text
    assert "stores equal tables: verified for 2 tenants: yes" in text


def test_a_changed_store_is_never_called_equal_and_verify_says_no(data: Path) -> None:
    """Same counts, other content: the default cannot know and says so; --verify says NO."""
    graph = open_graph_store("sqlite", sqlite_path=graph_path(data), gremlin_url="")
    vectors = open_vector_store(None, str(data))
    try:
        entity = graph.entities(ACME)[0]
        graph.upsert_entities(ACME, [replace(entity, name="edited")])
        held = vectors.ids(MODEL, GLOBEX)
        some = next(iter(held))
        vectors.upsert(MODEL, 8, GLOBEX, [(some, "another-hash", [1.0] + [0.0] * 7)])
    finally:
        graph.close()
        vectors.close()

    fast = status(settings(data))
    assert fast["attention"] == []  # counts agree: nothing it can see
    tenants = by_tenant(fast)
    assert tenants[ACME.key]["graph"]["equals_table"] is None
    assert tenants[GLOBEX.key]["vectors_equal_table"] is None

    checked = status(settings(data), verify=True)
    tenants = by_tenant(checked)
    assert tenants[ACME.key]["graph"]["equals_table"] is False
    assert tenants[ACME.key]["graph"]["diff"]["changed_entities"] == 1
    assert tenants[ACME.key]["attention"] == ["graph differs from its tables"]
    assert tenants[GLOBEX.key]["vectors_equal_table"] is False
    assert tenants[GLOBEX.key]["vectors_diff"]["entities"]["stale"]["count"] == 1
    assert tenants[GLOBEX.key]["attention"] == ["vectors differ from the tables"]
    assert checked["attention"] == [ACME.key, GLOBEX.key]
    text = format_status(checked)
    assert "equals table: NO" in text and "vectors equal tables: NO" in text
    assert "changed entities 1" in text and "entities vectors: stale 1" in text
    assert "NEEDS ATTENTION: graph differs from its tables" in text
    assert "stores equal tables: verified for 2 tenants: graph NO for 1, vectors NO for 1" in text


def test_counts_that_differ_are_flagged_without_verifying(data: Path) -> None:
    graph = open_graph_store("sqlite", sqlite_path=graph_path(data), gremlin_url="")
    vectors = open_vector_store(None, str(data))
    try:
        fact = graph.facts(GLOBEX)[0]
        assert graph.delete_facts(GLOBEX, [fact.fact_id]) == 1
        assert vectors.delete(fact_vectors_key(MODEL), GLOBEX, [fact.fact_id]) == 1
    finally:
        graph.close()
        vectors.close()

    report = status(settings(data))
    t = by_tenant(report)[GLOBEX.key]
    assert not t["graph"]["counts_equal_tables"] and t["graph"]["equals_table"] is False
    assert not t["vector_counts_equal_tables"] and t["vectors_equal_table"] is False
    assert t["fact_coverage"] < 1.0 and t["coverage"] == 1.0
    assert t["attention"] == [
        "graph differs from its tables",
        "vectors differ from the tables",
        "embedding coverage below 100%",
    ]
    assert report["attention"] == [GLOBEX.key] and by_tenant(report)[ACME.key]["attention"] == []
    assert report["totals"]["graph_counts_differ"] == report["totals"]["vector_counts_differ"] == 1


def test_an_unbalanced_tenant_is_listed_first_and_the_rest_summed(
    data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tables = TableStore(data)
    turns = tables.read(Asset.RAW_TURNS, ACME)
    assert turns is not None and turns.height > 1
    tables.write(turns.head(turns.height - 1), Asset.RAW_TURNS, ACME)  # a turn lost

    report = status(settings(data))
    acme = by_tenant(report)[ACME.key]
    assert not acme["accounting"]["lines_accounted"]
    assert acme["attention"] == ["lines not accounted"] and report["attention"] == [ACME.key]
    assert report["totals"]["lines_not_accounted"] == 1

    full = format_status(report)  # two tenants: every tenant, the one needing attention first
    assert full.index(f"\n{ACME.key}   NEEDS ATTENTION: lines not accounted") < full.index(
        f"\n{GLOBEX.key}\n"
    )
    assert "needs attention: 1 of 2 tenants" in full
    assert "balances: lines 1 of 2 tenants not accounted; triples all 2 tenants fine" in full
    monkeypatch.setattr(status_text, "LIST_ALL_UP_TO", 1)  # as with many tenants
    short = format_status(report)
    assert f"\n{ACME.key}   NEEDS ATTENTION" in short and f"\n{GLOBEX.key}\n" not in short
    assert "1 more tenants not listed: `memflow status --all` lists every tenant" in short
    assert f"\n{GLOBEX.key}\n" in format_status(report, every_tenant=True)


def test_verification_reads_tenants_in_chunks_and_reports_progress(
    world: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pipelines import status as status_mod

    monkeypatch.setattr(status_mod, "STATUS_CHUNK", 1)
    seen: list[tuple[int, int]] = []
    chunked = status(settings(world), verify=True, progress=lambda d, n: seen.append((d, n)))
    monkeypatch.setattr(status_mod, "STATUS_CHUNK", 200)
    whole = status(settings(world), verify=True)
    assert seen == [(1, 2), (2, 2)]
    assert json.dumps(chunked["tenants"], sort_keys=True) == json.dumps(
        whole["tenants"], sort_keys=True
    )


def test_the_cli_tenant_gives_one_tenant_verified_and_json_is_complete(
    world: Path, tmp_path: Path
) -> None:
    one = memflow(world, tmp_path, "--tenant", GLOBEX.key)
    assert one.returncode == 0, one.stderr[-2000:]
    assert f"\n{GLOBEX.key}\n" in one.stdout and f"\n{ACME.key}" not in one.stdout
    assert "equals table: yes" in one.stdout and "vectors equal tables: yes" in one.stdout
    assert "tenants: 1;" in one.stdout

    unknown = memflow(world, tmp_path, "--tenant", "nobody/here")
    assert unknown.returncode == 1 and "no table holds turns or facts of nobody/here" in (
        unknown.stderr
    )

    listed = memflow(world, tmp_path, "--json")
    assert listed.returncode == 0, listed.stderr[-2000:]
    report = json.loads(listed.stdout)
    assert set(report) == {
        "data_dir", "embedding_model", "verified", "system", "totals", "attention", "tenants",
        "notes",
    }  # fmt: skip
    assert report["verified"] is False and [t["tenant"] for t in report["tenants"]] == [
        ACME.key,
        GLOBEX.key,
    ]
    for t in report["tenants"]:
        assert set(t) == {
            "tenant", "tables", "accounting", "graph", "vectors", "embedding_model", "verified",
            "embedded", "coverage", "fact_coverage", "vector_counts_equal_tables",
            "vectors_equal_table", "attention",
        }  # fmt: skip
        assert t["graph"]["equals_table"] is None and t["vectors_equal_table"] is None
    assert report["system"]["text_turns_awaiting_extraction"] == sum(
        t["accounting"]["text_turns_awaiting_extraction"] for t in report["tenants"]
    )

    verified = json.loads(memflow(world, tmp_path, "--json", "--verify").stdout)
    assert verified["verified"] is True
    assert all(t["graph"]["equals_table"] is True for t in verified["tenants"])
    assert all(t["vectors_equal_table"] is True for t in verified["tenants"])
    assert_no_process_left(world)


def test_a_tenant_without_any_table_row_counts_zero(world: Path) -> None:
    nobody = Scope("nobody", "here")
    (acc,) = tenant_summaries(TableStore(world), [nobody])
    assert acc["lines_in"] == acc["turns"] == acc["facts"] == 0 and acc["lines_accounted"]
    assert acc["rejects_by_reason"] == {} and acc["text_turns_awaiting_extraction"] == 0
    assert TableStore(world).read_columns(Asset.QUARANTINE, [nobody], ["reason"]).is_empty()


def test_a_long_verification_reports_progress_on_stderr(capsys: pytest.CaptureFixture) -> None:
    from pipelines.cli import _verify_progress

    clock = iter([0.0, 1.0, 2.5, 3.0, 5.4])  # the start, then one reading a call
    progress = _verify_progress(lambda: next(clock))
    progress(200, 1000)  # 1 s in: too soon
    progress(400, 1000)  # 2.5 s: said
    progress(600, 1000)  # 0.5 s after the last: too soon
    progress(1000, 1000)  # the end, once something was said
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines() == [
        "memflow status: verified 400 of 1000 tenants' stores (2 s)",
        "memflow status: verified 1000 of 1000 tenants' stores (5 s)",
    ]
    quiet = _verify_progress(iter([0.0, 0.5]).__next__)
    quiet(2, 2)  # a short verification says nothing
    assert capsys.readouterr().err == ""
