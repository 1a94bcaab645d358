"""Issue 16 item 3 on a data directory today's code wrote: the entity-key rule and the id
encoding changed, and the next `memflow run` of the new code re-resolves what is stored
(`memflow.rekey`) so that every table and the graph equal a clean run of the new code; then
`memflow recall` never cites a turn that said ``>3.12`` as support for ``<3.12`` (review H1).

The old data directory is made at test time: `git archive` of the commit before issue 16 into
a temp folder, and its own `memflow run` (this venv, PYTHONPATH on the old tree).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest

from resources.graph.sqlite import SqliteGraphStore
from resources.tables import TableStore
from resources.vector.legacy import stop_legacy_server
from schemas.ids import norm_key
from schemas.scope import Scope
from tests.pipeline.landing_fixtures import save, turn, write_jsonl
from tests.support.old_code import CLI, run_ok, unpack

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
OLD_COMMIT = "bc5929a"  # main before issue 16
BIN = Path(sys.executable).parent
SCOPE = Scope("er", "resolve")
DAY = "2026-11-03"

# (turn, subject, predicate, object): each statement in a turn of its own.
STATEMENTS = [
    ("t1", "app", "REQUIRES", "python <3.12"),
    ("t2", "app", "REQUIRES", "python >3.12"),
    ("t3", "worker", "RETRIES", "-1"),
    ("t4", "worker", "RETRIES", "1"),
    ("t5", "trainer", "USES_LEARNING_RATE", "1e-5"),
    ("t6", "trainer", "USES_LEARNING_RATE", "1e5"),
    ("t7", "api", "LISTENS_ON", "::1"),
    ("t8", "api", "LISTENS_ON", "1"),
    ("t9", "billing", "RUNS_ON", ".NET"),
    ("t10", "billing", "RUNS_ON", "net"),
    ("t11", "deploy", "READS", ".env"),
    ("t12", "deploy", "READS", "env"),
    ("t13", "payments-api", "USES", "redis"),
    ("t14", "payments\u2013api", "USES", "redis"),
    ("t15", "payments\u200bapi", "USES", "redis"),
    ("t16", "p\u0430yments-api", "USES", "redis"),
]
# Table -> its key and the columns that hold run times.
TABLES = {
    "raw_turns": ("turn_key", ()),
    "turn_rejects": ("reject_id", ()),
    "landing_files": ("source_file", ("read_at", "mtime_ns")),
    "extracted_triples": ("triple_id", ()),
    "extraction_rejects": ("reject_id", ()),
    "extraction_log": ("turn_key", ("extracted_at",)),
    "validated_facts": ("fact_id", ()),
    "entities": ("entity_id", ()),
    "quarantine": ("reject_id", ()),
    "fact_merges": ("triple_id", ()),
}


def landing_zone(root: Path) -> Path:
    lines = []
    for n, (tid, s, p, o) in enumerate(STATEMENTS):
        triple = {"subject": s, "predicate": p, "object": o}
        lines.append(save("er", "resolve", "s1", tid, f"{DAY}T10:{n:02d}:00Z", [triple]))
    write_jsonl(root, "er", "resolve", "a.jsonl", lines)
    # L3: two different turns the \x1f join gave one key (the second was a duplicate_turn)
    for name, (session_id, turn_id) in (("b.jsonl", ("a\x1fb", "c")), ("c.jsonl", ("a", "b\x1fc"))):
        at = f"{DAY}T11:0{name[0] == 'c':d}:00Z"
        line = turn("er", "resolve", session_id, turn_id, at, "user", f"turn of {name}")
        write_jsonl(root, "er", "resolve", name, [line])
    return root


def _env(**extra: str) -> dict[str, str]:
    from resources.settings import DEFAULTS

    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMFLOW_", "DAGSTER_"))}
    env.update(DEFAULTS)
    env.update(
        {"MEMFLOW_EXTRACTOR": "none", "MEMFLOW_EMBEDDER": "none", "MEMFLOW_GRAPH_BACKEND": "sqlite"}
    )
    env.update(extra)
    return env


_run = run_ok


def memflow(*args: str | Path, cwd: Path) -> str:
    return _run([str(BIN / "memflow"), *map(str, args)], _env(), cwd)


@pytest.fixture(scope="module")
def worlds(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    base = tmp_path_factory.mktemp("upgrade-keys")
    tree = unpack(OLD_COMMIT, base / "tree")
    landing = landing_zone(base / "landing")
    old, clean = base / "old", base / "clean"
    try:
        _run(
            [sys.executable, "-c", CLI, "run", "--landing", str(landing), "--data", str(old)],
            _env(PYTHONPATH=str(tree)),
            tree,
        )
        snapshot = base / "old-as-written"
        shutil.copytree(old, snapshot, ignore=shutil.ignore_patterns("milvus*", "*.sock"))
        memflow("migrate", "--data", old, cwd=base)  # its Parquet tables to Delta tables
        memflow("run", "--landing", landing, "--data", old, cwd=base)  # the upgrade
        memflow("run", "--landing", landing, "--data", clean, cwd=base)
        yield {"old": old, "clean": clean, "snapshot": snapshot, "base": base}
    finally:
        for data in (old, clean):
            stop_legacy_server(data)


def _table(data: Path, asset: str) -> pl.DataFrame:
    from pipelines.migrate import _read_legacy, _tenant_files
    from resources.tables import legacy_layout

    if legacy_layout(data / "tables"):  # the old code's Parquet tables, read as migrate does
        files = _tenant_files(data / "tables" / asset).get(SCOPE)
        assert files, asset
        df = _read_legacy(asset, files)
    else:
        from schemas import tables as layouts

        df = TableStore(data).read_table(asset, SCOPE)
        if df is None:  # a Delta table holds no partition for a tenant with no rows
            df = layouts.empty(layouts.TABLES[asset])
    key, volatile = TABLES[asset]
    return df.drop([c for c in volatile if c in df.columns]).sort(key)


def test_the_old_code_merged_what_carries_meaning(worlds: dict[str, Path]) -> None:
    """The state an existing data directory holds: the review's H1 and L2 and L3."""
    facts = _table(worlds["snapshot"], "validated_facts")
    assert facts.height == 6 + 4  # six pairs merged into one fact each; four payments spellings
    rejects = _table(worlds["snapshot"], "turn_rejects")
    assert rejects["reason"].to_list() == ["duplicate_turn"]


