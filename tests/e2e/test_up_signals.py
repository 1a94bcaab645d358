"""`memflow up` leaves nothing behind, however it ends: killed with SIGKILL (no handler runs),
everything it started still goes, and the next `memflow up` on the same state home starts;
that one stopped with SIGINT (Ctrl-C) stops everything and exits 0."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.support.services import free_ports

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
WAIT_S = 900.0  # waits for processes to come and go on a busy machine, never speed checks


def start(tmp: Path, env: dict[str, str], name: str) -> tuple[subprocess.Popen[bytes], Path]:
    log = tmp / f"{name}.log"
    api_port, ui_port = free_ports(2)
    with open(log, "wb") as fh:
        up = subprocess.Popen(
            [sys.executable, "-m", "pipelines.cli", "up", "--port", str(api_port),
             "--ui-port", str(ui_port)],
            cwd=tmp, env=env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    deadline = time.monotonic() + WAIT_S
    while "ready;" not in log.read_text():
        assert up.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, "memflow up never got ready"
        time.sleep(1.0)
    return up, log


def tree(pid: int) -> set[tuple[int, float]]:
    out = set()
    for p in psutil.Process(pid).children(recursive=True):
        try:
            out.add((p.pid, p.create_time()))
        except psutil.Error:
            continue
    return out


def alive(found: set[tuple[int, float]]) -> list[int]:
    left = []
    for pid, started in found:
        try:
            p = psutil.Process(pid)
            if p.create_time() == started and p.status() != psutil.STATUS_ZOMBIE:
                left.append(pid)
        except psutil.Error:
            continue
    return left


def test_nothing_is_left_after_sigkill_or_sigint_and_up_starts_again(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMFLOW_", "DAGSTER_"))}
    env.update(MEMFLOW_HOME=str(tmp_path / "home"), MEMFLOW_EMBEDDER="none",
               PYTHONPATH=str(ROOT))  # fmt: skip
    first, _ = start(tmp_path, env, "first")
    children = tree(first.pid)
    assert len(children) >= 3  # the API, the daemon, the UI (and what they started)
    first.send_signal(signal.SIGKILL)
    first.wait(60)
    deadline = time.monotonic() + WAIT_S
    while alive(children) and time.monotonic() < deadline:
        time.sleep(1.0)
    assert not alive(children), f"left behind by a killed memflow up: {alive(children)}"

    second, log = start(tmp_path, env, "second")  # the dead one's registration is no obstacle
    children = tree(second.pid)
    second.send_signal(signal.SIGINT)
    assert second.wait(600) == 0, log.read_text()[-3000:]
    assert "memflow up: stopped" in log.read_text()
    assert not alive(children), f"left behind after Ctrl-C: {alive(children)}"


def test_one_port_for_the_api_and_the_ui_is_refused_before_anything_starts(
    tmp_path: Path,
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMFLOW_", "DAGSTER_"))}
    env.update(MEMFLOW_HOME=str(tmp_path / "home"), MEMFLOW_EMBEDDER="none",
               PYTHONPATH=str(ROOT))  # fmt: skip
    (port,) = free_ports(1)
    got = subprocess.run(
        [sys.executable, "-m", "pipelines.cli", "up", "--port", str(port), "--ui-port", str(port)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert got.returncode != 0
    assert f"cannot share port {port}" in got.stderr
    assert not (tmp_path / "home" / "logs" / "ui.log").exists()  # nothing was started
