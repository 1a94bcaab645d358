"""`memflow run`'s orchestration: a subset of tenants touches only those tenants."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipelines.runner import run_all
from pipelines.settings import resolve
from resources.settings import DEFAULTS
from resources.tables import TableStore
from resources.vector.lite_server import stop_lite_server
from schemas.scope import Scope
from tests.pipeline.landing_fixtures import small_landing


def test_run_all_for_a_subset_of_tenants(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    landing, data = small_landing(tmp_path / "landing"), tmp_path / "data"
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    for name in DEFAULTS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MEMFLOW_EMBEDDER", "none")
    resolve(
        {"MEMFLOW_LANDING_DIR": str(landing), "MEMFLOW_DATA_DIR": str(data)}, tmp_path / "no.env"
    )
    try:
        first = run_all(str(landing), str(data), tenants=["globex/ml"])
        assert [s.key for s in first.tenants] == ["globex/ml"] and first.tenant_runs == 1
        tables = TableStore(data)
        assert tables.read("validated_facts", Scope("globex", "ml")).height == 1
        assert tables.read("validated_facts", Scope("acme", "api")) is None
        both = run_all(str(landing), str(data))
        assert both.ingest_runs == 3
        assert tables.read("validated_facts", Scope("acme", "api")).height == 3
    finally:
        stop_lite_server(data)
