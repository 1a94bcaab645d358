"""Size budgets over the six packages: a module holds at most 900 lines, a function at most 80.

Today's offenders are listed below with their size, and the list only shrinks: the test fails
when a listed module or function grows, when a new one goes over its budget, and when a listed
one shrank (write its new size down, so that it cannot grow back unseen) or fits its budget now
(take it off the list). A function's size runs from its ``def`` line to its last line (its
decorators are declarations, not body: an asset's description lives there); a nested function
counts inside its parent and on its own.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("schemas", "resources", "memflow", "recall", "assets", "pipelines")
MODULE_BUDGET = 900
FUNCTION_BUDGET = 80

# Over budget today, with the size each may keep at most. Only ever lowered or removed.
MODULES_OVER: dict[str, int] = {}
FUNCTIONS_OVER: dict[str, int] = {
    "memflow/facts.py::build_facts": 176,
    "recall/service.py::RecallService.recall": 121,
    "pipelines/runner.py::run_all": 91,
    "pipelines/ingest_worker.py::worker_main": 89,
    "schemas/triples.py::items_to_triples": 87,
    "memflow/extract.py::extract_day": 86,
}


def module_sizes(root: Path, packages: Iterable[str]) -> dict[str, int]:
    """Lines of every module of `packages` under `root`, by path relative to `root`."""
    return {
        path.relative_to(root).as_posix(): len(path.read_text().splitlines())
        for package in packages
        for path in sorted((root / package).rglob("*.py"))
    }


def function_sizes(root: Path, packages: Iterable[str]) -> dict[str, int]:
    """Lines of every function and method, as ``path::Class.method`` (``outer.inner`` for a
    nested one), from its ``def`` line to its last."""
    sizes: dict[str, int] = {}

    def visit(node: ast.AST, rel: str, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{prefix}{child.name}"
                assert child.end_lineno is not None
                # a name defined twice (a property's setter, a conditional def) keeps the larger
                size = child.end_lineno - child.lineno + 1
                sizes[f"{rel}::{name}"] = max(size, sizes.get(f"{rel}::{name}", 0))
                visit(child, rel, f"{name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, rel, f"{prefix}{child.name}.")
            else:
                visit(child, rel, prefix)

    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            visit(ast.parse(path.read_text(), rel), rel, "")
    return sizes


def budget_breaches(sizes: Mapping[str, int], budget: int, allowed: Mapping[str, int]) -> list[str]:
    """What breaks the budget and its allowlist: a new offender, a listed one that grew, that
    shrank (its recorded size must follow it down) or that fits now, and a listed name that no
    longer exists."""
    out = []
    for name, size in sorted(sizes.items()):
        recorded = allowed.get(name)
        if recorded is None:
            if size > budget:
                out.append(f"{name}: {size} lines, over the budget of {budget}")
        elif size <= budget:
            out.append(f"{name}: {size} lines, within the budget now: take it off the list")
        elif size > recorded:
            out.append(f"{name}: grew from {recorded} to {size} lines (the list only shrinks)")
        elif size < recorded:
            out.append(f"{name}: shrank from {recorded} to {size} lines: record {size}")
    out += [
        f"{name}: listed but gone: take it off the list" for name in allowed if name not in sizes
    ]
    return out


def test_modules_keep_their_budget() -> None:
    assert not budget_breaches(module_sizes(ROOT, PACKAGES), MODULE_BUDGET, MODULES_OVER)


def test_functions_keep_their_budget() -> None:
    assert not budget_breaches(function_sizes(ROOT, PACKAGES), FUNCTION_BUDGET, FUNCTIONS_OVER)


def test_the_budget_guard_sees_what_it_guards(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    body = "".join(f"    x{i} = {i}\n" for i in range(85))
    (pkg / "big.py").write_text(
        "import dagster\n\n\n"
        f"@dagster.asset\ndef grown():\n{body}\n\n"
        "class Store:\n"
        "    def small(self):\n        return 1\n\n"
        "    def shrunk(self):\n"
        "        def inner():\n" + "".join(f"            y{i} = {i}\n" for i in range(82)) + "\n"
        "def within():\n    return 0\n" + "# filler\n" * 820
    )
    (pkg / "small.py").write_text("def f():\n    return 1\n")
    modules = module_sizes(tmp_path, ["pkg"])
    functions = function_sizes(tmp_path, ["pkg"])
    assert modules == {"pkg/big.py": modules["pkg/big.py"], "pkg/small.py": 2}
    assert modules["pkg/big.py"] > MODULE_BUDGET
    assert functions["pkg/big.py::grown"] == 86  # from the def line, the decorator not counted
    assert functions["pkg/big.py::Store.shrunk.inner"] == 83
    assert functions["pkg/big.py::Store.shrunk"] == 84
    assert functions["pkg/big.py::Store.small"] == 2

    assert budget_breaches(modules, MODULE_BUDGET, {}) == [
        f"pkg/big.py: {modules['pkg/big.py']} lines, over the budget of {MODULE_BUDGET}"
    ]
    assert not budget_breaches(modules, MODULE_BUDGET, {"pkg/big.py": modules["pkg/big.py"]})
    breaches = budget_breaches(
        functions,
        FUNCTION_BUDGET,
        {
            "pkg/big.py::grown": 85,
            "pkg/big.py::Store.shrunk": 90,
            "pkg/big.py::within": 81,
            "pkg/gone.py::removed": 99,
        },
    )
    assert breaches == [
        "pkg/big.py::Store.shrunk: shrank from 90 to 84 lines: record 84",
        "pkg/big.py::Store.shrunk.inner: 83 lines, over the budget of 80",
        "pkg/big.py::grown: grew from 85 to 86 lines (the list only shrinks)",
        "pkg/big.py::within: 2 lines, within the budget now: take it off the list",
        "pkg/gone.py::removed: listed but gone: take it off the list",
    ]
