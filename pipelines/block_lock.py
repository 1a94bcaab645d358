"""One run per tenant block at a time, however the run was started.

The run queue admits one run per `memflow/block` tag value (`pipelines.instance`,
`deploy/dagster.yaml`), but only for runs it launches and only for runs that carry the tag: a
backfill launched from the UI carries none, and `memflow run` and the API's warm ingest worker
execute their runs themselves. So every run also takes a file lock per block it covers
(`<data>/locks/block-<n>.lock`, in block order, so two runs never wait on each other), when
Dagster sets its resources up, and holds it until the run's resources are torn down: a CLI run,
a sensor run and a UI run of one tenant wait for each other instead of overlapping. A process
that dies releases its locks with it (flock).

`BlockLockedStorage` is the `storage` resource of the code location (every tenant asset uses
it); a run with no tenant partition (the survey) takes no lock. The locks guard one machine's
data directory; a deployment whose runs execute on several hosts relies on the queue's tag limit
(and on its runs carrying the tag).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from dagster import DagsterInstance, InitResourceContext
from pydantic import PrivateAttr

from assets.partitions import TENANTS
from pipelines.batches import BLOCK_SIZE, RANGE_END_TAG, RANGE_START_TAG
from resources.configurable import Storage

LOCKS_DIR = "locks"
PARTITION_TAG = "dagster/partition"
WAIT_REPORT_S = 30.0


def lock_path(data_dir: str | Path, block: int) -> Path:
    return Path(data_dir) / LOCKS_DIR / f"block-{block}.lock"


def blocks_of(
    tags: Mapping[str, str], ordered: Sequence[str], block_size: int = BLOCK_SIZE
) -> list[int]:
    """The blocks a run with these tags covers (by the tenants' order), ascending."""
    position = {k: i for i, k in enumerate(ordered)}
    first, last = tags.get(RANGE_START_TAG), tags.get(RANGE_END_TAG)
    if first is None and last is None:
        first = last = tags.get(PARTITION_TAG)
    if first is None or last is None:
        return []
    if first not in position or last not in position:
        return []  # not a tenant partition (it fails elsewhere)
    low, high = sorted((position[first] // block_size, position[last] // block_size))
    return list(range(low, high + 1))


class BlockLocks:
    """File locks of some blocks, taken in order; `release` gives them back."""

    def __init__(self, data_dir: str | Path, blocks: Iterable[int]) -> None:
        self.paths = [lock_path(data_dir, b) for b in sorted(set(blocks))]
        self._held: list = []

    def acquire(self, say=None, *, poll_s: float = 1.0) -> BlockLocks:
        from filelock import FileLock, Timeout

        started = time.monotonic()
        reported = started
        for path in self.paths:
            path.parent.mkdir(parents=True, exist_ok=True)
            lock = FileLock(str(path), thread_local=False)
            while True:
                try:
                    lock.acquire(timeout=poll_s)
                    break
                except Timeout:
                    now = time.monotonic()
                    if say is not None and now - reported >= WAIT_REPORT_S:
                        say(
                            f"waiting {now - started:.0f} s for {path.stem}: another run of "
                            "its tenants is under way"
                        )
                        reported = now
                except BaseException:
                    self.release()
                    raise
            self._held.append(lock)
        return self

    def release(self) -> None:
        while self._held:
            self._held.pop().release()

    def __enter__(self) -> BlockLocks:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def run_blocks(instance: DagsterInstance, tags: Mapping[str, str]) -> list[int]:
    if not (tags.get(PARTITION_TAG) or tags.get(RANGE_START_TAG)):
        return []
    return blocks_of(tags, instance.get_dynamic_partitions(TENANTS))


class BlockLockedStorage(Storage):
    """`Storage` that holds the run's block locks from resource set-up to tear-down."""

    _locks: BlockLocks | None = PrivateAttr(default=None)

    def setup_for_execution(self, context: InitResourceContext) -> None:
        run = context.dagster_run
        if run is None or context.instance is None:
            return  # a sensor, a schedule or a test building the resource: no run to guard
        blocks = run_blocks(context.instance, run.tags)
        if not blocks:
            return
        log = context.log
        self._locks = BlockLocks(self.data_dir, blocks).acquire(
            (lambda msg: log.info(msg)) if log is not None else None
        )

    def teardown_after_execution(self, context: InitResourceContext) -> None:
        if self._locks is not None:
            self._locks.release()
            self._locks = None
