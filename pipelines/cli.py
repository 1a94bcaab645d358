"""The `memflow` command line."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from schemas.redaction.logs import install_log_redaction

# Nothing heavy at import: `memflow hook` and `memflow mcp` must start fast (polars, Dagster and
# the models load only in the commands that need them).
if TYPE_CHECKING:
    from resources.settings import Settings

SAMPLE_QUESTION = "which database does the payments service use?"


def _common(p: argparse.ArgumentParser, landing: bool = False) -> None:
    p.add_argument("--data", help="data directory (default ./.memflow or $MEMFLOW_DATA_DIR)")
    if landing:
        p.add_argument("--landing", help="landing zone (default ./landing-sample)")


def _settings(args: argparse.Namespace) -> Settings:
    """The one resolution of this command's settings (flags > env > .env > defaults)."""
    from pipelines.settings import resolve

    return resolve(
        {
            "MEMFLOW_DATA_DIR": getattr(args, "data", None),
            "MEMFLOW_LANDING_DIR": getattr(args, "landing", None),
            "MEMFLOW_API_KEYS_FILE": getattr(args, "keys", None),
        }
    )


def _scope(text: str):
    from schemas.scope import Scope, ScopeError

    try:
        return Scope.parse(text)
    except ScopeError as exc:
        raise SystemExit(f"memflow: {exc}") from exc


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, default=str, ensure_ascii=False))


# `memflow run` is a batch process that builds millions of short-lived objects (rows, hashes,
# events): with Python's default first threshold (700 allocations) the collector ran ~900
# times and scanned the whole heap 5 times in a 40-tenant run, ~0.5 s of its ~9 s
# (bench/bench_ingest_scale.py). Collecting young objects less often keeps cycles collected
# and the peak memory the same.
RUN_GC_THRESHOLD = (50_000, 20, 20)


def cmd_run(args: argparse.Namespace) -> int:
    import gc

    before = gc.get_threshold()
    gc.set_threshold(*RUN_GC_THRESHOLD)
    try:
        return _run(args)
    finally:
        gc.set_threshold(*before)


def _run(args: argparse.Namespace) -> int:
    cfg = _settings(args)
    from pipelines.runner import SURVEY_TENANT, run_all, terminal_progress
    from pipelines.status import format_summary, tenant_summaries
    from resources.tables import TableStore

    outcome = run_all(
        cfg["MEMFLOW_LANDING_DIR"],
        cfg["MEMFLOW_DATA_DIR"],
        progress=terminal_progress(),
        tenants=args.tenant or None,
    )
    for problem in outcome.problems:
        print(f"landing zone: {problem}", file=sys.stderr)
    if not outcome.tenants:
        for failure in outcome.failures:  # the survey's
            print(failure.line(outcome.dagster_home))
        print(f"no tenants found under {cfg['MEMFLOW_LANDING_DIR']}", file=sys.stderr)
        return 1
    tables = TableStore(cfg["MEMFLOW_DATA_DIR"])
    rows = tenant_summaries(tables, outcome.tenants)
    _attach_store_counts(rows, outcome.tenants, cfg)
    print(
        f"memflow run: {len(outcome.tenants)} tenant(s), {outcome.runs} run(s), "
        f"{outcome.seconds:.2f} s"
    )
    print(format_summary(rows))
    for failure in outcome.failures:
        print(failure.line(outcome.dagster_home))
    tenants = [f for f in outcome.failures if f.tenant != SURVEY_TENANT]
    if tenants:
        print(
            f"memflow run: {len(tenants)} tenant(s) failed; every other tenant landed",
            file=sys.stderr,
        )
    if len(tenants) < len(outcome.failures):
        print(
            "memflow run: a survey step failed (the models' observation or the landing "
            "survey); the tenants' assets ran without it",
            file=sys.stderr,
        )
    if outcome.failures:
        return 1
    if args.question is not None:
        question = args.question or SAMPLE_QUESTION
        tenant = _scope(args.recall_tenant) if args.recall_tenant else outcome.tenants[0]
        return _recall_print(cfg, tenant, question, ranking="auto", as_of=None, as_json=False)
    return 0


