"""Which Delta Lake layout for memflow's tables: measured side by side on the paths
BENCHMARKS.md measures, before the table store was moved onto Delta.

    python bench/bench_table_layout.py [--rounds 3] [--tenants 100,1000,3000]

Layouts (every one a Delta table written with `deltalake`, read with `polars.scan_delta`):

- ``tenant``: one table per asset, partitioned by ``tenant_id, ns``; a write replaces the
  partitions of the tenants it carries (one commit for a run's tenants); a tenant's table is
  rewritten whole.
- ``tenant_day``: per-day tables partitioned by ``tenant_id, ns, day``; a write replaces only
  the (tenant, day) partitions whose content changed, found by reading the tenant's stored days
  and comparing digests (the read is timed).
- ``unpartitioned``: one table per asset, no partitions; a write is an overwrite with the
  predicate ``tenant_id = .. AND ns = ..`` (delta-rs rewrites the files holding other rows).
- ``table_per_tenant``: one Delta table per (asset, tenant); a write is one commit per tenant.

Paths:

- ``run``: 40 tenants x 10 days x 40 rows (raw_turns' layout, ~480-character contents) written
  as one run writes them (every tenant of the run), then each tenant read back.
- ``newday``: in a table of 40 tenants, one tenant with H days of history (5, then 60) gains a
  day: read the tenant, add the day, write it. Target of the pipeline: 60 days <= 1.2x 5 days.
- ``scale``: a table holding N tenants (written in blocks of 200, one commit a block, as runs
  write them); one tenant's read + write of a new day (a one-tenant run), and a 200-tenant
  block's read + write. Target: the cost per tenant flat as N grows.

Results: bench/results/table_layout.json and a table on stdout (median of the rounds).
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import polars as pl
from deltalake import DeltaTable, write_deltalake

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from schemas.tables import RAW_TURNS, conform  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "table_layout.json"
START = datetime(2026, 6, 1, 9, 0, tzinfo=UTC)
LAYOUTS = ("tenant", "tenant_day", "unpartitioned", "table_per_tenant")
TEXT = ("the payments service retries idempotent requests with jittered backoff; " * 7)[:480]


def tenant_rows(org: str, repo: str, days: range, per_day: int = 40) -> pl.DataFrame:
    rows = []
    for d in days:
        day = (START + timedelta(days=d)).date().isoformat()
        for i in range(per_day):
            rows.append(
                {
                    "turn_key": f"{org}-{repo}-{d}-{i}",
                    "tenant_id": org,
                    "ns": repo,
                    "day": day,
                    "session_id": f"s{d}-{i // 10}",
                    "turn_id": str(i),
                    "ts": START + timedelta(days=d, minutes=i),
                    "role": "assistant",
                    "client": "claude-code",
                    "content": f"{TEXT[:400]} {d}-{i}",
                    "content_sha256": f"{d:04d}{i:04d}" * 8,
                    "redactions": 0,
                    "source_file": f"{d:04d}.jsonl",
                    "line_no": i + 1,
                }
            )
    return conform(pl.DataFrame(rows), RAW_TURNS)


def _sql(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _tenant_predicate(keys: list[tuple[str, str]]) -> str:
    return " OR ".join(f"(tenant_id = {_sql(o)} AND ns = {_sql(r)})" for o, r in keys)


def _digest(df: pl.DataFrame) -> tuple[int, int]:
    return df.height, int(df.hash_rows(seed=0).sum())


class Layout:
    """One layout: write a run's tenant frames, read one tenant."""

    def __init__(self, name: str, root: Path) -> None:
        self.name, self.root = name, root
        self._table: DeltaTable | None = None

    def _files(
        self, keys: list[tuple[str, str]]
    ) -> dict[tuple[str, str], list[tuple[str, str | None]]]:
        """The data files of each tenant, from one kept snapshot of the log brought up to date
        (what the table store does for the partitioned layouts)."""
        if self._table is None:
            self._table = DeltaTable(self._uri())
        else:
            self._table.update_incremental()
        adds = pl.DataFrame(self._table.get_add_actions(flatten=True))
        wanted = pl.DataFrame(keys, schema=["partition.tenant_id", "partition.ns"], orient="row")
        hits = adds.join(wanted, on=["partition.tenant_id", "partition.ns"])
        if "partition.day" not in hits.columns:
            hits = hits.with_columns(pl.lit(None, pl.String).alias("partition.day"))
        out: dict[tuple[str, str], list[tuple[str, str | None]]] = {}
        base = self._uri()
        for org, repo, day, path in hits.select(
            "partition.tenant_id", "partition.ns", "partition.day", "path"
        ).iter_rows():
            out.setdefault((org, repo), []).append((f"{base}/{path}", day))
        return out

    def _read_files(
        self, key: tuple[str, str], files: list[tuple[str, str | None]]
    ) -> pl.DataFrame:
        if files[0][1] is None:
            df = pl.read_parquet([f for f, _ in files])
        else:
            df = pl.concat([pl.read_parquet(f).with_columns(day=pl.lit(d)) for f, d in files])
        return df.with_columns(tenant_id=pl.lit(key[0]), ns=pl.lit(key[1])).select(list(RAW_TURNS))

    def _uri(self, key: tuple[str, str] | None = None) -> str:
        if self.name == "table_per_tenant":
            assert key is not None
            return str(self.root / "raw_turns" / key[0] / key[1])
        return str(self.root / "raw_turns")

    def write(self, frames: dict[tuple[str, str], pl.DataFrame]) -> None:
        if self.name == "table_per_tenant":
            for key, df in frames.items():
                write_deltalake(self._uri(key), df.to_arrow(), mode="overwrite")
            return
        if self.name == "tenant_day":
            self._write_changed_days(frames)
            return
        whole = pl.concat(list(frames.values()))
        uri = self._uri()
        partition = ["tenant_id", "ns"] if self.name == "tenant" else None
        if not DeltaTable.is_deltatable(uri):
            write_deltalake(uri, whole.to_arrow(), mode="overwrite", partition_by=partition)
            return
        write_deltalake(
            uri, whole.to_arrow(), mode="overwrite", predicate=_tenant_predicate(list(frames))
        )

    def _write_changed_days(self, frames: dict[tuple[str, str], pl.DataFrame]) -> None:
        uri = self._uri()
        if not DeltaTable.is_deltatable(uri):
            whole = pl.concat(list(frames.values()))
            write_deltalake(
                uri, whole.to_arrow(), mode="overwrite", partition_by=["tenant_id", "ns", "day"]
            )
            return
        changed: list[pl.DataFrame] = []
        clauses: list[str] = []
        stored = self.read_many(list(frames))
        for key, df in frames.items():
            old = stored.get(key)
            old_days = (
                {d: _digest(p) for (d,), p in old.partition_by("day", as_dict=True).items()}
                if old is not None and old.height
                else {}
            )
            for (day,), part in df.partition_by("day", as_dict=True).items():
                if old_days.get(day) != _digest(part):
                    changed.append(part)
                    clauses.append(
                        f"(tenant_id = {_sql(key[0])} AND ns = {_sql(key[1])} "
                        f"AND day = {_sql(day)})"
                    )
        if changed:
            write_deltalake(
                uri, pl.concat(changed).to_arrow(), mode="overwrite", predicate=" OR ".join(clauses)
            )

    def read(self, key: tuple[str, str]) -> pl.DataFrame:
        if self.name == "table_per_tenant":
            return pl.read_delta(self._uri(key))
        if self.name in ("tenant", "tenant_day"):
            return self._read_files(key, self._files([key])[key])
        return (
            pl.scan_delta(self._uri())
            .filter((pl.col("tenant_id") == key[0]) & (pl.col("ns") == key[1]))
            .collect()
        )

    def read_many(self, keys: list[tuple[str, str]]) -> dict[tuple[str, str], pl.DataFrame]:
        if self.name == "table_per_tenant":
            return {k: self.read(k) for k in keys}
        if self.name in ("tenant", "tenant_day"):
            files = self._files(keys)
            return {k: self._read_files(k, files[k]) for k in keys if k in files}
        orgs = sorted({o for o, _ in keys})
        repos = sorted({r for _, r in keys})
        df = (
            pl.scan_delta(self._uri())
            .filter(pl.col("tenant_id").is_in(orgs) & pl.col("ns").is_in(repos))
            .collect()
        )
        parts = df.partition_by("tenant_id", "ns", as_dict=True)
        return {k: parts[k] for k in keys if k in parts}


