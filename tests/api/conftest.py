"""Real stores for the API tests: a SQLite graph file and a Milvus Lite file loaded with a few
tenants, the recall service over them, keys in a keys file, and the app.

The stores are built once per test session (Milvus Lite takes seconds to start). Tests that
write only write to the landing zone (a fresh folder per test), never to the stores.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from recall.api import create_app
from recall.auth import KeyRing, add_key
from recall.service import RecallService
from resources.graph.sqlite import SqliteGraphStore
from resources.models.base import EmbeddingProvider
from resources.vector.milvus import MilvusVectorStore
from schemas import ids
from schemas.records import EntityRecord, FactRecord
from schemas.scope import Scope

DIM = 64
T0 = datetime(2025, 6, 1, tzinfo=UTC)


class TrigramEmbedder(EmbeddingProvider):
    """Deterministic stand-in for a local model (not under test here): hashed character
    trigrams, L2-normalised, so similar spellings have a high cosine."""

    kind = "test"

    @property
    def model(self) -> str:
        return "test-trigram-64"

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        out = []
        for text in texts:
            v = [0.0] * DIM
            s = f"  {text.casefold()}  "
            for i in range(len(s) - 2):
                h = hashlib.blake2b(s[i : i + 3].encode("utf-8", "replace"), digest_size=4)
                v[int.from_bytes(h.digest(), "little") % DIM] += 1.0
            norm = math.sqrt(sum(x * x for x in v)) or 1.0
            out.append([x / norm for x in v])
        return out


# Shared technology names appear in several tenants (with different facts); each tenant also
# has names nobody else has, so a leak is visible in any answer.
SHARED = ["PostgreSQL", "Redis", "Kubernetes", "payments-service", "auth-service", "Kafka"]
PRIVATE: dict[str, list[str]] = {
    "acme/payments": ["LedgerCore", "acme-billing-vault", "Stripe adapter", "alice"],
    "acme/web": ["storefront-ui", "Next.js", "acme-cdn-edge", "bob"],
    "globex/payments": ["GlobexPayGate", "globex-fraud-model", "hank"],
    "globex/secret-lab": ["Project Nightjar", "globex-quantum-ledger", "dr-mindy"],
    "initech/core": ["TPS-report-engine", "initech-mainframe", "milton"],
    "umbrella/labs": ["t-virus-pipeline", "umbrella-hive-db", "wesker"],
}
PREDICATES = ["USES", "DEPENDS_ON", "OWNED_BY", "DEPLOYS_TO", "CALLS", "STORES_DATA_IN"]


@dataclass
class TenantData:
    scope: Scope
    entity_ids: set[str] = field(default_factory=set)
    fact_ids: set[str] = field(default_factory=set)
    names: set[str] = field(default_factory=set)
    private_names: list[str] = field(default_factory=list)


def _triples(key: str) -> list[tuple[str, str, str]]:
    names = PRIVATE[key] + SHARED
    out = []
    for i, s in enumerate(names):
        for j in (1, 3):
            o = names[(i + j) % len(names)]
            out.append((s, PREDICATES[(i + j) % len(PREDICATES)], o))
    # A contradiction (single-valued predicate) and a superseded fact in every tenant.
    out.append((names[0], "PRIMARY_DATABASE", "PostgreSQL"))
    out.append((names[0], "PRIMARY_DATABASE", "Redis"))
    return out


def load_graph(graph: SqliteGraphStore, key: str) -> tuple[TenantData, list[EntityRecord]]:
    """The tenant's entities and facts into the graph store (one fact superseded)."""
    scope = Scope.parse(key)
    data = TenantData(scope, private_names=list(PRIVATE[key]))
    triples = _triples(key)
    entities: dict[str, EntityRecord] = {}
    for s, _, o in triples:
        for name in (s, o):
            eid = ids.entity_id(scope.tenant_id, scope.ns, ids.norm_key(name))
            entities[eid] = EntityRecord(eid, name, types=("component",), row_hash=eid)
    facts = []
    for n, (s, p, o) in enumerate(triples):
        sid = ids.entity_id(scope.tenant_id, scope.ns, ids.norm_key(s))
        oid = ids.entity_id(scope.tenant_id, scope.ns, ids.norm_key(o))
        fid = ids.fact_id(scope.tenant_id, scope.ns, sid, p, oid)
        facts.append(
            FactRecord(
                fact_id=fid,
                subject_id=sid,
                subject=s,
                predicate=p,
                object_id=oid,
                object=o,
                confidence=0.9,
                valid_from=T0 + timedelta(hours=n),
                session_id=f"s-{scope.tenant_id}",
                turn_id=f"t{n}",
                client="claude-code",
                model="explicit",
                source="explicit",
                row_hash=fid,
            )
        )
    graph.upsert_entities(scope, list(entities.values()))
    graph.upsert_facts(scope, facts)
    # One fact closed by a later one: it must never be recalled at "now".
    graph.supersede(scope, facts[0].fact_id, facts[1].fact_id, T0 + timedelta(days=1))
    data.entity_ids = set(entities)
    data.fact_ids = {f.fact_id for f in facts}
    data.names = {e.name for e in entities.values()}
    return data, list(entities.values())


