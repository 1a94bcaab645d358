"""Hypothesis without its per-example deadline: a deadline is a timed assertion, and on a
shared 2-core machine a slow example is load, not a bug (speed is proven by `make bench`).

Every test session gets a state home of its own (`MEMFLOW_HOME`, and `XDG_STATE_HOME` for
subprocesses that start with a cleaned environment): no test reads or writes the user's
`~/.local/state/memflow` (recorded paths, registered processes)."""

import os
import tempfile

from hypothesis import settings

settings.register_profile("memflow", deadline=None)
settings.load_profile("memflow")

_STATE = tempfile.mkdtemp(prefix="memflow-test-state-")
os.environ["MEMFLOW_HOME"] = os.path.join(_STATE, "memflow")
os.environ["XDG_STATE_HOME"] = _STATE
