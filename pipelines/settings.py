"""Settings resolution for everything that runs memflow: flags > environment > the repository's
`.env` > built-in defaults (`resources.settings.DEFAULTS`).

`resolve` runs once per command. It exports the resolved values into the process environment,
where the code location's `EnvVar`s read them when a run starts, and returns the `Settings`
object the CLI hands to the server, `memflow status` and recall. Nothing here runs at import.

A command's resolution is final for its own runs: `MEMFLOW_SETTINGS_FILE` is exported empty,
since a settings file re-read at run start (what the code location does under `dagster dev`)
would put `.env` above the flags and the environment.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from dotenv import dotenv_values

from resources.settings import DEFAULTS, SETTINGS_FILE, Settings


def resolve(
    overrides: Mapping[str, str | None] | None = None,
    env_file: str | os.PathLike[str] = ".env",
) -> Settings:
    """Resolve every setting, export it to os.environ and return the result."""
    overrides = overrides or {}
    file_values = dotenv_values(env_file) if Path(env_file).is_file() else {}
    resolved: dict[str, str] = {}
    for name, default in DEFAULTS.items():
        for source in (overrides, os.environ, file_values):
            value = source.get(name)
            if value is not None:
                break
        else:
            value = default
        if name == SETTINGS_FILE:
            value = ""
        resolved[name] = value
        os.environ[name] = value
    return Settings(resolved)
