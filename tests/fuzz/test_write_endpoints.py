"""Generated requests to the write endpoints, through FastAPI's TestClient with a real KeyRing
and a real landing zone: the API answers 2xx or 4xx, never 5xx; no planted secret comes back in
an answer; and whatever it answered 202 to, ingestion accepts: every landed line becomes a turn
(no reject), every triple of POST /v1/triples a triple (no reject) and the fact the answer
named (`tests.fuzz.writes.ingest_landed`). Triples inside a turn of POST /v1/turns are the
pipeline's to judge: the landing format checks only their envelope, and a bad one is
quarantined with a reason. `memflow run` over what the API landed is in
`test_landing_pipeline`."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode

from recall.api import create_app
from recall.auth import KeyRing
from tests.fuzz.invariants import Counts
from tests.fuzz.profile import API, FUZZ, TALLY
from tests.fuzz.requests import Request, requests
from tests.fuzz.writes import Api, client_for, ingest_landed, post


@API
@given(batch=st.lists(requests(), min_size=1, max_size=3))
def test_generated_writes_never_5xx_and_ingestion_accepts_what_got_202(
    batch: list[Request], api: Api
) -> None:
    _check_batch(batch, api)


def _check_batch(batch: list[Request], api: Api) -> None:
    base = Path(tempfile.mkdtemp(prefix="memflow-fuzz-api-"))
    secrets = [s for req in batch for s in req.secrets]
    counts = Counts(inputs=len(batch)).planting(secrets)
    try:
        accepted = []
        with client_for(api, base) as client:
            for req in batch:
                response = post(client, api, req, counts)
                if response.status_code == 202:
                    accepted.append(response.json())
        ingest_landed(base, accepted, secrets, {"duplicate_turn"}, counts)
    finally:
        TALLY.add("api", counts)
        shutil.rmtree(base, ignore_errors=True)
    counts.assert_clean()


# -- schemathesis: the published schema's own idea of valid and invalid bodies ---------------

SCHEMA_EXAMPLES = 150 if FUZZ else 25


@pytest.mark.parametrize("path", ["/v1/turns", "/v1/triples"])
@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_schema_generated_writes_land_only_what_ingestion_accepts(
    path: str, mode: GenerationMode, api: Api, tmp_path: Path
) -> None:
    """Bodies schemathesis makes from the OpenAPI schema, aimed at a granted tenant: no 5xx,
    and every file the API landed ingests with no reject."""
    app = create_app(service=api.service, keys=KeyRing(api.keys), landing_dir=tmp_path)
    operation = schemathesis.openapi.from_asgi("/openapi.json", app)[path]["POST"]
    headers = {"Authorization": f"Bearer {api.key}"}
    answers: list[Any] = []

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(
        max_examples=SCHEMA_EXAMPLES,
        deadline=None,
        derandomize=not FUZZ,
        suppress_health_check=list(HealthCheck),
        database=None,
    )
    def fuzz(case: Any) -> None:
        if isinstance(case.body, dict):
            case.body.pop("org", None)
            case.body.pop("repo", None)
            case.body["tenant"] = "acme/payments-api"
        response = case.call(headers=headers)
        assert response.status_code < 500, (response.status_code, response.text[:300])
        if response.status_code == 202:
            answers.append(response.json())

    fuzz()
    counts = ingest_landed(tmp_path, answers, [], {"duplicate_turn"})
    counts.inputs = SCHEMA_EXAMPLES
    counts.reasons["http:202"] += len(answers)
    TALLY.add("api_schemathesis", counts)


# -- one pipeline run over many generated writes ---------------------------------------------
