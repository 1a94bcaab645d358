"""The `memflow` command line."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pipelines.run_gc import RUN_GC_THRESHOLD, run_gc_restore, run_gc_setup  # noqa: F401 (tests, bench)
from pipelines.shown import shown
from schemas.redaction.logs import install_log_redaction

# Nothing heavy at import: `memflow hook` and `memflow mcp` must start fast (polars, Dagster and
# the models load only in the commands that need them).
if TYPE_CHECKING:
    from resources.settings import Settings

SAMPLE_QUESTION = "which database does the payments service use?"


def _common(p: argparse.ArgumentParser, landing: bool = False) -> None:
    p.add_argument(
        "--data",
        help="data directory (default: the one the state home records, else <home>/data; "
        "`memflow settings` shows which)",
    )
    if landing:
        p.add_argument(
            "--landing",
            help="landing zone (default: the one the state home records, else <home>/landing)",
        )


DATA, LANDING = "MEMFLOW_DATA_DIR", "MEMFLOW_LANDING_DIR"


def _settings(
    args: argparse.Namespace,
    *,
    must_exist: tuple[str, ...] = (),
    create: tuple[str, ...] = (),
    create_default: tuple[str, ...] = (),
) -> Settings:
    """The one resolution of this command's settings (flags > env > .env > the state home's
    record > defaults). `must_exist`: paths the command only reads (a mistyped one is an error,
    never a new directory); `create`: paths it writes; `create_default`: paths it may create
    when they are the state home's own."""
    from pipelines.settings import SettingsError, resolve

    try:
        return resolve(
            {
                DATA: getattr(args, "data", None),
                LANDING: getattr(args, "landing", None),
                "MEMFLOW_API_KEYS_FILE": getattr(args, "keys", None),
            },
            must_exist=must_exist,
            create=create,
            create_default=create_default,
        )
    except SettingsError as exc:
        raise SystemExit(f"memflow: {shown(str(exc))}") from None


def _reads_data(args: argparse.Namespace) -> Settings:
    return _settings(args, must_exist=(DATA,))


def _writes_landing(cfg: Settings) -> Settings:
    """Refuse a landing zone inside a git work tree (the bundled sample, a checkout): agents'
    turns must never land where they could be committed."""
    from pipelines.settings import repository_of

    repo = repository_of(cfg.landing_dir)
    if repo is not None:
        raise SystemExit(
            f"memflow: the landing zone {shown(cfg.landing_dir)} holds files tracked by the git "
            f"work tree {shown(repo)}; memflow writes turns only outside one (the default is the "
            "state home's; --landing or MEMFLOW_LANDING_DIR name another)"
        )
    return cfg


def _scope(text: str):
    from schemas.scope import Scope, ScopeError

    try:
        return Scope.parse(text)
    except ScopeError as exc:
        raise SystemExit(f"memflow: {exc}") from exc


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, default=str, ensure_ascii=False))


def cmd_run(args: argparse.Namespace) -> int:
    before = run_gc_setup()
    try:
        return _run(args)
    finally:
        run_gc_restore(before)


