"""Fixtures of the fuzz suite: the tally is written at the end of the session when
``MEMFLOW_FUZZ_TALLY`` names a folder (see `tests.fuzz.profile`); `api` is the write
endpoints' keys and service (`tests.fuzz.writes`)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from recall.auth import add_key
from recall.service import RecallService
from resources.graph.sqlite import SqliteGraphStore
from tests.fuzz.profile import TALLY
from tests.fuzz.writes import Api


@pytest.fixture(scope="session", autouse=True)
def fuzz_tally() -> Iterator[None]:
    yield
    TALLY.flush()


@pytest.fixture(scope="session")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    root = tmp_path_factory.mktemp("fuzz-api")
    keys = root / "api-keys.json"
    key = add_key(keys, "acme", "*")
    add_key(keys, "globex", ["ml"])
    graph = SqliteGraphStore(root / "graph.sqlite")
    with RecallService(graph) as service:
        yield Api(keys, key, service)
    graph.close()