def timed(fn: Callable[[], Any]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def path_run(layout: str, base: Path) -> dict[str, float]:
    root = Path(tempfile.mkdtemp(dir=base))
    lay = Layout(layout, root)
    frames = {
        ("org", f"repo{t:02d}"): tenant_rows("org", f"repo{t:02d}", range(10)) for t in range(40)
    }
    write_s = timed(lambda: lay.write(frames))
    read_s = timed(lambda: [lay.read(k) for k in frames])
    again = {k: df.clone() for k, df in frames.items()}
    rewrite_s = timed(lambda: lay.write(again))  # an idempotent re-run writes the same
    shutil.rmtree(root)
    return {"write_40": write_s, "read_40": read_s, "rewrite_40": rewrite_s}


def path_newday(layout: str, base: Path, history: int) -> float:
    root = Path(tempfile.mkdtemp(dir=base))
    lay = Layout(layout, root)
    frames = {
        ("org", f"repo{t:02d}"): tenant_rows("org", f"repo{t:02d}", range(5)) for t in range(39)
    }
    frames[("org", "big")] = tenant_rows("org", "big", range(history))
    lay.write(frames)
    key = ("org", "big")

    def new_day() -> None:
        old = lay.read(key)
        new = pl.concat([old, tenant_rows("org", "big", range(history, history + 1))])
        lay.write({key: new})

    spent = timed(new_day)
    shutil.rmtree(root)
    return spent


def path_scale(layout: str, base: Path, tenants: int) -> dict[str, float]:
    root = Path(tempfile.mkdtemp(dir=base))
    lay = Layout(layout, root)
    keys = [(f"org{t // 50}", f"repo{t % 50}") for t in range(tenants)]
    for start in range(0, tenants, 200):
        block = {k: tenant_rows(*k, range(2), per_day=10) for k in keys[start : start + 200]}
        lay.write(block)
    one = keys[tenants // 2]

    def one_tenant() -> None:
        old = lay.read(one)
        lay.write({one: pl.concat([old, tenant_rows(*one, range(2, 3), per_day=10)])})

    block_keys = keys[:200]

    def block() -> None:
        olds = lay.read_many(block_keys)
        lay.write(
            {k: pl.concat([olds[k], tenant_rows(*k, range(3, 4), per_day=10)]) for k in block_keys}
        )

    out = {"one_tenant": timed(one_tenant), "block_200": timed(block)}
    shutil.rmtree(root)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tenants", default="100,1000,3000")
    parser.add_argument("--layouts", default=",".join(LAYOUTS))
    args = parser.parse_args(argv)
    layouts = [x for x in args.layouts.split(",") if x]
    sizes = [int(x) for x in args.tenants.split(",") if x]
    base = Path(tempfile.mkdtemp(prefix="memflow-layout-"))
    raw: dict[str, dict[str, list[float]]] = {lay: {} for lay in layouts}
    try:
        for r in range(args.rounds):
            order = layouts if r % 2 == 0 else list(reversed(layouts))
            for lay in order:
                got = raw[lay]
                for k, v in path_run(lay, base).items():
                    got.setdefault(k, []).append(v)
                for h in (5, 60):
                    got.setdefault(f"newday_{h}", []).append(path_newday(lay, base, h))
                for n in sizes:
                    for k, v in path_scale(lay, base, n).items():
                        got.setdefault(f"{k}@{n}", []).append(v)
                print(f"round {r} {lay} done", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    medians = {lay: {k: statistics.median(v) for k, v in got.items()} for lay, got in raw.items()}
    for m in medians.values():
        m["newday_ratio"] = m["newday_60"] / m["newday_5"]
    names = list(next(iter(medians.values())))
    print(f"{'path (median s)':<22}" + "".join(f"{lay:>18}" for lay in layouts))
    for name in names:
        print(f"{name:<22}" + "".join(f"{medians[lay][name]:>18.4f}" for lay in layouts))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "when": datetime.now(UTC).isoformat(timespec="seconds"),
                "machine": {"python": platform.python_version(), "polars": pl.__version__},
                "rounds": args.rounds,
                "medians": medians,
                "raw": raw,
            },
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
