"""The model sources are observed at the top of every hour under the daemon
(`assets.models.OBSERVE_HOURLY`, `pipelines.sensors.model_observations`), and nothing else is
started by automation: the per-tenant assets run when their landing files change."""

from __future__ import annotations

import warnings
from datetime import UTC, datetime, timedelta

from dagster import AssetKey, DagsterInstance, DefaultSensorStatus, evaluate_automation_conditions

from pipelines.definitions import defs
from schemas.tables import Asset

MODELS = {AssetKey(Asset.EXTRACTION_MODEL), AssetKey(Asset.EMBEDDING_MODEL)}


def _requested(result) -> set[AssetKey]:
    return {r.key for r in result.results if r.true_subset.size}


def test_the_models_are_observed_once_an_hour_and_nothing_else_is_requested() -> None:
    start = datetime(2026, 12, 7, 10, 30, tzinfo=UTC)
    with DagsterInstance.ephemeral() as instance, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Dagster's beta warnings about its own evaluator
        first = evaluate_automation_conditions(defs, instance, evaluation_time=start)
        assert _requested(first) == set()
        later = evaluate_automation_conditions(
            defs, instance, evaluation_time=start + timedelta(minutes=20), cursor=first.cursor
        )
        assert _requested(later) == set()  # no hour boundary passed
        hour = evaluate_automation_conditions(
            defs, instance, evaluation_time=start + timedelta(minutes=31), cursor=later.cursor
        )
        assert _requested(hour) == MODELS
        assert hour.total_requested == 2
        again = evaluate_automation_conditions(
            defs, instance, evaluation_time=start + timedelta(minutes=40), cursor=hour.cursor
        )
        assert _requested(again) == set()  # once per tick, not on every evaluation


def test_the_observation_sensor_runs_by_default_and_targets_the_models_only() -> None:
    repo = defs.get_repository_def()
    sensor = repo.get_sensor_def("model_observations")
    assert sensor.default_status == DefaultSensorStatus.RUNNING
    graph = repo.asset_graph
    assert sensor.asset_selection.resolve(graph, allow_missing=False) == MODELS
    conditioned = {
        spec.key
        for assets_def in graph.assets_defs
        for spec in assets_def.specs
        if spec.automation_condition is not None
    }
    assert conditioned == MODELS
