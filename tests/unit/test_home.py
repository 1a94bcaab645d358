"""The state home: where it is, what it records, which memflow processes run there, and the
conflicts `memflow status` and `/healthz` report."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from resources import home


def test_the_home_is_memflow_home_then_xdg_then_the_users_state_folder(tmp_path: Path) -> None:
    assert home.state_home({"MEMFLOW_HOME": str(tmp_path / "h")}) == tmp_path / "h"
    xdg = {"XDG_STATE_HOME": str(tmp_path / "xdg")}
    assert home.state_home(xdg) == tmp_path / "xdg" / "memflow"
    relative_xdg = {"XDG_STATE_HOME": "relative", "HOME": str(tmp_path)}
    # a relative XDG_STATE_HOME is ignored, as the XDG spec says
    assert home.state_home(relative_xdg).parts[-3:] == (".local", "state", "memflow")


def test_the_record_round_trips_and_a_damaged_one_is_an_error(tmp_path: Path) -> None:
    assert home.read_record(tmp_path) is None
    record = home.Record(str(tmp_path / "d"), str(tmp_path / "l"), api_url="http://127.0.0.1:1")
    home.write_record(tmp_path, record)
    assert home.read_record(tmp_path) == record
    for damaged in ("{not json", "[]", '{"data_dir": "rel", "landing_dir": "/x"}', "x" * 70_000):
        (tmp_path / home.RECORD_FILE).write_text(damaged)
        with pytest.raises(home.RecordError):
            home.read_record(tmp_path)


def test_a_registration_lives_as_long_as_its_process(tmp_path: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        mine = home.register(tmp_path, "serve", "/d", "/l", api_url="http://127.0.0.1:9")
        theirs = home.register(tmp_path, "dev", "/other-data", "/l", pid=child.pid)
        assert {e.pid for e in home.running(tmp_path)} == {os.getpid(), child.pid}
    finally:
        child.kill()
        child.wait()
    assert home.running(tmp_path) == [mine]  # the dead one's file is gone
    assert not (tmp_path / "processes" / f"{theirs.pid}-dev.json").exists()
    home.unregister(tmp_path, mine)
    assert home.running(tmp_path) == []


def test_a_reused_pid_is_not_taken_for_the_process_that_registered(tmp_path: Path) -> None:
    entry = home.register(tmp_path, "serve", "/d", "/l")
    path = tmp_path / "processes" / f"{entry.pid}-serve.json"
    forged = json.loads(path.read_text()) | {"create_time": entry.create_time - 3600}
    path.write_text(json.dumps(forged))
    assert home.running(tmp_path) == []


def test_conflicts_name_each_process_on_another_path(tmp_path: Path) -> None:
    a = home.Registration(1, 0.0, "up", "/data", "/landing")
    b = home.Registration(2, 0.0, "serve", "/data", "/other-landing")
    c = home.Registration(3, 0.0, "mcp", "/else", "/landing")
    lines = home.conflicts([a, b, c], "/data", "/landing")
    assert lines == [
        "memflow serve (pid 2) uses another landing zone: /other-landing",
        "memflow mcp (pid 3) uses another data directory: /else",
    ]
    assert all("/" not in line.split(")")[-1] for line in home.conflicts([a, b, c], paths=False))


def test_healthz_reports_processes_on_other_paths_without_their_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fastapi.testclient import TestClient

    from recall.server import create_server_app, system_health_of
    from resources.settings import Settings

    state = tmp_path / "home"
    monkeypatch.setenv("MEMFLOW_HOME", str(state))
    cfg = Settings(
        {
            "MEMFLOW_DATA_DIR": str(tmp_path / "data"),
            "MEMFLOW_LANDING_DIR": str(tmp_path / "landing"),
            "MEMFLOW_EMBEDDER": "none",
        },
        home=state,
    )
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        home.register(state, "serve", cfg.data_dir, cfg.landing_dir)
        home.register(state, "dev", tmp_path / "sample-data", cfg.landing_dir, pid=child.pid)
        app = create_server_app(cfg, system_health=system_health_of(cfg))
        with TestClient(app) as client:
            system = client.get("/healthz").json()["system"]
    finally:
        child.kill()
        child.wait()
    assert system["processes"] == 2
    assert system["conflicts"] == [f"memflow dev (pid {child.pid}) uses another data directory"]
    assert str(tmp_path) not in json.dumps(system)


def test_export_home_fills_in_only_what_the_environment_lacks(tmp_path: Path) -> None:
    home.write_record(
        tmp_path, home.Record("/rec/data", "/rec/landing", api_url="http://127.0.0.1:7")
    )
    env = {"MEMFLOW_HOME": str(tmp_path), "MEMFLOW_LANDING_DIR": "/mine"}
    home.export_home(env)
    assert env["MEMFLOW_DATA_DIR"] == "/rec/data" and env["MEMFLOW_LANDING_DIR"] == "/mine"
    assert env["MEMFLOW_API_URL"] == "http://127.0.0.1:7"
    named = {"MEMFLOW_HOME": str(tmp_path), "MEMFLOW_API_URL": "http://127.0.0.1:8"}
    home.export_home(named)
    assert named["MEMFLOW_API_URL"] == "http://127.0.0.1:8"
    empty = {"MEMFLOW_HOME": str(tmp_path / "new")}
    home.export_home(empty)
    assert empty["MEMFLOW_DATA_DIR"] == str(tmp_path / "new" / "data")
    assert not (tmp_path / "new").exists()  # nothing is created
