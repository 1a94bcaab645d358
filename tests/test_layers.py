"""The import rule of ARCHITECTURE.md: every import points down (or stays on its floor), no two
folders import each other, and Dagster stays out of the floors that must not know it."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FLOORS = {"schemas": 1, "resources": 2, "memflow": 3, "recall": 4, "assets": 5, "pipelines": 6}
NO_DAGSTER = ("schemas", "memflow", "recall")
DEV_ONLY = ("tests", "bench")


def imports() -> list[tuple[str, Path, str]]:
    """(folder, file, imported top-level name) for every import of the six packages."""
    found = []
    for folder in FLOORS:
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                    names = [node.module]
                else:
                    continue
                found += [(folder, path, n.split(".")[0]) for n in names]
    return found


def test_every_import_points_down() -> None:
    upward = [
        f"{path.relative_to(ROOT)} imports {name}"
        for folder, path, name in imports()
        if (name in FLOORS and FLOORS[name] > FLOORS[folder]) or name in DEV_ONLY
    ]
    assert not upward


def test_dagster_only_where_it_belongs() -> None:
    leaks = [
        f"{path.relative_to(ROOT)}"
        for folder, path, name in imports()
        if name == "dagster"
        and (folder in NO_DAGSTER or (folder == "resources" and path.name != "configurable.py"))
    ]
    assert not leaks


def test_no_two_folders_import_each_other() -> None:
    arrows = {(folder, name) for folder, _, name in imports() if name in FLOORS and name != folder}
    assert not {(a, b) for a, b in arrows if (b, a) in arrows}
