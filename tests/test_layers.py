"""The import rule of ARCHITECTURE.md: every import points down (or stays on its floor), no two
folders import each other, and Dagster stays out of the floors that must not know it."""

from __future__ import annotations

import ast
import subprocess
import sys
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


# ------------------------------------------------------------- Dagster's public API only

# Modules that may use Dagster internals, and which ones. location.py records CLI runs as runs
# of the code location's jobs (no public API records a remote origin); launcher.py answers the
# run launcher's health check with the two types Dagster exports nowhere public (its own
# dagster-docker and dagster-k8s launchers import them from the same module).
# event_log.py is location.py's neighbour: the local instance's event log, kept because the
# default one makes `memflow run` cost 2.6x the CPU (BENCHMARKS.md, "The local event log").
INTERNALS_ALLOWED: dict[str, set[str]] = {
    "pipelines/location.py": {"*"},
    "pipelines/event_log.py": {"*"},
    "pipelines/launcher.py": {"dagster._core.launcher.base", "_instance"},
}
# Private members of Dagster objects that code has reached for (read or written).
DAGSTER_PRIVATE = {
    "_step_execution_context",
    "_metadata_accumulator",
    "_instance",
    "_plan_data",
    "_event_storage",
    "_run_storage",
    "_connect",
    "_initdb",
    "_event_to_row",
    "_store_asset_event",
    "_store_asset_event_tags",
    "_obs",
    "_watchers",
    "_db_lock",
    "_initialized_dbs",
    "_user_events",
    "_output_metadata",
}


def _internals(path: Path) -> set[str]:
    """The Dagster internals a module uses: `dagster._...` modules it imports, and (in a
    module that imports Dagster: only there can an object be Dagster's) private Dagster
    members it names as an attribute or a getattr/setattr string."""
    found: set[str] = set()
    members: set[str] = set()
    uses_dagster = False
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
            uses_dagster |= any(n.split(".")[0] == "dagster" for n in names)
            found |= {n for n in names if n.startswith("dagster._")}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            uses_dagster |= node.module.split(".")[0] == "dagster"
            if node.module.startswith("dagster._"):
                found.add(node.module)
        elif isinstance(node, ast.Attribute) and node.attr in DAGSTER_PRIVATE:
            members.add(node.attr)
        elif isinstance(node, ast.Constant) and node.value in DAGSTER_PRIVATE:
            members.add(str(node.value))
    return found | members if uses_dagster else found


def test_no_dagster_internals_outside_the_fenced_modules() -> None:
    leaks = {}
    for folder in FLOORS:
        for path in (ROOT / folder).rglob("*.py"):
            rel = path.relative_to(ROOT).as_posix()
            allowed = INTERNALS_ALLOWED.get(rel, set())
            used = {u for u in _internals(path) if "*" not in allowed and u not in allowed}
            if used:
                leaks[rel] = sorted(used)
    assert not leaks, f"Dagster internals outside the allowlist: {leaks}"


def test_the_internals_guard_sees_what_it_guards(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import dagster\n"
        "from dagster._core.events import DagsterEventType\n"
        "import dagster._utils\n"
        "step = context.op_execution_context._step_execution_context\n"
        "acc = getattr(step, '_metadata_accumulator')\n"
    )
    assert _internals(sample) == {
        "dagster._core.events",
        "dagster._utils",
        "_step_execution_context",
        "_metadata_accumulator",
    }


# ------------------------------------------------------------- OS plumbing in one module

# fcntl, /proc and os.replace live in resources/fs.py; the one landing writer (the importers',
# the API's, MCP's and the hooks') writes through directory descriptors of its own (renameat)
# and serialises a session's writers with flock. The embedded vector store locks through
# resources.fs.file_lock but renames its own fsynced Arrow files: their temporary names carry
# the scope's file name (an erase removes a killed writer's leftovers by it), which
# resources.fs.atomic_write's do not.
OS_PLUMBING_ALLOWED = {
    "resources/fs.py",
    "memflow/landing_writer.py",
    "resources/vector/local.py",
}
OS_PLUMBING = {"fcntl", "/proc/", "os.replace"}


