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


# What issue 20's retune changed (BENCHMARKS.md "Recall quality: the curve"), as it was before.
BEFORE_RETUNE = {
    "fact_bm25_b": 0.75,
    "structure_weight": 0.1,
    "temporal_weight": 0.5,
    "new_sources_top": 10,
}

VARIANTS: dict[str, RecallConfig] = {
    "shipped": RecallConfig(),
    # main before issue 20: no question-entity focus, no near-duplicate dedup, no new-source
    # rule, issue 11's weights
    "issue 11 ranking (no focus, no dedup)": _ranking(
        **{**BEFORE_RETUNE, "distinct_top": 0, "new_sources_top": 0, "focus_weight": 0.0}
    ),
    # issue 20's retune undone (BM25 b, graph-distance prior, date window, new-source top)
    "before the retune": _ranking(**BEFORE_RETUNE),
    "fact_bm25_b=0.75": _ranking(fact_bm25_b=0.75),
    "structure_weight=0.1": _ranking(structure_weight=0.1),
    "temporal_weight=0.5": _ranking(temporal_weight=0.5),
    "new_sources_top=10": _ranking(new_sources_top=10),
    "no dedup": _ranking(distinct_top=0),
    "no new-source rule": _ranking(new_sources_top=0),
    "no focus": _ranking(focus_weight=0.0),
    "focus_weight=0.25": _ranking(focus_weight=0.25),
    "focus_weight=0.5": _ranking(focus_weight=0.5),
    "focus_weight=1": _ranking(focus_weight=1.0),
    "no fact vectors": RecallConfig(fact_vectors=0),
    "fusion=rrf": _ranking(fusion="rrf", structure_weight=0.25),
    "no spread": _ranking(spread_weight=0.0),
    "no date window": _ranking(temporal_weight=0.0),
    "no fact leg": _ranking(fact_leg=0),
    "no lexical feedback": RecallConfig(feedback_weight=0.0),
    "structure_weight=0.5": _ranking(structure_weight=0.5),
}