def _attach_store_counts(rows: list[dict], scopes: list, cfg: Settings) -> None:
    from pipelines.status import store_counts

    counts = store_counts(scopes, cfg)
    for row in rows:
        row.update(counts.get(row["tenant"], {}))


def _recall_print(
    cfg: Settings, scope, question: str, *, ranking: str, as_of, as_json: bool
) -> int:
    try:
        from recall.terminal import recall_once
    except ImportError as exc:  # recall service not installed in this build
        print(f"memflow: recall unavailable: {exc}", file=sys.stderr)
        return 1
    return recall_once(cfg, scope, question, ranking=ranking, as_of=as_of, as_json=as_json)


def cmd_table(args: argparse.Namespace, asset: str, columns: list[str]) -> int:
    cfg = _settings(args)
    from resources.tables import TableStore

    scope = _scope(args.tenant)
    df = TableStore(cfg["MEMFLOW_DATA_DIR"]).read(asset, scope)
    if df is None:
        print(f"memflow: no {asset} stored for {scope} (run `memflow run` first)", file=sys.stderr)
        return 1
    if args.json:
        _print_json(df.to_dicts())
        return 0
    import polars as pl

    with pl.Config(tbl_rows=args.limit, tbl_cols=-1, fmt_str_lengths=60, tbl_width_chars=200):
        print(df.select([c for c in columns if c in df.columns]).head(args.limit))
    print(f"{df.height} rows")
    return 0


FACT_COLUMNS = [
    "subject",
    "predicate",
    "object",
    "confidence",
    "valid_from",
    "valid_to",
    "source",
    "session_id",
    "turn_id",
]
REJECT_COLUMNS = ["stage", "reason", "severity", "detail", "source_file", "line_no", "turn_id"]


def cmd_facts(args: argparse.Namespace) -> int:
    from schemas.tables import Asset

    return cmd_table(args, Asset.VALIDATED_FACTS, FACT_COLUMNS)


def cmd_rejects(args: argparse.Namespace) -> int:
    from schemas.tables import Asset

    return cmd_table(args, Asset.QUARANTINE, REJECT_COLUMNS)


def cmd_status(args: argparse.Namespace) -> int:
    cfg = _settings(args)
    from pipelines.status import status

    report = status(cfg)
    if args.json:
        _print_json(report)
    else:
        from pipelines.status import format_status

        print(format_status(report))
    return 0


def cmd_recall(args: argparse.Namespace) -> int:
    """A running `memflow serve` answers when one does (MEMFLOW_API_URL, MEMFLOW_API_KEY): no
    model or store loads here. Otherwise the stores are read in-process."""
    from recall.client import ApiError, ApiUnreachable, ClientSettings, MemflowClient

    scope = _scope(args.tenant)
    client_settings = ClientSettings.from_env()
    if client_settings.key and not args.data:
        with MemflowClient(client_settings) as client:
            try:
                answer = client.recall(
                    scope, args.question, ranking=args.ranking, as_of=args.as_of or None
                )
            except ApiUnreachable:
                pass  # no server: answer in-process below
            except ApiError as exc:
                print(f"memflow: {exc}", file=sys.stderr)
                return 1 if exc.status in (404, 409) else 2
            else:
                return _print_answer(answer, args.question, as_json=args.json)
    return _recall_print(
        _settings(args),
        scope,
        args.question,
        ranking=args.ranking,
        as_of=args.as_of,
        as_json=args.json,
    )


def _print_answer(answer: dict[str, Any], question: str, *, as_json: bool) -> int:
    if as_json:
        _print_json(answer)
        return 0
    from recall.answers import RecallAnswer
    from recall.terminal import format_answer

    print(format_answer(RecallAnswer.model_validate(answer), question))
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    cfg = _settings(args)
    from memflow.importers.claude_code import import_claude_code
    from memflow.importers.codex import import_codex
    from memflow.importers.common import ImportSettings

    settings = ImportSettings.from_env(cfg.landing_dir)
    run = import_claude_code if args.agent == "claude-code" else import_codex
    report = run(args.paths, settings)
    if args.json:
        _print_json(report.as_dict())
    else:
        print(report.summary())
        for problem in report.errors:
            print(f"  {problem}", file=sys.stderr)
    return report.exit_code()  # what this input came to, not what was imported before


