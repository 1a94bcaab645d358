"""The tables IO manager hands a table written earlier in the same run to the steps that load
it (pipelines/io.py). What a step gets must be exactly what reading the files back gives, and
a table anybody rewrote in between must be read from its files."""

from __future__ import annotations

import os
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipelines import io
from pipelines.runner import run_all
from pipelines.settings import resolve
from resources.settings import DEFAULTS
from resources.tables import TableStore
from schemas.scope import Scope
from schemas.tables import PER_DAY, TABLES, Asset, conform
from tests.e2e.test_troubled_landing import build
from tests.support.leftovers import assert_no_process_left

SCOPE = Scope("acme", "api")


@pytest.fixture
def spied(monkeypatch: pytest.MonkeyPatch):
    """Every hand-off, checked against the files as they are at that moment."""
    seen: list[tuple[str, str]] = []
    original = io._Handoff.take

    def take(self, run_id, store, asset, key):
        found, df = original(self, run_id, store, asset, key)
        if found:
            on_disk = store.read_table(asset, Scope.parse(key))
            if df is None:
                assert on_disk is None, (asset, key)
            else:
                assert on_disk is not None, (asset, key)
                assert df.schema == on_disk.schema, (asset, key)
                assert df.equals(on_disk), (asset, key)
            seen.append((asset, key))
        return found, df

    monkeypatch.setattr(io._Handoff, "take", take)
    return seen


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    for name in DEFAULTS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MEMFLOW_EMBEDDER", "none")
    data = tmp_path / "data"
    yield tmp_path, data
    assert_no_process_left(data)


def test_every_input_of_a_run_is_handed_off_exactly_as_its_files_read(env, spied) -> None:
    tmp, data = env
    landing = tmp / "landing"
    build(landing, tmp / "outside.jsonl")  # every kind of trouble: rejects, merges, dates
    resolve({"MEMFLOW_LANDING_DIR": str(landing), "MEMFLOW_DATA_DIR": str(data)}, tmp / "x")
    first = run_all(str(landing), str(data))
    assert not first.failures
    handed = {asset for asset, _ in spied}
    # the ingest run's table inputs: turns -> triples -> facts -> embeddings and sinks
    assert {
        Asset.RAW_TURNS,
        Asset.EXTRACTED_TRIPLES,
        Asset.VALIDATED_FACTS,
        Asset.ENTITIES,
    } <= handed
    assert len({key for _, key in spied}) == len(first.tenants)

    # an incremental second run (one tenant gets a new day) hands off its new tables too
    spied.clear()
    extra = landing / "acme" / "merge" / "later.jsonl"
    extra.write_text(
        '{"org": "acme", "repo": "merge", "session_id": "s9", "turn_id": "t9", '
        '"ts": "2026-11-05T10:00:00Z", "role": "user", "content": "later"}\n'
    )
    second = run_all(str(landing), str(data))
    assert not second.failures and spied


def test_a_table_rewritten_after_the_step_wrote_it_is_read_from_its_files(tmp_path) -> None:
    store, other = TableStore(tmp_path), TableStore(tmp_path)  # other: another process
    handoff = io._Handoff()
    mine = day_frame(["2026-06-01", "2026-06-02"], "mine")
    theirs = day_frame(["2026-06-01", "2026-06-02"], "theirs")
    handoff.write("run-1", store, Asset.RAW_TURNS, SCOPE.key, mine)
    found, df = handoff.take("run-1", store, Asset.RAW_TURNS, SCOPE.key)
    assert found and df is not None and df["session_id"].to_list() == ["mine", "mine"]

    other.write_table(theirs, Asset.RAW_TURNS, SCOPE)  # another writer, same shape
    assert handoff.take("run-1", store, Asset.RAW_TURNS, SCOPE.key) == (False, None)

    handoff.write("run-1", store, Asset.RAW_TURNS, SCOPE.key, mine)
    assert handoff.take("run-2", store, Asset.RAW_TURNS, SCOPE.key) == (False, None)
    store.path(Asset.RAW_TURNS, SCOPE, "2026-06-02").unlink()  # a day deleted
    assert handoff.take("run-1", store, Asset.RAW_TURNS, SCOPE.key) == (False, None)


def test_a_write_racing_ours_or_a_same_size_rewrite_in_one_clock_tick_is_seen(tmp_path) -> None:
    """Red team F4: the files' identity is the token of the write in each footer, not
    (name, mtime, size), which a rewrite of the same size within one tick of a coarse clock
    (or a writer landing between our write and our look at the files) would leave equal."""
    store, other, handoff = TableStore(tmp_path), TableStore(tmp_path), io._Handoff()
    mine, theirs = day_frame(["2026-06-01"], "mine-A"), day_frame(["2026-06-01"], "mine-B")
    path = store.path(Asset.RAW_TURNS, SCOPE, "2026-06-01")
    second = time.time_ns() // 1_000_000_000 * 1_000_000_000
    original = TableStore.write_table

    def racing(self, df, asset, scope, token=None):
        done = original(self, df, asset, scope, token=token)
        os.utime(path, ns=(second, second))  # what a 1-second file system stores
        if token is not None:  # the other writer lands right after our write
            original(other, theirs, asset, scope)
            os.utime(path, ns=(second, second))
        return done

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(TableStore, "write_table", racing)
        handoff.write("run-1", store, Asset.RAW_TURNS, SCOPE.key, mine)
    on_disk = store.read_table(Asset.RAW_TURNS, SCOPE)
    assert on_disk is not None and on_disk["session_id"].to_list() == ["mine-B"]
    assert handoff.take("run-1", store, Asset.RAW_TURNS, SCOPE.key) == (False, None)