def _run(args: argparse.Namespace) -> int:
    cfg = _settings(args, must_exist=(LANDING,), create=(DATA,))
    from pipelines.runner import SURVEY_TENANT, run_all, terminal_progress
    from pipelines.status import tenant_summaries
    from pipelines.status_text import format_summary
    from resources.tables import open_tables

    outcome = run_all(
        cfg["MEMFLOW_LANDING_DIR"],
        cfg["MEMFLOW_DATA_DIR"],
        progress=terminal_progress(),
        tenants=args.tenant or None,
        all_tenants=args.all,
    )
    for problem in outcome.problems:
        print(f"landing zone: {shown(problem)}", file=sys.stderr)
    if not outcome.tenants and not outcome.up_to_date:
        for failure in outcome.failures:  # the survey's
            print(shown(failure.line(outcome.dagster_home)))
        print(f"no tenants found under {shown(cfg['MEMFLOW_LANDING_DIR'])}", file=sys.stderr)
        return 1
    if not args.tenant:
        print(
            f"memflow run: {len(outcome.tenants)} tenant(s) with something to do, "
            f"{len(outcome.up_to_date)} up to date"
            + ("" if args.all else " (`memflow run --all` runs every tenant)"),
            file=sys.stderr,
        )
    if not outcome.tenants:
        for failure in outcome.failures:  # the survey's
            print(shown(failure.line(outcome.dagster_home)))
        print(
            f"memflow run: 0 tenant(s), {outcome.runs} run(s), {outcome.seconds:.2f} s "
            "(nothing to do: the survey ran with no tenant)"
        )
        if outcome.failures:
            return 1
        if args.question is not None:
            question = args.question or SAMPLE_QUESTION
            tenant = _scope(args.recall_tenant) if args.recall_tenant else outcome.up_to_date[0]
            return _recall_print(cfg, tenant, question, ranking="auto", as_of=None, as_json=False)
        return 0
    tables = open_tables(cfg)
    rows = tenant_summaries(tables, outcome.tenants)
    _attach_store_counts(rows, outcome.tenants, cfg)
    print(
        f"memflow run: {len(outcome.tenants)} tenant(s), {outcome.runs} run(s), "
        f"{outcome.seconds:.2f} s"
    )
    print(format_summary(rows))
    for failure in outcome.failures:
        print(shown(failure.line(outcome.dagster_home)))
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
    cfg = _reads_data(args)
    from resources.tables import open_tables

    scope = _scope(args.tenant)
    df = open_tables(cfg).read(asset, scope)
    if df is None:
        print(
            f"memflow: no {asset} stored for {shown(scope)} (run `memflow run` first)",
            file=sys.stderr,
        )
        return 1
    if args.limit < 0:
        raise SystemExit("memflow: --limit must be 0 or more (0: every row)")
    shown_rows = df if args.limit == 0 else df.head(args.limit)
    left_out = df.height - shown_rows.height
    if args.json:
        _print_json(shown_rows.to_dicts())
    else:
        import polars as pl

        printable = shown_rows.select([c for c in columns if c in df.columns]).with_columns(
            pl.col(c).map_elements(shown, return_dtype=pl.String)
            for c, t in shown_rows.schema.items()
            if c in columns and t == pl.String
        )
        with pl.Config(
            tbl_rows=max(printable.height, 1), tbl_cols=-1, fmt_str_lengths=60, tbl_width_chars=200
        ):
            print(printable)
        print(f"{df.height} rows")
    if left_out:
        # on stderr, so `--json` stays one JSON document
        print(
            f"memflow: {shown_rows.height} of {df.height} rows shown, {left_out} left out "
            "(--limit N, or --limit 0 for every row)",
            file=sys.stderr,
        )
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
    cfg = _reads_data(args)
    from pipelines.status import status

    tenants = [_scope(t) for t in args.tenant] if args.tenant else None
    if tenants is not None:
        from pipelines.status import known_tenants
        from resources.tables import open_tables

        known = set(known_tenants(open_tables(cfg)))
        unknown = [t.key for t in tenants if t not in known]
        if unknown:
            print(
                f"memflow: no table holds turns or facts of {shown(', '.join(unknown))}",
                file=sys.stderr,
            )
            return 1
    report = status(cfg, verify=args.verify, tenants=tenants, progress=_verify_progress())
    if args.json:
        _print_json(report)
    else:
        from pipelines.status_text import format_status

        print(format_status(report, every_tenant=args.all or tenants is not None))
    return 0


def _verify_progress(clock: Callable[[], float] | None = None) -> Callable[[int, int], None]:
    """Progress of a long verification on stderr (every 2 s at most, and the end once
    anything was printed), so stdout stays the report."""
    import time

    clock = clock or time.monotonic
    started = clock()
    last = [started, False]  # when last printed, whether anything was

    def progress(done: int, total: int) -> None:
        now = clock()
        if now - last[0] < 2.0 and not (done == total and last[1]):
            return
        last[:] = [now, True]
        print(
            f"memflow status: verified {done} of {total} tenants' stores ({now - started:.0f} s)",
            file=sys.stderr,
            flush=True,
        )

    return progress