def _passthrough(argv: list[str]) -> int | None:
    """`memflow hook ...` and `memflow mcp ...` start light (no Dagster, no .env of the agent's
    project directory): they are dispatched before any settings are resolved."""
    if argv and argv[0] == "hook":
        from recall.hooks import main as hook_main

        return hook_main(argv[1:])
    if argv and argv[0] == "mcp":
        from recall.mcp_server import main as mcp_main

        return mcp_main(argv[1:])
    return None


def cmd_serve(args: argparse.Namespace) -> int:
    import os
    from pathlib import Path

    # The file SIGHUP re-reads: the deployment's MEMFLOW_SETTINGS_FILE, else the `.env` that
    # resolution reads (which then exports MEMFLOW_SETTINGS_FILE empty).
    settings_file = Path(os.environ.get("MEMFLOW_SETTINGS_FILE") or ".env").absolute()
    cfg = _settings(args)
    from recall.server import serve

    serve(
        cfg,
        args.host,
        args.port,
        public_metrics=args.public_metrics,
        settings_file=settings_file,
    )
    return 0


def _keys_path(args: argparse.Namespace) -> str:
    return str(_settings(args).keys_file)


def cmd_keys_list(args: argparse.Namespace) -> int:
    from recall.auth import list_keys

    _print_json(list_keys(_keys_path(args)))
    return 0


def cmd_keys_remove(args: argparse.Namespace) -> int:
    from recall.auth import remove_key

    if not remove_key(_keys_path(args), args.key_id):
        print(f"memflow: no key {args.key_id}", file=sys.stderr)
        return 1
    return 0


def cmd_keys_add(args: argparse.Namespace) -> int:
    from recall.auth import add_key

    path = _keys_path(args)
    key = add_key(path, args.org, args.repos, metrics=args.metrics, admin=args.admin)
    print(key)
    print(f"stored its SHA-256 in {path}; the key is shown only once", file=sys.stderr)
    return 0


def cmd_migrate(args: argparse.Namespace) -> int:
    cfg = _settings(args)
    from pipelines.migrate import migrate
    from pipelines.runner import instance_for, quiet_dagster

    quiet_dagster()
    with instance_for(cfg["MEMFLOW_DATA_DIR"]) as instance:
        report = migrate(
            cfg["MEMFLOW_DATA_DIR"],
            extraction_identity=args.extraction_identity,
            instance=instance,
        )
    print("\n".join(report.lines()))
    return 0


def cmd_vectors_prune(args: argparse.Namespace) -> int:
    import os
    from pathlib import Path

    # The file the code location (and a reloaded `memflow serve`) reads its models from: its
    # current and previous models are kept too. Read before resolution exports it empty.
    settings_file = Path(os.environ.get("MEMFLOW_SETTINGS_FILE") or ".env").absolute()
    cfg = _settings(args)
    from pipelines.vector_prune import PruneRefused, prune_vectors

    tenants = [_scope(t) for t in args.tenant or []]
    try:
        report = prune_vectors(
            cfg,
            tenants=tenants,
            keep=args.keep or [],
            apply=args.apply,
            settings_file=settings_file,
        )
    except PruneRefused as exc:
        print(f"memflow: {exc}", file=sys.stderr)
        return 2
    print("\n".join(report.lines()))
    return 1 if report.failed else 0


