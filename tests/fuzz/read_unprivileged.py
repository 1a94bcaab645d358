"""Read a landing zone the way a run does, and print what came of it as JSON: run as a child
process that may not read some of the zone's entries (see `test_landing_domain`).

    python -m tests.fuzz.read_unprivileged LANDING_ROOT
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from pathlib import Path

from memflow import landing
from memflow.turns import TurnTables, ingest_turns


def main(root: Path) -> dict:
    now = datetime.now(UTC)
    found = landing.discover(root)
    problems = landing.landing_problems(root, found)
    records = 0
    tenants = {}
    for scope, files in found.items():
        update = ingest_turns(root, scope, files, TurnTables.empty(), now)
        tables = update.tables
        records += int(tables.files["records"].sum() or 0)
        tenants[scope.key] = {
            "records": int(tables.files["records"].sum() or 0),
            "turns": tables.turns.height,
            "rejects": tables.rejects.height,
            "problems": [p.row() for p in update.problems],
        }
    return {
        "records": records,
        "tenants": tenants,
        "problems": problems.to_dicts(),
    }


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[1])), default=str))