def cmd_recall(args: argparse.Namespace) -> int:
    """The running system answers when it is up (MEMFLOW_API_URL, else the URL `memflow up`
    recorded, with MEMFLOW_API_KEY): no model or store loads here. Otherwise the stores are
    read in-process; `--ranking lexical` then loads no model."""
    import os

    from recall.client import ApiError, ApiUnreachable, ClientSettings, MemflowClient
    from resources.home import export_home

    scope = _scope(args.tenant)
    export_home(os.environ)
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
                print(f"memflow: {shown(exc)}", file=sys.stderr)
                return 1 if exc.status in (404, 409) else 2
            else:
                return _print_answer(answer, args.question, as_json=args.json)
    return _recall_print(
        _reads_data(args),
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
    cfg = _writes_landing(_settings(args, must_exist=(LANDING,), create_default=(LANDING,)))
    from memflow.importers.claude_code import import_claude_code
    from memflow.importers.codex import import_codex
    from memflow.importers.common import ImportSettings

    settings = ImportSettings.from_env(cfg.landing_dir)
    run = import_claude_code if args.agent == "claude-code" else import_codex
    report = run(args.paths, settings)
    if args.json:
        _print_json(report.as_dict())
    else:
        print(shown(report.summary()))
        for problem in report.errors:
            print(f"  {shown(problem)}", file=sys.stderr)
    return report.exit_code()  # what this input came to, not what was imported before


def _passthrough(argv: list[str]) -> int | None:
    """`memflow hook ...` and `memflow mcp ...` start light (no Dagster, no .env of the agent's
    project directory): they are dispatched before any settings are resolved, with the state
    home's paths and API URL in the environment where nothing else names them (an agent
    starts them in its project directory, where a relative path means nothing)."""
    if not argv or argv[0] not in ("hook", "mcp"):
        return None
    import os

    from resources.home import export_home

    export_home(os.environ)
    if argv[0] == "hook":
        from recall.hooks import main as hook_main

        return hook_main(argv[1:])
    from pipelines.mcp import main as mcp_main

    return mcp_main(argv[1:])


def _listen(args: argparse.Namespace) -> tuple[str, int]:
    """`--host`/`--port`, else the host and port of MEMFLOW_API_URL (the URL the clients use),
    else 127.0.0.1:8080."""
    from urllib.parse import urlsplit

    from resources.settings import client_env

    url = urlsplit(client_env().api_url)
    try:
        port = url.port
    except ValueError:
        port = None
    return args.host or url.hostname or "127.0.0.1", args.port or port or 8080


def cmd_serve(args: argparse.Namespace) -> int:
    from pathlib import Path

    from resources.settings import SETTINGS_FILE, env_path

    # The file SIGHUP re-reads: the deployment's MEMFLOW_SETTINGS_FILE, else the `.env` that
    # resolution reads (which then exports MEMFLOW_SETTINGS_FILE empty).
    settings_file = Path(env_path(SETTINGS_FILE) or ".env").absolute()
    cfg = _settings(args, must_exist=(DATA, LANDING), create_default=(DATA, LANDING))
    _writes_landing(cfg)
    host, port = _listen(args)
    from pipelines.erase import TenantEraser
    from pipelines.trigger import ingest_trigger
    from recall.server import serve

    serve(
        cfg,
        host,
        port,
        public_metrics=args.public_metrics,
        settings_file=settings_file,
        ingest_trigger=ingest_trigger(cfg, args.ingest, start_now=args.warm_now),
        eraser=TenantEraser(cfg),
    )
    return 0


def _keys_path(args: argparse.Namespace, *, create: bool = False) -> str:
    if getattr(args, "keys", None):
        return str(_settings(args).keys_file)
    # the default keys file is in the data directory: it must exist (`keys add` may create the
    # state home's own)
    policy = {"create_default": (DATA,)} if create else {}
    return str(_settings(args, must_exist=(DATA,), **policy).keys_file)


def cmd_keys_list(args: argparse.Namespace) -> int:
    from recall.auth import list_keys

    _print_json(list_keys(_keys_path(args)))
    return 0


def cmd_keys_remove(args: argparse.Namespace) -> int:
    from recall.auth import remove_key

    if not remove_key(_keys_path(args), args.key_id):
        print(f"memflow: no key {shown(args.key_id)}", file=sys.stderr)
        return 1
    return 0


def cmd_keys_add(args: argparse.Namespace) -> int:
    from recall.auth import add_key

    path = _keys_path(args, create=True)
    key = add_key(path, args.org, args.repos, metrics=args.metrics, admin=args.admin)
    print(key)
    print(f"stored its SHA-256 in {shown(path)}; the key is shown only once", file=sys.stderr)
    return 0


def cmd_migrate(args: argparse.Namespace) -> int:
    cfg = _reads_data(args)
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
    from pathlib import Path

    from resources.settings import SETTINGS_FILE, env_path

    # The file the code location (and a reloaded `memflow serve`) reads its models from: its
    # current and previous models are kept too. Read before resolution exports it empty.
    settings_file = Path(env_path(SETTINGS_FILE) or ".env").absolute()
    cfg = _reads_data(args)
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


def _serves(args: argparse.Namespace) -> Settings:
    """The paths `memflow up` and `memflow dev` start servers on: the state home's own are
    created; a named one that does not exist is an error (a typo), unless `--create`."""
    if args.create:
        return _settings(args, create=(DATA, LANDING))
    return _settings(args, must_exist=(DATA, LANDING), create_default=(DATA, LANDING))


def cmd_up(args: argparse.Namespace) -> int:
    from pipelines.up import UpOptions, up

    cfg = _serves(args)
    host, port = _listen(args)
    return up(
        cfg,
        UpOptions(
            host=host,
            api_port=port,
            ui_port=args.ui_port,
            public_metrics=args.public_metrics,
            settings_file=_explicit_settings_file(),
            ingest=args.ingest,
        ),
    )


def _dagster_options(p: argparse.ArgumentParser) -> None:
    """`memflow up`'s and `memflow dev`'s: the UI's port, and whether named paths are created."""
    p.add_argument("--ui-port", type=int, default=3000, help="the Dagster UI's port (3000)")
    p.add_argument(
        "--create",
        action="store_true",
        help="create a --data / --landing directory that does not exist (the state home's own "
        "are created without it)",
    )


def cmd_dev(args: argparse.Namespace) -> int:
    from pipelines.up import UpOptions, dev

    cfg = _serves(args)
    return dev(
        cfg,
        UpOptions(host=args.host or "127.0.0.1", ui_port=args.ui_port),
        settings_file=_explicit_settings_file() or _dotenv_settings_file(),
    )


def _explicit_settings_file() -> str:
    """MEMFLOW_SETTINGS_FILE as the user set it (read before resolution exports it empty),
    absolute; "" when it is not set."""
    from pathlib import Path

    from resources.settings import SETTINGS_FILE, env_path

    value = env_path(SETTINGS_FILE)
    return str(Path(value).expanduser().absolute()) if value else ""


def _dotenv_settings_file() -> str:
    """The working directory's `.env` (what `dagster dev` re-reads models from), if any."""
    from pathlib import Path

    path = Path(".env").absolute()
    return str(path) if path.is_file() else ""


def cmd_erase(args: argparse.Namespace) -> int:
    cfg = _writes_landing(_reads_data(args))  # never deletes files git tracks
    from pipelines.erase import erase_tenant, format_report

    scope = _scope(args.tenant)
    report = erase_tenant(cfg, scope, apply=args.yes, shared_runs=args.with_shared_runs)
    if args.json:
        _print_json(report.as_json())
    else:
        print(format_report(report, applied=args.yes))
    return 1 if report.problems else 0


def cmd_settings(args: argparse.Namespace) -> int:
    from resources.settings import configuration_table

    if args.markdown:
        print(configuration_table())
        return 0
    cfg = _settings(args)
    from pipelines.settings import describe

    if args.json:
        _print_json(describe(cfg))
    else:
        for row in describe(cfg):
            print(f"{row['name']:<34} {shown(row['value'])}   ({row['source']})")
    return 0


def _api_options(p: argparse.ArgumentParser) -> None:
    """Where the API listens and what a write does (`memflow serve` and `memflow up`)."""
    p.add_argument("--host", help="default: MEMFLOW_API_URL's host, else 127.0.0.1")
    p.add_argument("--port", type=int, help="the API's port (default: MEMFLOW_API_URL's, 8080)")
    p.add_argument("--public-metrics", action="store_true", help="serve /metrics without a key")
    p.add_argument(
        "--ingest",
        choices=("warm", "queue", "off"),
        default="warm",
        help="what a write does to ingest its tenant at once: `warm` runs it in a worker "
        "process of the API that keeps the pipeline loaded (default), `queue` submits it to "
        "the Dagster daemon's run queue, `off` leaves it to the landing sensor",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="memflow", description="Agent memory as a Dagster dataflow, with a recall API."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    _add_data_commands(sub)
    _add_server_commands(sub)
    _add_admin_commands(sub)
    _add_agent_commands(sub)
    _add_upkeep_commands(sub)
    from pipelines.tables_cli import add_parser as add_tables_parser

    add_tables_parser(sub, _common)
    return parser


_Subparsers = argparse._SubParsersAction


def _add_data_commands(sub: _Subparsers) -> None:
    """run, facts, rejects, status, recall: ingest and read a tenant's memory."""
    p = sub.add_parser("run", help="materialize every asset for every tenant found")
    _common(p, landing=True)
    p.add_argument("--tenant", action="append", help="only this ORG/REPO (repeatable)")
    p.add_argument(
        "--all",
        action="store_true",
        help="run every tenant (default: only those with a changed landing directory, never "
        "completed, or run under other models, code or settings)",
    )
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
    p.add_argument("--limit", type=int, default=50, help="rows shown (0: all); default 50")
    p.set_defaults(func=cmd_facts)

    p = sub.add_parser("rejects", help="print a tenant's quarantined rows and reasons")
    _common(p)
    p.add_argument("--tenant", required=True, help="ORG/REPO")
    p.add_argument("--json", action="store_true")
    p.add_argument("--limit", type=int, default=50, help="rows shown (0: all); default 50")
    p.set_defaults(func=cmd_rejects)

    p = sub.add_parser(
        "status",
        help="what runs; every tenant's balances, store counts and embedding coverage, those "
        "needing attention first",
    )
    _common(p)
    p.add_argument("--json", action="store_true", help="every tenant, as JSON")
    p.add_argument(
        "--verify",
        action="store_true",
        help="also compare every tenant's graph and vector store with its tables (ids and "
        "content; ~15 ms a tenant, progress on stderr)",
    )
    p.add_argument(
        "--tenant",
        action="append",
        help="only this ORG/REPO, in full, its stores verified (repeatable)",
    )
    p.add_argument("--all", action="store_true", help="print every tenant in full")
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("recall", help="answer a question from a tenant's memory")
    _common(p)
    p.add_argument("--tenant", required=True, help="ORG/REPO")
    p.add_argument("question")
    p.add_argument("--json", action="store_true")
    p.add_argument("--ranking", default="auto", help="auto | lexical | semantic | hybrid")
    p.add_argument("--as-of", help="ISO-8601 instant (default: now)")
    p.set_defaults(func=cmd_recall)


def _add_server_commands(sub: _Subparsers) -> None:
    """serve, up, dev: the long-running processes."""
    p = sub.add_parser("serve", help="run the recall HTTP API")
    _common(p, landing=True)
    _api_options(p)
    p.add_argument("--keys", help="API keys file (default <data>/api-keys.json)")
    p.add_argument(
        "--warm-now",
        action="store_true",
        help="start the warm worker (or load the queue trigger's pipeline) with the server, "
        "not at the first write (memflow up does)",
    )
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser(
        "up",
        help="bring memflow up: the recall API, the Dagster UI and daemon (landing sensor on), "
        "on one data directory and landing zone; Ctrl-C stops everything",
    )
    _common(p, landing=True)
    _api_options(p)
    _dagster_options(p)
    p.set_defaults(func=cmd_up)

    p = sub.add_parser(
        "dev",
        help="the Dagster UI and daemon (`dagster dev`) on the resolved data directory and "
        "landing zone",
    )
    _common(p, landing=True)
    p.add_argument("--host", help="default 127.0.0.1")
    _dagster_options(p)
    p.set_defaults(func=cmd_dev)


def _add_agent_commands(sub: _Subparsers) -> None:
    """import, mcp, hook: what coding agents call."""
    p = sub.add_parser("import", help="land agent transcripts (Claude Code, Codex) as turns")
    _common(p, landing=True)
    p.add_argument("agent", choices=["claude-code", "codex"])
    p.add_argument("paths", nargs="+", help="session files or folders")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_import)

    sub.add_parser("mcp", help="the MCP server (stdio; --http for streamable HTTP); see --help")
    sub.add_parser("hook", help="agent session hooks (session-start, pre-compact, session-end)")


def _add_admin_commands(sub: _Subparsers) -> None:
    """erase, settings, keys: a tenant's data, the settings, the API keys."""
    p = sub.add_parser(
        "erase",
        help="erase everything memflow holds for a tenant (a dry run that reports what would "
        "go, unless --yes)",
    )
    _common(p, landing=True)
    p.add_argument("--tenant", required=True, help="ORG/REPO")
    p.add_argument("--yes", action="store_true", help="erase (default: only report)")
    p.add_argument(
        "--with-shared-runs",
        action="store_true",
        help="also delete the Dagster runs that covered this tenant among others (their event "
        "logs hold its materializations; their history of the other tenants goes too)",
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_erase)

    p = sub.add_parser(
        "settings", help="every setting this command resolves, its value and where it came from"
    )
    _common(p, landing=True)
    p.add_argument("--json", action="store_true")
    p.add_argument(
        "--markdown", action="store_true", help="the README's configuration table, generated"
    )
    p.set_defaults(func=cmd_settings)

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


def _add_upkeep_commands(sub: _Subparsers) -> None:
    """migrate, vectors: the data directory's housekeeping."""
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
    from pipelines.vector_rebuild import add_parser as add_vectors_rebuild

    add_vectors_rebuild(vectors, _common, _settings, _scope)


def _interrupted_hook(previous: Callable[..., Any]) -> Callable[..., None]:
    """`sys.excepthook` for an interrupted command: one line for a plain Ctrl-C; any other
    exception, or a Ctrl-C that landed while an error was being handled (the error must not
    be hidden), goes to the hook that was there before."""

    def hook(kind: type[BaseException], error: BaseException, tb: Any) -> None:
        during = error.__cause__ or error.__context__
        if issubclass(kind, KeyboardInterrupt) and (
            during is None or isinstance(during, KeyboardInterrupt)
        ):
            print("memflow: interrupted", file=sys.stderr)
        else:
            previous(kind, error, tb)

    return hook


def main(argv: list[str] | None = None) -> int:
    install_log_redaction()
    argv = sys.argv[1:] if argv is None else argv
    direct = _passthrough(argv)
    if direct is not None:
        return direct
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        # Ctrl-C: one line instead of the traceback. Raised on, so that the interpreter still
        # runs its exit handlers and then ends by SIGINT: a shell or a supervisor sees an
        # interrupt (130 in a shell), not a failure.
        sys.excepthook = _interrupted_hook(sys.excepthook)
        raise
    except RuntimeError as exc:
        from resources.tables import LegacyTablesError  # only on this path: the CLI stays light

        if not isinstance(exc, LegacyTablesError):
            raise
        print(f"memflow: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
