"""F16: temp files of killed runs are removed by later writers, and a full or read-only disk
is one clear `StorageError` naming the path and the cause, not a traceback of polars/Rust."""

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

from resources import tables
from resources.tables import StorageError, TableStore, atomic_write_parquet, sweep_temp_files
from resources.vector.ledger import EmbeddingLedger
from schemas.scope import Scope

SCOPE = Scope("acme", "api")
ROOT = Path(__file__).resolve().parents[2]


def frame(rows: int = 10) -> pl.DataFrame:
    return pl.DataFrame({"a": list(range(rows)), "b": [f"row {i}" for i in range(rows)]})


# ------------------------------------------------------------------------- stale temp files

KILLED_WRITER = """
import os, sys, time
from resources.tables import temp_name
path = os.path.join(sys.argv[1], temp_name())
open(path, "wb").write(b"half a parquet file")
print(path, flush=True)
time.sleep(60)
"""


def test_temp_files_of_a_killed_writer_are_removed_by_the_next_writer(tmp_path: Path) -> None:
    """F16: kill -9 left `.tmp-*.parquet` files that later runs never removed."""
    store = TableStore(tmp_path)
    target = store.path("entities", SCOPE)
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
    assert not tables._stale(orphan)
    proc.kill()  # kill -9
    proc.wait()
    legacy = target.parent / ".tmp-k3j4h5g6.parquet"  # what older versions left
    legacy.write_bytes(b"x")
    os.utime(legacy, (time.time() - 3600, time.time() - 3600))
    fresh_legacy = target.parent / ".tmp-zzzzzzzz.parquet"  # a name without owner, made now
    fresh_legacy.write_bytes(b"x")
    mine = target.parent / tables.temp_name()  # this process's own write in flight
    mine.write_bytes(b"x")

    store.write(frame(), "entities", SCOPE)

    assert not orphan.exists() and not legacy.exists()
    assert sweep_temp_files(target.parent) == 0  # swept recently: not again at every write
    assert mine.exists() and fresh_legacy.exists()
    assert pl.read_parquet(target).height == 10
    assert sorted(p.name for p in target.parent.iterdir() if p.name.startswith(".tmp-")) == sorted(
        [mine.name, fresh_legacy.name]
    )


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


def incompressible(mib: int) -> pl.DataFrame:
    return pl.DataFrame({"blob": [os.urandom(1 << 16) for _ in range(mib * 16)]})


def test_a_full_disk_is_one_storage_error_naming_the_path(tiny_disk: Path) -> None:
    store = TableStore(tiny_disk)
    store.write(frame(), "entities", SCOPE)  # fits
    with pytest.raises(StorageError) as info:
        store.write(incompressible(4), "validated_facts", SCOPE)
    err = info.value
    target = store.path("validated_facts", SCOPE)
    assert str(err) == f"cannot write {target}: no space left on device"
    assert err.errno == errno.ENOSPC and err.path == target
    assert isinstance(err, OSError)
    # nothing half-written stays behind, and what was stored is intact
    assert not [p for p in target.parent.iterdir() if p.name.startswith(".tmp-")]
    assert not target.exists()
    assert pl.read_parquet(store.path("entities", SCOPE)).height == 10


def test_a_read_only_disk_is_one_storage_error_naming_the_path(tiny_disk: Path) -> None:
    store = TableStore(tiny_disk)
    store.write(frame(), "entities", SCOPE)
    subprocess.run(["mount", "-o", "remount,ro", str(tiny_disk)], check=True)
    with pytest.raises(StorageError) as info:
        store.write(frame(), "entities", SCOPE)
    assert info.value.errno == errno.EROFS
    assert str(info.value).endswith(": read-only file system")
    assert str(store.path("entities", SCOPE).parent) in str(info.value)
    with pytest.raises(StorageError, match="read-only file system"):
        store.write(frame(), "entities", Scope("globex", "new"))  # the mkdir fails too
    with pytest.raises(StorageError, match="read-only file system"):
        EmbeddingLedger(tiny_disk).append("m", SCOPE, [("e1", "h1", [0.1])])


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
    error = tables.as_storage_error("/d/x.parquet", pl.exceptions.ComputeError(message))
    assert error is not None and error.errno == code
    assert str(error).startswith("cannot write /d/x.parquet: ")


def test_other_errors_are_not_disguised() -> None:
    assert tables.as_storage_error("/d/x", ValueError("schema mismatch")) is None
