"""F16: temp files of killed writers are removed by later writers (resources/fs.py), and a
full or read-only disk is one clear `StorageError` naming the table or file and the cause, not
a traceback of polars, delta-rs or Rust."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest

from resources import fs
from resources.fs import StorageError, atomic_write_parquet, sweep_temp_files
from resources.tables import TableStore
from resources.vector.ledger import EmbeddingLedger
from schemas.scope import Scope

SCOPE = Scope("acme", "api")
ROOT = Path(__file__).resolve().parents[2]


def frame(rows: int = 10) -> pl.DataFrame:
    return pl.DataFrame({"a": list(range(rows)), "b": [f"row {i}" for i in range(rows)]})


# ------------------------------------------------------------------------- stale temp files

KILLED_WRITER = """
import os, sys, time
from resources.fs import temp_name
path = os.path.join(sys.argv[1], temp_name())
open(path, "wb").write(b"half a parquet file")
print(path, flush=True)
time.sleep(60)
"""


def test_temp_files_of_a_killed_writer_are_removed_by_the_next_writer(tmp_path: Path) -> None:
    """F16: kill -9 left `.tmp-*.parquet` files that later runs never removed."""
    target = tmp_path / "folder" / "x.parquet"
    target.parent.mkdir(parents=True)
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLED_WRITER, str(target.parent)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    assert proc.stdout is not None
    orphan = Path(proc.stdout.readline().strip())
    assert orphan.exists() and orphan.name.startswith(".tmp-")
    # While its writer lives, nobody touches it.
    assert not fs.stale_temp(orphan)
    proc.kill()  # kill -9
    proc.wait()
    legacy = target.parent / ".tmp-k3j4h5g6.parquet"  # what older versions left
    legacy.write_bytes(b"x")
    os.utime(legacy, (time.time() - 3600, time.time() - 3600))
    fresh_legacy = target.parent / ".tmp-zzzzzzzz.parquet"  # a name without owner, made now
    fresh_legacy.write_bytes(b"x")
    mine = target.parent / fs.temp_name()  # this process's own write in flight
    mine.write_bytes(b"x")

    atomic_write_parquet(frame(), target)

    assert not orphan.exists() and not legacy.exists()
    assert sweep_temp_files(target.parent) == 0  # swept recently: not again at every write
    assert mine.exists() and fresh_legacy.exists()
    assert pl.read_parquet(target).height == 10
    assert sorted(p.name for p in target.parent.iterdir() if p.name.startswith(".tmp-")) == sorted(
        [mine.name, fresh_legacy.name]
    )


def test_a_pid_reused_by_a_later_process_does_not_keep_a_temp_file(tmp_path: Path) -> None:
    """The name records when its writer started: a live process started at another time
    under the same pid is not its writer."""
    pid = os.getppid()  # alive, and not this process
    started = fs.process_started_at(pid)
    assert started is not None
    ours = tmp_path / f".tmp-{pid}-{int(started * 100)}-abcd0123.parquet"
    reused = tmp_path / f".tmp-{pid}-{int(started * 100) - 5000}-abcd0123.parquet"
    assert not fs.stale_temp(ours) and fs.stale_temp(reused)


def test_the_embedding_ledger_sweeps_its_temp_files_too(tmp_path: Path) -> None:
    ledger = EmbeddingLedger(tmp_path)
    folder = ledger.scope_dir("m", SCOPE)
    folder.mkdir(parents=True)
    dead = folder / ".tmp-part-00000000000000000001-999999-abcd1234.parquet"  # old naming
    dead.write_bytes(b"x")
    os.utime(dead, (time.time() - 3600, time.time() - 3600))
    dead_pid = folder / ".tmp-4194303-1-deadbeef.parquet"  # a pid that cannot be alive
    dead_pid.write_bytes(b"x")
    assert ledger.append("m", SCOPE, [("e1", "h1", [0.1, 0.2])]) == 1
    assert not dead.exists() and not dead_pid.exists()
    assert [p.name.startswith("part-") for p in folder.iterdir() if p.suffix == ".parquet"] == [
        True
    ]


# ---------------------------------------------------------------------------- disk faults


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 2 MiB tmpfs (root only); skipped where mounting is not allowed."""
    mount = tmp_path / "tiny"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)],
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_full_disk_is_one_storage_error_naming_the_table(tiny_disk: Path) -> None:
    store = TableStore(tiny_disk)
    store.write_table(entities(10), "entities", SCOPE)  # fits
    with pytest.raises(StorageError) as info:
        store.write_table(big_facts(4), "validated_facts", SCOPE)
    err = info.value
    assert str(err) == f"cannot write {store.uri('validated_facts')}: no space left on device"
    assert err.errno == errno.ENOSPC and isinstance(err, OSError)
    # what was stored is intact, and the failed table has no rows
    assert store.read("validated_facts", SCOPE) is None
    stored = store.read("entities", SCOPE)
    assert stored is not None and stored.height == 10