def test_a_per_day_table_with_days_kept_unchanged_is_read_from_its_files(tmp_path) -> None:
    """Red team F5: a kept day holds its rows in the order of the write that made it, which
    may not be the new frame's; such a table is never handed off."""
    store, handoff = TableStore(tmp_path), io._Handoff()
    first = day_frame(["2026-06-01"] * 3, "s")
    handoff.write("run-0", store, Asset.RAW_TURNS, SCOPE.key, first)  # an earlier run
    again = first.reverse()  # the same rows in another order: the day file is kept
    handoff.write("run-1", store, Asset.RAW_TURNS, SCOPE.key, again)
    assert handoff.take("run-1", store, Asset.RAW_TURNS, SCOPE.key) == (False, None)
    on_disk = store.read_table(Asset.RAW_TURNS, SCOPE)
    assert on_disk is not None and on_disk["turn_id"].to_list() == ["0", "1", "2"]


def test_a_new_run_forgets_the_last_and_the_size_bound_holds(tmp_path, monkeypatch) -> None:
    store = TableStore(tmp_path)
    handoff = io._Handoff()
    small, big = day_frame(["2026-06-01"], "a"), day_frame(["2026-06-01"] * 40, "b")
    monkeypatch.setattr(io, "HANDOFF_MAX_BYTES", small.estimated_size() * 2)
    handoff.write("run-1", store, Asset.RAW_TURNS, SCOPE.key, small)
    other = Scope("acme", "web")
    handoff.write("run-1", store, Asset.RAW_TURNS, other.key, big)  # over the bound: not kept
    assert handoff.take("run-1", store, Asset.RAW_TURNS, other.key) == (False, None)
    assert handoff.take("run-1", store, Asset.RAW_TURNS, SCOPE.key)[0]
    assert handoff.size == small.estimated_size()
    handoff.write("run-1", store, Asset.RAW_TURNS, SCOPE.key, small)  # rewritten: counted once
    assert handoff.size == small.estimated_size()
    handoff.write("run-2", store, Asset.RAW_TURNS, other.key, small)
    assert handoff.take("run-2", store, Asset.RAW_TURNS, SCOPE.key) == (False, None)
    assert handoff.size == small.estimated_size()


def test_a_write_outside_the_io_manager_is_never_mistaken_for_ours(tmp_path) -> None:
    store, handoff = TableStore(tmp_path), io._Handoff()
    frame = day_frame(["2026-06-01"], "x")
    handoff.write("run-1", store, Asset.RAW_TURNS, SCOPE.key, frame)
    store.write_table(frame, Asset.RAW_TURNS, SCOPE)  # same content, no token: not ours
    # the same content was kept by digest, so the file (and its token) is still ours
    assert handoff.take("run-1", store, Asset.RAW_TURNS, SCOPE.key)[0]
    store.write(frame, Asset.RAW_TURNS, SCOPE, "2026-06-01")  # rewritten without a token
    assert handoff.take("run-1", store, Asset.RAW_TURNS, SCOPE.key) == (False, None)


def day_frame(days: list[str], session: str) -> pl.DataFrame:
    t0 = datetime(2026, 6, 1, tzinfo=UTC)
    return conform(
        pl.DataFrame(
            {
                "day": days,
                "session_id": [session] * len(days),
                "turn_id": [str(i) for i in range(len(days))],
                "ts": [t0 + timedelta(minutes=i) for i in range(len(days))],
            }
        ),
        TABLES[Asset.RAW_TURNS],
    )


day_lists = st.lists(st.sampled_from(["2026-06-03", "2026-06-01", "2026-06-02"]), max_size=12)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    days=day_lists,
    asset=st.sampled_from(sorted(a for a in TABLES if a in PER_DAY and "day" in TABLES[a])),
)
def test_as_read_is_what_reading_back_a_written_table_returns(days, asset) -> None:
    df = conform(
        pl.DataFrame({"day": days, "session_id": [f"s{i}" for i in range(len(days))]}),
        TABLES[asset],
    )
    with tempfile.TemporaryDirectory() as tmp:
        store = TableStore(Path(tmp))
        store.write_table(df, asset, SCOPE)
        back = store.read_table(asset, SCOPE)
        expected = TableStore.as_read(df, asset)
        if expected is None:
            assert back is None
        else:
            assert back is not None and back.schema == expected.schema
            assert back.equals(expected)
