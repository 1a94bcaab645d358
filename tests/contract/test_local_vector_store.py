"""The embedded vector store's own promises, beyond the contract every backend keeps: files
that other tools read, several processes on one data directory, kill -9 mid-write, a bounded
cache, and rows of another scope never answered."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pytest

from resources.vector.base import VectorStoreError
from resources.vector.local import LocalVectorStore, _schema
from schemas.scope import Scope

ROOT = Path(__file__).resolve().parents[2]
SCOPE = Scope("acme", "payments")
E1 = [1.0, 0.0, 0.0, 0.0]
E2 = [0.0, 1.0, 0.0, 0.0]


def _python(code: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=check,
    )


def test_the_files_read_with_no_memflow_code(tmp_path: Path) -> None:
    store = LocalVectorStore(tmp_path)
    store.upsert("all-MiniLM-L6-v2", 4, SCOPE, [("e1", "h1", [3.0, 4.0, 0.0, 0.0])])
    path = store.path("all-MiniLM-L6-v2", SCOPE)
    assert path.is_relative_to(tmp_path / path.parent.parent.name / "acme")
    frame = pl.read_ipc(path)
    assert frame.columns == ["tenant_id", "ns", "entity_id", "text_hash", "vector"]
    assert frame.select("tenant_id", "ns", "entity_id", "text_hash").rows() == [
        ("acme", "payments", "e1", "h1")
    ]
    assert np.allclose(frame["vector"][0].to_list(), [0.6, 0.8, 0.0, 0.0])  # stored unit-length
    with pa.memory_map(str(path)) as source:
        assert pa.ipc.open_file(source).read_all().num_rows == 1


WRITER = """
import json, sys
from resources.vector.local import LocalVectorStore
from schemas.scope import Scope
store, scope = LocalVectorStore(sys.argv[1]), Scope("acme", "payments")
for line in sys.stdin:
    op, rows = json.loads(line)
    if op == "upsert":
        store.upsert("m", 4, scope, rows)
    elif op == "delete":
        store.delete("m", scope, rows)
    elif op == "scope":
        store.delete_scope(scope)
    else:
        for i in range(rows):
            store.upsert("m", 4, scope, [(f"{op}-{i}", "h", [1.0, 0.0, float(i), 0.0])])
    print("done", flush=True)
