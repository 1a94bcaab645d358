"""`memflow migrate` on data directories the OLD code wrote, then the new code's `memflow run`:
the same facts, nothing extracted again, nothing doubled.

Two old layouts, each made at test time by its own code: `git archive <commit>` into a temp
folder and its own `memflow run` (this venv, PYTHONPATH on the old tree) on its bundled sample
landing zone, with the test's command extractor logging every call:

- `bc5929a`: the per-tenant Parquet tables (manifests, write tokens) the Delta tables replace;
- `6ba3651`: the tenant x day design before it (per-day rejects, no extraction log).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pytest

from pipelines.migrate import BUILD_DIR, DONE, LEGACY_DIR, _build, _read_legacy, _tenant_files
from resources.graph.sqlite import SqliteGraphStore
from resources.tables import TableStore
from resources.vector.legacy import stop_legacy_server
from schemas.scope import Scope

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
PARQUET_LAYOUT, TENANT_DAY_DESIGN = "bc5929a", "6ba3651"
BIN = Path(sys.executable).parent
KEYS = {
    "validated_facts": "fact_id",
    "entities": "entity_id",
    "extracted_triples": "triple_id",
    "raw_turns": "turn_key",
    "quarantine": "reject_id",
    "turn_rejects": "reject_id",
    "extraction_rejects": "reject_id",
}


def _env(extract_log: Path, **extra: str) -> dict[str, str]:
    from resources.settings import DEFAULTS

    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMFLOW_", "DAGSTER_"))}
    env.update(DEFAULTS)
    command = f"{sys.executable} {ROOT}/tests/support/extractor_cmd.py --log {extract_log}"
    env.update(
        {
            "MEMFLOW_EXTRACTOR": "command",
            "MEMFLOW_EXTRACTION_COMMAND": command,
            "MEMFLOW_EMBEDDER": "none",
            "MEMFLOW_GRAPH_BACKEND": "sqlite",
        }
    )
    env.update(extra)
    return env


def _run(cmd: list[str], env: dict[str, str], cwd: Path, ok: bool = True) -> str:
    done = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=900)
    if ok:
        assert done.returncode == 0, f"{cmd} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


def _rekeyed(df: pl.DataFrame, asset: str, key: str, scope: Scope) -> list[str]:
    """`df[key]` as the current entity-key rule gives it (facts and entities), else as is."""
    from schemas import ids

    if asset == "entities":
        return [ids.entity_id(scope.tenant_id, scope.ns, ids.norm_key(n)) for n in df["name"]]
    if asset == "validated_facts":
        return [
            ids.fact_id(
                scope.tenant_id,
                scope.ns,
                ids.entity_id(scope.tenant_id, scope.ns, ids.norm_key(s)),
                p,
                ids.entity_id(scope.tenant_id, scope.ns, ids.norm_key(o)),
            )
            for s, p, o in df.select("subject", "predicate", "object").rows()
        ]
    return df[key].to_list()


def _calls(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


@pytest.fixture(scope="module", params=[PARQUET_LAYOUT, TENANT_DAY_DESIGN])
def old_world(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Path]]:
    """A data directory and instance written by the old code, and its landing zone."""
    commit = request.param
    base = tmp_path_factory.mktemp(f"old-{commit}")
    tree = base / "tree"
    tree.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", commit], capture_output=True, timeout=120
    )
    assert archive.returncode == 0, (
        f"git archive {commit} failed (the old layout's commit must be in the history): "
        f"{archive.stderr.decode(errors='replace')}"
    )
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
    data, log = base / "data", base / "old-extractor.log"
    env = _env(log, PYTHONPATH=str(tree))
    script = "import sys; from pipelines.cli import main; sys.exit(main(sys.argv[1:]))"
    _run(
        [sys.executable, "-c", script, "run", "--landing", str(tree / "landing-sample"),
         "--data", str(data)],
        env,
        tree,
    )  # fmt: skip
    assert _calls(log) > 0  # the old runs extracted text turns
    assert not (data / "tables" / "validated_facts" / "_delta_log").exists()
    yield {"tree": tree, "data": data, "landing": tree / "landing-sample"}
    stop_legacy_server(data)  # the old run's supervised Milvus Lite server, if it started one


def _legacy(tables: Path, asset: str, tenant: str) -> pl.DataFrame:
    """A tenant's table in an old layout (`tables`: its tables folder), read the way the
    migration reads it."""
    files = _tenant_files(tables / asset).get(Scope.parse(tenant))
    assert files, (asset, tenant)
    return _read_legacy(asset, files)


def _keys(store: TableStore, asset: str, scope: Scope, key: str) -> pl.Series:
    """A tenant's key column of `asset` (empty when it has no row)."""
    df = store.read(asset, scope)
    return pl.Series(key, [], pl.String) if df is None else df[key]


