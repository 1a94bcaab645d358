"""Reading: one file, one tenant's files, and the duplicate_turn rule."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

import polars as pl

from memflow.landing.discover import (
    _list_tenant,
    is_landing_name,
)
from memflow.landing.files import (
    FileFingerprint,
    _layout,
    _open_regular,
    _Source,
    relative_name,
    source_name,
)
from memflow.landing.format import (
    _MICROSECOND,
    JSONL_SUFFIX,
    LANDING_SUFFIXES,
    MAX_LINE_BYTES,
    PARQUET_SUFFIX,
    READ_ATTEMPTS,
    REJECT_COLUMNS,
    STAGE,
    TURN_COLUMNS,
)
from memflow.landing.jsonl import _scan_jsonl
from memflow.landing.problems import (
    LandingProblem,
    _os_detail,
    _problem,
    problems_frame,
)
from memflow.landing.records import _Collector, _typed
from memflow.landing.survey import _with_lines
from schemas.rules import (
    DEFAULT_TIME_WINDOW,
    EPOCH,
    SEVERITY_ERROR,
    Reason,
    TimeWindow,
)
from schemas.scope import Scope, ScopeError


@dataclass(frozen=True)
class LandingRead:
    """One landing file, read: accepted turns (content not redacted) and quarantined lines.

    ``fingerprint`` is the version read (None when the file was not read); ``problem`` says
    why a file was not read (then both tables are empty and ``records`` is 0)."""

    scope: Scope
    source_file: str
    turns: pl.DataFrame  # TURN_COLUMNS
    rejects: pl.DataFrame  # REJECT_COLUMNS
    records: int  # non-blank lines (JSONL) or rows (Parquet) examined
    fingerprint: FileFingerprint | None = None
    problem: LandingProblem | None = None

    @property
    def days(self) -> list[str]:
        return sorted(self.turns["day"].unique().to_list())

    def rejects_by_reason(self) -> dict[str, int]:
        return dict(sorted(Counter(self.rejects["reason"].to_list()).items()))


def _now_us(now: datetime | None) -> int:
    return ((now or datetime.now(UTC)) - EPOCH) // _MICROSECOND


def _read_file(
    path: Path,
    landing_root: Path,
    max_line_bytes: int,
    window: TimeWindow,
    now_us: int,
) -> LandingRead:
    """One file through one fd; a file changing in place is read again (`READ_ATTEMPTS`)."""
    scope, name = _layout(path, landing_root)
    rel = source_name(path, landing_root)
    lower = name.lower()
    if not lower.endswith(LANDING_SUFFIXES):
        raise ValueError(f"{path} is neither {JSONL_SUFFIX} nor {PARQUET_SUFFIX}")
    for _ in range(READ_ATTEMPTS):
        opened = _open_regular(landing_root, scope, name, rel)
        if isinstance(opened, LandingProblem):
            return _not_read(scope, rel, opened)
        fd, before = opened
        out = _Collector(scope, rel, window, now_us)
        try:
            src = _Source(fd)
            try:
                if lower.endswith(PARQUET_SUFFIX):
                    from memflow.landing import parquet  # pyarrow only where Parquet is read

                    parquet._scan_parquet(src, out, before.st_size)
                else:
                    _scan_jsonl(src, out, max_line_bytes)
            except OSError as exc:
                problem = _problem(rel, "unreadable_file", _os_detail(exc), scope)
                return _not_read(scope, rel, problem)
            after = os.fstat(fd)
        finally:
            os.close(fd)
        if (
            after.st_size == before.st_size == src.size
            and after.st_mtime_ns == before.st_mtime_ns
            and after.st_ctime_ns == before.st_ctime_ns
        ):
            turns, rejects = out.frames()
            fp = FileFingerprint(rel, src.size, before.st_mtime_ns, src.sha.hexdigest())
            return LandingRead(scope, rel, turns, rejects, out.records, fp)
    problem = _problem(
        rel,
        "changed_during_read",
        f"the file changed while it was read, {READ_ATTEMPTS} times; it is read once it stops "
        "changing (landing writers should write a dot-file and rename it when complete)",
        scope,
        out.records,
    )
    return _not_read(scope, rel, problem)


def _not_read(scope: Scope, rel: str, problem: LandingProblem) -> LandingRead:
    turns = pl.DataFrame(schema=TURN_COLUMNS)
    rejects = pl.DataFrame(schema=REJECT_COLUMNS)
    return LandingRead(scope, rel, turns, rejects, 0, None, problem)


def read_landing_file(
    path: str | os.PathLike[str],
    landing_root: str | os.PathLike[str],
    max_line_bytes: int = MAX_LINE_BYTES,
    *,
    window: TimeWindow | None = None,
    now: datetime | None = None,
) -> LandingRead:
    """Read one landing file into accepted turns and rejects (duplicates within the file
    included). Turns outside `window` (default: `schemas.rules.DEFAULT_TIME_WINDOW`, at `now`)
    are rejected. A file that is not a regular file, or is reached through a symlink, is not
    read: the result has ``problem`` set. Raises `ScopeError` only when the path does not lie
    at ``<landing>/<org>/<repo>/<file>`` under valid names."""
    read = _read_file(
        Path(path),
        Path(landing_root),
        max_line_bytes,
        window or DEFAULT_TIME_WINDOW,
        _now_us(now),
    )
    if read.problem is not None or read.turns.is_empty():
        return read
    kept, duplicates = split_duplicates(read.turns)
    if duplicates.is_empty():
        return read
    rejects = pl.concat([read.rejects, duplicates], how="vertical")
    return replace(read, turns=kept, rejects=rejects.sort("line_no", nulls_last=True))


def days_in_file(
    path: str | os.PathLike[str],
    landing_root: str | os.PathLike[str],
    max_line_bytes: int = MAX_LINE_BYTES,
    *,
    window: TimeWindow | None = None,
    now: datetime | None = None,
) -> list[str]:
    """The UTC days (``YYYY-MM-DD``) of the turns `read_landing_file` would accept, sorted."""
    return read_landing_file(path, landing_root, max_line_bytes, window=window, now=now).days


# ---------------------------------------------------------------------------------- duplicates


def split_duplicates(
    turns: pl.DataFrame, ingested_keys: Collection[str] | pl.Series = ()
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The ``duplicate_turn`` rule, in one place: (kept turns, duplicate rejects).

    A turn is identified by its ``turn_key`` (tenant_id, ns, session_id, turn_id). A key in
    `ingested_keys` (turns already stored, from earlier files or runs) wins over any new turn;
    among new turns the earliest wins, by ``ts``, then ``source_file``, then ``line_no``.
    `turns` has `TURN_COLUMNS`; kept turns keep their order, rejects have `REJECT_COLUMNS`.
    """
    if turns.is_empty():
        return turns, pl.DataFrame(schema=REJECT_COLUMNS)
    ingested = set(
        ingested_keys.to_list() if isinstance(ingested_keys, pl.Series) else ingested_keys
    )
    keys = turns["turn_key"]
    if not keys.is_duplicated().any() and not (ingested and keys.is_in(list(ingested)).any()):
        return turns, pl.DataFrame(schema=REJECT_COLUMNS)  # the common case: nothing to drop
    ordered = turns.with_row_index("_i").sort("ts", "source_file", "line_no", "_i")
    first: dict[str, tuple[str, int]] = {}
    dropped: list[int] = []
    details: list[str] = []
    for i, key, source, line in ordered.select(
        "_i", "turn_key", "source_file", "line_no"
    ).iter_rows():
        if key in ingested:
            dropped.append(i)
            details.append(
                "this session_id and turn_id were already ingested; the stored turn was kept"
            )
        elif key in first:
            kept_source, kept_line = first[key]
            dropped.append(i)
            where = "earlier in this file" if kept_source == source else f"in {kept_source}"
            details.append(
                f"this session_id and turn_id already appeared {where} (line {kept_line}); "
                "the earliest turn was kept"
            )
        else:
            first[key] = (source, line)
    if not dropped:
        return turns, pl.DataFrame(schema=REJECT_COLUMNS)
    index = pl.Series("_i", dropped, dtype=pl.UInt32)
    marked = turns.with_row_index("_i")
    dupes = (
        marked.join(pl.DataFrame([index, pl.Series("detail", details)]), on="_i", how="inner")
        .sort("_i")
        .select(
            "tenant_id",
            "ns",
            pl.lit(STAGE).alias("stage"),
            pl.lit(Reason.DUPLICATE_TURN).alias("reason"),
            "detail",
            "source_file",
            "line_no",
            "session_id",
            "turn_id",
            pl.lit(None, dtype=pl.String).alias("record"),
            pl.lit(SEVERITY_ERROR).alias("severity"),
        )
    )
    kept = marked.filter(~pl.col("_i").is_in(index)).drop("_i")
    return kept, _typed(dupes, REJECT_COLUMNS)


