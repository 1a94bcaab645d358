"""Settings resolution for everything that runs memflow: flags > environment > the working
directory's `.env` > what the state home records (`resources.home`) > built-in defaults.

`resolve` runs once per command. The values are validated by the pydantic-settings model of
`resources.settings` (a `MEMFLOW_RETENTION_DAYS=abc` is an error naming the setting, not a crash
later in a run); the data directory and the landing zone become absolute paths (an empty one is
the state home's record, else `<home>/data` and `<home>/landing`), so every process of one
system, started from any directory, uses the same two. `resolve` exports the values into the
process environment, where the code location's `EnvVar`s read them when a run starts, and
returns the `Settings` object the CLI hands to the server, `memflow status` and recall.
Nothing here runs at import.

A command's resolution is final for its own runs: `MEMFLOW_SETTINGS_FILE` is exported empty,
since a settings file re-read at run start (what the code location does under `dagster dev`)
would put `.env` above the flags and the environment.

Directories: `must_exist` names the path settings a command only reads (`memflow status --data
/typo` is an error, never a new directory); `create` the ones it may create (its writes go
there); `create_default` the ones it may create when they are the state home's own (a path
someone named must exist). Neither: nothing is checked or created.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from resources.home import RecordError, default_path, read_record, state_home
from resources.settings import (
    CORE,
    DATA_SETTING,
    DECLARED,
    DECLARED_SETTINGS,
    HOME,
    HOME_SETTING,
    LANDING_SETTING,
    PATH_SETTINGS,
    SETTINGS_FILE,
    Settings,
    environment_string,
    settings_model,
)

LABELS = {DATA_SETTING: "data directory", LANDING_SETTING: "landing zone"}


class SettingsError(ValueError):
    """A setting that cannot be used, said in one line per problem (names, never secrets)."""


def resolve(
    overrides: Mapping[str, str | None] | None = None,
    env_file: str | os.PathLike[str] = ".env",
    *,
    must_exist: Iterable[str] = (),
    create: Iterable[str] = (),
    create_default: Iterable[str] = (),
) -> Settings:
    """Resolve every setting, export it to os.environ and return the result."""
    given = {k: v for k, v in (overrides or {}).items() if v is not None}
    for name in given:
        if name not in DECLARED or DECLARED[name].group not in (CORE, HOME):
            raise SettingsError(f"{name} is not a setting a command resolves")
    env_path = Path(env_file)
    file_values = _dotenv(env_path)
    from pydantic import ValidationError

    try:
        model = settings_model()(
            _env_file=env_path if env_path.is_file() else None,
            **{DECLARED[k].field: v for k, v in given.items()},
        )
    except ValidationError as exc:
        raise SettingsError(_explain(exc)) from None
    home = state_home({HOME_SETTING: model.home})
    values: dict[str, str] = {}
    sources: dict[str, str] = {}
    for s in DECLARED_SETTINGS:
        if s.group != CORE:
            continue
        values[s.name] = environment_string(getattr(model, s.field))
        sources[s.name] = _source(s.name, given, file_values)
    record = None
    for name in PATH_SETTINGS:
        if values[name].strip():
            values[name] = str(Path(values[name].strip()).expanduser().resolve())
            continue
        if record is None:
            try:
                record = read_record(home)
            except RecordError as exc:
                raise SettingsError(f"the state home's record is damaged: {exc}") from None
        if record is not None:
            values[name], sources[name] = record.path_of(name), "state home record"
        else:
            values[name], sources[name] = str(default_path(home, name)), "state home default"
    keys = values["MEMFLOW_API_KEYS_FILE"].strip()
    if keys:
        values["MEMFLOW_API_KEYS_FILE"] = str(Path(keys).expanduser().resolve())
    create = set(create) | {n for n in create_default if sources[n].startswith("state home")}
    _check_directories(values, sources, set(must_exist), create)
    values[SETTINGS_FILE] = ""
    for name, value in values.items():
        os.environ[name] = value
    os.environ[HOME_SETTING] = str(home)
    return Settings(values, home=home, sources=sources)


def _dotenv(path: Path) -> dict[str, str]:
    if not path.is_file():
        return {}
    from dotenv import dotenv_values

    return {k: v for k, v in dotenv_values(path).items() if v is not None}


def _source(name: str, given: Mapping[str, str], file_values: Mapping[str, str]) -> str:
    if name in given:
        return "flag"
    if name in os.environ and (os.environ[name].strip() or name not in PATH_SETTINGS):
        return "environment"
    if name in file_values and (file_values[name].strip() or name not in PATH_SETTINGS):
        return ".env"
    return "default"


def _check_directories(
    values: Mapping[str, str], sources: Mapping[str, str], must_exist: set[str], create: set[str]
) -> None:
    """Every path checked before any is created: a command refused for one mistyped path
    leaves no new directory behind for another."""
    missing = []
    for name in PATH_SETTINGS:
        path = Path(values[name])
        if path.exists() and not path.is_dir():
            raise SettingsError(f"the {LABELS[name]} {path} is not a directory")
        if path.is_dir():
            continue
        if name in create:
            missing.append(path)
        elif name in must_exist:
            if sources[name].startswith("state home"):
                raise SettingsError(
                    f"the {LABELS[name]} {path} does not exist yet: `memflow up` or "
                    "`memflow run` creates it"
                )
            raise SettingsError(
                f"the {LABELS[name]} {path} (from the {sources[name]}) does not exist: check "
                "the path (`memflow up --create` or `memflow run` creates a new one)"
            )
    for path in missing:
        path.mkdir(parents=True, exist_ok=True)


def _explain(exc: object) -> str:
    """One line per invalid setting, by its environment name; the value only when the
    setting is not a secret."""
    lines = []
    for error in exc.errors():  # type: ignore[attr-defined]
        field = str(error["loc"][0]) if error.get("loc") else "?"
        setting = next((s for s in DECLARED_SETTINGS if s.field == field), None)
        name = setting.name if setting else field
        shown = "" if setting is None or setting.secret else f" (got {error.get('input')!r})"
        message = str(error.get("msg", "invalid")).removeprefix("Value error, ")
        lines.append(f"{name}: {message}{shown}")
    return "; ".join(lines)


def describe(cfg: Settings) -> list[dict[str, str]]:
    """Every declared setting as this command sees it: value (secrets masked), where it came
    from, and its group. The light groups (client, agent, hook) are read as their readers read
    them (a bad value falls back to the default, shown as such)."""
    rows = [{"name": HOME_SETTING, "value": str(cfg.home), "source": "resolved", "group": HOME}]
    for s in DECLARED_SETTINGS:
        if s.group == HOME:
            continue
        if s.group == CORE:
            value, source = cfg[s.name], cfg.sources.get(s.name, "default")
        else:
            raw = os.environ.get(s.name)
            value = environment_string(s.parse(raw))
            if s.valid(raw):
                source = "environment"
            elif raw is not None and raw.strip():
                given = "value" if s.secret else repr(raw)
                source = f"default (the environment's {given} is not valid)"
            else:
                source = "default"
        if s.secret and value:
            value = "***"
        rows.append({"name": s.name, "value": value, "source": source, "group": s.group})
    return rows


def repository_of(path: str | os.PathLike[str]) -> Path | None:
    """The git work tree whose tracked files lie in `path` (the bundled sample, a folder of a
    checkout), if any: memflow never writes agents' turns where they could be committed. A
    directory inside a work tree that tracks nothing there (a state home under a home
    directory kept in git) is not one."""
    import shutil
    import subprocess

    current = Path(path).resolve()
    root = next((f for f in (current, *current.parents) if (f / ".git").exists()), None)
    if root is None:
        return None
    git = shutil.which("git")
    if git is None:  # cannot ask: only the sample's own name is known for sure
        return root if current == root / "landing-sample" else None
    try:
        found = subprocess.run(
            [git, "-C", str(root), "ls-files", "-z", "--", str(current.relative_to(root))],
            capture_output=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return root if current == root / "landing-sample" else None
    return root if found.returncode == 0 and found.stdout else None
