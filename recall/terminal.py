"""`memflow recall --tenant ORG/REPO "question"`: one answer, read from the stores directly.

No HTTP and no key: whoever can read the data directory can read every tenant. The answer is
printed readably (facts with validity and provenance, entry entities with how they were found,
mode, warnings, timings and the notice) or as the API's JSON (`--json`).
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from typing import TextIO

from recall.answers import RANKINGS, RecallAnswer, RecalledFact, RecallError, SemanticUnavailable
from resources.settings import Settings
from schemas.scope import Scope


def parse_as_of(value: datetime | str | None) -> datetime | None:
    """An ISO-8601 instant (``Z`` or an offset; none means UTC), or None for now."""
    if value is None or isinstance(value, datetime):
        return value
    text = value.strip()
    if not text:
        return None
    parsed = datetime.fromisoformat(text.replace("z", "Z"))
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def recall_once(
    cfg: Settings,
    scope: Scope,
    question: str,
    *,
    ranking: str = "auto",
    as_of: datetime | str | None = None,
    as_json: bool = False,
    out: TextIO | None = None,
) -> int:
    """Answer `question` for `scope` and print it. Exit status: 0 answered, 1 nothing stored
    for the tenant or semantic ranking unavailable, 2 bad arguments."""
    from recall.build import build_service  # not recall.server: no web stack to import

    out = out or sys.stdout
    if ranking not in RANKINGS:
        print(f"memflow: --ranking must be one of {', '.join(RANKINGS)}", file=sys.stderr)
        return 2
    try:
        when = parse_as_of(as_of)
    except ValueError:
        print(f"memflow: --as-of {as_of!r} is not an ISO-8601 time", file=sys.stderr)
        return 2
    # lexical ranking reads the graph only: no model loads (a few hundred ms, not seconds)
    built = build_service(cfg, names_only=ranking == "lexical")
    try:
        counts = built.service.graph.counts(scope)
        if not counts["entities"] and not counts["facts"]:
            print(f"memflow: nothing stored for {scope} (run `memflow run` first)", file=sys.stderr)
            return 1
        try:
            answer = built.service.recall(scope, question, ranking=ranking, as_of=when)  # type: ignore[arg-type]
        except SemanticUnavailable as exc:
            print(
                f"memflow: semantic ranking unavailable ({exc.reason}); "
                "use --ranking auto or lexical",
                file=sys.stderr,
            )
            return 1
        except RecallError as exc:
            print(f"memflow: {exc}", file=sys.stderr)
            return 2
    finally:
        built.close()
    if as_json:
        print(answer.model_dump_json(indent=2), file=out)
    else:
        print(format_answer(answer, question), file=out)
    return 0


def _day(t: datetime | None) -> str:
    if t is None:
        return "open"
    return t.astimezone(UTC).strftime("%Y-%m-%d %H:%M")


def _fact_lines(n: int, f: RecalledFact) -> list[str]:
    hop = f"hop {f.hop}" if f.hop else "outside the neighbourhood"
    p = f.provenance
    lines = [
        f"{n:>3}. {f.subject} {f.predicate} {f.object}",
        f"     confidence {f.confidence:.2f}, valid {_day(f.valid_from)} -> {_day(f.valid_to)}, "
        f"{hop}, {f.fact_id}",
        f"     from {p.client} session {p.session_id} turn {p.turn_id} (model {p.model})",
    ]
    later = [s for s in p.sources if (s.session_id, s.turn_id) != (p.session_id, p.turn_id)]
    if later:
        shown = ", ".join(f"{s.session_id} {s.turn_id}" for s in later[:3])
        more = f" and {len(later) - 3} more" if len(later) > 3 else ""
        lines.append(f"     also stated in {shown}{more}")
    if f.contradicts:
        lines.append(f"     contradicts {', '.join(f.contradicts)}")
    return lines


def format_answer(answer: RecallAnswer, question: str) -> str:
    model = f" ({answer.embedding_model})" if answer.embedding_model else ""
    lines = [
        f"{answer.scope}: {question!r}",
        f"mode {answer.mode}{model}, ranking {answer.ranking}, as of {_day(answer.as_of)} UTC",
    ]
    if answer.skipped:
        lines.append(f"skipped: {answer.skip_reason} (the question asks the memory nothing)")
    if answer.entities:
        lines.append("")
        lines.append("entry entities:")
        for e in answer.entities:
            ranks = ", ".join(f"{leg} #{rank}" for leg, rank in sorted(e.ranks.items()))
            lines.append(f"  - {e.name}  via {e.via} ({ranks})  {e.entity_id}")
    lines.append("")
    if answer.facts:
        lines.append(f"facts ({len(answer.facts)}):")
        for n, f in enumerate(answer.facts, start=1):
            lines.extend(_fact_lines(n, f))
    elif not answer.skipped:
        lines.append("no facts found")
    for w in answer.warnings:
        lines.append(f"warning [{w.code}]: {w.message}")
    t = answer.timings_ms
    stages = ("gate", "lexical", "embed", "vector", "fuse", "expand", "select")
    lines.append(
        "timings ms: "
        + ", ".join(f"{s} {getattr(t, s):.2f}" for s in stages if getattr(t, s))
        + f", total {t.total:.2f}"
    )
    lines.append("")
    lines.append(f"notice: {answer.notice}")
    return "\n".join(lines)
