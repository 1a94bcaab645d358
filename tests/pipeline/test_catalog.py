"""The catalog a data engineer expects (pipelines/catalog.py, pipelines/io.py): every table
asset declares its column schema, table name, owner and a code version that follows its code;
every materialization records the table's URI, rows, the tenant's rows and the Delta version
it committed, and that version reads back the table as the run left it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from dagster import AssetKey, materialize

from pipelines import catalog
from pipelines.batches import range_tags
from pipelines.definitions import ALL_ASSETS, defs
from pipelines.io import DELTA_VERSION
from resources.tables import TableStore
from schemas.scope import Scope
from schemas.tables import TABLES
from tests.pipeline.conftest import FACTS, INGEST, make_resources

ROOT = Path(__file__).resolve().parents[2]
TENANTS = ["acme/api", "globex/ml"]


def test_every_table_asset_declares_its_schema_owner_and_code_version() -> None:
    specs = {
        s.key.to_user_string(): s for ad in defs.get_repository_def().asset_graph.assets_defs
        for s in ad.specs
    }  # fmt: skip
    for asset, layout in TABLES.items():
        spec = specs[asset]
        schema = spec.metadata["dagster/column_schema"]
        assert [c.name for c in schema.columns] == list(layout), asset
        assert spec.metadata["dagster/table_name"] == f"memflow.{asset}"
        assert spec.owners and spec.code_version, asset
        assert "delta" in spec.kinds, asset


def test_a_materialization_names_its_table_rows_and_delta_version(instance, landing, data_dir):
    instance.add_dynamic_partitions("tenants", TENANTS)
    result = materialize(
        catalog.with_catalog(ALL_ASSETS),
        selection=[*INGEST, *FACTS],
        instance=instance,
        resources=make_resources(landing, data_dir),
        tags=range_tags(TENANTS[0], TENANTS[-1]),
    )
    assert result.success
    store = TableStore(data_dir)
    for tenant in TENANTS:
        records = instance.fetch_materializations(AssetKey("validated_facts"), limit=10).records
        mat = next(
            r.asset_materialization for r in records if r.asset_materialization.partition == tenant
        )
        meta = mat.metadata
        assert meta["dagster/uri"].value == store.uri("validated_facts")
        assert meta["dagster/row_count"].value == store.total_rows("validated_facts")
        scope = Scope.parse(tenant)
        mine = store.read("validated_facts", scope)
        assert mine is not None and meta["dagster/partition_row_count"].value == mine.height
        version = meta[DELTA_VERSION].value
        assert version == store.version("validated_facts")
        assert mat.tags and mat.tags.get("dagster/code_version")  # what staleness compares
        then = store.read("validated_facts", scope, version=version)
        assert then is not None and then.equals(mine)


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the project's packages, which catalog.code_version reads instead."""
    for package in catalog.PROJECT:
        shutil.copytree(
            ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    monkeypatch.setattr(catalog, "ROOT", tmp_path)
    catalog.code_version.cache_clear()
    catalog._imports.cache_clear()
    yield tmp_path
    catalog.code_version.cache_clear()
    catalog._imports.cache_clear()


def _versions() -> dict[str, str]:
    catalog.code_version.cache_clear()
    catalog._imports.cache_clear()
    return {m: catalog.code_version(m) for m in ("assets.facts", "assets.turns", "assets.landing")}


def test_a_code_change_changes_the_code_version_of_the_assets_whose_code_it_is(tree: Path) -> None:
    before = _versions()
    with (tree / "memflow" / "facts.py").open("a") as fh:
        fh.write("\n# a change to the facts stage\n")
    after = _versions()
    assert after["assets.facts"] != before["assets.facts"]  # the stage the asset calls
    assert after["assets.turns"] == before["assets.turns"]  # not its code: not stale
    assert after["assets.landing"] == before["assets.landing"]
    with (tree / "schemas" / "rules.py").open("a") as fh:
        fh.write("\n# a rule every stage reads\n")
    changed = _versions()
    assert all(changed[m] != after[m] for m in changed)