"""


def _writer(root: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, str(root)],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def _send(proc: subprocess.Popen[str], op: str, rows: object) -> None:
    assert proc.stdin is not None
    proc.stdin.write(json.dumps([op, rows]) + "\n")
    proc.stdin.flush()


def _done(proc: subprocess.Popen[str]) -> None:
    assert proc.stdout is not None and proc.stdout.readline().strip() == "done"


def _ask(proc: subprocess.Popen[str], op: str, rows: object) -> None:
    _send(proc, op, rows)
    _done(proc)


@pytest.mark.slow  # spawns interpreters
def test_another_process_sees_each_write_at_the_next_call(tmp_path: Path) -> None:
    reader = LocalVectorStore(tmp_path)
    assert reader.nearest("m", SCOPE, E1) == []
    writer = _writer(tmp_path)
    try:
        _ask(writer, "upsert", [["a", "h", E1]])
        assert [h.entity_id for h in reader.nearest("m", SCOPE, E1)] == ["a"]
        assert reader.models(SCOPE) == {"m": (4, 1)}
        _ask(writer, "upsert", [["a", "h2", E2], ["b", "h", E1]])
        assert [h.entity_id for h in reader.nearest("m", SCOPE, E1)] == ["b"]
        assert reader.ids("m", SCOPE) == {"a": "h2", "b": "h"}
        _ask(writer, "delete", ["b"])
        assert reader.nearest("m", SCOPE, E1) == []
        _ask(writer, "scope", None)
        assert reader.models(SCOPE) == {} and reader.ids("m", SCOPE) == {}
    finally:
        writer.communicate(timeout=60)


@pytest.mark.slow  # spawns interpreters
def test_concurrent_writers_of_one_scope_lose_no_write(tmp_path: Path) -> None:
    writers = [_writer(tmp_path) for _ in range(4)]
    try:
        for w, proc in enumerate(writers):  # every interpreter is up before the race starts
            _ask(proc, f"warm{w}", 1)
        for w, proc in enumerate(writers):
            _send(proc, f"w{w}", 20)
        for proc in writers:
            _done(proc)
    finally:
        for proc in writers:
            proc.communicate(timeout=60)
    assert [p.returncode for p in writers] == [0, 0, 0, 0]
    held = LocalVectorStore(tmp_path).ids("m", SCOPE)
    expected = {f"w{w}-{i}" for w in range(4) for i in range(20)}
    assert set(held) == expected | {f"warm{w}-0" for w in range(4)}


@pytest.mark.slow  # spawns interpreters
def test_a_writer_killed_mid_write_leaves_the_previous_file(tmp_path: Path) -> None:
    store = LocalVectorStore(tmp_path)
    store.upsert("m", 4, SCOPE, [("kept", "h", E1)])
    # The child writes its temporary file, then is killed (SIGKILL) where it would rename it.
    killed = _python(
        """
        import os, signal, sys
        import resources.vector.local as local
        from schemas.scope import Scope
        local.os.replace = lambda *a: os.kill(os.getpid(), signal.SIGKILL)
        local.LocalVectorStore(sys.argv[1]).upsert("m", 4, Scope("acme", "payments"),
                                                   [("lost", "h", [0, 1, 0, 0])])
        """,
        str(tmp_path),
        check=False,
    )
    assert killed.returncode == -signal.SIGKILL
    path = store.path("m", SCOPE)
    orphans = list(path.parent.glob(f".{path.name}.*.tmp"))
    assert len(orphans) == 1
    assert LocalVectorStore(tmp_path).ids("m", SCOPE) == {"kept": "h"}
    store.upsert("m", 4, SCOPE, [("next", "h", E2)])
    assert store.ids("m", SCOPE) == {"kept": "h", "next": "h"}
    assert list(path.parent.glob(f".{path.name}.*.tmp")) == []


def test_a_damaged_file_fails_naming_it_and_the_way_out(tmp_path: Path) -> None:
    store = LocalVectorStore(tmp_path)
    store.upsert("m", 4, SCOPE, [("a", "h", E1)])
    path = store.path("m", SCOPE)
    path.write_bytes(path.read_bytes()[:100])
    fresh = LocalVectorStore(tmp_path)
    with pytest.raises(VectorStoreError, match=r"payments\..*cannot be read.*vectors rebuild"):
        fresh.nearest("m", SCOPE, E1)
    with pytest.raises(VectorStoreError, match=r"payments\..*cannot be read.*vectors rebuild"):
        fresh.models_many([SCOPE])
    path.write_bytes(b"")
    with pytest.raises(VectorStoreError, match="cannot be read"):
        fresh.ids("m", SCOPE)
    with pytest.raises(VectorStoreError, match="cannot be read"):
        fresh.models_many([SCOPE])


def _write_ipc(path: Path, table: pa.Table) -> None:
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)


@pytest.mark.parametrize(
    "vector_type, vector, why",
    [
        (pa.list_(pa.float32(), 3), [1.0, 0.0, 0.0], "columns are not"),  # another model's file
        (pa.list_(pa.float64(), 4), E1, "columns are not"),  # doubles read as floats: garbage
        (pa.list_(pa.float32()), E1, "columns are not"),  # not a fixed-size list
        (pa.list_(pa.float32(), 4), [1.0, None, 0.0, 0.0], "nulls"),
        (pa.list_(pa.float32(), 4), None, "nulls"),
    ],
)
def test_a_file_of_another_shape_fails_naming_it(
    tmp_path: Path, vector_type: pa.DataType, vector: list | None, why: str
) -> None:
    """A file copied in by hand that is not this store's schema for the declared model is never
    searched nor merged into: every call names it and the way out."""
    store = LocalVectorStore(tmp_path)
    store.upsert("m", 4, SCOPE, [("a", "h", E1)])
    path = store.path("m", SCOPE)
    schema = pa.schema([*list(_schema(4))[:4], pa.field("vector", vector_type)])
    row = {"tenant_id": "acme", "ns": "payments", "entity_id": "b", "text_hash": "h"}
    _write_ipc(path, pa.Table.from_pylist([{**row, "vector": vector}], schema=schema))
    reader = LocalVectorStore(tmp_path)
    for call in (
        lambda: reader.nearest("m", SCOPE, E1),
        lambda: reader.ids("m", SCOPE),
        lambda: reader.upsert("m", 4, SCOPE, [("c", "h", E2)]),
    ):
        with pytest.raises(VectorStoreError, match=f"{path.name}.*{why}.*vectors rebuild"):
            call()


def test_rows_of_another_scope_in_a_file_are_never_answered(tmp_path: Path) -> None:
    """A file holds its own scope's rows; one that does not (copied by hand) answers only
    the rows that carry the scope."""
    store = LocalVectorStore(tmp_path)
    store.upsert("m", 4, SCOPE, [("mine", "h", E2)])
    path = store.path("m", SCOPE)
    table = pa.Table.from_pylist(
        [
            {"tenant_id": "acme", "ns": "payments", "entity_id": "mine", "text_hash": "h",
             "vector": E2},
            {"tenant_id": "globex", "ns": "payments", "entity_id": "theirs", "text_hash": "h",
             "vector": E1},
        ],
        schema=_schema(4),
    )  # fmt: skip
    _write_ipc(path, table)
    reader = LocalVectorStore(tmp_path)
    assert [h.entity_id for h in reader.nearest("m", SCOPE, E1, min_cosine=-1.0)] == ["mine"]
    assert reader.ids("m", SCOPE) == {"mine": "h"}
    assert reader.models(SCOPE) == {"m": (4, 1)}
    assert reader.models_many([SCOPE]) == {SCOPE: {"m": (4, 1)}}  # counted from two columns


def test_scopes_differing_in_case_never_share_a_file(tmp_path: Path) -> None:
    store = LocalVectorStore(tmp_path)
    upper, lower = Scope("Acme", "Payments"), Scope("acme", "payments")
    store.upsert("m", 4, upper, [("u", "h", E1)])
    store.upsert("m", 4, lower, [("l", "h", E1)])
    assert str(store.path("m", upper)).lower() != str(store.path("m", lower)).lower()
    assert store.ids("m", upper) == {"u": "h"} and store.ids("m", lower) == {"l": "h"}


def test_the_search_cache_is_bounded_by_bytes(tmp_path: Path) -> None:
    writer = LocalVectorStore(tmp_path)
    scopes = [Scope("acme", f"repo-{i}") for i in range(30)]
    rng = np.random.default_rng(7)
    for scope in scopes:
        writer.upsert("m", 64, scope, [(f"e{j}", "h", rng.normal(size=64)) for j in range(50)])
    one = writer.path("m", scopes[0]).stat().st_size
    reader = LocalVectorStore(tmp_path, cache_max_bytes=5 * one)
    for scope in scopes * 2:
        query = rng.normal(size=64)
        hits = reader.nearest("m", scope, query, k=3, min_cosine=-1.0)
        assert len(hits) == 3 and {h.entity_id for h in hits} <= {f"e{j}" for j in range(50)}
        assert reader.cache.bytes <= 5 * one and len(reader.cache) <= 5
    # A scope larger than the whole cache is answered, and not kept.
    tiny = LocalVectorStore(tmp_path, cache_max_bytes=one // 2)
    assert len(tiny.nearest("m", scopes[0], rng.normal(size=64), min_cosine=-1.0)) == 8
    assert tiny.cache.bytes == 0


@pytest.mark.slow  # spawns interpreters
def test_dimensions_are_declared_once_across_processes(tmp_path: Path) -> None:
    LocalVectorStore(tmp_path).upsert("m", 4, SCOPE, [("a", "h", E1)])
    other = _python(
        """
        import sys
        from resources.vector.local import LocalVectorStore
        from schemas.scope import Scope
        LocalVectorStore(sys.argv[1]).upsert("m", 3, Scope("globex", "x"), [("a", "h", [1, 0, 0])])
        """,
        str(tmp_path),
        check=False,
    )
    assert other.returncode != 0 and "4-dimensional" in other.stderr
    declared = [p for p in tmp_path.iterdir() if p.is_dir() and p.name != ".locks"]
    assert len(declared) == 1 and (declared[0] / "model.json").is_file()


def test_bad_vectors_are_refused_before_anything_is_written(tmp_path: Path) -> None:
    store = LocalVectorStore(tmp_path)
    with pytest.raises(ValueError, match="NaN"):
        store.upsert("m", 4, SCOPE, [("a", "h", [float("nan"), 0, 0, 0])])
    with pytest.raises(ValueError, match=r"1\.\.1024 bytes"):
        store.upsert("m", 4, SCOPE, [("", "h", E1)])
    with pytest.raises(ValueError, match="positive integer"):
        store.upsert("m", True, SCOPE, [("a", "h", E1)])  # type: ignore[arg-type]
    assert store.models(SCOPE) == {} and not any(tmp_path.iterdir())
    assert os.listdir(tmp_path) == []


def test_reading_ids_keeps_nothing_in_the_search_cache(tmp_path: Path) -> None:
    """A sink reads every tenant's ids once or twice a run: its memory does not grow with them."""
    store = LocalVectorStore(tmp_path)
    scopes = [Scope("acme", f"repo-{i}") for i in range(5)]
    for scope in scopes:
        store.upsert("m", 4, scope, [("a", "h", E1)])
    assert store.ids_many("m", scopes) == {s: {"a": "h"} for s in scopes}
    assert store.models_many(scopes) == {s: {"m": (4, 1)} for s in scopes}
    assert len(store.cache) == 0 and store.cache.bytes == 0
    store.nearest("m", scopes[0], E1)
    assert len(store.cache) == 1


