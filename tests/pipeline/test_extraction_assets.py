"""extracted_triples through Dagster with a real local OpenAI-compatible server."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
from dagster import AssetKey, materialize

from assets.partitions import TENANTS, scope_day_key
from pipelines.definitions import ALL_ASSETS
from pipelines.jobs import INGEST_ASSETS
from resources.configurable import ExtractionModelResource, Storage
from resources.tables import TableStore
from schemas.scope import Scope
from tests.pipeline.conftest import make_resources
from tests.pipeline.landing_fixtures import SECRET_PASSWORD
from tests.support.openai_chat_server import OpenAIChatServer, Scripted

ACME = Scope("acme", "api")
DAY = "2026-11-02"


def run_ingest(instance, landing: Path, data_dir: Path, **res):
    instance.add_dynamic_partitions(TENANTS, [ACME.key])
    return materialize(
        ALL_ASSETS,
        selection=INGEST_ASSETS,
        partition_key=scope_day_key(ACME, DAY),
        instance=instance,
        resources=make_resources(landing, data_dir, **res),
        raise_on_error=False,
    )


def test_model_extraction_records_model_drops_low_confidence_and_never_sees_secrets(
    instance, landing: Path, data_dir: Path
) -> None:
    answer = json.dumps(
        {
            "triples": [
                {
                    "subject": "payments-api",
                    "predicate": "uses",
                    "object": "Postgres 16",
                    "confidence": 0.9,
                    "turn_id": "1",
                },
                {
                    "subject": "payments-api",
                    "predicate": "USES",
                    "object": "MySQL",
                    "confidence": 0.2,
                },
                {"subject": "x", "predicate": "has weird!!", "object": "y", "confidence": 0.9},
            ]
        }
    )
    with OpenAIChatServer(model="qwen2.5") as server:
        server.enqueue(Scripted.answer("Sure! ```json\n" + answer + "\n``` hope that helps"))
        extraction = ExtractionModelResource(
            provider="openai", base_url=server.url, model="qwen2.5"
        )
        result = run_ingest(instance, landing, data_dir, extraction=extraction)
        assert result.success
        prompts = [r.text for r in server.chat_requests]
    assert prompts and all(SECRET_PASSWORD not in p for p in prompts)
    tables = TableStore(data_dir)
    triples = tables.read("extracted_triples", ACME, DAY)
    by_source = triples.group_by("source").len().sort("source").rows()
    assert by_source == [("explicit", 2), ("llm", 1)]
    llm = triples.filter(pl.col("source") == "llm").row(0, named=True)
    assert (llm["predicate"], llm["model"], llm["turn_id"], llm["client"]) == (
        "USES",
        "openai-compatible:qwen2.5",
        "1",
        "claude-code",
    )
    rejects = tables.read("extraction_rejects", ACME, DAY)
    assert sorted(rejects["reason"]) == [
        "confidence_below_0.6",
        "predicate_not_upper_snake_case",
        "predicate_not_upper_snake_case",
    ]
    meta = instance.get_latest_materialization_event(
        AssetKey("extracted_triples")
    ).asset_materialization.metadata
    assert meta["model"].value == "openai-compatible:qwen2.5"
    assert meta["low_confidence_dropped"].value == 1
    assert meta["awaiting_extraction"].value == 0


def test_without_an_extractor_text_turns_wait_and_the_check_warns(
    instance, landing: Path, data_dir: Path
) -> None:
    result = run_ingest(instance, landing, data_dir)
    assert result.success
    checks = result.get_asset_check_evaluations()
    (awaiting,) = [c for c in checks if c.check_name == "nothing_awaiting_extraction"]
    assert not awaiting.passed and awaiting.metadata["awaiting_extraction"].value == 1
    turns = TableStore(data_dir).read("raw_turns", ACME, DAY)
    assert turns.filter(pl.col("role") == "user")["content"].to_list()[0].startswith("We use")


def test_retention_zero_drops_text_once_extracted_keeping_ids_and_hashes(
    instance, landing: Path, data_dir: Path
) -> None:
    with OpenAIChatServer() as server:
        server.enqueue(Scripted.answer('{"triples": []}'))
        res = {
            "extraction": ExtractionModelResource(
                provider="openai", base_url=server.url, model="m"
            ),
            "storage": Storage(landing_dir=str(landing), data_dir=str(data_dir), retention_days=0),
        }
        assert run_ingest(instance, landing, data_dir, **res).success
    turns = TableStore(data_dir).read("raw_turns", ACME, DAY)
    assert turns["content"].is_null().all()
    assert turns["content_sha256"].is_not_null().all() and turns["turn_key"].n_unique() == 2


def test_a_model_server_that_is_down_fails_the_run_naming_the_endpoint(
    instance, landing: Path, data_dir: Path
) -> None:
    extraction = ExtractionModelResource(
        provider="openai", base_url="http://127.0.0.1:9", model="m", max_retries=1, timeout_s=2
    )
    result = run_ingest(instance, landing, data_dir, extraction=extraction)
    assert not result.success
    failure = [e for e in result.all_events if e.is_step_failure]
    assert "127.0.0.1:9" in str(failure[0].step_failure_data.error)


def test_a_graph_store_that_is_down_fails_the_sink_naming_it_after_retries(
    instance, landing: Path, data_dir: Path
) -> None:
    from resources.configurable import GraphStoreResource

    assert run_ingest(instance, landing, data_dir).success
    url = "ws://127.0.0.1:9/gremlin"
    res = make_resources(
        landing, data_dir, graph=GraphStoreResource(backend="gremlin", gremlin_url=url)
    )
    assert materialize(
        ALL_ASSETS,
        selection=["validated_facts", "entities", "quarantine"],
        partition_key=ACME.key,
        instance=instance,
        resources=res,
    ).success
    result = materialize(
        ALL_ASSETS,
        selection=["graph_sink"],
        partition_key=ACME.key,
        instance=instance,
        resources=res,
        raise_on_error=False,
    )
    assert not result.success
    events = result.all_events
    assert sum(e.event_type_value == "STEP_UP_FOR_RETRY" for e in events) == 3
    failure = next(e for e in events if e.is_step_failure)
    assert url in str(failure.step_failure_data.error)