# -------------------------------------------------------------------------------- one tenant


@dataclass(frozen=True, slots=True)
class FileRead:
    """What reading one landing file of a tenant came to. ``records == turns + rejects`` for a
    file that was read (duplicates of other files count as its rejects)."""

    source_file: str  # the value of the source_file column; the landing index key
    path: Path  # where it was read; keep in memory only (names may hold secrets)
    fingerprint: FileFingerprint | None  # the exact bytes read; None when not read
    records: int
    turns: int
    rejects: int
    problem: LandingProblem | None = None

    @property
    def read(self) -> bool:
        return self.fingerprint is not None


@dataclass(frozen=True)
class TenantRead:
    """One tenant's landing files, read: deduplicated turns (content not redacted), landing
    rejects (duplicates included), one `FileRead` per file and the problems met (entries of the
    tenant's directory that were not read, with the lines they hold where countable)."""

    scope: Scope
    turns: pl.DataFrame  # TURN_COLUMNS
    rejects: pl.DataFrame  # REJECT_COLUMNS
    files: list[FileRead] = field(default_factory=list)
    problems: list[LandingProblem] = field(default_factory=list)

    @property
    def records(self) -> int:
        """Non-blank lines / rows of the files read (= turns + rejects)."""
        return sum(f.records for f in self.files)

    @property
    def fingerprints(self) -> list[FileFingerprint]:
        return [f.fingerprint for f in self.files if f.fingerprint is not None]

    def rejects_by_reason(self) -> dict[str, int]:
        return dict(sorted(Counter(self.rejects["reason"].to_list()).items()))

    def problems_frame(self) -> pl.DataFrame:
        return problems_frame(self.problems)


