"""extracted_triples through Dagster with a real local OpenAI-compatible server."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
from dagster import AssetKey

from resources.configurable import ExtractionModelResource, Storage
from resources.tables import TableStore
from schemas.scope import Scope
from tests.pipeline.conftest import INGEST, make_resources, run_assets
from tests.pipeline.landing_fixtures import SECRET_PASSWORD
from tests.support.openai_chat_server import OpenAIChatServer, Scripted

ACME = Scope("acme", "api")
DAY = "2026-11-02"


def run_ingest(instance, landing: Path, data_dir: Path, config: dict | None = None, **res):
    return run_assets(
        instance,
        make_resources(landing, data_dir, **res),
        INGEST,
        [ACME.key],
        raise_on_error=False,
        run_config={"ops": {"extracted_triples": {"config": config}}} if config else None,
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
    triples = tables.read_table("extracted_triples", ACME)
    by_source = triples.group_by("source").len().sort("source").rows()
    assert by_source == [("explicit", 3), ("llm", 1)]
    llm = triples.filter(pl.col("source") == "llm").row(0, named=True)
    assert (llm["predicate"], llm["model"], llm["turn_id"], llm["client"]) == (
        "USES",
        "openai-compatible:qwen2.5",
        "1",
        "claude-code",
    )
    rejects = tables.read("extraction_rejects", ACME)
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
    assert not awaiting.passed and awaiting.metadata["awaiting_extraction"].value == {ACME.key: 1}
    turns = TableStore(data_dir).read_table("raw_turns", ACME)
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
    turns = TableStore(data_dir).read_table("raw_turns", ACME)
    assert turns["content"].is_null().all()
    assert turns["content_sha256"].is_not_null().all() and turns["turn_key"].n_unique() == 3
    # the rewrite of raw_turns is a materialization event of raw_turns, saying what changed
    events = instance.fetch_materializations(AssetKey("raw_turns"), limit=5).records
    dropped = [
        r.asset_materialization.metadata["turn_text_dropped"].value
        for r in events
        if "turn_text_dropped" in r.asset_materialization.metadata
    ]
    assert dropped == [3]


def test_a_new_model_re_extracts_text_turns_only_and_a_date_range_can_be_forced(
    instance, landing: Path, data_dir: Path
) -> None:
    with OpenAIChatServer(model="m1") as server:
        server.enqueue(Scripted.answer('{"triples": []}'))
        first = ExtractionModelResource(provider="openai", base_url=server.url, model="m1")
        assert run_ingest(instance, landing, data_dir, extraction=first).success
        assert len(server.chat_requests) == 1
        # Same model, nothing new: no call at all.
        assert run_ingest(instance, landing, data_dir, extraction=first).success
        assert len(server.chat_requests) == 1
    with OpenAIChatServer(model="m2") as server:
        server.enqueue(Scripted.answer('{"triples": []}'))
        server.enqueue(Scripted.answer('{"triples": []}'))
        second = ExtractionModelResource(provider="openai", base_url=server.url, model="m2")
        assert run_ingest(instance, landing, data_dir, extraction=second).success
        assert len(server.chat_requests) == 1  # the one text turn, with the new model
        meta = instance.get_latest_materialization_event(
            AssetKey("extracted_triples")
        ).asset_materialization.metadata
        assert meta["why"].value == {"new": 0, "turn_changed": 0, "model_changed": 1}
        log = TableStore(data_dir).read_table("extraction_log", ACME)
        assert sorted(log["model"]) == ["explicit", "explicit", "openai-compatible:m2"]
        # By hand: re-extract 2026-11-02 with the same model.
        config = {"reextract_from": DAY, "reextract_to": DAY}
        assert run_ingest(instance, landing, data_dir, config=config, extraction=second).success
        assert len(server.chat_requests) == 2
        meta = instance.get_latest_materialization_event(
            AssetKey("extracted_triples")
        ).asset_materialization.metadata
        assert meta["why"].value["forced"] == 2  # both turns of that day
        triples = TableStore(data_dir).read_table("extracted_triples", ACME)
        assert triples.filter(pl.col("source") == "explicit").height == 3  # nothing doubled


def test_a_bad_reextract_range_fails_the_step_naming_the_value(
    instance, landing: Path, data_dir: Path
) -> None:
    result = run_ingest(instance, landing, data_dir, config={"reextract_from": "last tuesday"})
    assert not result.success
    failure = next(e for e in result.all_events if e.is_step_failure)
    assert failure.step_key == "extracted_triples"
    assert "'last tuesday' is not a day like 2026-11-03" in str(failure.step_failure_data.error)
    assert TableStore(data_dir).read_table("extracted_triples", ACME) is None
