"""Hypothesis settings of the fuzz suite, and its tally.

Two profiles, as in `tests/unit/test_redaction_properties.py`: a small default (the whole of
tests/fuzz in about two minutes with ``-n 2``; derandomized under ``CI`` so a CI run is
repeatable) and ``HYPOTHESIS_PROFILE=fuzz``, many more examples and seeds (what
`bench/bench_fuzz.py` runs).

The tally: every check adds what it saw (inputs, lines, lines accounted for, secrets planted
and found...). With ``MEMFLOW_FUZZ_TALLY=<dir>`` each test process writes its sums there as
JSON at the end of the session (`bench/bench_fuzz.py` adds them up).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from hypothesis import HealthCheck, settings

from tests.fuzz.invariants import Counts

FUZZ = os.environ.get("HYPOTHESIS_PROFILE") == "fuzz"
TALLY_ENV = "MEMFLOW_FUZZ_TALLY"
_MAPPINGS = ("reasons", "leaks", "planted_by_channel", "found_by_channel")


def fuzz_settings(default: int, fuzz: int) -> settings:
    return settings(
        max_examples=fuzz if FUZZ else default,
        deadline=None,
        derandomize=bool(os.environ.get("CI")) and not FUZZ,
        suppress_health_check=list(HealthCheck),
        database=None,
        print_blob=True,
    )


# Domain-level zones, pipeline runs, API requests per example batch.
DOMAIN = fuzz_settings(24, 600)
PIPELINE = fuzz_settings(1, 8)
API = fuzz_settings(25, 800)
# Seeds of the combinatorial generator (each covers every variant once).
COMBINATORIAL_SEEDS = list(range(1, 21)) if FUZZ else [20261201]


class Tally:
    """Per-process sums, by test group (domain, pipeline, cli, api)."""

    def __init__(self) -> None:
        self.groups: dict[str, Counts] = {}

    def add(self, group: str, counts: Counts) -> None:
        self.groups.setdefault(group, Counts()).add(counts)

    def as_dict(self) -> dict[str, dict]:
        out = {}
        for group, c in self.groups.items():
            fields = {k: getattr(c, k) for k in c.__dataclass_fields__ if k not in _MAPPINGS}
            out[group] = {**fields, **{k: dict(getattr(c, k)) for k in _MAPPINGS}}
        return out

    def flush(self) -> None:
        folder = os.environ.get(TALLY_ENV)
        if not folder or not self.groups:
            return
        Path(folder).mkdir(parents=True, exist_ok=True)
        path = Path(folder, f"tally-{os.getpid()}.json")
        path.write_text(json.dumps(self.as_dict(), indent=1, sort_keys=True))


TALLY = Tally()
