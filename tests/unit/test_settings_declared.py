"""Every `MEMFLOW_*` name is declared once (resources/settings.py) with its default, type and
meaning, read there and nowhere else, and documented from the declarations."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from resources.settings import (
    DECLARED,
    DECLARED_SETTINGS,
    agent_env,
    client_env,
    configuration_table,
    declared,
    hook_env,
)

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("schemas", "resources", "memflow", "recall", "assets", "pipelines")
SETTINGS_MODULE = ROOT / "resources" / "settings.py"
NAME = re.compile(r"MEMFLOW_[A-Z0-9][A-Z0-9_]*")
# Where a whole name may stand as a value outside the settings module, and why:
ALLOWED = {
    # floor 1 cannot import the settings (floor 2): the two names the time window reads from
    # the mapping it is given; the declarations use these very constants
    ("schemas/rules.py", "MEMFLOW_HISTORY_START"),
    ("schemas/rules.py", "MEMFLOW_FUTURE_TOLERANCE_HOURS"),
}


ENV_NAMES = {"env", "environ", "environment"}


def _is_env(node: ast.AST) -> bool:
    """`os.environ`, `environ`, or a mapping named `env`: what settings are read from."""
    if isinstance(node, ast.Attribute) and node.attr == "environ":
        return True
    return isinstance(node, ast.Name) and node.id in ENV_NAMES


def _whole(node: ast.AST | None) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value if NAME.fullmatch(node.value) else None
    return None


def strings() -> list[tuple[str, int, str]]:
    """(file, line, text) of every string constant of the six packages."""
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = str(path.relative_to(ROOT))
            for node in ast.walk(ast.parse(path.read_text(), rel)):
                if isinstance(node, ast.Constant) and isinstance(node.value, str):
                    found.append((rel, node.lineno, node.value))
    return found


def reads(source: str, rel: str) -> list[tuple[str, int, str]]:
    """Where `source` reads a setting by its name: `os.environ.get("MEMFLOW_X")`,
    `os.getenv(...)`, `env["MEMFLOW_X"]` (a mapping named env or environ), `EnvVar("MEMFLOW_X")`
    outside pipelines/resources.py, and a module-level constant naming one (`X_SETTING =
    "MEMFLOW_X"`, the way names were read elsewhere before). A resolved `Settings` looked up
    by name (`cfg["MEMFLOW_DATA_DIR"]`) and a child's environment being written are not."""
    found = []
    tree = ast.parse(source, rel)
    for node in ast.walk(tree):
        name = None
        if isinstance(node, ast.Call) and node.args:
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr in ("get", "pop", "setdefault"):
                name = _whole(node.args[0]) if _is_env(func.value) else None
            elif isinstance(func, ast.Attribute) and func.attr == "getenv":
                name = _whole(node.args[0])
            elif getattr(func, "id", getattr(func, "attr", None)) == "EnvVar":
                name = _whole(node.args[0]) if rel != "pipelines/resources.py" else None
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            name = _whole(node.slice) if _is_env(node.value) else None
        if name:
            found.append((rel, node.lineno, name))
    for node in tree.body:
        if isinstance(node, ast.Assign | ast.AnnAssign) and _whole(node.value):
            found.append((rel, node.lineno, _whole(node.value)))
    return found


def every_read() -> list[tuple[str, int, str]]:
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = str(path.relative_to(ROOT))
            if rel != "resources/settings.py":
                found += reads(path.read_text(), rel)
    return found


def test_every_name_the_packages_mention_is_declared() -> None:
    undeclared = sorted(
        {
            f"{rel}:{line}: {name}"
            for rel, line, text in strings()
            for name in NAME.findall(text)
            if name not in DECLARED and not name.endswith("_")
        }
    )
    assert not undeclared


def test_no_name_is_read_outside_the_settings_module() -> None:
    stray = sorted(
        f"{rel}:{line}: {name}" for rel, line, name in every_read() if (rel, name) not in ALLOWED
    )
    assert not stray


@pytest.mark.parametrize(
    "source",
    [
        'import os\nx = os.environ.get("MEMFLOW_API_URL")',
        'import os\nx = os.getenv("MEMFLOW_API_URL", "")',
        'def f(env):\n    return env["MEMFLOW_TENANT"]',
        'URL_SETTING = "MEMFLOW_API_URL"',
        'from dagster import EnvVar\nv = EnvVar("MEMFLOW_DATA_DIR")',
    ],
)
def test_the_guard_finds_a_stray_read(source: str) -> None:
    assert reads(source, "recall/example.py")


@pytest.mark.parametrize(
    "source",
    [
        'def f(cfg):\n    return cfg["MEMFLOW_DATA_DIR"]',
        'def f(env):\n    env["MEMFLOW_API_URL"] = "http://x"',
        'raise ValueError("set MEMFLOW_EXTRACTOR to openai")',
    ],
)
def test_the_guard_leaves_lookups_writes_and_messages(source: str) -> None:
    assert not reads(source, "recall/example.py")


def test_every_declaration_has_a_meaning_and_a_default_of_its_type() -> None:
    for s in DECLARED_SETTINGS:
        assert s.meaning.strip(), s.name
        assert s.name.startswith("MEMFLOW_")
        if s.default != "":
            assert s.parse(s.default) is not None or s.kind is str, s.name
            assert s.valid(s.default), s.name
    assert len(DECLARED) == len(DECLARED_SETTINGS)  # declared once


def test_the_readme_configuration_table_is_the_declarations() -> None:
    readme = (ROOT / "README.md").read_text()
    start, end = "<!-- settings table: memflow settings --markdown -->", "<!-- end settings -->"
    assert start in readme and end in readme
    table = readme.split(start, 1)[1].split(end, 1)[0].strip()
    assert table == configuration_table()


@pytest.mark.parametrize(
    ("raw", "expected"),
    [(None, 5.0), ("", 5.0), ("2.5", 2.5), ("-1", 5.0), ("nan", 5.0), ("abc", 5.0), ("9999", 5.0)],
)
def test_light_readers_fall_back_to_the_default_on_a_bad_value(raw, expected) -> None:
    env = {} if raw is None else {"MEMFLOW_API_TIMEOUT_S": raw}
    assert client_env(env).timeout_s == expected


def test_light_readers_read_what_they_are_given() -> None:
    env = {
        "MEMFLOW_API_URL": " http://127.0.0.1:9999 ",
        "MEMFLOW_API_KEY": "k",
        "MEMFLOW_HOOK_MAX_FACTS": "3",
        "MEMFLOW_HOOK_BUDGET_S": "1.5",
        "MEMFLOW_TENANT": "acme/api",
        "MEMFLOW_DEFAULT_ORG": "",
    }
    assert client_env(env).api_url == "http://127.0.0.1:9999" and client_env(env).api_key == "k"
    assert hook_env(env).max_facts == 3 and hook_env(env).budget_s == 1.5
    assert hook_env({}).budget_s is None and hook_env({}).max_chars == 4000
    assert agent_env(env).tenant == "acme/api" and agent_env(env).default_org == "local"
    assert declared("MEMFLOW_MCP_CLIENT").default == agent_env({}).mcp_client == "mcp"


def test_the_settings_module_costs_a_hook_no_pydantic() -> None:
    code = (
        "import sys, resources.settings, recall.client, recall.hooks, memflow.importers.tenant;"
        "print(sorted(m for m in ('pydantic', 'pydantic_settings', 'dagster', 'polars') "
        "if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
