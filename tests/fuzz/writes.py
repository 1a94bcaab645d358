"""The write endpoints as the fuzz drives them: an app over a real KeyRing and landing zone,
a request sent and its answer checked (never 5xx, a known status, no planted secret in it), and
everything the API landed fed through ingestion (`ingest_landed`)."""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import polars as pl
from fastapi.testclient import TestClient

from memflow import landing
from memflow.extract import ExtractionTables, extract_tenant
from memflow.facts import build_facts
from memflow.turns import TurnTables, ingest_turns
from recall.api import create_app
from recall.auth import KeyRing
from recall.service import RecallService
from schemas.rules import SEVERITY_ERROR
from tests.fuzz.invariants import Counts, dump
from tests.fuzz.planted import Secret
from tests.fuzz.requests import Request, build_request
from tests.fuzz.zones import SeededChooser

# What a write may answer: accepted, or refused with a reason.
ANSWERS = {202, 400, 404, 413, 422}


@dataclass
class Api:
    """A keys file with a key of org acme (every repo) and one of globex/ml, and a recall
    service over an empty graph (the write endpoints need one to start)."""

    keys: Path
    key: str
    service: RecallService


def client_for(api: Api, landing_dir: Path) -> TestClient:
    app = create_app(service=api.service, keys=KeyRing(api.keys), landing_dir=landing_dir)
    return TestClient(app, raise_server_exceptions=False)


def post(client: TestClient, api: Api, req: Request, out: Counts) -> Any:
    headers = {"Authorization": f"Bearer {api.key}", "Content-Type": req.content_type}
    response = client.post(req.path, content=req.body, headers=headers)
    assert response.status_code < 500, (response.status_code, response.text[:500])
    assert response.status_code in ANSWERS, (response.status_code, response.text[:500])
    answer = response.text + dump(dict(response.headers))
    out.look(answer, req.secrets, f"the answer to {req.path}")
    out.reasons[f"http:{response.status_code}"] += 1
    return response


def ingest_landed(
    root: Path,
    accepted: list[dict[str, Any]],
    secrets: list[Secret],
    allowed: set[str] = frozenset(),
    out: Counts | None = None,
) -> Counts:
    """Everything the API landed, through the domain functions: no line rejected (but for
    `allowed` reasons), no triple of POST /v1/triples rejected, every fact an answer named
    stored."""
    out = out if out is not None else Counts()
    now = datetime.now(UTC)
    triple_turns = {a["turn_id"] for a in accepted if "triples" in a}
    fact_ids: set[str] = set()
    for scope, files in landing.discover(root).items():
        update = ingest_turns(root, scope, files, TurnTables.empty(), now)
        tables = update.tables
        bad = tables.rejects.filter(~pl.col("reason").is_in(list(allowed)))
        assert bad.is_empty(), bad.select("reason", "detail").to_dicts()
        done = extract_tenant(scope, tables.turns, ExtractionTables.of(None, None, None), None, "x")
        # Triples inside a turn of POST /v1/turns are the pipeline's to judge (the landing
        # format checks only their envelope); those of POST /v1/triples were validated at once.
        errors = done.tables.rejects.filter(
            (pl.col("severity") == SEVERITY_ERROR) & pl.col("turn_id").is_in(list(triple_turns))
        )
        assert errors.is_empty(), errors.select("reason", "detail").to_dicts()
        built = build_facts(scope, done.tables.triples)
        assert built.balanced, built.counts
        rejected = built.rejects.filter(pl.col("turn_id").is_in(list(triple_turns)))
        assert rejected.filter(pl.col("severity") == SEVERITY_ERROR).is_empty(), rejected
        fact_ids |= set(built.facts["fact_id"].to_list())
        haystack = dump(tables.turns) + dump(tables.rejects) + dump(done.tables.triples)
        out.look(haystack + dump(built.facts) + dump(built.entities), secrets, "ingestion")
        out.lines += int(tables.files["records"].sum() or 0)
        out.accounted += tables.turns.height + tables.rejects.height
        out.turns += tables.turns.height
        out.rejects += tables.rejects.height
        out.triples += done.tables.triples.height
        out.facts += built.facts.height
    for answer in accepted:
        if "triples" in answer:
            named = {t["fact_id"] for t in answer["triples"]}
            assert named <= fact_ids, named - fact_ids
    return out


def land_generated(
    api: Api, landing_dir: Path, requests: int, seed: int, out: Counts
) -> tuple[list[dict[str, Any]], list[Secret]]:
    """Send `requests` seeded generated requests to an app landing into `landing_dir`: the
    answers of the accepted ones, and every secret planted."""
    rng = random.Random(seed)
    accepted: list[dict[str, Any]] = []
    secrets: list[Secret] = []
    with client_for(api, landing_dir) as client:
        for _ in range(requests):
            req = build_request(SeededChooser(random.Random(rng.getrandbits(64))))
            secrets += req.secrets
            response = post(client, api, req, out)
            if response.status_code == 202:
                accepted.append(response.json())
    return accepted, secrets
