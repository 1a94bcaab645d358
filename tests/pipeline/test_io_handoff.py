"""The tables IO manager hands a table written earlier in the same run to the steps that load
it (pipelines/io.py). What a step gets must be exactly what reading the table back gives, and
a tenant anybody rewrote in between must be read from the table."""

from __future__ import annotations

import tempfile
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

    def take(self, run_id, store, asset, scopes):
        found = original(self, run_id, store, asset, scopes)
        for scope, df in found.items():
            stored = store.read_table(asset, scope)
            assert stored is not None, (asset, scope)
            assert df.schema == stored.schema, (asset, scope)
            assert df.equals(stored), (asset, scope)
            seen.append((asset, scope.key))
        return found

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


def keep(handoff: io._Handoff, run_id: str, store: TableStore, frames: dict) -> None:
    """What the IO manager does with a step's output: one commit, then keep what it wrote."""
    handoff.keep(run_id, store, store.write_tenants(Asset.RAW_TURNS, frames), frames)


def take(handoff: io._Handoff, run_id: str, store: TableStore, scope: Scope):
    return handoff.take(run_id, store, Asset.RAW_TURNS, [scope]).get(scope)


def test_a_tenant_rewritten_after_the_step_wrote_it_is_read_from_the_table(tmp_path) -> None:
    store, other = TableStore(tmp_path), TableStore(tmp_path)  # other: another process
    handoff = io._Handoff()
    mine = day_frame(["2026-06-01", "2026-06-02"], "mine")
    theirs = day_frame(["2026-06-01", "2026-06-02"], "theirs")
    keep(handoff, "run-1", store, {SCOPE: mine})
    got = take(handoff, "run-1", store, SCOPE)
    assert got is not None and got["session_id"].to_list() == ["mine", "mine"]

    other.write_table(theirs, Asset.RAW_TURNS, SCOPE)  # another writer, same shape
    assert take(handoff, "run-1", store, SCOPE) is None
    assert take(handoff, "run-2", store, SCOPE) is None  # and never for another run


def test_a_commit_of_another_tenant_in_between_keeps_the_hand_off(tmp_path) -> None:
    """The table's version moved, but not this tenant's files: the kept frame is still what
    the table holds for it."""
    store, other, handoff = TableStore(tmp_path), TableStore(tmp_path), io._Handoff()
    mine = day_frame(["2026-06-01"], "mine")
    keep(handoff, "run-1", store, {SCOPE: mine})
    other.write_table(day_frame(["2026-06-01"], "web").with_columns(ns=pl.lit("web")),
                      Asset.RAW_TURNS, Scope("acme", "web"))  # fmt: skip
    got = take(handoff, "run-1", store, SCOPE)
    assert got is not None and got.equals(store.read_table(Asset.RAW_TURNS, SCOPE))


def test_an_unchanged_tenant_is_not_rewritten_nor_handed_off_in_another_order(tmp_path) -> None:
    """A tenant whose rows did not change keeps its stored rows (in the order of the write
    that made them): it is read back, not handed off in the new frame's order."""
    store, handoff = TableStore(tmp_path), io._Handoff()
    first = day_frame(["2026-06-01"] * 3, "s")
    keep(handoff, "run-0", store, {SCOPE: first})
    version = store.version(Asset.RAW_TURNS)
    keep(handoff, "run-1", store, {SCOPE: first.reverse()})
    assert store.version(Asset.RAW_TURNS) == version  # no commit
    assert take(handoff, "run-1", store, SCOPE) is None
    stored = store.read_table(Asset.RAW_TURNS, SCOPE)
    assert stored is not None and stored["turn_id"].to_list() == ["0", "1", "2"]


def test_a_new_run_forgets_the_last_and_the_size_bound_holds(tmp_path, monkeypatch) -> None:
    store = TableStore(tmp_path)
    handoff = io._Handoff()
    other = Scope("acme", "web")
    small = day_frame(["2026-06-01"], "a")
    big = day_frame(["2026-06-01"] * 40, "b").with_columns(ns=pl.lit("web"))
    monkeypatch.setattr(io, "HANDOFF_MAX_BYTES", small.estimated_size() * 2)
    keep(handoff, "run-1", store, {SCOPE: small, other: big})  # big: over the bound
    assert take(handoff, "run-1", store, other) is None
    assert take(handoff, "run-1", store, SCOPE) is not None
    assert handoff.size == small.estimated_size()
    keep(handoff, "run-1", store, {SCOPE: day_frame(["2026-06-02"], "a")})  # rewritten
    assert handoff.size == small.estimated_size()  # counted once
    keep(handoff, "run-2", store, {other: big.head(1)})
    assert take(handoff, "run-2", store, SCOPE) is None
    assert handoff.size == big.head(1).estimated_size()


def day_frame(days: list[str], session: str) -> pl.DataFrame:
    t0 = datetime(2026, 6, 1, tzinfo=UTC)
    n = len(days)
    return conform(
        pl.DataFrame(
            {
                "turn_key": [f"{session}-{i}" for i in range(n)],
                "tenant_id": [SCOPE.tenant_id] * n,
                "ns": [SCOPE.ns] * n,
                "day": days,
                "session_id": [session] * n,
                "turn_id": [str(i) for i in range(n)],
                "ts": [t0 + timedelta(minutes=i) for i in range(n)],
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
        pl.DataFrame(
            {
                "tenant_id": [SCOPE.tenant_id] * len(days),
                "ns": [SCOPE.ns] * len(days),
                "day": days,
                "session_id": [f"s{i}" for i in range(len(days))],
            }
        ),
        TABLES[asset],
    )
    with tempfile.TemporaryDirectory() as tmp:
        store = TableStore(Path(tmp))
        store.write_table(df, asset, SCOPE)
        back = store.read_table(asset, SCOPE)
        if df.is_empty():
            assert back is None
        else:
            expected = TableStore.as_read(df, asset)
            assert back is not None and back.schema == expected.schema
            assert back.equals(expected)
