"""Read every landing file of a tenant directory under a cap on the address space, and print
what came of each as JSON: run as a child process by the bomb tests, so a reader that decodes a
bomb fails there (a MemoryError, an abort) and the test says so, instead of taking the worker
down.

    python -m tests.fuzz.read_bounded LANDING_ROOT HEADROOM_MIB

The cap is the address space the process holds once memflow and its libraries are imported and
have read a small file (thread pools and allocator arenas reserve address space when first
used, and how much differs by machine: a fixed cap would measure the machine, not the reader),
plus HEADROOM_MIB.
"""

from __future__ import annotations

import json
import os
import resource
import sys
from datetime import UTC, datetime
from pathlib import Path


def _vm_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def _warm_up(landing: object) -> None:
    """Read a small Parquet and JSONL file the way the reader does, before the cap."""
    import tempfile

    import pyarrow as pa
    import pyarrow.parquet as pq

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp, "acme", "api")
        folder.mkdir(parents=True)
        row = {"org": "acme", "repo": "api", "session_id": "s", "turn_id": "t", "role": "user",
               "ts": "2026-11-03T10:00:00Z", "content": "warm", "client": "c"}  # fmt: skip
        pq.write_table(pa.table({k: [v] * 1000 for k, v in row.items()}), folder / "w.parquet")
        (folder / "w.jsonl").write_text(json.dumps(row) + "\n")
        for name in ("w.parquet", "w.jsonl"):
            landing.read_landing_file(folder / name, tmp)  # type: ignore[attr-defined]


def main(root: Path, headroom_mib: int) -> dict:
    from memflow import landing

    _warm_up(landing)
    cap = (_vm_kib("VmSize") + headroom_mib * 1024) * 1024
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    now = datetime(2026, 11, 5, tzinfo=UTC)
    out: dict[str, dict] = {}
    for path in sorted((root / "acme" / "api").iterdir()):
        read = landing.read_landing_file(path, root, now=now)
        out[path.name] = {
            "records": read.records,
            "turns": read.turns["turn_id"].to_list(),
            "reasons": read.rejects_by_reason(),
            "details": read.rejects["detail"].to_list(),
            "counted": landing.count_records(root, f"acme/api/{path.name}"),
        }
    return {"files": out, "cap_mib": cap >> 20, "peak_rss_mib": _vm_kib("VmHWM") >> 10}


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[1]), int(sys.argv[2]))), flush=True)
    # The result is out. Skip the interpreter's teardown: under the address-space cap a native
    # thread pool being torn down can abort ("terminate called without an active exception",
    # seen once in ~20 suites on a loaded machine), which is about the cap, not the reader.
    sys.stderr.flush()
    os._exit(0)
