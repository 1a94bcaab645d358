"""How `memflow status` and the run summary print (`pipelines.status` builds the reports).

`memflow status` prints the system, the totals over every tenant, then the tenants that need
attention in full; every tenant only while there are few of them (`LIST_ALL_UP_TO`) or with
`--all`. A store that was not compared with its tables says "not verified", never "yes".
"""

from __future__ import annotations

from typing import Any

from pipelines.shown import shown

LIST_ALL_UP_TO = 20  # more tenants than this: the totals and those needing attention
ATTENTION_SHOWN = 50  # tenants needing attention printed in full; --json or --all for more


def format_summary(rows: list[dict[str, Any]]) -> str:
    lines = [
        f"{'tenant':<28} {'lines':>6} {'turns':>6} {'triples':>8} {'facts':>6} {'entities':>8} "
        f"{'rejects':>8}"
    ]
    for r in rows:
        lines.append(
            f"{r['tenant']:<28} {r['lines_in']:>6} {r['turns']:>6} {r['triples']:>8} "
            f"{r['facts']:>6} {r['entities']:>8} {r['rejects']:>8}"
        )
        if not r["lines_accounted"]:
            lines.append(
                f"    NOT ACCOUNTED: {r['lines_in']} lines read, but {r['turns']} turns + "
                f"{r['landing_rejects']} landing rejects"
            )
        if not r["triples_accounted"]:
            b = r["triples_balance"]
            lines.append(
                f"    NOT ACCOUNTED: {b['triples_in']} triples in, but {b['facts_stored']} + "
                f"{b['facts_new']} facts + {b['merged']} merged + {b['rejects']} rejects"
            )
        lines.extend(_reasons(r, "    "))
        for key in ("graph", "vectors"):
            if key in r:
                lines.append(f"    {key}: {r[key]}")
    return "\n".join(lines)


def _reasons(acc: dict[str, Any], indent: str) -> list[str]:
    lines = []
    if acc.get("warnings_by_reason"):
        warned = ", ".join(f"{k} {v}" for k, v in acc["warnings_by_reason"].items())
        lines.append(f"{indent}warnings (facts kept): {warned}")
    if acc["rejects_by_reason"]:
        reasons = ", ".join(f"{k} {v}" for k, v in acc["rejects_by_reason"].items())
        lines.append(f"{indent}rejects by reason: {reasons}")
    if acc.get("text_turns_awaiting_extraction"):
        lines.append(
            f"{indent}{acc['text_turns_awaiting_extraction']} text turns await extraction "
            "(no extractor configured: set MEMFLOW_EXTRACTOR)"
        )
    return lines


def format_system(report: dict[str, Any]) -> list[str]:
    lines = [
        f"state home: {shown(report['home'])}",
        f"landing zone: {shown(report['landing_dir'])}",
    ]
    if report["record_problem"]:
        lines.append(f"  the state home's record is damaged: {shown(report['record_problem'])}")
    if not report["processes"]:
        lines.append("running: nothing (memflow up starts the API, the UI and the daemon)")
    for p in report["processes"]:
        where = " ".join(f"{k} {p[k]}" for k in ("api_url", "ui_url") if p[k])
        lines.append(f"running: memflow {p['role']} (pid {p['pid']}) {shown(where)}".rstrip())
    for line in report["conflicts"]:
        lines.append(f"  CONFLICT: {shown(line)}")
    waiting = report["text_turns_awaiting_extraction"]
    if report["extractor"] == "none":
        lines.append(
            f"extraction: none; {waiting} text turns wait for an extractor (set "
            "MEMFLOW_EXTRACTOR=openai with MEMFLOW_EXTRACTION_URL and MEMFLOW_EXTRACTION_MODEL "
            "of a local OpenAI-compatible server: docs/agents.md, Extraction)"
        )
    else:
        lines.append(f"extraction: {report['extractor']}; {waiting} text turns wait")
    return lines


def _equal(value: bool | None) -> str:
    return "not verified" if value is None else "yes" if value else "NO"


def format_totals(report: dict[str, Any]) -> list[str]:
    t = report["totals"]
    b = t["triples_balance"]
    n = t["tenants"]
    lines = [
        f"tenants: {n}; lines in {t['lines_in']} = turns {t['turns']} + rejects "
        f"{t['landing_rejects']}; triples in {b['triples_in']} = facts "
        f"{b['facts_stored']}+{b['facts_new']} + merged {b['merged']} + rejects {b['rejects']}; "
        f"facts {t['facts']}, entities {t['entities']}, rejects {t['rejects']}, warnings "
        f"{t['warnings']}",
        f"  balances: lines {_short(n, t['lines_not_accounted'], 'not accounted')}; triples "
        f"{_short(n, t['triples_not_accounted'], 'not accounted')}",
    ]
    g = t["graph"]
    vec = ", ".join(f"{m} {v['vectors']} x {v['dim']}" for m, v in t["vectors"].items())
    lines.append(
        f"  stores: graph {g['entities']} entities, {g['facts']} facts; vectors {vec or 'none'}"
    )
    lines.append(
        f"  graph counts vs tables: {_short(n, t['graph_counts_differ'], 'differ')}"
        + (
            f"; vector counts vs embedding tables: {_short(n, t['vector_counts_differ'], 'differ')}"
            f"; coverage: {_short(n, t['below_full_coverage'], 'below 100%')}"
            if "vector_counts_differ" in t
            else ""
        )
    )
    lines.append("  stores equal tables: " + _verified(report, t))
    return lines


def _short(n: int, failing: int, what: str) -> str:
    return f"all {n} tenants fine" if not failing else f"{failing} of {n} tenants {what}"


def _verified(report: dict[str, Any], t: dict[str, Any]) -> str:
    if not report["verified"]:
        return (
            "not verified (`memflow status --verify` compares every tenant's stores with its "
            "tables; `--tenant ORG/REPO` one tenant's)"
        )
    unequal = [
        f"{what} NO for {n}"
        for what, n in (("graph", t["graph_not_equal"]), ("vectors", t.get("vectors_not_equal", 0)))
        if n
    ]
    return f"verified for {t['graph_verified']} tenants: " + (", ".join(unequal) or "yes")


def format_tenant(t: dict[str, Any]) -> list[str]:
    rows, g, acc = t["tables"], t["graph"], t["accounting"]
    b = acc["triples_balance"]
    flag = f"   NEEDS ATTENTION: {'; '.join(t['attention'])}" if t.get("attention") else ""
    lines = [
        f"\n{shown(t['tenant'])}{flag}",
        "  tables: " + ", ".join(f"{k} {v}" for k, v in rows.items()),
        f"  lines in {acc['lines_in']} = turns {acc['turns']} + rejects "
        f"{acc['landing_rejects']}: {'yes' if acc['lines_accounted'] else 'NO'}; "
        f"triples in {b['triples_in']} = facts {b['facts_stored']}+{b['facts_new']} + "
        f"merged {b['merged']} + rejects {b['rejects']}: "
        f"{'yes' if acc['triples_accounted'] else 'NO'}",
    ]
    lines.extend(_reasons(acc, "  "))
    lines.append(
        f"  graph ({g['backend']}): {g['entities']} entities, {g['facts']} facts; counts match "
        f"the tables: {'yes' if g['counts_equal_tables'] else 'NO'}; equals table: "
        f"{_equal(g['equals_table'])}"
    )
    if g.get("diff") and g["equals_table"] is False:
        lines.append(f"    differences: {_differences(g['diff'])}")
    vec = ", ".join(f"{m} {v['vectors']} x {v['dim']}" for m, v in t["vectors"].items())
    lines.append(f"  vectors: {vec or 'none'}")
    if "coverage" in t:
        lines.append(
            f"  coverage of {t['embedding_model']}: entities {t['coverage']:.0%}, facts "
            f"{t['fact_coverage']:.0%}; vectors equal tables: {_equal(t['vectors_equal_table'])}"
        )
        for kind, diff in (t.get("vectors_diff") or {}).items():
            found = ", ".join(f"{k} {v['count']}" for k, v in diff.items() if v["count"])
            if found:
                lines.append(f"    {kind} vectors: {found}")
    return lines


def _differences(diff: dict[str, Any]) -> str:
    parts = [
        f"{k.replace('_', ' ')} {v}"
        for k, v in diff.items()
        if k.startswith(("missing_", "extra_", "changed_")) and v
    ]
    return ", ".join(parts)


def format_status(report: dict[str, Any], *, every_tenant: bool = False) -> str:
    """The report as text: system, totals, tenants needing attention (all of them with
    `every_tenant`, or when there are at most `LIST_ALL_UP_TO`)."""
    lines = [
        f"data: {shown(report['data_dir'])}   embedding model: "
        f"{shown(report['embedding_model'] or 'none')}"
    ]
    lines += [f"note: {shown(note)}" for note in report.get("notes", [])]
    if "system" in report:
        lines.extend(format_system(report["system"]))
    lines.extend(format_totals(report))
    tenants = report["tenants"]
    needing = [t for t in tenants if t.get("attention")]
    lines.append(
        f"needs attention: {len(needing)} of {len(tenants)} tenants"
        + ("" if needing else " (every tenant balances, is covered and its store counts agree)")
    )
    if every_tenant or len(tenants) <= LIST_ALL_UP_TO:
        shown_tenants = needing + [t for t in tenants if not t.get("attention")]
    else:
        shown_tenants = needing[:ATTENTION_SHOWN]
    for t in shown_tenants:
        lines.extend(format_tenant(t))
    left = len(tenants) - len(shown_tenants)
    if left:
        more = len(needing) - len([t for t in shown_tenants if t.get("attention")])
        lines.append(
            f"\n{left} more tenants not listed"
            + (f" ({more} of them need attention)" if more else "")
            + ": `memflow status --all` lists every tenant, `--tenant ORG/REPO` one tenant "
            "with its stores verified, `--json` every tenant as JSON"
        )
    return "\n".join(lines)
