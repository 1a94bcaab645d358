"""A model key's directory and its one-time declaration (`model.json`: the model's name and
the dimension of its vectors), shared by the embedding ledger and the embedded store.

The first writer of a model declares it, atomically across processes (a hard link of a
temporary file, which fails when the name exists), and every later writer is held to it: a
vector of another dimension is refused without looking at any tenant's files.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
from pathlib import Path

MODEL_FILE = "model.json"
_SLUG = re.compile(r"[^a-z0-9]+")


def model_dir_name(model: str) -> str:
    """`<slug>-<hash>`: the sanitized model key plus a hash, so slugs cannot collide."""
    slug = _SLUG.sub("-", model.lower()).strip("-")[:60] or "model"
    return f"{slug}-{hashlib.sha256(model.encode('utf-8')).hexdigest()[:10]}"


def check_declared(model: str, held: int | None, dim: int) -> None:
    """A ValueError when `model` is declared (`held`) with another dimension than `dim`."""
    if held is not None and held != dim:
        raise ValueError(f"model {model!r} holds {held}-dimensional vectors; got {dim}")


def read_declaration(folder: Path, model: str) -> int | None:
    """The dimension declared in `folder` for `model`; None before its first write. A
    ValueError when the file is unreadable or another model's."""
    path = folder / MODEL_FILE
    try:
        raw = json.loads(path.read_text("utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as err:
        raise ValueError(f"{path} cannot be read: {err}") from err
    dim = raw.get("dim") if isinstance(raw, dict) else None
    if not isinstance(dim, int) or raw.get("model") != model:
        raise ValueError(f"{path} is not {model!r}'s declaration")
    return dim


def declared_models(root: Path) -> dict[str, tuple[str, int]]:
    """directory name -> (model, dim) of every model declared under `root`."""
    out: dict[str, tuple[str, int]] = {}
    try:
        entries = list(os.scandir(root))
    except FileNotFoundError:
        return out
    for entry in entries:
        if not entry.is_dir():
            continue
        try:
            raw = json.loads(Path(entry.path, MODEL_FILE).read_text("utf-8"))
        except (OSError, ValueError):
            continue  # being created, or not a model's directory
        model = raw.get("model") if isinstance(raw, dict) else None
        if isinstance(model, str) and model_dir_name(model) == entry.name:
            out[entry.name] = (model, int(raw["dim"]))
    return out


def declare(folder: Path, model: str, dim: int) -> int:
    """Declare `model`'s dimension in `folder` unless declared already; returns the declared
    one (the first writer's, whatever process it ran in). Storage failures raise OSError."""
    tmp = folder / f".{MODEL_FILE}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps({"model": model, "dim": dim}), "utf-8")
        os.link(tmp, folder / MODEL_FILE)  # fails when another writer declared first
    except FileExistsError:
        pass
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
    declared = read_declaration(folder, model)
    assert declared is not None
    return declared
