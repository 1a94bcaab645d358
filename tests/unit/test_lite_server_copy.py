"""F10: a copied data directory (``cp -a``) must not drive the original's Milvus Lite server,
and ``memflow stop`` on the copy must never kill the original's server."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from resources.vector import lite_server
from resources.vector.lite_server import (
    IDENTITY_FILE,
    STATE_FILE,
    ensure_lite_server,
    running_lite_server,
    stop_lite_server,
)

# A stand-in server process: its command line looks like Milvus Lite's (the supervisor checks
# it), it listens on the port it is given and stops on SIGINT, like `milvus-lite server`.
FAKE_SERVER = """
import signal, socket, sys, time
port = int(sys.argv[sys.argv.index("--port") + 1])
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", port)); s.listen(16)
signal.signal(signal.SIGINT, lambda *_: sys.exit(0))
while True:
    time.sleep(0.2)
"""


@pytest.fixture
def fake_servers(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    def command(milvus_dir: Path, port: int) -> list[str]:
        return [
            sys.executable,
            "-c",
            FAKE_SERVER,
            "milvus_lite",
            "server",
            "--data-dir",
            str(milvus_dir),
            "--port",
            str(port),
        ]

    monkeypatch.setattr(lite_server, "_server_command", command)
    started: list[int] = []
    yield started
    for pid in list(lite_server._CHILDREN):
        lite_server._terminate(pid, timeout_s=5)


def cp_a(src: Path, dst: Path) -> None:
    subprocess.run(["cp", "-a", str(src), str(dst)], check=True)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return lite_server._alive(pid)


def test_f10_a_copy_starts_its_own_server_and_stop_on_it_spares_the_original(
    tmp_path: Path, fake_servers: list[int]
) -> None:
    original = tmp_path / "orig"
    uri = ensure_lite_server(original)
    server = running_lite_server(original)
    assert server is not None and server.token
    copy = tmp_path / "copy"
    cp_a(original, copy)  # state file and identity token copied along, server still running
    assert json.loads((copy / STATE_FILE).read_text())["pid"] == server.pid

    # `memflow stop --data COPY` before anything else: the original's server survives.
    assert running_lite_server(copy) is None
    assert stop_lite_server(copy) is False
    assert alive(server.pid)
    assert ensure_lite_server(original) == uri

    # `memflow run --data COPY`: its own server, never the original's.
    copy_uri = ensure_lite_server(copy)
    mine = running_lite_server(copy)
    assert mine is not None and copy_uri != uri and mine.pid != server.pid
    assert mine.data_dir == str(copy.resolve() / "milvus")
    assert mine.token != server.token
    assert json.loads((copy / IDENTITY_FILE).read_text())["path"] == str(copy.resolve())
    assert ensure_lite_server(original) == uri and running_lite_server(original) == server

    assert stop_lite_server(copy) is True
    assert not alive(mine.pid) and alive(server.pid)
    assert stop_lite_server(original) is True
    assert not alive(server.pid)


def test_f10_a_copy_of_a_stopped_directory_and_a_moved_directory(
    tmp_path: Path, fake_servers: list[int]
) -> None:
    original = tmp_path / "orig"
    ensure_lite_server(original)
    server = running_lite_server(original)
    assert server is not None
    moved = tmp_path / "moved"
    cp_a(original, moved)
    os.rename(moved, tmp_path / "moved2")  # a copy that was moved again
    moved = tmp_path / "moved2"
    assert running_lite_server(moved) is None
    assert stop_lite_server(moved) is False and alive(server.pid)
    assert not (moved / STATE_FILE).exists()  # the foreign record is dropped, not obeyed
    stop_lite_server(original)


def test_a_server_recorded_before_tokens_existed_is_adopted_not_duplicated(
    tmp_path: Path, fake_servers: list[int]
) -> None:
    root = tmp_path / "data"
    uri = ensure_lite_server(root)
    server = running_lite_server(root)
    assert server is not None
    legacy = {"pid": server.pid, "port": server.port, "data_dir": server.data_dir}
    (root / STATE_FILE).write_text(json.dumps(legacy))
    (root / IDENTITY_FILE).unlink()
    assert ensure_lite_server(root) == uri  # same server, now recorded with a token
    adopted = running_lite_server(root)
    assert adopted is not None and adopted.pid == server.pid and adopted.token
    assert stop_lite_server(root) is True and not alive(server.pid)


def test_a_pid_reused_by_another_programme_is_not_a_server(
    tmp_path: Path, fake_servers: list[int]
) -> None:
    root = tmp_path / "data"
    ensure_lite_server(root)
    server = running_lite_server(root)
    assert server is not None
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        state = json.loads((root / STATE_FILE).read_text())
        (root / STATE_FILE).write_text(json.dumps({**state, "pid": other.pid}))
        assert running_lite_server(root) is None
        assert stop_lite_server(root) is False
        assert other.poll() is None  # never signalled
    finally:
        other.kill()
        other.wait()
        os.kill(server.pid, signal.SIGKILL)


@pytest.mark.slow
def test_f10_with_real_milvus_lite_servers(tmp_path: Path) -> None:
    """The red team's reproduction with real servers: the copy's collections never land in
    the original's Milvus, and stopping the copy leaves the original serving."""
    from pymilvus import MilvusClient

    original = tmp_path / "orig"
    uri = ensure_lite_server(original)
    copy = tmp_path / "copy"
    try:
        MilvusClient(uri=uri).create_collection("orig_only", dimension=4)
        cp_a(original, copy)
        copy_uri = ensure_lite_server(copy)
        assert copy_uri != uri
        MilvusClient(uri=copy_uri).create_collection("copy_only", dimension=4)
        assert "copy_only" not in MilvusClient(uri=uri).list_collections()
        assert stop_lite_server(copy) is True
        assert "orig_only" in MilvusClient(uri=uri).list_collections()
        assert running_lite_server(original) is not None
    finally:
        stop_lite_server(copy)
        stop_lite_server(original)