def _plumbing(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {"fcntl" for a in node.names if a.name == "fcntl"}
        elif isinstance(node, ast.ImportFrom) and node.module == "fcntl":
            found.add("fcntl")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if "/proc/" in node.value or node.value == "/proc":
                found.add("/proc/")
        elif isinstance(node, ast.JoinedStr):
            text = "".join(v.value for v in node.values if isinstance(v, ast.Constant))
            if "/proc/" in text:
                found.add("/proc/")
        elif (
            isinstance(node, ast.Attribute)
            and node.attr == "replace"
            and isinstance(node.value, ast.Name)
            and node.value.id == "os"
        ):
            found.add("os.replace")
    return found


def test_os_plumbing_has_one_home() -> None:
    leaks = {}
    for folder in FLOORS:
        for path in (ROOT / folder).rglob("*.py"):
            rel = path.relative_to(ROOT).as_posix()
            used = _plumbing(path)
            if used and rel not in OS_PLUMBING_ALLOWED:
                leaks[rel] = sorted(used)
    assert not leaks, f"fcntl, /proc or os.replace outside resources/fs.py: {leaks}"


def test_the_allowlists_name_only_modules_that_need_them() -> None:
    """An allowlisted module that no longer uses what it was allowed (or is gone) leaves the
    list: the lists only shrink."""
    stale = [rel for rel in OS_PLUMBING_ALLOWED if not _plumbing_of(rel)]
    stale += [
        f"{rel}: {sorted(allowed - used)}"
        for rel, allowed in INTERNALS_ALLOWED.items()
        if not (used := _internals_of(rel)) or ("*" not in allowed and allowed - used)
    ]
    assert not stale


def _plumbing_of(rel: str) -> set[str]:
    return _plumbing(ROOT / rel) if (ROOT / rel).is_file() else set()


def _internals_of(rel: str) -> set[str]:
    return _internals(ROOT / rel) if (ROOT / rel).is_file() else set()


def test_the_plumbing_guard_sees_what_it_guards(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import fcntl\nimport os\nstat = open(f'/proc/{pid}/stat').read()\nos.replace('a', 'b')\n"
    )
    assert _plumbing(sample) == OS_PLUMBING


# ------------------------------------------------------------- schemas/: data libraries only

# What floor 1 may import besides the standard library and itself: the data libraries its
# rules and shapes are written in, and the pattern libraries the redaction engine runs on.
SCHEMAS_MAY_IMPORT = {
    "schemas",
    "polars",  # table layouts, conform, redact_series
    "pandera",  # contracts
    "detect_secrets",  # redaction: its keyword list, denylists and entropy
    "re2",  # redaction: the rule set's and the prefilter's linear-time regexes
    "regex",  # ids: norm_key's Unicode classes
    "confusable_homoglyphs",  # ids: names that only look alike
}


def _imported(path: Path) -> set[str]:
    """Top-level names a module imports: import statements (function-level ones included) and
    `importlib.import_module` / `__import__` calls. A call whose name is not a literal is
    reported as `<dynamic>` unless it names a submodule of the package itself
    (f"{__name__}...")."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module.split(".")[0])
        elif (
            isinstance(node, ast.Call)
            and node.args
            and (
                getattr(node.func, "attr", None) == "import_module"
                or getattr(node.func, "id", None) in ("import_module", "__import__")
            )
        ):
            arg = node.args[0]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                found.add(arg.value.split(".")[0])
            elif not (
                isinstance(arg, ast.JoinedStr)
                and arg.values
                and isinstance(arg.values[0], ast.FormattedValue)
                and getattr(arg.values[0].value, "id", None) == "__name__"
            ):
                found.add("<dynamic>")
    return found


def test_schemas_imports_only_data_libraries() -> None:
    allowed = SCHEMAS_MAY_IMPORT | set(sys.stdlib_module_names)
    leaks = {
        path.relative_to(ROOT).as_posix(): sorted(names - allowed)
        for path in sorted((ROOT / "schemas").rglob("*.py"))
        if (names := _imported(path)) - allowed
    }
    assert not leaks, f"schemas/ imports what is no data library: {leaks}"


def test_the_schemas_guard_sees_what_it_guards(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import re, json\n"
        "import polars as pl\n"
        "from schemas.rules import Reason\n"
        "from . import ids\n"
        "def f(name):\n"
        "    import httpx\n"
        "    from resources.settings import declared\n"
        "    importlib.import_module('dagster')\n"
        "    importlib.import_module(f'{__name__}.engine')\n"
        "    return __import__(name)\n"
    )
    names = _imported(sample)
    assert names == {
        "re",
        "json",
        "polars",
        "schemas",
        "httpx",
        "resources",
        "dagster",
        "<dynamic>",
    }
    assert names - SCHEMAS_MAY_IMPORT - set(sys.stdlib_module_names) == {
        "httpx",
        "resources",
        "dagster",
        "<dynamic>",
    }


def test_a_scope_is_spelled_without_loading_the_redaction_engine() -> None:
    """Importing `schemas.scope` loads none of the engine: a hook or a client that only names
    a tenant does not pay for it (the first `Scope` made does, for its secret check)."""
    code = (
        "import sys, schemas.scope;"
        "print(sorted(m for m in sys.modules if m.startswith(('schemas.redaction', "
        "'detect_secrets', 're2', 'polars', 'pandera', 'dagster'))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


# ------------------------------------------------------------- bench/: no import circle


def bench_imports(folder: Path) -> dict[str, set[str]]:
    """Which modules of `folder` (a flat package of scripts, also run as `python bench/x.py`
    with the folder on the path) each one imports, at any level of the module."""
    package = folder.name
    modules = {p.stem for p in folder.glob("*.py")}
    graph: dict[str, set[str]] = {}
    for path in sorted(folder.glob("*.py")):
        edges: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name.split(".") for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level <= 1:
                base = ([package] if node.level else []) + (node.module or "").split(".")
                base = [b for b in base if b]
                # `from bench import a` / `from . import a` name modules; else the module does
                names = [a.name for a in node.names]
                targets = [[*base, n] for n in names] if base == [package] else [base]
            else:
                continue
            for parts in targets:
                if parts[0] == package and len(parts) > 1:
                    parts = parts[1:]
                if parts and parts[0] in modules:
                    edges.add(parts[0])
        graph[path.stem] = edges - {path.stem}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every import circle of `graph`, each as the path from its smallest module back to it."""
    found = set()

    def walk(start: str, node: str, path: list[str]) -> None:
        for nxt in graph.get(node, ()):
            if nxt == start:
                found.add(tuple(path))
            elif nxt > start and nxt not in path:
                walk(start, nxt, [*path, nxt])

    for start in sorted(graph):
        walk(start, start, [start])
    return [list(c) for c in sorted(found)]


def test_bench_has_no_import_circle() -> None:
    graph = bench_imports(ROOT / "bench")
    # the pair that once was a circle: bench_quality runs bench_locomo, not the other way
    assert "bench_locomo" in graph["bench_quality"] and "bench_quality" not in graph["bench_locomo"]
    assert not circles(graph)


def test_the_bench_guard_sees_what_it_guards(tmp_path: Path) -> None:
    folder = tmp_path / "bench"
    folder.mkdir()
    (folder / "a.py").write_text("from bench.b import VARIANTS\n")
    (folder / "b.py").write_text("def main():\n    from bench import c\n")
    (folder / "c.py").write_text("import a\nimport numpy\n")
    (folder / "d.py").write_text("from bench.a import x\nfrom . import e\n")
    (folder / "e.py").write_text("import bench.d\n")
    graph = bench_imports(folder)
    assert graph == {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a", "e"}, "e": {"d"}}
    assert circles(graph) == [["a", "b", "c"], ["d", "e"]]
