"""Issue 17 item 3, pipeline side, as a user lives it: `memflow run` lands facts, a later
`retract_facts` turn (the shared landing format) retracts one fact and forgets one entity,
the next `memflow run` applies it, and `memflow recall` on the embedded stores no longer
answers with them, while `--as-of` a time before the retraction still does; a restatement
after it brings the fact back from then on. Real subprocesses, real stores."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest

from memflow.landing import RETRACT_TOOL
from resources.graph.sqlite import SqliteGraphStore
from resources.tables import TableStore
from schemas.scope import Scope
from schemas.tables import TABLES
from tests.pipeline.landing_fixtures import save, turn, write_jsonl

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
SCOPE = Scope("acme", "cache")
SAID = "2026-11-02T10:00:00Z"
RETRACTED = "2026-11-05T09:30:00Z"
RESTATED = "2026-11-09T08:00:00Z"
QUESTION = "what does the cache service use, and what reads from redis"


def memflow(*args: str | Path, env: dict[str, str]) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "pipelines.cli", *map(str, args)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def retract(tid: str, ts: str, items: list[dict], **extra: str) -> dict:
    line = turn("acme", "cache", "s2", tid, ts, "tool", "")
    line.update(tool_name=RETRACT_TOOL, tool_input={"retract": items, **extra})
    return line


def answer(env: dict[str, str], data: Path, *extra: str) -> dict:
    out = memflow(
        "recall", "--tenant", SCOPE.key, QUESTION, "--data", data, "--json",
        "--ranking", "lexical", *extra, env=env,
    )  # fmt: skip
    return json.loads(out)


def cited(answer: dict) -> set[tuple[str, str, str]]:
    return {(f["subject"], f["predicate"], f["object"]) for f in answer["facts"]}


def recalled(env: dict[str, str], data: Path, *extra: str) -> set[tuple[str, str, str]]:
    return cited(answer(env, data, *extra))


def entries(answer: dict) -> set[str]:
    return {e["name"] for e in answer["entities"]}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    base = tmp_path_factory.mktemp("retract")
    landing, data = base / "landing", base / "data"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMFLOW_", "DAGSTER_"))}
    env.update(MEMFLOW_EMBEDDER="none", MEMFLOW_EXTRACTOR="none", CI="true")
    triples = [
        {"subject": "cache service", "predicate": "USES", "object": "redis 6"},
        {"subject": "cache service", "predicate": "USES", "object": "memcached"},
        {"subject": "report job", "predicate": "READS_FROM", "object": "redis 6"},
        {"subject": "cache service", "predicate": "RUNS_ON", "object": "kubernetes"},
    ]
    write_jsonl(
        landing, "acme", "cache", "a.jsonl", [save("acme", "cache", "s1", "1", SAID, triples)]
    )
    states: dict[str, object] = {}
    try:
        memflow("run", "--landing", landing, "--data", data, env=env)
        first = answer(env, data)
        states["before"], states["entries_before"] = cited(first), entries(first)
        items = [
            {"subject": "cache service", "predicate": "uses", "object": "Memcached"},
            {"entity": "Redis 6"},
            {"subject": "cache service", "predicate": "USES", "object": "never said"},
        ]
        write_jsonl(landing, "acme", "cache", "b.jsonl", [
            retract("1", RETRACTED, items, reason="replaced by valkey", by="key:ops@acme"),
        ])  # fmt: skip
        memflow("run", "--landing", landing, "--data", data, env=env)
        after = answer(env, data)
        states["after"], states["entries_after"] = cited(after), entries(after)
        before = answer(env, data, "--as-of", "2026-11-05T09:29:59Z")
        states["as_of_before"], states["entries_as_of_before"] = cited(before), entries(before)
        states["as_of_at"] = recalled(env, data, "--as-of", RETRACTED)
        tables = TableStore(data)
        states["retractions"] = tables.read("retractions", SCOPE)
        states["quarantine"] = tables.read("quarantine", SCOPE)
        states["tables_before_rerun"] = {a: tables.read_table(a, SCOPE) for a in TABLES}
        memflow("run", "--landing", landing, "--data", data, env=env)
        states["tables_after_rerun"] = {a: tables.read_table(a, SCOPE) for a in TABLES}
        states["rerun_retractions"] = tables.read("retractions", SCOPE)
        again = [{"subject": "cache service", "predicate": "USES", "object": "memcached"}]
        write_jsonl(
            landing, "acme", "cache", "c.jsonl", [save("acme", "cache", "s3", "1", RESTATED, again)]
        )
        memflow("run", "--landing", landing, "--data", data, env=env)
        states["restated"] = recalled(env, data)
        states["between"] = recalled(env, data, "--as-of", "2026-11-07T00:00:00Z")
        states["facts"] = tables.read("validated_facts", SCOPE)
        with SqliteGraphStore(data / "graph.sqlite") as graph:
            states["graph"] = {f.fact_id: f.valid_to for f in graph.facts(SCOPE)}
        yield states
    finally:
        pass  # nothing runs after memflow's commands (no vector server in the data directory)


CACHE_REDIS = ("cache service", "USES", "redis 6")
CACHE_MEMCACHED = ("cache service", "USES", "memcached")
REPORT_REDIS = ("report job", "READS_FROM", "redis 6")
K8S = ("cache service", "RUNS_ON", "kubernetes")


def test_recall_before_the_retraction_answers_with_every_fact(world: dict) -> None:
    assert {CACHE_REDIS, CACHE_MEMCACHED, REPORT_REDIS, K8S} <= world["before"]


def test_a_retracted_fact_and_a_forgotten_entity_leave_recall(world: dict) -> None:
    assert K8S in world["after"]
    assert not {CACHE_REDIS, CACHE_MEMCACHED, REPORT_REDIS} & world["after"]
    assert not {CACHE_REDIS, CACHE_MEMCACHED, REPORT_REDIS} & world["as_of_at"]


def test_as_of_before_the_retraction_still_sees_them(world: dict) -> None:
    assert {CACHE_REDIS, CACHE_MEMCACHED, REPORT_REDIS, K8S} <= world["as_of_before"]


def test_a_forgotten_entity_is_no_entry_entity_from_then_on(world: dict) -> None:
    assert "redis 6" in world["entries_before"]
    assert "redis 6" in world["entries_as_of_before"]
    assert "redis 6" not in world["entries_after"]
    assert "cache service" in world["entries_after"]


def test_each_closure_is_recorded_with_who_when_why_and_the_turn(world: dict) -> None:
    table: pl.DataFrame = world["retractions"]
    rows = {(r["subject"], r["predicate"], r["object"]): r for r in table.to_dicts()}
    assert set(rows) == {CACHE_REDIS, CACHE_MEMCACHED, REPORT_REDIS}
    for row in rows.values():
        assert row["by"] == "key:ops@acme"
        assert row["reason"] == "replaced by valkey"
        assert row["retracted_at"].isoformat().startswith("2026-11-05T09:30")
        assert (row["session_id"], row["turn_id"]) == ("s2", "1")
    assert rows[CACHE_MEMCACHED]["kind"] == "triple"
    assert {rows[CACHE_REDIS]["kind"], rows[REPORT_REDIS]["kind"]} == {"entity"}
    assert world["rerun_retractions"].equals(table)  # a rerun changes nothing


def test_a_rerun_over_an_unchanged_zone_leaves_every_table_identical(world: dict) -> None:
    before, after = world["tables_before_rerun"], world["tables_after_rerun"]
    assert before["validated_facts"] is not None and before["retractions"] is not None

    def same(a: pl.DataFrame | None, b: pl.DataFrame | None) -> bool:
        return a is b if a is None or b is None else a.equals(b)

    assert [asset for asset, df in before.items() if not same(df, after[asset])] == []


def test_an_item_matching_nothing_is_quarantined(world: dict) -> None:
    quarantine: pl.DataFrame = world["quarantine"]
    unknown = quarantine.filter(pl.col("reason") == "retract_unknown").to_dicts()
    assert len(unknown) == 1 and "never said" in unknown[0]["detail"]
    assert unknown[0]["severity"] == "error" and unknown[0]["turn_id"] == "1"


def test_a_restatement_brings_the_fact_back_from_then_on(world: dict) -> None:
    assert CACHE_MEMCACHED in world["restated"]
    assert CACHE_MEMCACHED not in world["between"]
    facts: pl.DataFrame = world["facts"]
    memcached = facts.filter(pl.col("object") == "memcached").sort("valid_from")
    assert memcached.height == 2  # the closed fact and the restated one
    assert memcached["valid_to"][0] is not None and memcached["valid_to"][1] is None
    # the graph sink holds the closures
    assert {world["graph"][f] for f in memcached["fact_id"]} == set(memcached["valid_to"])