def test_a_read_only_disk_is_one_storage_error_naming_the_table(tiny_disk: Path) -> None:
    store = TableStore(tiny_disk)
    store.write_table(entities(10), "entities", SCOPE)
    subprocess.run(["mount", "-o", "remount,ro", str(tiny_disk)], check=True)
    with pytest.raises(StorageError) as info:
        store.write_table(entities(3), "entities", SCOPE)
    assert info.value.errno == errno.EROFS
    assert str(info.value).endswith(": read-only file system")
    assert store.uri("entities") in str(info.value)
    with pytest.raises(StorageError, match="read-only file system"):
        store.write_table(entities(3), "quarantine", SCOPE)  # a new table: mkdir fails
    with pytest.raises(StorageError, match="read-only file system"):
        EmbeddingLedger(tiny_disk).append("m", SCOPE, [("e1", "h1", [0.1])])
    stored = store.read("entities", SCOPE)
    assert stored is not None and stored.height == 10  # reads go on


def entities(rows: int) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "entity_id": [f"e{i}" for i in range(rows)],
            "tenant_id": [SCOPE.tenant_id] * rows,
            "ns": [SCOPE.ns] * rows,
            "name": [f"name {i}" for i in range(rows)],
        }
    )


def big_facts(mib: int) -> pl.DataFrame:
    """Facts whose text does not compress: `mib` MiB of it."""
    n = mib * 64
    return pl.DataFrame(
        {
            "fact_id": [f"f{i}" for i in range(n)],
            "tenant_id": [SCOPE.tenant_id] * n,
            "ns": [SCOPE.ns] * n,
            "subject": [os.urandom(8192).hex() for _ in range(n)],
        }
    )


def test_enospc_from_the_writer_is_translated_without_a_tmpfs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same without mounting: the write itself raises ENOSPC."""

    def full(self: pl.DataFrame, path: object, **_: object) -> None:
        Path(str(path)).write_bytes(b"PAR1")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pl.DataFrame, "write_parquet", full)
    target = tmp_path / "t" / "x.parquet"
    with pytest.raises(StorageError, match=r"cannot write .*x\.parquet: no space left on device"):
        atomic_write_parquet(frame(), target)
    assert list(target.parent.iterdir()) == []


@pytest.mark.parametrize(
    ("message", "code"),
    [
        ("failed to write: No space left on device (os error 28)", errno.ENOSPC),
        ("Read-only file system (os error 30)", errno.EROFS),
        ("io error: Permission denied", errno.EACCES),
    ],
)
def test_polars_io_errors_are_storage_errors(message: str, code: int) -> None:
    error = fs.as_storage_error("/d/x.parquet", pl.exceptions.ComputeError(message))
    assert error is not None and error.errno == code
    assert str(error).startswith("cannot write /d/x.parquet: ")


def test_other_errors_are_not_disguised() -> None:
    assert fs.as_storage_error("/d/x", ValueError("schema mismatch")) is None
