"""The catalog a data engineer expects on every table asset, added to the definitions in one
place (`dagster.map_asset_specs`, as dagster-open-platform maps its policies over specs):

- ``dagster/column_schema`` and ``dagster/table_name`` from the table's layout
  (`schemas.tables.TABLES`), the ``delta`` kind, and the owner;
- a **code version** per asset: a digest of the source of the asset's module and of every
  memflow module it imports (transitively: the domain stage, the rules, the contracts, the
  table layouts). A code change therefore marks the asset stale in the UI, and its
  downstream with it once it is rematerialized, like a model change does.

Each materialization adds what only the run knows: the table's URI, its rows, the Delta
version the commit made (`pipelines.io`), and the tenant's own rows
(``dagster/partition_row_count``, `assets.metadata.tenant_metadata`).
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import os
import pkgutil
import re
from collections.abc import Sequence
from pathlib import Path

from dagster import AssetsDefinition, AssetSpec, TableColumn, TableSchema, map_asset_specs

import assets as assets_package
from schemas.tables import TABLES

OWNERS = ("team:memflow",)
PROJECT = ("assets", "memflow", "schemas", "resources")


ROOT = Path(__file__).resolve().parents[1]


def _file(module: str) -> Path | None:
    """The source file of a project module (found by path: nothing is imported)."""
    return _file_under(ROOT, module)


@functools.cache
def _file_under(root: Path, module: str) -> Path | None:
    # Cached: a code version walks ~1,700 imported names, most of them seen before (each
    # `from x import a, b` also tries x.a and x.b as modules), and building and statting
    # paths for each was most of loading the definitions (~0.1 s of every `memflow run`).
    base = os.path.join(root, *module.split("."))
    for path in (base + ".py", os.path.join(base, "__init__.py")):
        if os.path.isfile(path):
            return Path(path)
    return None


_IMPORT = re.compile(r"^\s*(?:from\s+([\w.]+)\s+import\s+([\w., ()]+)|import\s+([\w.]+))", re.M)


@functools.cache
def _imports(path: Path) -> frozenset[str]:
    """The project modules a file imports (a regex over its lines: parsing every file of
    the closure would cost a definitions load ~0.3 s)."""
    out: set[str] = set()
    for base, names, plain in _IMPORT.findall(path.read_text()):
        if plain:
            out.add(plain)
            continue
        out.add(base)
        out |= {f"{base}.{n.strip()}" for n in names.strip("() ").split(",") if n.strip()}
    return frozenset(m for m in out if m.split(".")[0] in PROJECT)


@functools.cache
def code_version(module: str) -> str:
    """A digest of `module`'s source and of the project modules it imports, transitively."""
    seen: dict[str, Path] = {}
    todo = [module]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        path = _file(name)
        if path is None:
            continue
        seen[name] = path
        todo.extend(_imports(path) - seen.keys())
    digest = hashlib.sha256()
    for name in sorted(seen):
        digest.update(name.encode())
        digest.update(seen[name].read_bytes())
    return digest.hexdigest()[:16]


@functools.cache
def _asset_modules() -> dict[str, str]:
    """Asset key -> the module of `assets/` that defines it."""
    out: dict[str, str] = {}
    for info in pkgutil.iter_modules(assets_package.__path__, "assets."):
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            if isinstance(value, AssetsDefinition):
                for key in value.keys:
                    out.setdefault(key.to_user_string(), info.name)
    return out


def _schema(asset: str) -> TableSchema:
    return TableSchema(
        columns=[TableColumn(name, str(dtype)) for name, dtype in TABLES[asset].items()]
    )


def _with_catalog(spec: AssetSpec) -> AssetSpec:
    name = spec.key.to_user_string()
    module = _asset_modules().get(name)
    version = code_version(module) if module else None
    if name not in TABLES:  # model sources and sinks: a code version and the owner only
        return spec.replace_attributes(code_version=version or spec.code_version).merge_attributes(
            owners=[o for o in OWNERS if o not in spec.owners]
        )
    return spec.replace_attributes(code_version=version or spec.code_version).merge_attributes(
        metadata={"dagster/column_schema": _schema(name), "dagster/table_name": f"memflow.{name}"},
        owners=[o for o in OWNERS if o not in spec.owners],
        kinds={"delta"} - set(spec.kinds),
    )


def with_catalog(defs: Sequence[AssetsDefinition]) -> list[AssetsDefinition]:
    """The assets with the catalog metadata, code versions and owners above."""
    observable = [a for a in defs if a.is_observable]
    mapped = map_asset_specs(_with_catalog, [a for a in defs if not a.is_observable])
    return [*observable, *mapped]  # type: ignore[list-item]
