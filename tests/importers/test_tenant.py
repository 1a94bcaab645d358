"""Tenant mapping: explicit rules, git remotes (worktrees too), defaults, sanitising."""

from __future__ import annotations

from pathlib import Path

import pytest

from memflow.importers.tenant import (
    TenantMapError,
    TenantMapper,
    parse_map,
    remote_parts,
    sanitize_part,
)
from schemas.scope import Scope


@pytest.mark.parametrize(
    ("url", "parts"),
    [
        ("git@github.com:acme/payments.git", ("acme", "payments")),
        ("https://github.com/acme/payments", ("acme", "payments")),
        ("https://user:secret@gitlab.com/group/sub/tool.git", ("sub", "tool")),
        ("ssh://git@host:2222/acme/web.git", ("acme", "web")),
        ("/srv/git/acme/core.git", ("acme", "core")),
        ("file:///srv/git/acme/core", ("acme", "core")),
        ("https://github.com/", None),
        ("", None),
        (None, None),
    ],
)
def test_remote_parts(url: str | None, parts: tuple[str, str] | None) -> None:
    assert remote_parts(url) == parts


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("acme", "acme"),
        ("weird name!", "weird-name-"),
        ("..hidden", "hidden"),
        ("a..b", "a.b"),
        ("", "unknown"),
        ("ü" * 5, "unknown"),
        ("x" * 300, "x" * 100),
    ],
)
def test_sanitize_part_gives_valid_scope_names(raw: str, clean: str) -> None:
    assert sanitize_part(raw) == clean
    Scope(clean, clean)


def test_map_rules_longest_prefix_wins(tmp_path: Path) -> None:
    mapper = TenantMapper(
        parse_map(f"{tmp_path}=acme/*; {tmp_path / 'pay'}=acme/payments\n"), default_org="me"
    )
    assert mapper.choose(str(tmp_path / "pay" / "src")).scope == Scope("acme", "payments")
    assert mapper.choose(str(tmp_path / "web")).scope == Scope("acme", "web")
    assert mapper.choose(str(tmp_path) + "-other").scope == Scope("me", tmp_path.name + "-other")
    assert mapper.choose(None).scope == Scope("me", "unknown")


def test_bad_map_rules_are_refused() -> None:
    for bad in ("/x", "/x=acme", "/x=/repo", "=acme/x", "/x=ac me/x"):
        with pytest.raises(TenantMapError):
            parse_map(bad)


def test_from_env_reads_the_settings_when_called(tmp_path: Path) -> None:
    env = {"MEMFLOW_TENANT_MAP": f"{tmp_path}=acme/api", "MEMFLOW_DEFAULT_ORG": "team"}
    mapper = TenantMapper.from_env(env)
    assert mapper.choose(str(tmp_path)).how == "map"
    assert mapper.choose("/elsewhere/tool").scope == Scope("team", "tool")


def test_worktree_git_file_reads_the_common_config(tmp_path: Path) -> None:
    main = tmp_path / "main"
    (main / ".git" / "worktrees" / "wt").mkdir(parents=True)
    (main / ".git" / "config").write_text('[remote "origin"]\n  url = git@h:acme/core.git\n')
    (main / ".git" / "worktrees" / "wt" / "commondir").write_text("../..\n")
    wt = tmp_path / "wt"
    wt.mkdir()
    (wt / ".git").write_text(f"gitdir: {main / '.git' / 'worktrees' / 'wt'}\n")
    choice = TenantMapper().choose(str(wt))
    assert (choice.scope, choice.how) == (Scope("acme", "core"), "remote")


def test_a_repository_without_remote_uses_its_top_directory(tmp_path: Path) -> None:
    top = tmp_path / "my-service"
    (top / ".git").mkdir(parents=True)
    (top / ".git" / "config").write_text("[core]\n")
    assert TenantMapper(default_org="me").choose(str(top / "a" / "b")).scope == Scope(
        "me", "my-service"
    )


def test_a_fifo_for_a_git_config_is_never_opened(tmp_path: Path) -> None:
    import os

    top = tmp_path / "trap"
    (top / ".git").mkdir(parents=True)
    os.mkfifo(top / ".git" / "config")
    assert TenantMapper(default_org="me").choose(str(top)).scope == Scope("me", "trap")
