"""Hypothesis without its per-example deadline: a deadline is a timed assertion, and on a
shared 2-core machine a slow example is load, not a bug (speed is proven by `make bench`).

Every test session gets a state home of its own (`MEMFLOW_HOME`, and `XDG_STATE_HOME` for
subprocesses that start with a cleaned environment): no test reads or writes the user's
`~/.local/state/memflow` (recorded paths, registered processes)."""

import atexit
import os
import shutil
import signal
import tempfile
from collections.abc import Iterator

import pytest
from hypothesis import settings

settings.register_profile("memflow", deadline=None)
settings.load_profile("memflow")

_STATE = tempfile.mkdtemp(prefix="memflow-test-state-")
atexit.register(shutil.rmtree, _STATE, ignore_errors=True)
os.environ["MEMFLOW_HOME"] = os.path.join(_STATE, "memflow")
os.environ["XDG_STATE_HOME"] = _STATE


_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_HANDLERS = {sig: signal.getsignal(sig) for sig in _SIGNALS}


@pytest.fixture(autouse=True)
def _signal_handlers_as_the_session_began() -> Iterator[None]:
    """Each test starts with the session's SIGINT and SIGTERM handlers. Dagster's in-process
    execution (`materialize`, which some tests call directly) maps SIGTERM to SIGINT's handler
    and leaves it; in an xdist worker SIGINT may be ignored, so SIGTERM stayed ignored for the
    worker's later tests and the programs they start (memflow's own runs put it back:
    `pipelines.location.signals_after_the_run`). Before the test too: a module fixture may
    have run one."""
    _restore_handlers()
    yield
    _restore_handlers()


def _restore_handlers() -> None:
    for sig, handler in _HANDLERS.items():
        if handler is not None and signal.getsignal(sig) != handler:
            signal.signal(sig, handler)
