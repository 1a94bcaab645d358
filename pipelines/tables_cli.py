"""`memflow tables`: the Delta tables as they stand or as they were (time travel).

    memflow tables                                    every table: version, rows, tenants, URI
    memflow tables --asset A --history                the versions of A: when, which run, tenants
    memflow tables --asset A --tenant ORG/REPO        a tenant's rows of A now
        [--version V | --as-of T | --run RUN_ID]      ... as they were after version V, at time
                                                      T, or after run RUN_ID's commit
    memflow tables --maintain [--retention-hours H]   compact, vacuum, checkpoint (the
                                                      table_maintenance job does the same)

Every materialization records the Delta version it committed (`delta_version` in the Dagster
UI); `--version` reads that state back. The same tables open in polars (`pl.scan_delta(URI)`)
and DuckDB (`delta_scan('URI')`) with no memflow code.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from datetime import datetime
from typing import Any

DEFAULT_LIMIT = 50


def add_parser(sub: Any, common: Any) -> None:
    """Register `memflow tables` on the CLI's subparsers (`common` adds --data)."""
    p = sub.add_parser("tables", help="the Delta tables: versions, history, time travel")
    common(p)
    p.add_argument("--asset", help="one table (an asset's name, e.g. validated_facts)")
    p.add_argument("--tenant", help="ORG/REPO: print this tenant's rows of --asset")
    when = p.add_mutually_exclusive_group()
    when.add_argument("--version", type=int, help="as the table was at this version")
    when.add_argument("--as-of", help="as the table was at this ISO-8601 time")
    when.add_argument("--run", help="as the table was after this Dagster run's commit")
    p.add_argument("--history", action="store_true", help="list --asset's versions")
    p.add_argument("--maintain", action="store_true", help="compact and vacuum every table")
    p.add_argument(
        "--retention-hours",
        type=int,
        help="--maintain: keep history readable this long (default: a week)",
    )
    p.add_argument("--limit", type=int, default=DEFAULT_LIMIT, help="rows or versions shown")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_tables)


def _fail(message: str) -> int:
    print(f"memflow tables: {message}", file=sys.stderr)
    return 1


def _out(value: Any, as_json: bool, text: str) -> None:
    print(json.dumps(value, indent=2, default=str, ensure_ascii=False) if as_json else text)


def cmd_tables(args: argparse.Namespace) -> int:
    from pipelines.settings import resolve
    from resources.tables import DEFAULT_RETENTION_HOURS, open_tables
    from schemas.tables import TABLES

    cfg = resolve({"MEMFLOW_DATA_DIR": getattr(args, "data", None)})
    store = open_tables(cfg)
    if args.maintain:
        hours = DEFAULT_RETENTION_HOURS if args.retention_hours is None else args.retention_hours
        rows = [asdict(m) for m in store.maintain(retention_hours=hours)]
        _out(rows, args.json, "\n".join(_maintenance_line(m) for m in rows) or "no tables")
        return 0
    if args.asset is not None and args.asset not in TABLES:
        return _fail(f"no table {args.asset!r} (tables: {', '.join(TABLES)})")
    if args.tenant is not None:
        if args.asset is None:
            return _fail("--tenant needs --asset")
        return _tenant_rows(store, args)
    if args.asset is not None and args.history:
        return _history(store, args)
    if args.version is not None or args.as_of or args.run:
        return _fail("--version, --as-of and --run read a tenant's rows: give --asset and --tenant")
    listing = [_table_line(store, asset) for asset in ([args.asset] if args.asset else TABLES)]
    _out(
        listing,
        args.json,
        "\n".join(
            f"{t['table']:<20} version {t['version'] if t['version'] is not None else '-':>5}  "
            f"{t['rows']:>8} rows  {t['tenants']:>5} tenants  {t['uri']}"
            for t in listing
        ),
    )
    return 0


def _maintenance_line(m: dict[str, Any]) -> str:
    return (
        f"{m['table']:<28} v{m['version_before']} -> v{m['version_after']}: "
        f"{m['files_compacted']} files compacted into {m['files_added']}, "
        f"{m['files_vacuumed']} vacuumed"
        + (f"; set {', '.join(m['properties_set'])}" if m.get("properties_set") else "")
    )


def _table_line(store: Any, asset: str) -> dict[str, Any]:
    return {
        "table": asset,
        "version": store.version(asset),
        "rows": store.total_rows(asset),
        "tenants": len(store.scopes(asset)),
        "uri": store.uri(asset),
    }


def _history(store: Any, args: argparse.Namespace) -> int:
    versions = store.history(args.asset, args.limit)
    if not versions:
        return _fail(f"{args.asset} has never been written ({store.uri(args.asset)})")
    rows = [asdict(v) for v in versions]
    lines = [
        f"v{r['version']:<5} {r['timestamp']:%Y-%m-%d %H:%M:%S} UTC  {r['operation']:<13} "
        f"run {r['run_id'] or '-'}  tenants {', '.join(r['tenants'] or []) or '-'}"
        for r in rows
    ]
    _out(rows, args.json, "\n".join(lines))
    return 0


def _run_version(store: Any, asset: str, run_id: str) -> int | None:
    """The version `run_id` committed to `asset` (its last commit there), from the log."""
    for entry in store.history(asset):
        if entry.run_id == run_id:
            return entry.version
    return None


def _tenant_rows(store: Any, args: argparse.Namespace) -> int:
    from schemas.scope import Scope, ScopeError

    try:
        scope = Scope.parse(args.tenant)
    except ScopeError as exc:
        return _fail(str(exc))
    version, as_of = args.version, None
    if args.run:
        version = _run_version(store, args.asset, args.run)
        if version is None:
            return _fail(f"run {args.run} committed nothing to {args.asset}")
    if args.as_of:
        try:
            as_of = datetime.fromisoformat(args.as_of.replace("Z", "+00:00"))
        except ValueError:
            return _fail(f"--as-of {args.as_of!r} is not an ISO-8601 time")
    try:
        df = store.read(args.asset, scope, version=version, as_of=as_of)
    except LookupError as exc:
        return _fail(str(exc))
    at = f"version {version}" if version is not None else (f"as of {as_of}" if as_of else "now")
    if df is None:
        return _fail(f"{scope} has no rows in {args.asset} ({at})")
    shown = df.head(args.limit)
    if args.json:
        _out({"table": args.asset, "tenant": scope.key, "at": at, "rows": df.height,
              "shown": shown.to_dicts()}, True, "")  # fmt: skip
        return 0
    print(f"{args.asset} [{scope}] {at}: {df.height} rows")
    for row in shown.iter_rows(named=True):
        print("  ".join(f"{k}={_cell(v)}" for k, v in row.items()))
    if df.height > shown.height:
        print(f"... {df.height - shown.height} more rows (--limit)")
    return 0


def _cell(value: Any, width: int = 40) -> str:
    """One value on one line: control characters escaped (a stored value cannot forge
    lines), long values cut."""
    text = "" if value is None else str(value)
    text = text.encode("unicode_escape").decode("ascii") if not text.isprintable() else text
    return text if len(text) <= width else text[: width - 1] + "…"
