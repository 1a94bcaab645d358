"""The shipped recall configuration and one change each: what `--ablation` of both quality
benchmarks (`bench_quality.py`, `bench_locomo.py`) compares. Its own module so that neither
benchmark imports the other."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from recall.service import RankingConfig, RecallConfig  # noqa: E402


def _ranking(**changes: object) -> RecallConfig:
    return RecallConfig(ranking=RankingConfig(**changes))  # type: ignore[arg-type]


VARIANTS: dict[str, RecallConfig] = {
    "shipped": RecallConfig(),
    "before issue 11 (rrf, no fact vectors, no dates, no spread)": RecallConfig(
        fact_vectors=0,
        ranking=RankingConfig(
            fusion="rrf", structure_weight=0.25, temporal_weight=0.0, spread_weight=0.0
        ),
    ),
    "fusion=rrf": _ranking(fusion="rrf", structure_weight=0.25),
    "no fact vectors": RecallConfig(fact_vectors=0),
    "fact_cosine_weight=0.5": _ranking(fact_cosine_weight=0.5),
    "fact_cosine_weight=1": _ranking(fact_cosine_weight=1.0),
    "no spread": _ranking(spread_weight=0.0),
    "no date window": _ranking(temporal_weight=0.0),
    "no fact leg": _ranking(fact_leg=0),
    "no lexical feedback": RecallConfig(feedback_weight=0.0),
    "feedback_weight=0.75": RecallConfig(feedback_weight=0.75),
    "structure_weight=0": _ranking(structure_weight=0.0),
    "structure_weight=0.5": _ranking(structure_weight=0.5),
    "entity_cosine_weight=0.25": _ranking(entity_cosine_weight=0.25),
    "fuse_depth=8": RecallConfig(fuse_depth=8),
}
