"""Agent session hooks (Claude Code; Codex has the same events): recall at session start, import
the transcript before compaction and at the end.

    python -m recall.hooks session-start   < hook-input.json   # prints recalled facts
    python -m recall.hooks pre-compact     < hook-input.json   # imports the transcript
    python -m recall.hooks session-end     < hook-input.json   # (Codex: use "stop")

Input: the hook's JSON on stdin (``session_id``, ``transcript_path``, ``cwd``,
``hook_event_name``, ``source``...), at most 1 MiB. The exact configuration to paste is in
``docs/agents.md``.

``session-start``
    The tenant of ``cwd`` (`memflow.importers.tenant`, or ``--tenant`` / ``MEMFLOW_TENANT``) is
    asked one question (``MEMFLOW_HOOK_QUERY``, default: the repo name and "decisions conventions
    preferences dependencies") through the running API (`recall.client`: ``MEMFLOW_API_URL``,
    ``MEMFLOW_API_KEY``); when no server answers, names-only recall from the local stores
    (``MEMFLOW_DATA_DIR``, absolute paths only). When the local stores can answer, the API gets
    the budget less `FALLBACK_RESERVE_S`, so a server that accepts and never answers still
    leaves time for the local answer, and the fallback's imports run while the API is asked.
    Prints ``{"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext":
    ...}}`` (what Claude Code and Codex read): the first ``MEMFLOW_HOOK_MAX_FACTS`` facts
    (default 15) of the answer, in its order, at most ``MEMFLOW_HOOK_MAX_CHARS`` characters
    (default 4000), and how many more were recalled.
    Nothing when nothing was recalled.
``pre-compact``, ``session-end``, ``stop``
    Import ``transcript_path`` (Claude Code or Codex, detected) into ``MEMFLOW_LANDING_DIR`` (or
    ``--landing``; absolute paths only) with the importers: idempotent, so running it at every
    compaction, turn end and session end lands each turn once. A Codex rollout is read from where
    the last import of it stopped (`memflow.importers.offsets`). Prints nothing on stdout.

A hook never blocks the agent: everything runs under a budget (``MEMFLOW_HOOK_BUDGET_S``, default
2 s for session-start and 30 s for the imports; ``--budget`` overrides); past it, or on any
error, the hook prints nothing and exits 0. It prints only facts of the scope it asked for, and
only what the server or the stores answered (both hold redacted names only); an error the server
answers (an unknown key, a tenant the key does not cover) is never worked around. ``--verbose``
says on stderr why nothing was printed.

Start-up is kept light: this module, the client (`recall.client`, on ``http.client``), the tenant
mapping and the formatter import the standard library and `schemas` (redaction, with
detect-secrets: a tenant name is checked for secrets) and nothing heavier (checked by
``bench/bench_hooks.py`` with ``python -X importtime``); the recall service loads only on the
fallback, or while an API that has not answered within `WARM_AFTER_S` is waited for.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

EVENTS = ("session-start", "pre-compact", "session-end", "stop")
IMPORT_EVENTS = frozenset({"pre-compact", "session-end", "stop"})
DEFAULT_BUDGET_S = {"session-start": 2.0, "pre-compact": 30.0, "session-end": 30.0, "stop": 30.0}
DEFAULT_QUERY = "{repo} decisions conventions preferences dependencies"
MAX_STDIN_BYTES = 1 << 20
_MARGIN_S = 0.05
# Asked of the API: the answer's own first facts are what the hook shows (a smaller limit
# could select others), and the rest are counted.
ASK_FACTS = 40
# Kept back from the API's share of the budget when the local stores can answer instead (at
# least this, or this share of what is left): a names-only recall from the embedded graph
# loads the recall service: a whole hook process answering locally took 5 s at load 8 on the
# 2-core development machine, so the default 2 s budget only leaves it time on a quiet one.
FALLBACK_RESERVE_S = 1.0
FALLBACK_SHARE = 0.4


class Quiet(Exception):
    """Nothing to print; the reason is shown with --verbose only."""


def read_payload(stream: Any = None, limit: int = MAX_STDIN_BYTES) -> dict[str, Any]:
    """The hook's JSON object from stdin; `Quiet` when it is empty, too big or not an object."""
    stream = stream if stream is not None else sys.stdin.buffer
    data = stream.read(limit + 1)
    if len(data) > limit:
        raise Quiet(f"stdin is larger than {limit} bytes")
    if not data.strip():
        raise Quiet("stdin is empty")
    try:
        payload = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        raise Quiet("stdin is not JSON") from None
    if not isinstance(payload, dict):
        raise Quiet("stdin is not a JSON object")
    return payload