def test_the_new_code_refuses_an_old_data_directory_until_it_is_migrated(
    old_world: dict[str, Path], tmp_path: Path
) -> None:
    data = tmp_path / "data"
    shutil.copytree(old_world["data"], data)
    memflow = str(BIN / "memflow")
    out = _run([memflow, "status", "--data", str(data)], _env(tmp_path / "x.log"), tmp_path, False)
    assert "memflow migrate" in out and "Parquet layout" in out
    stop_legacy_server(data)


def test_migrate_then_run_keeps_the_facts_and_extracts_nothing_again(
    old_world: dict[str, Path], tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    data = tmp_path / "data"
    request.addfinalizer(lambda: stop_legacy_server(data))
    shutil.copytree(old_world["data"], data)
    log = tmp_path / "new-extractor.log"
    env = _env(log)
    memflow = str(BIN / "memflow")

    out = _run([memflow, "migrate", "--data", str(data)], env, tmp_path)
    assert "command:python extractor_cmd.py" in out  # the identity the old instance observed
    assert (data / LEGACY_DIR / DONE).exists() and not (data / BUILD_DIR).exists()
    store = TableStore(data)
    tenants = [s.key for s in store.scopes("validated_facts")]
    assert len(tenants) == 4
    old = data / LEGACY_DIR  # the old tables, kept as they were
    for tenant in tenants:
        scope = Scope.parse(tenant)
        log_table = store.read("extraction_log", scope)
        turns = store.read("raw_turns", scope)
        assert log_table is not None and turns is not None
        assert log_table["turn_key"].is_unique().all()
        assert log_table.height == turns.height
        for asset, key in KEYS.items():
            before, after = _legacy(old, asset, tenant), _keys(store, asset, scope, key)
            assert after.is_unique().all(), (tenant, asset)
            assert sorted(after.to_list()) == sorted(before[key].to_list()), (tenant, asset)

    again = _run([memflow, "migrate", "--data", str(data)], env, tmp_path)
    assert "nothing changed" in again  # idempotent

    _run(
        [memflow, "run", "--landing", str(old_world["landing"]), "--data", str(data)],
        env,
        tmp_path,
    )
    assert _calls(log) == 0, "the new code extracted turns the old one had extracted"

    for tenant in tenants:
        scope = Scope.parse(tenant)
        for asset, key in KEYS.items():
            before, after = _legacy(old, asset, tenant), _keys(store, asset, scope, key)
            assert after.is_unique().all(), (tenant, asset)  # nothing doubled
            expected = _rekeyed(before, asset, key, scope)
            assert sorted(after.to_list()) == sorted(expected), (tenant, asset)
        # The same facts, content and all: ids follow the entity-key rule of issue 16, which
        # the new code applies to what the old one stored (memflow.rekey).
        facts_before = _legacy(old, "validated_facts", tenant).sort("triple_id")
        facts_after = store.read("validated_facts", scope)
        assert facts_after is not None
        # the columns the old code wrote (later ones, such as `sources`, the new run fills)
        files = _tenant_files(old / "validated_facts")[scope]
        written = {c for f in files for c in pl.read_parquet_schema(f)}
        ids_ = {"fact_id", "subject_id", "object_id", "supersedes", "superseded_by"}
        columns = [c for c in facts_before.columns if c in written and c not in ids_]
        assert facts_after.sort("triple_id").select(columns).equals(facts_before.select(columns))
        graph_before = SqliteGraphStore(old_world["data"] / "graph.sqlite")
        graph_after = SqliteGraphStore(data / "graph.sqlite")
        try:
            assert graph_after.counts(scope) == graph_before.counts(scope)
        finally:
            graph_before.close()
            graph_after.close()
        files = store.read("landing_files", scope)
        assert files is not None and files.height > 0
        assert (files["records"] == files["turns"] + files["rejects"]).all()


def test_a_migration_killed_half_way_is_finished_by_the_next(
    old_world: dict[str, Path], tmp_path: Path
) -> None:
    from pipelines.migrate import migrate

    data = tmp_path / "data"
    shutil.copytree(old_world["data"], data)
    half = data / BUILD_DIR
    _build(data / "tables", half, "none", datetime.now(UTC), print)
    (half / "_BUILT").unlink()  # killed before the build finished: it is redone
    first = migrate(data, extraction_identity="none")
    assert not first.already_migrated and (data / LEGACY_DIR / DONE).exists()
    # killed between the two renames: the next migrate finishes them
    (data / "tables").rename(data / BUILD_DIR)
    (data / BUILD_DIR / "_BUILT").write_text("x")
    (data / LEGACY_DIR / DONE).unlink()
    migrate(data, extraction_identity="none")
    assert (data / "tables" / "validated_facts" / "_delta_log").is_dir()
    assert (data / LEGACY_DIR / DONE).exists()
    assert migrate(data, extraction_identity="none").already_migrated
    stop_legacy_server(data)
