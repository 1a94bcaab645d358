"""An earlier commit of memflow, unpacked to run its own `memflow` on a test's data: how the
migration tests get a data directory exactly as that code wrote it."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# `python -c` with PYTHONPATH on the unpacked tree runs that tree's CLI.
CLI = "import sys; from pipelines.cli import main; sys.exit(main(sys.argv[1:]))"


def unpack(commit: str, tree: Path) -> Path:
    """`git archive commit` extracted into `tree` (the commit must be in the history)."""
    tree.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", commit], capture_output=True, timeout=120
    )
    assert archive.returncode == 0, (
        f"git archive {commit} failed (the commit must be in the history): "
        f"{archive.stderr.decode(errors='replace')}"
    )
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
    return tree


def run_ok(cmd: list[str], env: dict[str, str], cwd: Path) -> str:
    """Run a command to completion; its stdout, or a failure showing both streams."""
    done = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"{cmd} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout
