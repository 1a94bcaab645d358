"""The invariants the fuzz checks on every generated landing zone, at two levels.

Domain level (`check_domain`, no Dagster): `discover`, `read_tenant_files`, `ingest_turns`,
`extract_tenant` and `build_facts` never raise; every line is accounted for (per file, records
= turns + rejects and records = what the landing format says the file holds; over the zone,
lines written = tenant records + lines of the problems listed); every explicit triple item is a
triple or an error row; triples in = facts (stored + new) + merged + rejects; every table meets
its contract (what the blocking checks test); no planted secret in any returned frame, record,
detail, id or problem row. The zone is ingested in two waves (the second adds files), so the
incremental path (stored turns, stored facts) is fuzzed too.

Pipeline level (`check_data_dir`, after a real `run_all` or `memflow run`): every tenant's
`tenant_summary` balances, the zone's lines are all accounted for, every asset check of
severity error passed, and no planted secret is in any table, graph.sqlite, the Dagster event
log, a file name, or the given output.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import polars as pl

from memflow import landing
from memflow.extract import ExtractionTables, extract_tenant
from memflow.facts import build_facts
from memflow.turns import TurnTables, ingest_turns
from schemas import contracts
from schemas.rules import SEVERITY_ERROR
from schemas.scope import Scope
from tests.fuzz.planted import Secret, scan
from tests.fuzz.zones import Zone, expected_records, planted_lines, special_kinds

# Columns of `read_tenant_files`' turns that are documented as not redacted yet (the turns
# stage redacts them): everything else it returns must be clean.
UNREDACTED_READ_COLUMNS = ("content", "tool_input_json")


@dataclass
class Counts:
    """What one zone came to (summed into the suite's tally)."""

    inputs: int = 0
    lines: int = 0
    accounted: int = 0
    turns: int = 0
    rejects: int = 0
    triples: int = 0
    facts: int = 0
    problems: int = 0
    secrets_planted: int = 0
    secrets_found: int = 0
    reasons: Counter[str] = field(default_factory=Counter)
    # secret (kind and first characters) -> where it was found, one entry per place
    leaks: dict[str, list[str]] = field(default_factory=dict)
    # per channel (where a secret was planted) and source (claimed, held_out): planted, found
    planted_by_channel: Counter[str] = field(default_factory=Counter)
    found_by_channel: Counter[str] = field(default_factory=Counter)

    def planting(self, secrets: list[Secret]) -> Counts:
        """Count `secrets` as planted, by channel and source."""
        self.secrets_planted += len(secrets)
        self.planted_by_channel.update(f"{s.channel or 'other'}|{s.source}" for s in secrets)
        return self

    def add(self, other: Counts) -> None:
        for name in self.__dataclass_fields__:
            if name in ("reasons", "planted_by_channel", "found_by_channel"):
                getattr(self, name).update(getattr(other, name))
            elif name == "leaks":
                for secret, places in other.leaks.items():
                    self.leaks.setdefault(secret, []).extend(places)
            else:
                setattr(self, name, getattr(self, name) + getattr(other, name))

    def look(self, haystack: str, secrets: list[Secret], where: str) -> None:
        """Record every planted secret found in `haystack` (asserted by `assert_clean`)."""
        for secret in scan(haystack, secrets):
            places = self.leaks.setdefault(f"{secret.kind}:{secret.secret[:6]}", [])
            if not places:
                self.secrets_found += 1
                self.found_by_channel[f"{secret.channel or 'other'}|{secret.source}"] += 1
            places.append(where)

    def assert_clean(self) -> None:
        assert not self.leaks, f"planted secrets found: {self.leaks}"


def dump(value: Any) -> str:
    if isinstance(value, pl.DataFrame):
        value = value.to_dicts()
    return json.dumps(value, default=str, ensure_ascii=False)


def assert_contract(df: pl.DataFrame, contract: type, what: str) -> None:
    _, violations = contracts.split_valid(df, contract)
    assert not violations, f"{what} breaks {contract.__name__}: {violations[:5]}"


@dataclass
class _Tenant:
    turns: TurnTables
    extraction: ExtractionTables
    facts: pl.DataFrame | None = None
    entities: pl.DataFrame | None = None


def _file_bytes(path: Path) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as fh:
        return fh.read()


def _check_read(
    root: Path, scope: Scope, now: datetime, secrets: list[Secret], out: Counts
) -> None:
    """A tenant read on its own: per file, records = turns + rejects = the oracle's count."""
    read = landing.read_tenant_files(root, scope, now=now)
    assert read.turns.height + read.rejects.height == read.records, scope
    for f in read.files:
        if not f.read:
            assert f.problem is not None and f.records == 0, f
            continue
        assert f.records == f.turns + f.rejects, f
        expected = expected_records(f.path.name, _file_bytes(f.path))
        assert f.records == expected, (f.source_file, f.records, expected)
    ids = read.turns.drop(UNREDACTED_READ_COLUMNS)
    out.look(
        dump(ids) + dump(read.rejects) + dump([p.row() for p in read.problems]),
        secrets,
        f"read_tenant_files({scope})",
    )
    out.look(
        dump([(f.source_file, f.fingerprint and f.fingerprint.as_dict()) for f in read.files]),
        secrets,
        "file reads",
    )


def _explicit_items(turns: pl.DataFrame) -> int:
    rows = turns.filter(pl.col("tool_triples").is_not_null())["tool_triples"].to_list()
    return sum(len(json.loads(r)) for r in rows)


def _ingest_wave(
    root: Path, now: datetime, state: dict[Scope, _Tenant], secrets: list[Secret], out: Counts
) -> landing.Discovery:
    found = landing.discover(root)
    for scope, files in found.items():
        _check_read(root, scope, now, secrets, out)
        tenant = state.setdefault(
            scope, _Tenant(TurnTables.empty(), ExtractionTables.of(None, None, None))
        )
        update = ingest_turns(root, scope, files, tenant.turns, now)
        tables = update.tables
        out.look(
            dump(tables.turns) + dump(tables.rejects) + dump(tables.files),
            secrets,
            f"turn tables of {scope}",
        )
        out.look(dump([p.row() for p in update.problems]), secrets, "problems")
        off = tables.files.filter(pl.col("records") != pl.col("turns") + pl.col("rejects"))
        assert off.is_empty(), off.to_dicts()
        assert tables.turns.height + tables.rejects.height == tables.files["records"].sum()
        assert_contract(tables.turns, contracts.TurnContract, f"raw turns of {scope}")
        assert_contract(tables.rejects, contracts.QuarantineContract, f"turn rejects of {scope}")
        tenant.turns = tables

        done = extract_tenant(scope, tables.turns, tenant.extraction, None, "none", now=now)
        ext = done.tables
        errors = ext.rejects.filter(pl.col("severity") == SEVERITY_ERROR).height
        assert _explicit_items(tables.turns) == ext.triples.height + errors, scope
        assert_contract(ext.triples, contracts.TripleContract, f"triples of {scope}")
        assert_contract(ext.rejects, contracts.QuarantineContract, f"extraction rejects of {scope}")
        out.look(dump(ext.triples) + dump(ext.rejects) + dump(ext.log), secrets, "extraction")
        tenant.extraction = ext

        built = build_facts(scope, ext.triples, tenant.facts, tenant.entities)
        assert built.balanced, built.counts
        assert built.triples_in == ext.triples.height
        assert_contract(built.facts, contracts.FactContract, f"facts of {scope}")
        assert_contract(built.entities, contracts.EntityContract, f"entities of {scope}")
        assert_contract(built.rejects, contracts.QuarantineContract, f"fact rejects of {scope}")
        out.look(
            dump(built.facts) + dump(built.entities) + dump(built.rejects) + dump(built.merges),
            secrets,
            f"facts of {scope}",
        )
        tenant.facts, tenant.entities = built.facts, built.entities
    return found


def check_domain(zone: Zone, base: Path, now: datetime) -> Counts:
    """Ingest `zone` at the domain level in two waves; assert every invariant but the secrets
    one: planted secrets found are in the result (`Counts.assert_clean`), so a caller can
    tally them first."""
    root, outside = base / "landing", base / "outside"
    secrets = zone.secrets
    state: dict[Scope, _Tenant] = {}
    out = Counts(inputs=1).planting(secrets)
    zone.write(root, outside, waves=(0,))
    _ingest_wave(root, now, state, secrets, out)
    zone.write(root, outside, waves=(1,))
    found = _ingest_wave(root, now + timedelta(seconds=1), state, secrets, out)
    # Nothing changed since: ingesting again reads nothing and changes nothing.
    for scope, files in found.items():
        tables = state[scope].turns
        again = ingest_turns(root, scope, files, tables, now + timedelta(seconds=2))
        assert again.files_read == 0 and again.tables is tables, scope

    problems = landing.landing_problems(root, found)
    out.look(dump(problems), secrets, "landing problems")
    records = sum(int(t.turns.files["records"].sum() or 0) for t in state.values())
    problem_lines = int(problems["lines"].sum() or 0)
    lines = planted_lines(root)
    assert lines == records + problem_lines, (lines, records, problem_lines)

    # Each special entry of a tenant directory is listed with its reason.
    listed = Counter(
        (r["tenant_id"], r["ns"], r["reason"]) for r in problems.to_dicts() if r["tenant_id"]
    )
    for (org, repo), kinds in special_kinds(zone).items():
        try:
            scope = Scope(org, repo)
        except ValueError:
            continue
        for reason, n in kinds.items():
            assert listed[(scope.tenant_id, scope.ns, reason)] >= n, (org, repo, reason, listed)

    out.lines = lines
    out.accounted = records + problem_lines
    out.problems = problems.height
    for tenant in state.values():
        out.turns += tenant.turns.turns.height
        out.rejects += tenant.turns.rejects.height
        out.triples += tenant.extraction.triples.height
        out.facts += 0 if tenant.facts is None else tenant.facts.height
        out.reasons.update(tenant.turns.rejects["reason"].to_list())
        out.reasons.update(tenant.extraction.rejects["reason"].to_list())
    out.reasons.update(f"problem:{r}" for r in problems["reason"].to_list())
    return out


# ------------------------------------------------------------------------------ data directory


def data_dir_text(data: Path) -> str:
    """Everything a run stored, as text: every Parquet table, every SQLite database (graph,
    Dagster's run and event-log storage), every other text file, and every file name."""
    parts: list[str] = []
    for path in sorted(data.rglob("*")):
        parts.append(str(path.relative_to(data)))
        if not path.is_file() or path.is_symlink():
            continue
        if "milvus" in path.parts[-2:] or path.suffix in (".lock", ".pid"):
            continue
        if path.suffix == ".parquet":
            parts.append(dump(pl.read_parquet(path)))
        elif path.suffix in (".db", ".sqlite") or path.name.endswith((".db-wal", ".sqlite-wal")):
            if path.suffix in (".db", ".sqlite"):
                with sqlite3.connect(path) as db:
                    parts.append("\n".join(db.iterdump()))
            parts.append(path.read_bytes().decode("utf-8", "replace"))
        else:
            parts.append(path.read_bytes().decode("utf-8", "replace"))
    return "\n".join(parts)


def evaluated_checks(dagster_home: Path) -> list[tuple[str, str, bool, bool]]:
    """(check, asset, passed, severity is error) of every asset check evaluation stored."""
    from dagster import AssetCheckSeverity, DagsterEventType, DagsterInstance, EventRecordsFilter

    out = []
    with DagsterInstance.from_ref(DagsterInstance.local_temp(str(dagster_home)).get_ref()) as inst:
        records = inst.get_event_records(
            EventRecordsFilter(event_type=DagsterEventType.ASSET_CHECK_EVALUATION), limit=100_000
        )
        for record in records:
            data = record.event_log_entry.dagster_event.event_specific_data
            severe = data.severity == AssetCheckSeverity.ERROR
            out.append((data.check_name, data.asset_key.to_user_string(), data.passed, severe))
    return out


def check_data_dir(
    zone: Zone, landing_dir: Path, data: Path, outputs: list[str], failures: list[Any]
) -> Counts:
    """The pipeline-level invariants after a run of `zone` into `data` (secrets found are in
    the result: `Counts.assert_clean`)."""
    from pipelines.status import tenant_summary
    from resources.tables import TableStore
    from schemas.tables import Asset

    assert not failures, failures
    secrets = zone.secrets
    out = Counts(inputs=1).planting(secrets)
    tables = TableStore(data)
    found = landing.discover(landing_dir)
    records = 0
    for scope in found:
        summary = tenant_summary(tables, scope)
        assert summary["lines_accounted"], summary
        assert summary["triples_accounted"], summary
        records += summary["lines_in"]
        out.turns += summary["turns"]
        out.rejects += summary["landing_rejects"]
        out.triples += summary["triples"]
        out.facts += summary["facts"]
        out.reasons.update(summary["rejects_by_reason"])
    problems = tables.read_zone(Asset.LANDING_PROBLEMS)
    problem_lines = 0 if problems is None else int(problems["lines"].sum() or 0)
    lines = planted_lines(landing_dir)
    assert lines == records + problem_lines, (lines, records, problem_lines)
    out.lines, out.accounted = lines, records + problem_lines
    out.problems = 0 if problems is None else problems.height

    checks = evaluated_checks(data / "dagster")
    assert checks or not found, "no asset check was evaluated"
    failed = [(c, a) for c, a, passed, severe in checks if severe and not passed]
    assert not failed, failed
    out.look(data_dir_text(data), secrets, "the data directory")
    out.look("\n".join(outputs), secrets, "the run's output and logs")
    return out


__all__ = [
    "Counts",
    "check_data_dir",
    "check_domain",
    "data_dir_text",
    "dump",
    "evaluated_checks",
]
