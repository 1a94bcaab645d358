"""kill -9 of a process in the middle of Delta commits: every table reads back whole (each
tenant exactly as one of the writes left it, never a mix), the next writer commits on top,
and maintenance removes the files the killed commit left unreferenced. Real processes."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest

from resources.tables import TableStore
from schemas.scope import Scope

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
A, B = Scope("acme", "api"), Scope("globex", "ml")
ROWS = 40_000

WRITER = """
import sys
import polars as pl
from resources.tables import TableStore
from schemas.scope import Scope
from tests.faults.test_table_kill import frame
store = TableStore(sys.argv[1])
for i in range(10_000):
    store.write_tenants("entities", {Scope("acme", "api"): frame("acme", "api", i),
                                     Scope("globex", "ml"): frame("globex", "ml", i)})
    print(i, flush=True)
"""


def frame(org: str, repo: str, tag: int) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "entity_id": [f"e{i}" for i in range(ROWS)],
            "tenant_id": [org] * ROWS,
            "ns": [repo] * ROWS,
            "name": [f"write {tag} name {i} " + "x" * 40 for i in range(ROWS)],
        }
    )


def tag_of(df: pl.DataFrame | None) -> int:
    assert df is not None and df.height == ROWS
    tags = df["name"].str.extract(r"^write (\d+) ").cast(pl.Int64).unique().to_list()
    assert len(tags) == 1, f"a mix of writes: {tags}"
    return int(tags[0])


@pytest.mark.parametrize("round_", range(3))
def test_a_writer_killed_mid_commit_leaves_whole_tables(tmp_path: Path, round_: int) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(tmp_path)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None
    done = [int(proc.stdout.readline()) for _ in range(2 + round_)]  # some commits landed
    time.sleep(random.uniform(0.0, 0.4))  # then kill it somewhere inside the next write
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)
    done += [int(line) for line in proc.stdout.read().split()]  # printed while it slept

    store = TableStore(tmp_path)
    a, b = tag_of(store.read("entities", A)), tag_of(store.read("entities", B))
    assert a == b >= done[-1]  # one commit held both tenants: never half of one
    assert a <= done[-1] + 1  # the last printed write, or the one killed after its commit
    version = store.version("entities")

    after = store.write_tenants("entities", {A: frame("acme", "api", 99_999)})
    assert after.version == (version or 0) + 1
    assert tag_of(store.read("entities", A)) == 99_999 and tag_of(store.read("entities", B)) == a

    folder = tmp_path / "tables" / "entities"
    assert len(list(folder.glob("tenant_id=*/ns=*/*.parquet"))) > 2  # old versions, killed write
    store.maintain(retention_hours=0)
    live = store.files_by_scope("entities", [A, B])
    assert {str(p) for p in folder.glob("tenant_id=*/ns=*/*.parquet")} == {*live[A], *live[B]}
    assert tag_of(store.read("entities", A)) == 99_999 and tag_of(store.read("entities", B)) == a
