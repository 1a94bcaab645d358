from __future__ import annotations

import os
from pathlib import Path

from dotenv import dotenv_values

from pipelines.settings import resolve
from resources.settings import DEFAULTS

ROOT = Path(__file__).resolve().parents[2]


def test_dotenv_lists_every_setting_with_its_default() -> None:
    assert dotenv_values(ROOT / ".env") == DEFAULTS


def test_flags_beat_environment_beat_dotenv(tmp_path: Path, monkeypatch) -> None:
    env_file = tmp_path / ".env"
    env_file.write_text("MEMFLOW_DATA_DIR=from-file\nMEMFLOW_EXTRACTOR=command\n")
    monkeypatch.setenv("MEMFLOW_EXTRACTOR", "openai")
    monkeypatch.delenv("MEMFLOW_DATA_DIR", raising=False)
    monkeypatch.delenv("MEMFLOW_LANDING_DIR", raising=False)
    got = resolve({"MEMFLOW_LANDING_DIR": "flag"}, env_file)
    assert got["MEMFLOW_LANDING_DIR"] == "flag" == os.environ["MEMFLOW_LANDING_DIR"]
    assert got["MEMFLOW_EXTRACTOR"] == "openai"
    assert got["MEMFLOW_DATA_DIR"] == "from-file"
    assert got["MEMFLOW_GRAPH_BACKEND"] == "sqlite"


def test_importing_the_code_location_reads_no_configuration(monkeypatch) -> None:
    import importlib
    import sys

    for name in DEFAULTS:
        monkeypatch.setenv(name, "not-a-valid-value")
    for mod in [m for m in sys.modules if m.split(".")[0] in ("pipelines", "assets")]:
        monkeypatch.delitem(sys.modules, mod)
    defs = importlib.import_module("pipelines.definitions").defs
    assert defs.resolve_job_def("tenant_job").name == "tenant_job"
