"""kill -9 during the embedding asset and during each sink, then rerun: the stores converge,
nothing is lost and nothing is embedded twice. Real subprocesses, real stores."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import polars as pl
import pytest

from resources.graph.sqlite import SqliteGraphStore
from resources.graph.sync import graph_equals_table
from resources.tables import TableStore
from resources.vector.factory import open_vector_store
from resources.vector.ledger import EmbeddingLedger, vector_table
from resources.vector.sync import vectors_equal_table
from schemas.scope import Scope
from schemas.tables import TABLES, empty
from tests.pipeline.conftest import FACTS, INGEST
from tests.pipeline.landing_fixtures import save, turn, write_jsonl
from tests.support.embeddings_server import EmbeddingsServer, Fault
from tests.support.gremlin import DedicatedJanusGraph
from tests.support.leftovers import assert_no_process_left
from tests.support.milvus_server import MilvusServer, MilvusServerError
from tests.support.services import ServiceUnavailable, free_port_block

# No test here relies on another having run: under xdist they may run on either worker, each
# with its own world (and with pytest 9.2, xdist's loadgroup does not group: pytest-xdist#1386).
pytestmark = pytest.mark.slow


def _nothing() -> None:
    """No action besides the kill."""


NOTHING: Callable[[], None] = _nothing
SCOPE = Scope("acme", "big")
DAY = "2026-11-02"
FACTS_TOTAL = 3000
FACTS_STAGE = tuple(FACTS)  # the multi-assets of the facts and ingest stages, whole
INGEST_STAGE = tuple(INGEST)
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")  # once per worker, even if xdist interleaves other modules
def world(tmp_path_factory: pytest.TempPathFactory):
    base = tmp_path_factory.mktemp("faults")
    landing, data, home = base / "landing", base / "data", base / "home"
    data.mkdir()
    home.mkdir()
    triples = [
        {"subject": f"svc-{i}", "predicate": "DEPENDS_ON", "object": f"lib-{i % 700}"}
        for i in range(FACTS_TOTAL)
    ]
    lines = [
        save("acme", "big", "s1", str(n), f"{DAY}T10:{n:02d}:00Z", triples[n * 250 : (n + 1) * 250])
        for n in range(FACTS_TOTAL // 250)
    ]
    write_jsonl(landing, "acme", "big", "inventory.jsonl", lines)
    w = {"landing": landing, "data": data, "home": home}
    assert child(w, *INGEST_STAGE).wait(300) == 0
    assert child(w, *FACTS_STAGE).wait(300) == 0
    yield w
    assert_no_process_left(data)


def child(
    w: dict,
    *select: str,
    embed_url: str = "",
    gremlin_url: str = "",
    milvus_uri: str = "",
    tenant: str = SCOPE.key,
) -> subprocess.Popen:
    cmd = [
        sys.executable,
        "-m",
        "tests.faults.child",
        "--landing",
        str(w["landing"]),
        "--data",
        str(w["data"]),
        "--home",
        str(w["home"]),
        "--tenant",
        tenant,
        "--select",
        *select,
    ]
    if embed_url:
        cmd += ["--embed-url", embed_url]
    if gremlin_url:
        cmd += ["--gremlin-url", gremlin_url]
    if milvus_uri:
        cmd += ["--milvus-uri", milvus_uri]
    return subprocess.Popen(
        cmd, cwd=ROOT, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )


def kill_run(proc: subprocess.Popen) -> None:
    """SIGKILL the run's process group (the child and whatever it spawned)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)


def kill_on_log(
    proc: subprocess.Popen, marker: str, timeout: float = 240, also: Callable[[], None] = NOTHING
) -> None:
    """Once the run's log shows `marker`: `also()` (e.g. kill -9 a server), then SIGKILL the
    run's process group."""
    deadline = time.monotonic() + timeout
    assert proc.stderr is not None
    for line in iter(proc.stderr.readline, b""):
        if marker.encode() in line:
            also()
            kill_run(proc)
            return
        assert time.monotonic() < deadline, "the run never reached the kill point"
    raise AssertionError(f"the run ended without logging {marker!r}")


def kill_when(
    proc: subprocess.Popen,
    ready: Callable[[], bool],
    timeout: float = 240,
    poll: float = 0.05,
    also: Callable[[], None] = NOTHING,
) -> bool:
    """Once `ready()`: `also()`, then SIGKILL the run's process group; False if the run ended
    first."""
    deadline = time.monotonic() + timeout
    while not ready():
        if proc.poll() is not None:
            return False
        assert time.monotonic() < deadline, "the run never reached the kill point"
        time.sleep(poll)
    also()
    kill_run(proc)
    return True


