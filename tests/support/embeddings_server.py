"""A real OpenAI-compatible `/v1/embeddings` server on 127.0.0.1 for tests.

    with EmbeddingsServer(dim=8) as server:
        server.enqueue(Fault(status=500), Fault(delay=0.5))
        provider = OpenAIEmbeddingProvider(server.url, "hash-model")
        ...
        server.requests  # every request: its inputs and headers, in order

`http.server` in a thread on a free port. Each request pops the next queued `Fault` (if any)
before answering; without one it answers deterministic hash-based vectors (`hash_vector`), so
a test can check every vector it gets back.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np

from resources.models.base import EmbeddingProvider


def hash_vector(text: str, dim: int) -> list[float]:
    """A unit vector that depends only on `text` and `dim`."""
    seed = int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "little")
    vec = np.random.default_rng(seed).standard_normal(dim)
    return [float(x) for x in vec / np.linalg.norm(vec)]


@dataclass(slots=True)
class Fault:
    """One scripted misbehaviour: a status with an error body, a delay before answering, a
    wrong dimension, one vector too few, or a raw body."""

    status: int = 200
    delay: float = 0.0
    dim: int | None = None
    drop_one: bool = False
    body: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class Request:
    inputs: list[str]
    model: str | None
    headers: dict[str, str]


class EmbeddingsServer:
    def __init__(self, dim: int = 8, model: str = "hash-model") -> None:
        self.dim = dim
        self.model = model
        self.requests: list[Request] = []
        self.fail_after: int | None = None  # answer 400 to every request after this many
        self._faults: deque[Fault] = deque()
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,), daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    @property
    def texts(self) -> list[str]:
        """Every text the server was asked to embed, in order."""
        return [t for r in self.requests for t in r.inputs]

    def enqueue(self, *faults: Fault) -> None:
        with self._lock:
            self._faults.extend(faults)

    def __enter__(self) -> EmbeddingsServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def _next(self, request: Request) -> Fault | None:
        with self._lock:
            self.requests.append(request)
            if self.fail_after is not None and len(self.requests) > self.fail_after:
                return Fault(status=400)
            return self._faults.popleft() if self._faults else None

    def _answer(self, request: Request, fault: Fault | None) -> tuple[int, bytes, dict[str, str]]:
        fault = fault or Fault()
        if fault.delay:
            time.sleep(fault.delay)
        if fault.body is not None:
            return fault.status, fault.body, fault.headers
        if fault.status != 200:
            error = {"error": {"message": f"scripted {fault.status}", "type": "server_error"}}
            return fault.status, json.dumps(error).encode(), fault.headers
        dim = fault.dim or self.dim
        inputs = request.inputs[:-1] if fault.drop_one else request.inputs
        data = [
            {"object": "embedding", "index": i, "embedding": hash_vector(text, dim)}
            for i, text in enumerate(inputs)
        ]
        body = {"object": "list", "model": self.model, "data": data, "usage": {}}
        return 200, json.dumps(body).encode(), fault.headers

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                if self.path != "/v1/embeddings":
                    self._send(404, b'{"error": {"message": "not found"}}', {})
                    return
                length = int(self.headers.get("content-length", "0"))
                payload = json.loads(self.rfile.read(length) or b"{}")
                raw = payload.get("input", [])
                request = Request(
                    inputs=[raw] if isinstance(raw, str) else list(raw),
                    model=payload.get("model"),
                    headers={k.lower(): v for k, v in self.headers.items()},
                )
                status, body, headers = server._answer(request, server._next(request))
                self._send(status, body, headers)

            def _send(self, status: int, body: bytes, headers: dict[str, str]) -> None:
                try:
                    self.send_response(status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(body)))
                    for key, value in headers.items():
                        self.send_header(key, value)
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout tests)

        return Handler


class HashEmbeddingProvider(EmbeddingProvider):
    """In-process `hash_vector`s: what `resources.models.embed_server` serves in its tests."""

    kind = "hash"

    def __init__(self, model: str = "hash-model", dim: int = 8) -> None:
        self._model = model
        self.dim = dim

    @property
    def model(self) -> str:
        return self._model

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [hash_vector(t, self.dim) for t in texts]