def test_a_file_truncated_in_place_under_a_reader_fails_clearly(tmp_path: Path) -> None:
    """`cp` over a file a process has loaded truncates it in place: the reader holds a copy
    (a mapping would die of SIGBUS) and its next call names the damaged file."""
    store = LocalVectorStore(tmp_path)
    store.upsert("m", 4, SCOPE, [(f"e{i}", "h", E1) for i in range(100)])
    reader = LocalVectorStore(tmp_path)
    assert len(reader.nearest("m", SCOPE, E1, k=200)) == 100
    path = store.path("m", SCOPE)
    with open(path, "r+b") as f:
        f.truncate(64)
    with pytest.raises(VectorStoreError, match="cannot be read"):
        reader.nearest("m", SCOPE, E1)


def test_erasing_a_tenant_leaves_nothing_that_names_it(tmp_path: Path) -> None:
    """`delete_scope` of each of a tenant's scopes (what erasing a tenant calls) leaves no file
    or folder that names the tenant, a killed writer's temporary file included; the other
    tenants keep theirs, and the scope can be written again."""
    store = LocalVectorStore(tmp_path)
    gone = [Scope("zebra-corp", "api"), Scope("zebra-corp", "web")]
    kept = Scope("acme", "api")
    for scope in (*gone, kept):
        for model in ("m", "facts:m"):
            store.upsert(model, 4, scope, [("a", "h", E1)])
    path = store.path("m", gone[0])
    (path.parent / f".{path.name}.999.dead.tmp").write_bytes(b"half a write")
    for scope in gone:
        store.delete_scope(scope)
    left = [p.relative_to(tmp_path) for p in tmp_path.rglob("*")]
    assert not any("zebra" in str(p) for p in left), left
    assert store.models(kept) == {"m": (4, 1), "facts:m": (4, 1)}
    store.upsert("m", 4, gone[1], [("b", "h", E2)])
    assert store.ids("m", gone[1]) == {"b": "h"}


