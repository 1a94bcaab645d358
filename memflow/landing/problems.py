"""What the landing zone holds that no reader consumed: `LandingProblem`, its reasons and
details, and the `LANDING_PROBLEMS` frame."""

from __future__ import annotations

import errno
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from memflow.landing.format import (
    _id,
    _text,
    printable,
)
from schemas.scope import Scope, ScopeError
from schemas.tables import LANDING_PROBLEMS


@dataclass(frozen=True, slots=True)
class LandingProblem:
    """Something in the landing zone that no tenant's reader consumed (a `LANDING_PROBLEMS`
    row). ``lines``: the non-blank lines / Parquet rows it holds, None when not counted (a
    symlink is not followed, a FIFO never opened)."""

    path: str  # relative to the landing root, posix, ids redacted
    reason: str  # see LANDING_PROBLEMS
    detail: str
    lines: int | None = None
    tenant_id: str | None = None
    ns: str | None = None
    # The unredacted relative path, to count lines; in memory only, never in a table.
    fs_path: str | None = field(default=None, repr=False, compare=False)

    def row(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "reason": self.reason,
            "detail": self.detail,
            "lines": self.lines,
            "tenant_id": self.tenant_id,
            "ns": self.ns,
        }


_KIND_NAMES = {
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
}


def _kind(mode: int) -> str:
    return _KIND_NAMES.get(stat.S_IFMT(mode), "not a regular file")


def _problem(
    rel: str, reason: str, detail: str, scope: Scope | None = None, lines: int | None = None
) -> LandingProblem:
    return LandingProblem(
        _id(_text(rel)),
        reason,
        detail,
        lines,
        scope.tenant_id if scope else None,
        scope.ns if scope else None,
        rel,
    )


_SYMLINK = "symlinks are not followed; it was not read"
_NESTED = "landing files belong directly in <org>/<repo>/; this directory was not read"
_MISPLACED = "landing files belong in <org>/<repo>/; this file was not read"
_HIDDEN = (
    "names starting with '.' are skipped (writers' temporary names), and this directory holds "
    "landing files: they were not read"
)


def _special(mode: int) -> str:
    return f"{_kind(mode)}, not a regular file; it was never opened"


def _scope_detail(exc: ScopeError) -> str:
    # The name itself may be anything (newlines, secrets): the path column carries it.
    text = str(exc)
    return text[text.find("is not a valid name") :] if "is not a valid name" in text else text


def _os_detail(exc: OSError) -> str:
    code = errno.errorcode.get(exc.errno or 0, "")
    return f"{exc.strerror or type(exc).__name__}" + (f" ({code})" if code else "")


def problems_frame(problems: Iterable[LandingProblem]) -> pl.DataFrame:
    """`LANDING_PROBLEMS` rows for problems (from `discover`, `read_tenant_files`)."""
    rows = [p.row() for p in problems]
    if not rows:
        return pl.DataFrame(schema=LANDING_PROBLEMS)
    return pl.DataFrame(rows, schema=LANDING_PROBLEMS)


def problem_line(row: Mapping[str, Any]) -> str:
    """One `LANDING_PROBLEMS` row as one line of text to print: the path and detail escaped
    (`printable`), so no name in the landing zone can forge another output line."""
    held = "" if row.get("lines") is None else f", {row['lines']} lines not read"
    path, detail = printable(str(row["path"])), printable(str(row["detail"]))
    return f"{path}: {printable(str(row['reason']))}{held} ({detail})"
