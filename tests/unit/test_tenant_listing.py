"""`memflow run --tenant` lists the named tenants' directories only: `tenant_listings` gives
what the whole zone's walk (`zone_listing`) gives for those tenants, and nothing else. The
survey's walk for the problems alone (`zone_problems`, no lstat per file) finds exactly
`discover`'s problems."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from memflow import landing
from memflow.landing.discover import discover, zone_problems
from pipelines import runner
from schemas.scope import Scope

ACME, GLOBEX, INITECH = Scope("acme", "api"), Scope("globex", "ml"), Scope("initech", "core")


def _zone(root: Path) -> None:
    for scope, names in ((ACME, ["b.jsonl", "a.jsonl"]), (GLOBEX, ["x.parquet", "y.jsonl"])):
        folder = root / scope.tenant_id / scope.ns
        folder.mkdir(parents=True)
        for i, name in enumerate(names):
            (folder / name).write_text('{"x": 1}\n' * (i + 1))
    acme = root / "acme" / "api"
    (acme / "notes.txt").write_text("not a landing file")
    (acme / ".tmp.jsonl").write_text("a writer's temporary name")
    (acme / "nested").mkdir()
    (acme / "nested" / "c.jsonl").write_text("{}\n")
    (root / "initech").mkdir()
    os.symlink(acme, root / "initech" / "core")  # a symlinked tenant is never followed


def test_the_named_tenants_listings_are_the_zone_walks(tmp_path: Path) -> None:
    _zone(tmp_path)
    whole, _ = landing.zone_listing(tmp_path)
    assert set(whole) == {ACME, GLOBEX}
    named = landing.tenant_listings(tmp_path, [GLOBEX, INITECH, ACME, Scope("nobody", "x")])
    assert list(named) == [ACME, GLOBEX]  # scope order, as the walk gives them
    assert named == whole
    assert [f.name for f in named[ACME]] == ["a.jsonl", "b.jsonl"]
    assert named[ACME][0].size == len('{"x": 1}\n' * 2) and named[ACME][0].mtime_ns > 0
    assert landing.tenant_listings(tmp_path, [GLOBEX]) == {GLOBEX: whole[GLOBEX]}
    assert landing.tenant_listings(tmp_path, [INITECH]) == {}


def test_a_tenant_run_does_not_walk_the_zone(tmp_path: Path, monkeypatch) -> None:
    _zone(tmp_path)

    def walked(*_args, **_kwargs):
        raise AssertionError("the whole landing zone was listed for a --tenant run")

    monkeypatch.setattr(landing, "zone_listing", walked)
    got = runner._listings(str(tmp_path), ["globex/ml", "nobody/x", "not a tenant", "acme/api/"])
    assert got == {GLOBEX: landing.tenant_listings(tmp_path, [GLOBEX])[GLOBEX]}
    with pytest.raises(AssertionError, match="whole landing zone"):
        runner._listings(str(tmp_path), None)  # a plain run lists the whole zone


def test_the_surveys_problem_walk_finds_what_discover_finds(tmp_path: Path) -> None:
    _zone(tmp_path)
    acme = tmp_path / "acme" / "api"
    os.mkfifo(acme / "pipe.jsonl")  # a special file named like a landing file
    (acme / ".partial").mkdir()
    (acme / ".partial" / "d.jsonl").write_text("{}\n")  # landing files in a hidden directory
    (tmp_path / "bad org!" / "api").mkdir(parents=True)
    (tmp_path / "bad org!" / "api" / "x.jsonl").write_text("{}\n")
    (tmp_path / "acme" / "stray.jsonl").write_text("{}\n")
    (tmp_path / "top.parquet").write_text("misplaced")
    expected = discover(tmp_path).problems
    assert {p.reason for p in expected} == {
        "nested_directory",
        "not_a_regular_file",
        "hidden_directory",
        "invalid_scope",
        "misplaced_file",
        "symlink",
    }
    assert zone_problems(tmp_path) == expected
    assert zone_problems(tmp_path / "nope") == discover(tmp_path / "nope").problems
