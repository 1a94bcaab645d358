"""The garbage collector as `memflow run` runs it."""

from __future__ import annotations

# `memflow run` is a batch process that builds millions of short-lived objects (rows, hashes,
# events): with Python's default first threshold (700 allocations) the collector ran ~900
# times and scanned the whole heap 5 times in a 40-tenant run, ~0.5 s of its ~9 s
# (bench/bench_ingest_scale.py). Collecting young objects less often keeps cycles collected
# and the peak memory the same.
RUN_GC_THRESHOLD = (50_000, 20, 20)


def run_gc_setup() -> tuple[int, int, int]:
    """The collector as `memflow run` runs it (the threshold above; the benchmark's direct
    path calls this too); returns the threshold before it.

    Then the modules a run needs are imported and `gc.freeze()` moves everything they made
    (Dagster's and memflow's definitions, ~200,000 objects that live as long as the process)
    out of the collector's sight: each collection of the older generations otherwise walks
    them again, ~0.1-0.15 s CPU of a 40-tenant run (BENCHMARKS.md "Ingestion at scale").
    `run_gc_restore` undoes both (a command run in-process, as the tests do, leaves the
    collector as it found it)."""
    import gc
    import importlib

    before = gc.get_threshold()
    gc.set_threshold(*RUN_GC_THRESHOLD)
    for module in ("pipelines.definitions", "pipelines.runner"):  # what the run loads
        importlib.import_module(module)
    gc.freeze()
    return before


def run_gc_restore(before: tuple[int, int, int]) -> None:
    import gc

    gc.unfreeze()
    gc.set_threshold(*before)
