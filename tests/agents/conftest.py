"""A small memory for the agent-facing tests: a SQLite graph with three tenants of two orgs, the
API's keys file, a real API server on loopback (uvicorn in a thread) and a server that hangs.

The stores are read-only here; writes go to a landing folder per session of tests.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import uvicorn

from bench.netutil import free_port
from recall.api import create_app
from recall.auth import KeyRing, add_key
from recall.service import RecallService
from resources.graph.sqlite import SqliteGraphStore
from schemas import ids
from schemas.records import EntityRecord, FactRecord
from schemas.scope import Scope

ROOT = Path(__file__).resolve().parents[2]
T0 = datetime(2025, 6, 1, tzinfo=UTC)
TRIPLES: dict[str, list[tuple[str, str, str]]] = {
    "acme/payments": [
        ("payments-service", "USES", "PostgreSQL"),
        ("payments-service", "DEPENDS_ON", "ledger-core"),
        ("payments-service", "OWNED_BY", "team-ledger"),
        ("team-ledger", "PREFERS", "small pull requests"),
        ("payments decisions", "DECIDED", "Valkey replaces Redis"),
    ],
    "acme/web": [("storefront-ui", "USES", "Next.js"), ("storefront-ui", "CALLS", "payments-api")],
    "globex/secret-lab": [
        ("Project Nightjar", "USES", "globex-quantum-ledger"),
        ("Project Nightjar", "OWNED_BY", "dr-mindy"),
    ],
}
# Calls that test behaviour, not latency, wait this long: the client's 5 s default is a latency
# budget for agents, and a write's fsync on a CI machine busy with four servers can exceed it.
PATIENT_TIMEOUT_S = 60.0
PRIVATE = {
    "acme/payments": ["ledger-core", "team-ledger"],
    "acme/web": ["storefront-ui"],
    "globex/secret-lab": ["Project Nightjar", "globex-quantum-ledger", "dr-mindy"],
}


def load(graph: SqliteGraphStore, key: str) -> None:
    scope = Scope.parse(key)
    entities: dict[str, EntityRecord] = {}
    facts = []
    for n, (s, p, o) in enumerate(TRIPLES[key]):
        eids = []
        for name in (s, o):
            eid = ids.entity_id(scope.tenant_id, scope.ns, ids.norm_key(name))
            entities[eid] = EntityRecord(eid, name, types=("component",), row_hash=eid)
            eids.append(eid)
        fid = ids.fact_id(scope.tenant_id, scope.ns, eids[0], p, eids[1])
        facts.append(
            FactRecord(
                fact_id=fid,
                subject_id=eids[0],
                subject=s,
                predicate=p,
                object_id=eids[1],
                object=o,
                confidence=0.9,
                valid_from=T0 + timedelta(hours=n),
                session_id="s-1",
                turn_id=f"t{n}",
                client="claude-code",
                model="explicit",
                source="explicit",
                row_hash=fid,
            )
        )
    graph.upsert_entities(scope, list(entities.values()))
    graph.upsert_facts(scope, facts)


@dataclass
class Memory:
    data_dir: Path
    landing: Path
    keys_file: Path
    keys: dict[str, str]  # role -> plaintext
    url: str  # the running API

    def env(self, role: str | None = "acme_payments", **extra: str) -> dict[str, str]:
        """A clean environment for a subprocess (hook, MCP server) of this memory."""
        env = {
            "PATH": os.environ.get("PATH", ""),
            "HOME": os.environ.get("HOME", "/tmp"),
            "PYTHONPATH": str(ROOT),
            "MEMFLOW_API_URL": self.url,
            "MEMFLOW_API_TIMEOUT_S": str(PATIENT_TIMEOUT_S),
            "MEMFLOW_DATA_DIR": str(self.data_dir),
            "MEMFLOW_LANDING_DIR": str(self.landing),
            "HF_HUB_OFFLINE": "1",
            # Behaviour, not latency: a hook process on a loaded machine can take seconds to
            # start. Tests of the budget pass --budget or set this themselves.
            "MEMFLOW_HOOK_BUDGET_S": "30",
        }
        if role is not None:
            env["MEMFLOW_API_KEY"] = self.keys[role]
        env.update(extra)
        return env


def serve_in_thread(app: object) -> tuple[uvicorn.Server, str]:
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the test server did not start")
        time.sleep(0.02)
    return server, f"http://127.0.0.1:{port}"


@pytest.fixture(scope="session")
def memory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Memory]:
    root = tmp_path_factory.mktemp("agents-memory")
    graph = SqliteGraphStore(root / "graph.sqlite")
    for key in TRIPLES:
        load(graph, key)
    keys_file = root / "api-keys.json"
    keys = {
        "acme_payments": add_key(keys_file, "acme", ["payments"]),
        "acme_all": add_key(keys_file, "acme", "*"),
        "globex": add_key(keys_file, "globex", ["secret-lab"]),
    }
    landing = root / "landing"
    landing.mkdir()
    service = RecallService(graph)
    server, url = serve_in_thread(
        create_app(service=service, keys=KeyRing(keys_file), landing_dir=landing)
    )
    yield Memory(root, landing, keys_file, keys, url)
    server.should_exit = True
    service.close()
    graph.close()


@pytest.fixture
def hanging_url() -> Iterator[str]:
    """A port that accepts connections (the kernel's backlog) and never answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    sock.close()


@pytest.fixture
def closed_url() -> str:
    return f"http://127.0.0.1:{free_port()}"


PYTHON = sys.executable