def _text(payload: Mapping[str, Any], key: str, limit: int = 4096) -> str | None:
    value = payload.get(key)
    if isinstance(value, str) and value.strip() and len(value) <= limit and "\x00" not in value:
        return value
    return None


# ------------------------------------------------------------------------------ session-start


def session_start(
    payload: Mapping[str, Any], env: Mapping[str, str], deadline: float, tenant: str | None = None
) -> str:
    """The hook's stdout: recalled facts for the working repository, or `Quiet`."""
    from memflow.importers.tenant import TenantMapper
    from recall.context import format_context
    from resources.settings import agent_env, hook_env
    from schemas.scope import Scope, ScopeError

    try:
        spelled = tenant or agent_env(env).tenant
        if spelled:
            scope = Scope.parse(spelled)
        else:
            cwd = _text(payload, "cwd") or os.getcwd()
            scope = TenantMapper.from_env(env).choose(cwd).scope
    except (ScopeError, ValueError) as exc:
        raise Quiet(f"no tenant: {exc}") from None
    settings = hook_env(env)
    query = settings.query.replace("{repo}", scope.ns)
    max_facts, max_chars = settings.max_facts, settings.max_chars
    answer, note = _recall(scope, query[:1000], ASK_FACTS, env, deadline)
    if answer.get("scope") != scope.key:
        raise Quiet("the answer is not for the working repository")
    facts = answer.get("facts") or []
    if not facts:
        raise Quiet(f"nothing recalled for {scope.key}")
    # The answer's first facts, in its order; the text says how many more were recalled (the
    # rest are one tool call away). The character budget may show fewer than max_facts: the
    # note counts what is shown, so it is formatted again when that differs.
    shown, text = min(len(facts), max_facts), ""
    for _ in range(3):
        notes = [note] if note else []
        if len(facts) > shown:
            at_least = "at least " if len(facts) >= ASK_FACTS else ""
            notes.append(
                f"these are the first {shown} facts recalled; {at_least}{len(facts) - shown} "
                "more were recalled: ask recall_context for them"
            )
        text = format_context(
            answer, max_chars=max_chars, max_facts=max_facts, note="; ".join(notes) or None
        )
        printed = sum(1 for line in text.splitlines() if line.startswith("- "))
        if printed == shown:
            break
        shown = printed
    output = {"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": text}}
    return json.dumps(output, ensure_ascii=False)


# The local fallback's imports (the recall service: pydantic models, bm25s, scipy) are most of
# its time (5 s of a loaded 2-core machine's wall clock, 1.3 s of CPU). When the API has not
# answered within WARM_AFTER_S (the hook's p95 target, issue 9) they start in the background, as
# that wait is on a socket, so a hanging API leaves the fallback only its own work; an API that
# answers in time never pays for them.
WARM_AFTER_S = 0.3
_warming: threading.Timer | None = None


def _warm_local_recall() -> threading.Timer:
    global _warming

    def target() -> None:
        try:
            import recall.service  # noqa: F401
            import resources.settings  # noqa: F401
        except Exception:  # the fallback reports its own failure
            pass

    _warming = threading.Timer(WARM_AFTER_S, target)
    _warming.name, _warming.daemon = "memflow-hook-warm", True
    _warming.start()
    return _warming


def _recall(
    scope: Any, query: str, limit: int, env: Mapping[str, str], deadline: float
) -> tuple[dict[str, Any], str | None]:
    from recall.client import (
        ApiError,
        ApiUnreachable,
        ClientSettings,
        LocalStores,
        MemflowClient,
        local_grant_allows,
        local_recall,
    )

    settings = ClientSettings.from_env(env)
    stores = LocalStores.from_env(env, require_absolute=True)
    note = "no API key is configured"
    if settings.key:
        with MemflowClient(settings) as api:
            try:
                remaining = deadline - time.monotonic() - _MARGIN_S
                if remaining <= 0:
                    raise Quiet("no time left")
                warming = None
                if stores is not None:  # keep time to answer locally when the API hangs
                    warming = _warm_local_recall()
                    reserve = max(FALLBACK_RESERVE_S, FALLBACK_SHARE * remaining)
                    remaining = max(min(remaining, 0.25), remaining - reserve)
                answer = api.recall(scope, query, limit=limit, timeout=remaining)
                if warming is not None:
                    warming.cancel()  # a no-op once the imports started
                return answer, None
            except ApiError as exc:
                raise Quiet(f"the server answered {exc.code}") from None
            except ApiUnreachable as exc:
                note = f"the memflow API is unreachable ({exc.kind})"
    if stores is None:
        raise Quiet(f"{note}, and MEMFLOW_DATA_DIR is not an absolute path")
    if not local_grant_allows(scope, settings, stores, env):
        raise Quiet("the key does not cover the working repository")
    try:
        answer = local_recall(stores, scope, query, limit=limit)
    except (OSError, ValueError) as exc:
        raise Quiet(f"{note}; local stores: {type(exc).__name__}") from None
    return answer, f"answered by names only from the local stores: {note}"


