"""Generated landing zones through the domain functions (no Dagster): `discover`,
`read_tenant_files`, `ingest_turns`, `extract_tenant` and `build_facts` never raise, every line
and triple is accounted for, every table meets its contract, and no planted secret is in
anything they return (`tests.fuzz.invariants.check_domain`)."""

from __future__ import annotations

import ctypes
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import given

from tests.fuzz.invariants import check_domain
from tests.fuzz.profile import COMBINATORIAL_SEEDS, DOMAIN, TALLY
from tests.fuzz.zones import (
    NOW,
    Build,
    Node,
    SeededChooser,
    Where,
    Zone,
    combinatorial_count,
    combinatorial_zone,
    dumps,
    planted_lines,
    tenant_files,
    zones,
)


def _check(zone: Zone) -> None:
    base = Path(tempfile.mkdtemp(prefix="memflow-fuzz-"))
    try:
        counts = check_domain(zone, base, NOW)
        TALLY.add("domain", counts)
        counts.assert_clean()
    finally:
        shutil.rmtree(base, ignore_errors=True)


@DOMAIN
@given(zone=zones())
def test_a_generated_zone_ingests_with_every_line_accounted_for_and_no_secret(zone: Zone):
    _check(zone)


@pytest.mark.parametrize(
    "seed,index", [(s, i) for s in COMBINATORIAL_SEEDS for i in range(combinatorial_count())]
)
def test_every_variant_of_every_family_ingests(seed: int, index: int) -> None:
    """The combinatorial generator: each variant of each family (lines, triples, Parquet
    schemas, special files, directories, file names) in one of the zones of a seed."""
    _check(combinatorial_zone(seed, index))


def _without_dac_override() -> None:
    """In the child, before exec: drop root's power to ignore file modes (a no-op for others)."""
    if os.geteuid() != 0:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
        if libc.prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


@pytest.mark.skipif(sys.platform != "linux", reason="file modes and capabilities are Linux's")
def test_unreadable_files_and_directories_are_listed_problems_and_the_rest_is_read(
    tmp_path: Path,
) -> None:
    """Entries the reader may not open (a file, a tenant directory, an org directory, a nested
    directory, an invalid scope's directory, all mode 000) are problems with a reason, never a
    crash, and every line of everything else is accounted for. Run in a child process without
    CAP_DAC_OVERRIDE when the suite runs as root (root reads anything otherwise)."""
    b = Build(SeededChooser(random.Random(7)))
    good, other = Where("acme", "r"), Where("globex", "ml")
    nodes = tenant_files(b, good, 3, 6) + tenant_files(b, other, 2, 4)
    blocked = [
        Node(("acme", "r", "locked.jsonl"), "file", dumps(b.turn("acme", "r")) + b"\n", mode=0),
        Node(("globex", "ml", "sub", "x.jsonl"), "file", b"{}\n"),
        Node(("globex", "ml", "sub"), "dir", mode=0),
        Node(("initech", "core", "a.jsonl"), "file", dumps(b.turn("initech", "core")) + b"\n"),
        Node(("initech", "core"), "dir", mode=0),
        Node(("umbrella", "labs", "a.jsonl"), "file", b"{}\n"),
        Node(("umbrella",), "dir", mode=0),
        Node(("my org", "r", "a.jsonl"), "file", b"{}\n"),
        Node(("my org", "r"), "dir", mode=0),
    ]
    root = tmp_path / "landing"
    Zone(nodes + blocked).write(root, tmp_path / "outside")
    unreadable_lines = 5  # one line in each blocked entry
    try:
        try:
            child = subprocess.run(
                [sys.executable, "-m", "tests.fuzz.read_unprivileged", str(root)],
                cwd=Path(__file__).resolve().parents[2],
                capture_output=True,
                text=True,
                timeout=300,
                preexec_fn=_without_dac_override,
            )
        except subprocess.SubprocessError as exc:  # prctl refused (no CAP_SETPCAP)
            pytest.skip(f"cannot drop CAP_DAC_OVERRIDE here: {exc}")
        assert child.returncode == 0, child.stderr[-3000:]
        result = json.loads(child.stdout)
        lines = planted_lines(root)
    finally:
        for path in (root / "acme/r/locked.jsonl", root / "globex/ml/sub", root / "initech/core",
                     root / "umbrella", root / "my org/r"):  # fmt: skip
            os.chmod(path, 0o755)
    reasons = {(p["path"], p["reason"]) for p in result["problems"]}
    reasons |= {(p["path"], p["reason"]) for t in result["tenants"].values() for p in t["problems"]}
    assert ("acme/r/locked.jsonl", "unreadable_file") in reasons, reasons
    assert ("globex/ml/sub", "nested_directory") in reasons, reasons
    assert ("initech/core", "unreadable_directory") in reasons, reasons
    assert ("umbrella", "unreadable_directory") in reasons, reasons
    assert ("my org/r", "invalid_scope") in reasons, reasons
    for tenant in result["tenants"].values():
        assert tenant["records"] == tenant["turns"] + tenant["rejects"], tenant
    counted = result["records"] + sum(p["lines"] or 0 for p in result["problems"])
    assert counted == lines - unreadable_lines, (counted, lines)