def load_tenant(
    graph: SqliteGraphStore, vectors: MilvusVectorStore, embedder: TrigramEmbedder, key: str
) -> TenantData:
    data, entities = load_graph(graph, key)
    vectors.upsert(
        embedder.model,
        DIM,
        data.scope,
        [
            (e.entity_id, ids.sha256_text(e.name), v)
            for e, v in zip(entities, embedder.embed([e.name for e in entities]), strict=True)
        ],
    )
    return data


@dataclass
class World:
    graph: SqliteGraphStore
    vectors: MilvusVectorStore
    embedder: TrigramEmbedder
    tenants: dict[str, TenantData]
    keys_file: Path
    keys: dict[str, str]  # role -> plaintext key
    grants: dict[str, set[str]]  # role -> tenant keys it may read (among the loaded ones)

    def readable(self, role: str) -> set[str]:
        return self.grants.get(role, set())


@pytest.fixture(scope="session")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    root = tmp_path_factory.mktemp("api-stores")
    graph = SqliteGraphStore(root / "graph.sqlite")
    vectors = MilvusVectorStore(str(root / "vectors.db"))
    embedder = TrigramEmbedder()
    tenants = {key: load_tenant(graph, vectors, embedder, key) for key in PRIVATE}
    keys_file = root / "api-keys.json"
    keys = {
        "acme_payments": add_key(keys_file, "acme", ["payments"]),
        "acme_all": add_key(keys_file, "acme", "*"),
        "globex": add_key(keys_file, "globex", ["payments", "secret-lab"]),
        "initech": add_key(keys_file, "initech", ["core"]),
        "ops": add_key(keys_file, "ops", [], metrics=True),
        "acme_admin": add_key(keys_file, "acme", "*", admin=True),
    }
    grants = {
        "acme_payments": {"acme/payments"},
        "acme_all": {"acme/payments", "acme/web"},
        "globex": {"globex/payments", "globex/secret-lab"},
        "initech": {"initech/core"},
        "ops": set(),
        "acme_admin": {"acme/payments", "acme/web"},
    }
    yield World(graph, vectors, embedder, tenants, keys_file, keys, grants)
    vectors.close()
    graph.close()


@pytest.fixture(scope="session")
def service(world: World) -> Iterator[RecallService]:
    with RecallService(world.graph, world.vectors, world.embedder) as svc:
        yield svc


@pytest.fixture
def landing(tmp_path: Path) -> Path:
    path = tmp_path / "landing"
    path.mkdir()
    return path


@pytest.fixture
def app(world: World, service: RecallService, landing: Path) -> FastAPI:
    return create_app(service=service, keys=KeyRing(world.keys_file), landing_dir=landing)


@pytest.fixture
def client(app: FastAPI) -> Iterator[TestClient]:
    with TestClient(app, raise_server_exceptions=False) as c:
        yield c


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}