# ------------------------------------------------------------------------------------ imports


def import_transcript(
    payload: Mapping[str, Any], env: Mapping[str, str], landing: str | None = None
) -> str:
    """Import the hook's transcript into the landing zone; returns a one-line summary."""
    path = _text(payload, "transcript_path")
    if path is None:
        raise Quiet("no transcript_path")
    path = os.path.expanduser(path)
    if not os.path.isabs(path) or not path.endswith(".jsonl"):
        raise Quiet("transcript_path is not an absolute .jsonl path")
    if os.path.islink(path) or not os.path.isfile(path):
        raise Quiet("transcript_path is not a regular file")
    from resources.settings import local_env

    landing = landing or local_env(env).landing_dir
    if not landing or not os.path.isabs(landing):
        raise Quiet("MEMFLOW_LANDING_DIR (or --landing) is not an absolute path")
    from memflow.importers.common import ImportSettings
    from memflow.importers.tenant import TenantMapError

    try:
        settings = ImportSettings.from_env(landing, env)
    except TenantMapError as exc:
        raise Quiet(str(exc)) from None
    if is_codex_transcript(path):
        from memflow.importers.codex import import_codex

        # Codex's Stop hook runs after every turn: read only what is new since the last import.
        report = import_codex([path], dataclasses.replace(settings, incremental=True))
    else:
        from memflow.importers.claude_code import import_claude_code

        report = import_claude_code([path], settings)
    return report.summary()


def is_codex_transcript(path: str) -> bool:
    """Codex rollouts are named ``rollout-*.jsonl`` and start with a session header."""
    if os.path.basename(path).startswith("rollout-"):
        return True
    try:
        with open(path, "rb") as fh:
            head = fh.readline(1 << 16)
    except OSError:
        return False
    return b'"session_meta"' in head or (b'"instructions"' in head and b'"sessionId"' not in head)


# -------------------------------------------------------------------------------------- main


def _run_within(budget_s: float, work: Callable[[], str | None]) -> tuple[str | None, str | None]:
    """(output, why nothing) of `work` run in a daemon thread for at most `budget_s`."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["out"] = work()
        except Quiet as exc:
            box["why"] = str(exc)
        except BaseException as exc:  # a hook never fails the agent: report, print nothing
            box["why"] = f"failed: {type(exc).__name__}"

    thread = threading.Thread(target=target, name="memflow-hook", daemon=True)
    thread.start()
    thread.join(budget_s)
    if thread.is_alive():
        return None, f"over the budget of {budget_s:g} s"
    return box.get("out"), box.get("why")


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    """``memflow hook EVENT``: always exits 0; prints only a complete answer."""
    started = time.monotonic()
    env = os.environ if env is None else env
    parser = argparse.ArgumentParser(prog="memflow hook", add_help=True)
    parser.add_argument("event", choices=EVENTS)
    parser.add_argument("--budget", type=float, help="seconds at most (default per event)")
    parser.add_argument("--tenant", help="ORG/REPO instead of the working directory's tenant")
    parser.add_argument("--landing", help="landing zone for imports (absolute)")
    parser.add_argument("--verbose", action="store_true", help="say on stderr why nothing printed")
    try:
        args = parser.parse_args(argv)
    except SystemExit:
        return 0
    default = DEFAULT_BUDGET_S[args.event]
    from resources.settings import hook_env

    budget = args.budget or hook_env(env).budget_s or default
    deadline = started + budget

    def work() -> str | None:
        payload = read_payload()
        if args.event == "session-start":
            return session_start(payload, env, deadline, args.tenant)
        summary = import_transcript(payload, env, args.landing)
        if args.verbose:
            print(f"memflow hook {args.event}: {summary}", file=sys.stderr)
        return None

    out, why = _run_within(max(0.0, deadline - time.monotonic()), work)
    if out:
        try:
            sys.stdout.write(out + "\n")
            sys.stdout.flush()
        except (OSError, ValueError):  # the agent stopped reading: nothing more to do
            why = "stdout is closed"
    elif why and args.verbose:
        print(f"memflow hook {args.event}: nothing printed ({why})", file=sys.stderr)
    if (why and why.startswith("over the budget")) or (_warming and _warming.is_alive()):
        sys.stdout.flush()
        sys.stderr.flush()
        # the worker may be stuck in a read, the warm-up in an import: wait for neither
        os._exit(0)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