def test_counts_come_from_what_each_write_recorded_while_its_file_is_unchanged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`models_many` (every tenant's counts, `memflow status`) opens no Arrow file whose
    writer's record beside it still holds; a file changed since (written by hand, the record
    lost or damaged) is counted, never taken from a stale record."""
    import resources.vector.local as local

    store = LocalVectorStore(tmp_path)
    store.upsert("m", 4, SCOPE, [("a", "h", E1), ("b", "h", E2)])
    path = store.path("m", SCOPE)
    record = path.with_suffix(local.ROWS_SUFFIX)
    assert record.read_text().split()[0] == "2"

    def never(*_: object) -> int:
        raise AssertionError("the Arrow file was opened")

    with monkeypatch.context() as m:
        m.setattr(local, "_count", never)
        assert LocalVectorStore(tmp_path).models_many([SCOPE]) == {SCOPE: {"m": (4, 2)}}

    row = {"tenant_id": "acme", "ns": "payments", "text_hash": "h"}
    by_hand = [{**row, "entity_id": e, "vector": E1} for e in ("x", "y", "z")]
    _write_ipc(path, pa.Table.from_pylist(by_hand, schema=_schema(4)))  # the record is stale
    assert LocalVectorStore(tmp_path).models_many([SCOPE]) == {SCOPE: {"m": (4, 3)}}
    for damaged in ("", "many", "7 1 2 3"):
        record.write_text(damaged)
        assert LocalVectorStore(tmp_path).models_many([SCOPE]) == {SCOPE: {"m": (4, 3)}}
    record.unlink()
    assert LocalVectorStore(tmp_path).models_many([SCOPE]) == {SCOPE: {"m": (4, 3)}}
    # `memflow vectors rebuild` records what is missing (a file written before records were
    # kept), once; then no Arrow file is opened to count
    assert store.record_counts([SCOPE, Scope("acme", "none")]) == 1
    assert store.record_counts([SCOPE]) == 0 and record.read_text().split()[0] == "3"
    with monkeypatch.context() as m:
        m.setattr(local, "_count", never)
        assert LocalVectorStore(tmp_path).models_many([SCOPE]) == {SCOPE: {"m": (4, 3)}}
    store.upsert("m", 4, SCOPE, [("w", "h", E1)])  # a write records its count again
    assert record.read_text().split()[0] == "4"
    store.delete("m", SCOPE, ["w", "x", "y", "z"])  # the file goes, and its record
    assert not path.exists() and not record.exists()
    assert store.models_many([SCOPE]) == {SCOPE: {}}