def cmd_stop(args: argparse.Namespace) -> int:
    cfg = _settings(args)
    from resources.vector.lite_server import stop_lite_server

    stopped = stop_lite_server(cfg["MEMFLOW_DATA_DIR"])
    print("stopped the Milvus Lite server" if stopped else "no Milvus Lite server was running")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="memflow", description="Agent memory as a Dagster dataflow, with a recall API."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("run", help="materialize every asset for every tenant found")
    _common(p, landing=True)
    p.add_argument("--tenant", action="append", help="only this ORG/REPO (repeatable)")
    p.add_argument(
        "--recall",
        dest="question",
        nargs="?",
        const="",
        default=None,
        help="then answer a question (default: a sample question)",
    )
    p.add_argument("--recall-tenant", help="tenant for --recall (default: the first)")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("facts", help="print a tenant's validated facts")
    _common(p)
    p.add_argument("--tenant", required=True, help="ORG/REPO")
    p.add_argument("--json", action="store_true")
    p.add_argument("--limit", type=int, default=50)
    p.set_defaults(func=cmd_facts)

    p = sub.add_parser("rejects", help="print a tenant's quarantined rows and reasons")
    _common(p)
    p.add_argument("--tenant", required=True, help="ORG/REPO")
    p.add_argument("--json", action="store_true")
    p.add_argument("--limit", type=int, default=50)
    p.set_defaults(func=cmd_rejects)

    p = sub.add_parser("status", help="tables, stores and embedding coverage per tenant")
    _common(p)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("recall", help="answer a question from a tenant's memory")
    _common(p)
    p.add_argument("--tenant", required=True, help="ORG/REPO")
    p.add_argument("question")
    p.add_argument("--json", action="store_true")
    p.add_argument("--ranking", default="auto", help="auto | lexical | semantic | hybrid")
    p.add_argument("--as-of", help="ISO-8601 instant (default: now)")
    p.set_defaults(func=cmd_recall)

    p = sub.add_parser("serve", help="run the recall HTTP API")
    _common(p, landing=True)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8080)
    p.add_argument("--keys", help="API keys file (default <data>/api-keys.json)")
    p.add_argument("--public-metrics", action="store_true", help="serve /metrics without a key")
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("keys", help="manage API keys")
    keys = p.add_subparsers(dest="keys_command", required=True)
    k = keys.add_parser("add", help="create a bearer key for an org's repos; prints it once")
    _common(k)
    k.add_argument("--org", required=True)
    k.add_argument("--repos", default="*", help="comma-separated repos, or * (default)")
    k.add_argument("--metrics", action="store_true", help="may read /metrics")
    k.add_argument("--admin", action="store_true", help="may erase the tenants it covers")
    k.add_argument("--keys", help="API keys file")
    k.set_defaults(func=cmd_keys_add)
    k = keys.add_parser("list", help="key ids with their scopes (never the keys)")
    _common(k)
    k.add_argument("--keys", help="API keys file")
    k.set_defaults(func=cmd_keys_list)
    k = keys.add_parser("remove", help="revoke a key by id")
    _common(k)
    k.add_argument("key_id")
    k.add_argument("--keys", help="API keys file")
    k.set_defaults(func=cmd_keys_remove)

    p = sub.add_parser("import", help="land agent transcripts (Claude Code, Codex) as turns")
    _common(p, landing=True)
    p.add_argument("agent", choices=["claude-code", "codex"])
    p.add_argument("paths", nargs="+", help="session files or folders")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_import)

    sub.add_parser("mcp", help="the MCP server (stdio; --http for streamable HTTP); see --help")
    sub.add_parser("hook", help="agent session hooks (session-start, pre-compact, session-end)")

    p = sub.add_parser(
        "migrate",
        help="migrate a data directory and Dagster instance of the tenant x day design",
    )
    _common(p)
    p.add_argument(
        "--extraction-identity",
        help="the extractor the old runs used (default: the instance's last extraction_model "
        "observation, else the configured extractor)",
    )
    p.set_defaults(func=cmd_migrate)

    p = sub.add_parser("vectors", help="vector store housekeeping")
    vectors = p.add_subparsers(dest="vectors_command", required=True)
    v = vectors.add_parser(
        "prune",
        help="remove the vectors of embedding models recall no longer serves (a dry run "
        "unless --apply)",
    )
    _common(v)
    v.add_argument("--tenant", action="append", help="only this ORG/REPO (repeatable)")
    v.add_argument("--keep", action="append", help="also keep this model (repeatable)")
    v.add_argument("--apply", action="store_true", help="delete (default: only report)")
    v.set_defaults(func=cmd_vectors_prune)

    p = sub.add_parser("stop", help="stop the Milvus Lite server memflow supervises")
    _common(p)
    p.set_defaults(func=cmd_stop)
    return parser


def main(argv: list[str] | None = None) -> int:
    install_log_redaction()
    argv = sys.argv[1:] if argv is None else argv
    direct = _passthrough(argv)
    if direct is not None:
        return direct
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
