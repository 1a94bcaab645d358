"""What the scale benchmarks of both stacks share (bench_scale.py, bench_scale_production.py):
the tenants' names, disk use and per-tenant figures."""

from __future__ import annotations

import contextlib
from pathlib import Path


def tenant_name(i: int) -> str:
    return f"org{i // 50:04d}/repo{i:05d}"


def disk(data: Path) -> dict[str, int]:
    """Bytes on disk (allocated blocks) of the data directory, by top-level part."""
    out: dict[str, int] = {}
    for part in sorted(data.iterdir()):
        total = 0
        paths = [part] if part.is_file() else [p for p in part.rglob("*") if p.is_file()]
        for p in paths:
            with contextlib.suppress(OSError):
                total += p.stat().st_blocks * 512
        out[part.name] = total
    out["total"] = sum(out.values())
    return out


def per_tenant(value: float, n: int, digits: int = 4) -> float:
    return round(value / n, digits)