def read_tenant_files(
    landing_root: str | os.PathLike[str],
    scope: Scope,
    files: Iterable[str | os.PathLike[str]] | None = None,
    *,
    window: TimeWindow | None = None,
    ingested_keys: Collection[str] | pl.Series = (),
    now: datetime | None = None,
    max_line_bytes: int = MAX_LINE_BYTES,
    count_problem_lines: bool = True,
) -> TenantRead:
    """Read a tenant's landing files: the regular files of ``<landing>/<org>/<repo>/`` (listed
    here like `discover` does), or only `files` (e.g. the new or changed ones; each must lie
    directly in that directory, anything else is a problem and is not opened).

    Turns outside `window` (at `now`, one instant for the whole read) are rejected, and
    ``duplicate_turn`` is applied across the files and against `ingested_keys` (`turn_key`
    values already stored). Never raises for what the landing zone holds: every entry that is
    not read is a problem with a reason, and with the lines it holds where they can be counted
    without following a link or blocking (`count_problem_lines`)."""
    root = Path(landing_root)
    names, problems = _listed(root, scope) if files is None else _given(root, scope, files)
    now_us = _now_us(now)
    use = window or DEFAULT_TIME_WINDOW
    paths = [root / scope.tenant_id / scope.ns / name for name in sorted(names)]
    reads = [_read_file(path, root, max_line_bytes, use, now_us) for path in paths]
    read_ok = [r for r in reads if r.problem is None]
    turns = (
        pl.concat([r.turns for r in read_ok], how="vertical")
        if read_ok
        else pl.DataFrame(schema=TURN_COLUMNS)
    )
    kept, duplicates = split_duplicates(turns, ingested_keys)
    rejects = pl.concat(
        [*(r.rejects for r in read_ok), duplicates, pl.DataFrame(schema=REJECT_COLUMNS)],
        how="vertical",
    )
    kept_by_file = Counter(kept["source_file"].to_list())
    rejects_by_file = Counter(rejects["source_file"].to_list())
    outcomes: list[FileRead] = []
    for read, path in zip(reads, paths, strict=True):
        if read.problem is not None:
            problems.append(read.problem)
        outcomes.append(
            FileRead(
                read.source_file,
                path,
                read.fingerprint,
                read.records,
                kept_by_file.get(read.source_file, 0),
                rejects_by_file.get(read.source_file, 0),
                read.problem,
            )
        )
    if count_problem_lines:
        problems = [_with_lines(root, p) if p.lines is None else p for p in problems]
    return TenantRead(scope, kept, rejects, outcomes, problems)


def _listed(root: Path, scope: Scope) -> tuple[list[str], list[LandingProblem]]:
    """(landing file names, problems) of the tenant's directory (a missing one is
    ``vanished``)."""
    entries, problems = _list_tenant(root, scope, missing_is_a_problem=True)
    return [e.name for e in entries], problems


def _given(
    root: Path, scope: Scope, files: Iterable[str | os.PathLike[str]]
) -> tuple[list[str], list[LandingProblem]]:
    """(names, problems) of the `files` asked for: each must be a landing file directly in the
    tenant's directory; any other is a ``not_in_tenant`` problem and is not opened."""
    names: list[str] = []
    problems: list[LandingProblem] = []
    for given in files:
        try:
            given_scope, name = _layout(given, root)
        except (ScopeError, ValueError):
            given_scope, name = None, ""
        if given_scope == scope and is_landing_name(name):
            if name not in names:
                names.append(name)
            continue
        try:
            shown = relative_name(given, root)
        except ValueError:
            shown = os.path.basename(given)
        detail = f"not a landing file of {scope.key}; it was not read"
        problems.append(_problem(shown, "not_in_tenant", detail, scope))
    return names, problems
