"""`memflow mcp`: the MCP server (`recall.mcp_server`) with what the pipelines layer gives it.

The server registers in the state home while it runs (a server whose local landing zone is not
the system's shows as a conflict in `memflow status`), and gets an ingest trigger for the writes
it lands itself when the API cannot be reached: the run queue's (`pipelines.trigger.
QueueTrigger`), built on the first such write, so the server still starts without Dagster.
Writes through the API are triggered by the API.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from recall.ports import IngestRequest
from schemas.scope import Scope


class LazyQueueTrigger:
    """`QueueTrigger` for the data directory, imported and opened on the first call."""

    def __init__(self, data_dir: str) -> None:
        self.data_dir = data_dir
        self._trigger: Any = None

    def __call__(self, scope: Scope, landed: Path) -> IngestRequest:
        if self._trigger is None:
            from pipelines.trigger import QueueTrigger

            self._trigger = QueueTrigger(self.data_dir)
        return self._trigger(scope, landed)

    def close(self) -> None:
        if self._trigger is not None:
            self._trigger.close()


def main(argv: Sequence[str]) -> int:
    from recall.mcp_server import main as mcp_main
    from resources import home
    from resources.settings import local_env

    found = local_env()
    data_dir, landing_dir = found.data_dir, found.landing_dir
    options: dict[str, Any] = {}
    trigger = LazyQueueTrigger(data_dir) if data_dir else None
    # the server takes the trigger once recall.mcp_server accepts one (helper "agents")
    if trigger is not None and "ingest_trigger" in inspect.signature(mcp_main).parameters:
        options["ingest_trigger"] = trigger
    help_only = any(a in ("-h", "--help") for a in argv)
    entry = None
    if not help_only and data_dir and landing_dir:
        entry = home.register(home.state_home(), "mcp", data_dir, landing_dir)
    try:
        return mcp_main(list(argv), **options)
    finally:
        if entry is not None:
            home.unregister(home.state_home(), entry)
        if trigger is not None:
            trigger.close()
