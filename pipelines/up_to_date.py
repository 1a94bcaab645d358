"""Which tenants a plain `memflow run` has something to do for (issue 19: work proportional to
what changed).

A tenant is **up to date**, and skipped, only when all of these hold:

- a successful run completed it (its entry is written after its range succeeded, and removed
  before a run over it starts: a failed or killed run leaves no entry, so it runs again);
- its landing directory's listing (names, sizes, mtimes: `pipelines.sensors.listing_digest`,
  one ``lstat`` per entry, no file opened) is the one taken when that run *started* (a file
  landing mid-run makes the next run pick the tenant up again);
- the run's **fingerprint** is the one recorded with the entry. It covers what changes the
  outputs of unchanged inputs: the extraction and embedding models' identities (the resources'
  `identity()`, with `MEMFLOW_SETTINGS_FILE` re-read as a run does), memflow's code (every
  asset's code version, `pipelines.catalog.code_version`, and the package version), and,
  conservatively, every resolved ``MEMFLOW_*`` setting except those that cannot change a
  tenant's outputs (the landing, data and home paths; the API, hook and MCP clients' settings;
  the recall-time rerank's).

Anything unknown runs: no record (a data directory written before this module), an unreadable
or foreign record, or a tenant missing from it. `memflow run --all` runs every tenant.

The record is one small JSON file, ``<data>/memflow/up_to_date.json`` (``{"version", "tenants":
{key: [digest, fingerprint]}}``), rewritten atomically (`resources.fs.atomic_write_text`) by the
one process that runs (the run holds the tenant-block locks; the file is written under its own
lock too). One entry per tenant, not per file: 1,000 tenants are ~60 KB. A file, not a Delta
table: it is the CLI's bookkeeping (not an asset, not queried), read whole and written whole
a few times per `memflow run`, and a Delta commit per range would cost more than the runs it
saves for one changed tenant.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from pathlib import Path

from resources.fs import atomic_write_text, file_lock

VERSION = 1
RECORD = Path("memflow", "up_to_date.json")

# Settings that cannot change a tenant's outputs (paths of the run itself, clients' settings).
_IGNORED = frozenset(
    {"MEMFLOW_LANDING_DIR", "MEMFLOW_DATA_DIR", "MEMFLOW_HOME", "MEMFLOW_RERANKER"}
)
_IGNORED_PREFIXES = ("MEMFLOW_API_", "MEMFLOW_HOOK_", "MEMFLOW_MCP_", "MEMFLOW_RERANK_")


def record_path(data_dir: str | os.PathLike[str]) -> Path:
    return Path(data_dir) / RECORD


def _model_identities() -> dict[str, str]:
    from resources.configurable import EmbeddingModelResource, ExtractionModelResource
    from resources.settings import EMBEDDING_SETTINGS, EXTRACTION_SETTINGS, SETTINGS_FILE

    out: dict[str, str] = {}
    settings_file = os.environ.get(SETTINGS_FILE, "")
    for name, cls, fields in (
        ("extraction", ExtractionModelResource, EXTRACTION_SETTINGS),
        ("embedding", EmbeddingModelResource, EMBEDDING_SETTINGS),
    ):
        values = {f: os.environ.get(setting, "") for f, setting in fields.items()}
        try:
            fresh = cls(**values, settings_file=settings_file).reread()
            out[name] = cls(**{**values, **fresh}).identity()
        except Exception as exc:  # unknown identity: a value that never matches
            out[name] = f"unresolved:{type(exc).__name__}:{os.urandom(8).hex()}"
    return out


def _code() -> dict[str, str]:
    from pipelines import catalog

    try:
        from importlib.metadata import version

        package = version("memflow")
    except Exception:  # not installed as a distribution: the source hashes only
        package = ""
    modules = sorted(set(catalog._asset_modules().values()))
    versions = {m: catalog.code_version(m) for m in modules}
    # The runner's own bookkeeping and the job definitions decide what runs, too.
    for extra in ("pipelines.jobs", "pipelines.io", "pipelines.runner"):
        versions[extra] = catalog.code_version(extra) if catalog._file(extra) else ""
    return {"package": package, **versions}


def _settings() -> dict[str, str]:
    out = {}
    for name, value in os.environ.items():
        if not name.startswith("MEMFLOW_") or name in _IGNORED:
            continue
        if name.startswith(_IGNORED_PREFIXES):
            continue
        out[name] = value
    from resources.settings import SETTINGS_FILE

    path = os.environ.get(SETTINGS_FILE, "").strip()
    if path:
        try:
            out["(settings file)"] = hashlib.sha256(Path(path).read_bytes()).hexdigest()
        except OSError:
            out["(settings file)"] = "unreadable"
    return out


def fingerprint() -> str:
    """16 hex characters that change when the models, memflow's code or the settings that
    shape outputs change (see the module docstring)."""
    parts = {"models": _model_identities(), "code": _code(), "settings": _settings()}
    text = json.dumps(parts, sort_keys=True)
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()[:16]


def load(data_dir: str | os.PathLike[str]) -> dict[str, tuple[str, str]]:
    """{tenant: (listing digest, fingerprint)}; {} when there is no usable record."""
    path = record_path(data_dir)
    try:
        raw = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(raw, dict) or raw.get("version") != VERSION:
        return {}
    tenants = raw.get("tenants")
    if not isinstance(tenants, dict):
        return {}
    out: dict[str, tuple[str, str]] = {}
    for key, entry in tenants.items():
        if isinstance(entry, list) and len(entry) == 2 and all(isinstance(v, str) for v in entry):
            out[str(key)] = (entry[0], entry[1])
    return out


def to_do(digests: dict[str, str], recorded: dict[str, tuple[str, str]], current: str) -> list[str]:
    """The tenants of `digests` (tenant -> listing digest now) with something to do."""
    return [k for k, d in digests.items() if recorded.get(k) != (d, current)]


def update(
    data_dir: str | os.PathLike[str],
    *,
    done: dict[str, str] | None = None,
    forget: Iterable[str] = (),
    current: str = "",
) -> None:
    """Record `done` (tenant -> the listing digest taken before its run) under `current`, and
    drop the entries of `forget`; one atomic rewrite."""
    path = record_path(data_dir)
    with file_lock(path.with_suffix(".lock")):
        tenants = {k: list(v) for k, v in load(data_dir).items()}
        for key in forget:
            tenants.pop(key, None)
        for key, digest in (done or {}).items():
            tenants[key] = [digest, current]
        text = json.dumps({"version": VERSION, "tenants": tenants}, sort_keys=True)
        atomic_write_text(path, text)
