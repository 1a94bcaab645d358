"""The daemon tests' PostgreSQL server: started once for every test process (file lock, the
last user stops it; tests/support/postgres.py). A server that cannot start fails the tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support import postgres
from tests.support.services import ServiceUnavailable


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """postgresql+psycopg2://memflow@127.0.0.1:<port> (no database: each world makes one)."""
    try:
        url = postgres.acquire()
    except ServiceUnavailable as exc:
        pytest.fail(f"PostgreSQL could not be started: {exc}", pytrace=False)
    yield url.replace("postgresql://", "postgresql+psycopg2://", 1)
    postgres.release()
