"""What serving asks of the layers above it, as protocols the pipelines layer implements.

`recall/` never imports Dagster, yet a write through the API or MCP should start its tenant's
ingestion at once, and erasing a tenant must reach Dagster's partitions. The process that runs
the API (`memflow serve`, `memflow up`, `memflow mcp`) is built in `pipelines/` and hands
implementations of these protocols down; without one, the API says what it could not do.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from schemas.scope import Scope


@dataclass(frozen=True)
class IngestRequest:
    """What a write's answer tells the agent about when its data becomes recallable.

    `requested`: a run for the tenant was asked for now (False: nothing ingests on its own, and
    `reason` says why, e.g. no daemon); `run_id` when a run was launched or joined; `expected_by`
    when the data should be recallable (an estimate from recent runs), None when unknown."""

    requested: bool
    run_id: str | None = None
    expected_by: datetime | None = None
    reason: str | None = None


class IngestTrigger(Protocol):
    """Called after a landing file was written and checked: ask for the tenant's run now."""

    def __call__(self, scope: Scope, landed: Path) -> IngestRequest: ...


@dataclass(frozen=True)
class EraseReport:
    """What erasing a tenant removed, place by place (counts of rows, files, vectors, ...)."""

    scope: Scope
    removed: Mapping[str, int] = field(default_factory=dict)
    problems: tuple[str, ...] = ()
    # What stays without anything to do about it, and until when (not a failure: the erase
    # did all it can; e.g. Delta log entries that expire).
    notes: tuple[str, ...] = ()

    def as_json(self) -> dict[str, Any]:
        return {
            "org": self.scope.tenant_id,
            "repo": self.scope.ns,
            "removed": dict(self.removed),
            "problems": list(self.problems),
            "notes": list(self.notes),
        }


class TenantEraser(Protocol):
    """Removes everything memflow holds for one tenant: tables, graph, vectors, embedding
    ledger, landing files and the tenant's Dagster partitions, and reports what went."""

    def __call__(self, scope: Scope) -> EraseReport: ...
