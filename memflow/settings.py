"""Settings for the CLI: flags > environment > the repository's `.env` > built-in defaults.

The CLI writes the resolved values into its own process environment, where the code location's
`EnvVar`s read them when a run starts. Nothing here runs at import time.
"""

from __future__ import annotations

import os
from pathlib import Path

from dotenv import dotenv_values

from pipelines.resources import SETTINGS


def apply(overrides: dict[str, str | None], env_file: str | os.PathLike[str] = ".env") -> dict:
    """Resolve every setting and export it to os.environ; returns the resolved values."""
    file_values = dotenv_values(env_file) if Path(env_file).is_file() else {}
    resolved: dict[str, str] = {}
    for name, default in SETTINGS.items():
        value = overrides.get(name)
        if value is None:
            value = os.environ.get(name)
        if value is None:
            value = file_values.get(name)
        if value is None:
            value = default
        resolved[name] = value
        os.environ[name] = value
    return resolved
