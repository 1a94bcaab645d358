"""kill -9 during the embedding asset and during each sink, then rerun: the stores converge,
nothing is lost and nothing is embedded twice. Real subprocesses, real stores."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from resources.graph.sqlite import SqliteGraphStore
from resources.graph.sync import graph_equals_table
from resources.tables import TableStore
from resources.vector.factory import open_vector_store
from resources.vector.ledger import EmbeddingLedger, vector_table
from resources.vector.lite_server import stop_lite_server
from resources.vector.sync import vectors_equal_table
from schemas.scope import Scope
from tests.pipeline.landing_fixtures import save, write_jsonl
from tests.support.embeddings_server import EmbeddingsServer, Fault

pytestmark = pytest.mark.slow
SCOPE = Scope("acme", "big")
DAY = "2026-11-02"
FACTS_TOTAL = 3000
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
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
    assert (
        child(
            w,
            "raw_turns",
            "turn_rejects",
            "landing_files",
            "extracted_triples",
            "extraction_rejects",
            "extraction_log",
        ).wait(300)
        == 0
    )
    assert child(w, "validated_facts", "entities", "quarantine").wait(300) == 0
    yield w
    stop_lite_server(data)


def child(w: dict, *select: str, embed_url: str = "") -> subprocess.Popen:
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
        SCOPE.key,
        "--select",
        *select,
    ]
    if embed_url:
        cmd += ["--embed-url", embed_url]
    return subprocess.Popen(
        cmd, cwd=ROOT, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )


def kill_on_log(proc: subprocess.Popen, marker: str, timeout: float = 240) -> None:
    """SIGKILL the run's process group as soon as its log shows `marker`."""
    deadline = time.monotonic() + timeout
    assert proc.stderr is not None
    for line in iter(proc.stderr.readline, b""):
        if marker.encode() in line:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
            return
        assert time.monotonic() < deadline, "the run never reached the kill point"
    raise AssertionError(f"the run ended without logging {marker!r}")


def kill_when(
    proc: subprocess.Popen, ready: Callable[[], bool], timeout: float = 240, poll: float = 0.05
) -> bool:
    """SIGKILL the run's process group once `ready()`; False if the run ended first."""
    deadline = time.monotonic() + timeout
    while not ready():
        if proc.poll() is not None:
            return False
        assert time.monotonic() < deadline, "the run never reached the kill point"
        time.sleep(poll)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)
    return True


def test_kill_during_embedding_then_rerun_embeds_only_what_is_missing(world: dict) -> None:
    ledger = EmbeddingLedger(world["data"])
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


def test_kill_during_vector_sink_then_rerun_converges(world: dict) -> None:
    ledger = EmbeddingLedger(world["data"])
    table = vector_table(ledger, "hash-model", SCOPE)
    assert table.height > 0  # embedded by the previous test
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