def test_the_upgraded_directory_equals_a_clean_run_on_every_table(worlds: dict[str, Path]) -> None:
    for asset in TABLES:
        upgraded, clean = _table(worlds["old"], asset), _table(worlds["clean"], asset)
        assert upgraded.equals(clean), (asset, upgraded, clean)
    facts = _table(worlds["clean"], "validated_facts")
    assert facts.height == 12 + 1
    assert _table(worlds["clean"], "turn_rejects").is_empty()  # both L3 turns landed


def test_the_upgraded_graph_equals_the_clean_one(worlds: dict[str, Path]) -> None:
    upgraded = SqliteGraphStore(worlds["old"] / "graph.sqlite")
    clean = SqliteGraphStore(worlds["clean"] / "graph.sqlite")
    try:
        assert upgraded.entities(SCOPE) == clean.entities(SCOPE)
        assert upgraded.facts(SCOPE) == clean.facts(SCOPE)
    finally:
        upgraded.close()
        clean.close()


def test_a_second_run_changes_nothing(worlds: dict[str, Path]) -> None:
    before = {a: _table(worlds["old"], a) for a in TABLES}
    memflow(
        "run", "--landing", worlds["base"] / "landing", "--data", worlds["old"], cwd=worlds["base"]
    )
    for asset, df in before.items():
        assert _table(worlds["old"], asset).equals(df), asset


@pytest.mark.parametrize("data", ["old", "clean"])
def test_recall_cites_each_turn_only_for_what_it_said(worlds: dict[str, Path], data: str) -> None:
    said = {tid: norm_key(o) for tid, _, _, o in STATEMENTS}
    question = (
        "which python version does app require, and what do worker retries, trainer, billing use"
    )
    out = memflow(
        "recall", "--tenant", SCOPE.key, question, "--data", worlds[data], "--json",
        "--ranking", "lexical", cwd=worlds["base"],
    )  # fmt: skip
    answer = json.loads(out)
    pairs = {(s, o) for _, s, _, o in STATEMENTS}
    recalled = [f for f in answer["facts"] if (f["subject"], f["object"]) in pairs]
    assert {f["object"] for f in recalled if f["subject"] == "app"} == {
        "python <3.12",
        "python >3.12",
    }, answer
    for fact in recalled:
        cited = [t["turn_id"] for t in fact["provenance"]["sources"]]
        assert cited and cited[0] == fact["provenance"]["turn_id"]
        for turn_id in cited:
            assert said[turn_id] == norm_key(fact["object"]), (fact, turn_id)