# -- the facts stage: kill -9 between its table writes, rerun, equal a clean run ------------
# Review L1: fact_merges said whether a merge went into a fact of an earlier run, so a rerun
# (or a kill between the writes of validated_facts and fact_merges, then a rerun) never equalled
# a clean run. Every table of the stage is compared here.

MERGE_SCOPE = Scope("acme", "merges")
FACTS_TABLES = {
    "validated_facts": "fact_id",
    "entities": "entity_id",
    "quarantine": "reject_id",
    "fact_merges": "triple_id",
    "retractions": "fact_id",
}


@pytest.fixture(scope="session")
def merges_upstream(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A data directory with the turns and extraction stages done for a tenant whose triples
    repeat each other (so fact_merges has rows) and hold one retraction."""
    base = tmp_path_factory.mktemp("faults-merges")
    landing, data, home = base / "landing", base / "data", base / "home"
    data.mkdir()
    home.mkdir()
    lines = []
    for n in range(12):
        triples = [
            {"subject": f"Svc {i}" if n % 2 else f"svc-{i}", "predicate": "DEPENDS_ON",
             "object": f"lib-{i % 300}"}
            for i in range(n * 100, n * 100 + 250)
        ]  # fmt: skip
        lines.append(save("acme", "merges", "s1", str(n), f"{DAY}T10:{n:02d}:00Z", triples))
    forget = turn("acme", "merges", "s2", "r", f"{DAY}T11:00:00Z", "tool", "")
    forget.update(tool_name="retract_facts", tool_input={"retract": [{"entity": "lib-7"}]})
    write_jsonl(landing, "acme", "merges", "inventory.jsonl", [*lines, forget])
    w = {"landing": landing, "data": data, "home": home, "scope": MERGE_SCOPE.key}
    assert child(w, *INGEST_STAGE, tenant=MERGE_SCOPE.key).wait(300) == 0
    return w


def _copy(upstream: dict, into: Path) -> dict:
    shutil.copytree(upstream["data"], into / "data")
    (into / "home").mkdir()
    return {**upstream, "data": into / "data", "home": into / "home"}


def _facts_tables(data: Path) -> dict[str, pl.DataFrame]:
    store = TableStore(data)
    out = {}
    for asset, key in FACTS_TABLES.items():
        df = store.read_table(asset, MERGE_SCOPE)
        if df is None:  # a Delta table holds no partition for a tenant with no rows
            df = empty(TABLES[asset])
        out[asset] = df.sort(key, *(["request_id"] if asset == "retractions" else []))
    return out


def test_kill_between_the_facts_writes_then_rerun_equals_a_clean_run(
    merges_upstream: dict, tmp_path: Path
) -> None:
    clean = _copy(merges_upstream, tmp_path / "clean")
    assert child(clean, *FACTS_STAGE, tenant=MERGE_SCOPE.key).wait(300) == 0
    expected = _facts_tables(clean["data"])
    assert expected["fact_merges"].height > 0 and expected["retractions"].height > 0

    # a plain rerun over the same triples
    assert child(clean, *FACTS_STAGE, tenant=MERGE_SCOPE.key).wait(300) == 0
    for asset, df in _facts_tables(clean["data"]).items():
        assert df.equals(expected[asset]), asset

    def written(w: dict) -> Callable[[], bool]:
        store = TableStore(w["data"])

        def ready() -> bool:
            try:
                facts = store.read_table("validated_facts", MERGE_SCOPE)
                merges = store.read_table("fact_merges", MERGE_SCOPE)
            except Exception:  # a file being renamed into place
                return False
            return facts is not None and merges is None

        return ready

    for attempt in range(5):
        killed = _copy(merges_upstream, tmp_path / f"killed-{attempt}")
        proc = child(killed, *FACTS_STAGE, tenant=MERGE_SCOPE.key)
        if kill_when(proc, written(killed), poll=0.005):
            break
    else:
        pytest.fail("no kill landed between the facts stage's writes in 5 runs")
    store = TableStore(killed["data"])
    assert store.read_table("validated_facts", MERGE_SCOPE) is not None
    assert store.read_table("fact_merges", MERGE_SCOPE) is None
    assert child(killed, *FACTS_STAGE, tenant=MERGE_SCOPE.key).wait(300) == 0
    for asset, df in _facts_tables(killed["data"]).items():
        assert df.equals(expected[asset]), asset


def test_kill_during_embedding_then_rerun_embeds_only_what_is_missing(world: dict) -> None:
    ledger = EmbeddingLedger(world["data"])
    ledger.drop(SCOPE, "hash-model")  # from an empty ledger, whatever ran before on this worker
    entities = TableStore(world["data"]).read("entities", SCOPE)
    with EmbeddingsServer(dim=16) as server:
        server.enqueue(*[Fault(delay=0.4) for _ in range(200)])
        proc = child(world, "entity_embeddings", embed_url=server.url)
        assert kill_when(proc, lambda: ledger.load("hash-model", SCOPE).height >= 3 * 64)
        kept = ledger.load("hash-model", SCOPE)
        assert kept["entity_id"].n_unique() == kept.height < entities.height
    with EmbeddingsServer(dim=16) as server:
        proc = child(world, "entity_embeddings", embed_url=server.url)
        assert proc.wait(300) == 0, proc.stderr.read().decode()[-2000:]
        rerun_texts = server.texts
    final = ledger.load("hash-model", SCOPE)
    assert final.height == final["entity_id"].n_unique() == entities.height
    assert set(final["entity_id"]) == set(entities["entity_id"])
    # the rerun asked only for what the killed run had not persisted: nothing twice
    assert len(rerun_texts) == entities.height - kept.height
    assert not set(rerun_texts) & set(
        entities.filter(entities["entity_id"].is_in(kept["entity_id"].to_list()))["name"]
    )


def test_kill_during_graph_sink_then_rerun_converges(world: dict) -> None:
    store = SqliteGraphStore(str(world["data"] / "graph.sqlite"))
    tables = TableStore(world["data"])
    facts, entities = tables.read("validated_facts", SCOPE), tables.read("entities", SCOPE)

    def partial() -> bool:
        counts = store.counts(SCOPE)
        return counts["entities"] > 0 and counts["facts"] < facts.height

    try:
        # The window between the entity and the fact writes is short: try a few times, from an
        # empty scope each time, until the kill lands inside it.
        for _attempt in range(5):
            store.delete_scope(SCOPE)
            proc = child(world, "graph_sink")
            if kill_when(proc, partial, poll=0.002):
                break
        else:
            pytest.fail("no kill landed between the sink's first and last write in 5 runs")
        assert not graph_equals_table(store, SCOPE, entities, facts)[0]
        proc = child(world, "graph_sink")
        assert proc.wait(300) == 0, proc.stderr.read().decode()[-2000:]
        equal, diff = graph_equals_table(store, SCOPE, entities, facts)
        assert equal, diff
        assert store.counts(SCOPE) == {"entities": entities.height, "facts": facts.height}
    finally:
        store.close()


def embedded(world: dict) -> pl.DataFrame:
    """The world's `hash-model` vectors: the embedding test's, or embedded now if that test has
    not run in this process (xdist, -k) or was killed for good."""
    ledger = EmbeddingLedger(world["data"])
    table = vector_table(ledger, "hash-model", SCOPE)
    if table.height == 0:
        with EmbeddingsServer(dim=16) as server:
            proc = child(world, "entity_embeddings", embed_url=server.url)
            assert proc.wait(300) == 0, proc.stderr.read().decode()[-2000:]
        table = vector_table(ledger, "hash-model", SCOPE)
    assert table.height > 0
    return table


def test_kill_during_vector_sink_then_rerun_converges(world: dict) -> None:
    table = embedded(world)
    store = open_vector_store(None, str(world["data"]))
    try:
        store.delete_scope(SCOPE)
        proc = child(world, "vector_sink", embed_url="http://127.0.0.1:9")
        kill_on_log(proc, 'Started execution of step "vector_sink"')
        proc = child(world, "vector_sink", embed_url="http://127.0.0.1:9")
        assert proc.wait(300) == 0, proc.stderr.read().decode()[-2000:]
        equal, diff = vectors_equal_table(store, "hash-model", SCOPE, table)
        assert equal, diff
        assert store.models(SCOPE)["hash-model"] == (16, table.height)
    finally:
        store.close()


# -- real servers: kill -9 the server mid-sync, restart it, rerun ------------------------------
# Each test owns its server (a free port, a data directory of its own): a kill -9 of the shared
# test servers would fail the other workers' tests.


@pytest.fixture
def janusgraph(tmp_path: Path) -> Iterator[DedicatedJanusGraph]:
    server = DedicatedJanusGraph(tmp_path / "janusgraph")
    try:
        server.start()
    except ServiceUnavailable as exc:
        pytest.fail(f"JanusGraph could not be started: {exc}", pytrace=False)
    yield server
    server.stop()


@pytest.fixture
def milvus(tmp_path: Path) -> Iterator[MilvusServer]:
    server = MilvusServer(free_port_block(13, "MEMFLOW_FAULT_MILVUS_PORT"), tmp_path / "milvus")
    try:
        server.start()
    except MilvusServerError as exc:
        pytest.fail(f"the Milvus server could not be started: {exc}", pytrace=False)
    yield server
    server.stop(timeout_s=3)  # a throwaway server: no need to wait for a graceful stop


@pytest.mark.server
def test_kill_janusgraph_during_graph_sink_then_restart_and_rerun_converges(
    world: dict, janusgraph: DedicatedJanusGraph
) -> None:
    from resources.graph.gremlin import GremlinGraphStore

    tables = TableStore(world["data"])
    facts, entities = tables.read("validated_facts", SCOPE), tables.read("entities", SCOPE)
    store = GremlinGraphStore(janusgraph.url)
    # The sink in the insert mode JanusGraph deployments should use (4x faster there): new rows
    # go in batches of data-driven inserts, which are not retried after a lost connection.
    sink_url = f"{janusgraph.url}?new_rows=inject&insert_batch=200"

    def partial() -> bool:
        counts = store.counts(SCOPE)
        return counts["entities"] > 0 and counts["facts"] < facts.height

    try:
        for _attempt in range(3):
            store.delete_scope(SCOPE)
            proc = child(world, "graph_sink", gremlin_url=sink_url)
            # The server dies between the sink's first and last write; the run, now retrying
            # against a dead server, is killed too rather than waited for.
            if kill_when(proc, partial, poll=0.1, also=janusgraph.kill):
                break
            janusgraph.start()
        else:
            pytest.fail("no kill landed between the graph sink's first and last write in 3 runs")
        janusgraph.start()  # same data directory
        # What the killed run committed is on disk (BerkeleyDB JE), and it is not the table.
        assert store.counts(SCOPE)["entities"] > 0
        assert not graph_equals_table(store, SCOPE, entities, facts)[0]
        proc = child(world, "graph_sink", gremlin_url=sink_url)
        assert proc.wait(300) == 0, proc.stderr.read().decode()[-2000:]
        equal, diff = graph_equals_table(store, SCOPE, entities, facts)
        assert equal, diff
        assert store.counts(SCOPE) == {"entities": entities.height, "facts": facts.height}
    finally:
        store.close()


@pytest.mark.server
def test_kill_milvus_server_during_vector_sink_then_restart_and_rerun_converges(
    world: dict, milvus: MilvusServer
) -> None:
    from resources.vector.milvus import MilvusVectorStore

    table = embedded(world)
    dim = int(table["dim"][0])
    store = MilvusVectorStore(milvus.uri)
    # A stale half (other text hashes) the sink must replace, and a missing half it must add.
    half = table.head(table.height // 2)
    vectors = half["vector"].list.to_array(dim).to_numpy()
    stale = list(zip(half["entity_id"], ["stale"] * half.height, vectors, strict=True))
    store.upsert("hash-model", dim, SCOPE, stale)
    store.close()
    sink = ("vector_sink",)
    options = {"embed_url": "http://127.0.0.1:9", "milvus_uri": milvus.uri}

    # The server dies as the sink starts reading and writing (it writes a tenant in one or
    # two requests, so there is no wider window to aim at); the run is killed with it.
    proc = child(world, *sink, **options)
    kill_on_log(proc, 'Started execution of step "vector_sink"', also=milvus.kill)
    milvus.start()  # same data directory
    store = MilvusVectorStore(milvus.uri)
    try:
        assert not vectors_equal_table(store, "hash-model", SCOPE, table)[0]
        proc = child(world, *sink, **options)
        assert proc.wait(300) == 0, proc.stderr.read().decode()[-2000:]
        # The sink never flushes on a server: its acknowledged writes survive a kill -9 that
        # follows at once (Milvus replays its log on start).
        store.close()
        milvus.kill()
        milvus.start()
        store = MilvusVectorStore(milvus.uri)
        equal, diff = vectors_equal_table(store, "hash-model", SCOPE, table)
        assert equal, diff
        assert store.models(SCOPE)["hash-model"] == (dim, table.height)
    finally:
        store.close()
