"""Resolution: flags > environment > `.env` > the state home's record > defaults, validated by
the declared types, paths made absolute once, directories checked or created as asked."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from dotenv import dotenv_values

from pipelines.settings import SettingsError, resolve
from resources import home
from resources.settings import DEFAULTS, Settings

ROOT = Path(__file__).resolve().parents[2]
DATA, LANDING = "MEMFLOW_DATA_DIR", "MEMFLOW_LANDING_DIR"


@pytest.fixture
def clean(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No MEMFLOW_* setting in the environment, and a state home of this test's own."""
    for name in [n for n in os.environ if n.startswith("MEMFLOW_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("MEMFLOW_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_dotenv_lists_every_setting_with_its_default() -> None:
    assert dotenv_values(ROOT / ".env") == DEFAULTS


def test_the_repository_dotenv_names_no_landing_zone_or_data_directory() -> None:
    # an empty one is the state home's: nothing lands in the checkout or its sample
    values = dotenv_values(ROOT / ".env")
    assert values[LANDING] == "" and values[DATA] == ""


def test_flags_beat_environment_beat_dotenv(clean: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env_file = clean / ".env"
    env_file.write_text("MEMFLOW_DATA_DIR=from-file\nMEMFLOW_EXTRACTOR=command\n")
    monkeypatch.setenv("MEMFLOW_EXTRACTOR", "openai")
    got = resolve({LANDING: "flag"}, env_file)
    assert got[LANDING] == str(clean / "flag") == os.environ[LANDING]
    assert got["MEMFLOW_EXTRACTOR"] == "openai"
    assert got[DATA] == str(clean / "from-file")
    assert got["MEMFLOW_GRAPH_BACKEND"] == "sqlite"
    assert got.sources == {**got.sources, LANDING: "flag", DATA: ".env"}
    assert got.sources["MEMFLOW_EXTRACTOR"] == "environment"


def test_empty_paths_are_the_state_homes_and_the_same_from_any_directory(
    clean: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = resolve({}, clean / "none")
    elsewhere = clean / "somewhere" / "else"
    elsewhere.mkdir(parents=True)
    monkeypatch.chdir(elsewhere)
    for name in (DATA, LANDING):
        monkeypatch.delenv(name)
    second = resolve({}, elsewhere / "none")
    assert first[DATA] == second[DATA] == str(clean / "home" / "data")
    assert first[LANDING] == second[LANDING] == str(clean / "home" / "landing")
    assert not (clean / "home").exists()  # resolution alone creates nothing


def test_the_recorded_paths_are_used_below_flags_environment_and_dotenv(
    clean: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = home.Record(data_dir=str(clean / "d"), landing_dir=str(clean / "l"))
    home.write_record(clean / "home", record)
    got = resolve({}, clean / "none")
    assert (got[DATA], got[LANDING]) == (str(clean / "d"), str(clean / "l"))
    assert got.sources[DATA] == "state home record"
    monkeypatch.delenv(DATA)
    monkeypatch.delenv(LANDING)
    assert resolve({DATA: str(clean / "x")}, clean / "none")[DATA] == str(clean / "x")


def test_a_damaged_record_is_an_error_not_other_paths(clean: Path) -> None:
    (clean / "home").mkdir()
    (clean / "home" / home.RECORD_FILE).write_text('{"data_dir": "relative", "landing_dir": 1}')
    with pytest.raises(SettingsError, match="record is damaged"):
        resolve({}, clean / "none")


def test_an_invalid_value_is_an_error_naming_the_setting_never_a_secret(
    clean: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMFLOW_RETENTION_DAYS", "a week")
    with pytest.raises(SettingsError, match=r"MEMFLOW_RETENTION_DAYS: .*'a week'"):
        resolve({}, clean / "none")
    monkeypatch.setenv("MEMFLOW_RETENTION_DAYS", "-1")
    monkeypatch.setenv("MEMFLOW_EXTRACTOR", "olama")
    with pytest.raises(SettingsError, match="MEMFLOW_EXTRACTOR: 'olama' is not one of"):
        resolve({}, clean / "none")
    monkeypatch.setenv("MEMFLOW_EXTRACTOR", "none")
    monkeypatch.setenv("MEMFLOW_HISTORY_START", "yesterday")
    with pytest.raises(SettingsError, match="MEMFLOW_HISTORY_START"):
        resolve({}, clean / "none")


def test_a_blank_number_is_its_default(clean: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMFLOW_RETENTION_DAYS", "")
    monkeypatch.setenv("MEMFLOW_FUTURE_TOLERANCE_HOURS", " ")
    got = resolve({}, clean / "none")
    assert got["MEMFLOW_RETENTION_DAYS"] == "-1" and got["MEMFLOW_FUTURE_TOLERANCE_HOURS"] == "24"


def test_a_path_a_command_only_reads_must_exist_and_is_never_created(clean: Path) -> None:
    with pytest.raises(SettingsError, match=r"/typo \(from the flag\) does not exist"):
        resolve({DATA: "/typo"}, clean / "none", must_exist=[DATA])
    assert not Path("/typo").exists()
    with pytest.raises(SettingsError, match="does not exist yet: `memflow up`"):
        resolve({}, clean / "none", must_exist=[DATA])
    assert not (clean / "home").exists()


def test_create_default_creates_only_the_state_homes_own(clean: Path) -> None:
    got = resolve({}, clean / "none", create_default=[DATA, LANDING])
    assert Path(got[DATA]).is_dir() and Path(got[LANDING]).is_dir()
    with pytest.raises(SettingsError):
        resolve({DATA: str(clean / "named")}, clean / "none", must_exist=[DATA],
                create_default=[DATA])  # fmt: skip
    assert not (clean / "named").exists()


def test_a_file_where_a_directory_belongs_is_an_error(clean: Path) -> None:
    (clean / "afile").write_text("x")
    with pytest.raises(SettingsError, match="is not a directory"):
        resolve({DATA: str(clean / "afile")}, clean / "none")


def test_the_cli_says_what_is_wrong_and_creates_nothing(clean: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMFLOW_")}
    env["MEMFLOW_HOME"] = str(clean / "home")
    done = subprocess.run(
        [sys.executable, "-m", "pipelines.cli", "status", "--data", str(clean / "typo")],
        cwd=clean,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode != 0
    assert f"the data directory {clean / 'typo'} (from the flag) does not exist" in done.stderr
    assert not (clean / "typo").exists() and not (clean / "home").exists()


def test_memflow_settings_shows_each_value_and_where_it_came_from(clean: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMFLOW_")}
    env.update(
        MEMFLOW_HOME=str(clean / "home"),
        MEMFLOW_EMBEDDING_API_KEY="sk-should-not-show",
        MEMFLOW_HOOK_MAX_FACTS="999",  # out of range: the hook uses its default
    )
    done = subprocess.run(
        [sys.executable, "-m", "pipelines.cli", "settings", "--json"],
        cwd=clean,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    rows = {r["name"]: r for r in json.loads(done.stdout)}
    assert rows["MEMFLOW_DATA_DIR"]["value"] == str(clean / "home" / "data")
    assert rows["MEMFLOW_DATA_DIR"]["source"] == "state home default"
    assert rows["MEMFLOW_EMBEDDING_API_KEY"]["value"] == "***"
    assert "sk-should-not-show" not in done.stdout
    assert rows["MEMFLOW_HOOK_MAX_FACTS"]["value"] == "15"
    assert "not valid" in rows["MEMFLOW_HOOK_MAX_FACTS"]["source"]


def test_settings_repr_hides_secrets() -> None:
    shown = repr(Settings({"MEMFLOW_MILVUS_TOKEN": "tok-123", "MEMFLOW_EXTRACTOR": "none"}))
    assert "tok-123" not in shown and "***" in shown


def test_importing_the_code_location_reads_no_configuration(monkeypatch) -> None:
    import importlib

    for name in DEFAULTS:
        monkeypatch.setenv(name, "not-a-valid-value")
    for mod in [m for m in sys.modules if m.split(".")[0] in ("pipelines", "assets")]:
        monkeypatch.delitem(sys.modules, mod)
    defs = importlib.import_module("pipelines.definitions").defs
    assert defs.resolve_job_def("tenant_job").name == "tenant_job"


def test_a_resource_built_with_an_empty_path_uses_the_state_home_never_the_cwd(
    clean: Path,
) -> None:
    from pipelines.block_lock import BlockLockedStorage
    from resources.configurable import GraphStoreResource, Storage

    assert Storage(data_dir="", landing_dir="").data_dir == str(clean / "home" / "data")
    assert Storage(data_dir="", landing_dir="").landing_dir == str(clean / "home" / "landing")
    assert GraphStoreResource(data_dir="").data_dir == str(clean / "home" / "data")
    assert BlockLockedStorage(data_dir="rel").data_dir == str(clean / "rel")


def test_the_vector_cache_setting_bounds_the_embedded_stores_copy(tmp_path: Path) -> None:
    from resources.configurable import VectorStoreResource
    from resources.settings import Settings

    cfg = Settings({"MEMFLOW_DATA_DIR": str(tmp_path), "MEMFLOW_VECTOR_CACHE_MIB": "3"})
    store = cfg.open_vectors()
    assert store.cache.max_bytes == 3 * 1024 * 1024
    store.close()
    store = VectorStoreResource(data_dir=str(tmp_path), cache_mib=2).open()
    assert store.cache.max_bytes == 2 * 1024 * 1024
    store.close()
    default = Settings({"MEMFLOW_DATA_DIR": str(tmp_path)}).open_vectors()
    assert default.cache.max_bytes == 512 * 1024 * 1024
    default.close()


def test_the_previous_model_is_the_former_default_only_while_onnx_runs_its_default() -> None:
    """Issue 20 made the 8-bit model the `onnx` default: a data directory the float default
    embedded keeps being answered with its vectors while the new default re-embeds it."""
    default = Settings({})
    assert default["MEMFLOW_EMBEDDER"] == "onnx" and default["MEMFLOW_EMBEDDING_MODEL"] == ""
    assert default.embedding_model == "all-MiniLM-L6-v2-int8"
    assert default.previous_embedding_model == "all-MiniLM-L6-v2"
    # A named previous model wins; a named current model (the float one, or the 8-bit one
    # chosen on purpose) or another provider has no implicit previous.
    named = Settings({"MEMFLOW_PREVIOUS_EMBEDDING_MODEL": " hash-a "})
    assert named.previous_embedding_model == "hash-a"
    for values in (
        {"MEMFLOW_EMBEDDING_MODEL": "all-MiniLM-L6-v2"},
        {"MEMFLOW_EMBEDDING_MODEL": "all-MiniLM-L6-v2-int8"},
        {"MEMFLOW_EMBEDDER": "sentence-transformers"},
        {"MEMFLOW_EMBEDDER": "none"},
        {"MEMFLOW_EMBEDDER": "openai", "MEMFLOW_EMBEDDING_MODEL": "m"},
    ):
        assert Settings(values).previous_embedding_model == "", values
    assert Settings({"MEMFLOW_EMBEDDER": "sentence-transformers"}).embedding_model == (
        "all-MiniLM-L6-v2"
    )
