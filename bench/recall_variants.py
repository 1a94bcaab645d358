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
    # main before issue 20: no question-entity focus, no near-duplicate dedup
    "issue 11 ranking (no focus, no dedup)": _ranking(distinct_top=0),
    "no dedup": _ranking(distinct_top=0),
    "focus_weight=0.25": _ranking(focus_weight=0.25),
    "focus_weight=0.5": _ranking(focus_weight=0.5),
    "focus_weight=1": _ranking(focus_weight=1.0),
    "no fact vectors": RecallConfig(fact_vectors=0),
    "fusion=rrf": _ranking(fusion="rrf", structure_weight=0.25),
    "no spread": _ranking(spread_weight=0.0),
    "no date window": _ranking(temporal_weight=0.0),
    "no fact leg": _ranking(fact_leg=0),
    "no lexical feedback": RecallConfig(feedback_weight=0.0),
    "structure_weight=0": _ranking(structure_weight=0.0),
    "structure_weight=0.5": _ranking(structure_weight=0.5),
}
