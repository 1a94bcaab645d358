from __future__ import annotations

import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from bench.netutil import ServerExited, free_port, wait_for_http


class _Health(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def http_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join(5)


def test_free_port_can_be_bound() -> None:
    port = free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


def test_wait_for_http_returns_once_the_url_answers_200(http_url: str) -> None:
    wait_for_http(f"{http_url}/health", 10)


def test_wait_for_http_times_out_on_a_non_200_answer(http_url: str) -> None:
    with pytest.raises(TimeoutError, match="/other"):
        wait_for_http(f"{http_url}/other", 0.3, interval=0.05)


def test_wait_for_http_reports_an_exited_server_with_its_stderr() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stderr.write('boom'); sys.exit(3)"],
        stderr=subprocess.PIPE,
    )
    proc.wait(30)
    with pytest.raises(ServerExited, match="exited with 3: boom"):
        wait_for_http(f"http://127.0.0.1:{free_port()}/health", 30, proc=proc)
