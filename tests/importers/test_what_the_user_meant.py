"""Importers keep what the user meant (issue 17 item 4), on public real transcripts
(tests/fixtures/transcripts, see its README: claude-code-log's and claude-code-viewer's fixtures,
codemie-code's Codex rollouts): slash commands, sub-agent / teammate / other-session turns,
typed-ahead steering, rewound branches, Codex sub-agent replays, Windows working directories, the
wrong importer, the exit code, an incremental Stop hook, and tenants renamed by this version."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from memflow.importers.claude_code import import_claude_code
from memflow.importers.codex import import_codex
from memflow.importers.common import ImportSettings
from memflow.importers.tenant import TenantMapper, parse_map
from tests.importers.test_transcripts import assert_valid_landing

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "transcripts"
LOG = FIXTURES / "claude-code" / "claude-code-log"
VIEWER = FIXTURES / "claude-code" / "claude-code-viewer"
CODEX = FIXTURES / "codex" / "codemie-code"
ROOT = Path(__file__).resolve().parents[2]


def settings(landing: Path, mapper: TenantMapper | None = None, **kw: Any) -> ImportSettings:
    return ImportSettings(landing, mapper or TenantMapper(), **kw)


def landed(landing: Path) -> list[dict[str, Any]]:
    return [
        json.loads(line)
        for path in sorted(landing.rglob("*.jsonl"))
        if not any(p.startswith(".") for p in path.relative_to(landing).parts)
        for line in path.read_text().splitlines()
    ]


readable = assert_valid_landing  # every landed file passes the landing reader, no reject


def users(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [t for t in lines if t["role"] == "user"]


# -- Claude Code -----------------------------------------------------------------------------


def test_a_slash_command_and_its_expansion_become_the_users_turn(tmp_path: Path) -> None:
    """A real session landed zero user turns: `/init` and its expansion were both skipped."""
    report = import_claude_code([LOG / "JSSoundRecorder", VIEWER], settings(tmp_path))
    assert report.errors_total == 0
    commands = [t for t in landed(tmp_path) if (t.get("origin") or "").startswith("command:")]
    assert len(commands) == 2 and {t["origin"] for t in commands} == {"command:/init"}
    for turn in commands:
        assert turn["role"] == "user"
        assert turn["content"].startswith("/init\n\nPlease analyze this codebase")
    assert readable(tmp_path) == report.turns_written


def test_a_commands_arguments_land_and_built_ins_without_any_do_not(tmp_path: Path) -> None:
    import_claude_code([LOG / "edge_cases.jsonl", LOG / "worktrees"], settings(tmp_path))
    texts = [t["content"] for t in users(landed(tmp_path))]
    assert "/test-command --verbose --output /tmp/test.log" in texts
    assert not any(t.startswith("/exit") for t in texts)  # a built-in without arguments
    assert not any("<command-name>" in t or "<local-command-stdout>" in t for t in texts)


def test_steering_typed_while_the_agent_worked_lands_once(tmp_path: Path) -> None:
    report = import_claude_code([LOG / "session_id_steering_order.jsonl"], settings(tmp_path))
    turns = users(landed(tmp_path))
    assert [t["content"] for t in turns] == [
        "Please start the migration.",
        "actually \u2014 focus on the parser first",
        "Here is the extra context you asked for.",
    ]
    assert [t.get("origin") for t in turns] == [None, "steering", None]
    assert report.exit_code() == 0 and readable(tmp_path) == report.turns_written
    # enqueued then dequeued messages arrive as user records: each lands exactly once
    import_claude_code([LOG / "JSSoundRecorder"], settings(tmp_path / "queued"))
    texts = [t["content"] for t in users(landed(tmp_path / "queued"))]
    for queued in ("ok, fine, let's do vite", "yes please, and let's make it cross-browser"):
        assert texts.count(queued) == 1


def test_sub_agent_and_teammate_turns_are_marked_for_the_extractor(tmp_path: Path) -> None:
    import_claude_code([LOG / "teammates", LOG / "sidechain_agent.jsonl"], settings(tmp_path))
    lines = landed(tmp_path)
    by_origin: dict[str | None, list[dict[str, Any]]] = {}
    for t in lines:
        by_origin.setdefault((t.get("origin") or "").split(":")[0] or None, []).append(t)
    assert {"subagent", "subagent-task", "teammate", None} <= set(by_origin)
    for t in by_origin["teammate"]:
        assert t["role"] == "user"
        name = t["origin"].split(":", 1)[1]
        assert t["content"].startswith(f"[message from teammate {name}] ")
    assert {t["origin"] for t in by_origin["teammate"]} >= {"teammate:alice", "teammate:team-lead"}
    for t in by_origin["subagent-task"]:
        assert t["content"].startswith("[task from the main agent to a sub-agent] ")
    for t in by_origin["subagent"]:
        if t["role"] == "assistant":
            assert t["content"].startswith("[sub-agent] ")
    # the user's own words carry no marker
    mine = [t for t in by_origin[None] if t["role"] == "user"]
    assert mine and not any(t["content"].startswith("[") for t in mine)
    assert readable(tmp_path) == len(lines)


PEER_MESSAGE = (
    "Another Claude session sent a message:\n"
    '<cross-session-message from="planner">the API froze</cross-session-message>'
)


def test_messages_from_other_sessions_are_marked(tmp_path: Path) -> None:
    """A peer message as Claude Code writes it (`origin.kind: peer`, isMeta, the
    `<cross-session-message>` envelope) lands marked instead of vanishing with the meta records."""
    session = "5c0375b4-57a5-4f26-b12d-d022ee4e51b7"
    base = {"sessionId": session, "cwd": "/work/app", "timestamp": "2026-01-05T10:00:00Z"}
    records = [
        {**base, "type": "user", "uuid": "u1", "parentUuid": None,
         "message": {"role": "user", "content": "ship it"}},
        {**base, "type": "user", "uuid": "u2", "parentUuid": "u1", "isMeta": True,
         "origin": {"kind": "peer", "name": "planner"},
         "message": {"role": "user", "content": PEER_MESSAGE}},
    ]  # fmt: skip
    path = tmp_path / f"{session}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    import_claude_code([path], settings(tmp_path / "landing"))
    turns = landed(tmp_path / "landing")
    assert [t.get("origin") for t in turns] == [None, "peer:planner"]
    assert turns[1]["content"].startswith("[message from another agent session planner] ")


def test_rewound_branches_are_left_out_and_parallel_tool_calls_are_no_rewind(
    tmp_path: Path,
) -> None:
    report = import_claude_code(
        [LOG / "dag_within_fork.jsonl", LOG / "dag_compact_after_rewind.jsonl"],
        settings(tmp_path),
    )
    texts = [t["content"] for t in landed(tmp_path)]
    for gone in (
        "Branch 1 start",
        "Branch 1 reply",
        "Branch 1 end",
        "First attempt",
        "First answer",
    ):
        assert gone not in texts
    for kept in ("Fork point", "Branch 2 start", "Second attempt", "Keep going", "Final answer"):
        assert kept in texts
    assert report.skipped["rewound"] == 5
    # a real session with parallel tool calls (their results fork the chain): nothing rewound
    parallel = import_claude_code([LOG / "worktrees"], settings(tmp_path / "parallel"))
    assert parallel.skipped["rewound"] == 0 and parallel.turns_written > 100


def test_a_windows_session_lands_under_its_folder_whatever_the_importers_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`e:\\Workspace\\src\\github\\claude-code-log` used to be read as a relative POSIX path."""
    here = tmp_path / "elsewhere"
    (here / ".git").mkdir(parents=True)
    (here / ".git" / "config").write_text('[remote "origin"]\n url = git@github.com:work/main\n')
    monkeypatch.chdir(here)
    import_claude_code([LOG / "sidechain_main.jsonl"], settings(tmp_path / "landing"))
    assert {(t["org"], t["repo"]) for t in landed(tmp_path / "landing")} == {
        ("local", "claude-code-log")
    }


# -- Codex -----------------------------------------------------------------------------------


def test_a_recorded_repository_url_wins_over_the_local_checkout(tmp_path: Path) -> None:
    checkout = tmp_path / "project"
    (checkout / ".git").mkdir(parents=True)
    (checkout / ".git" / "config").write_text('[remote "origin"]\n url = git@github.com:me/fork\n')
    rollout = tmp_path / "sessions" / "rollout-turn-1.jsonl"
    rollout.parent.mkdir()
    lines = (CODEX / "rollout-turn-1.jsonl").read_text().splitlines()
    meta = json.loads(lines[0])
    assert meta["payload"]["git"]["repository_url"] == "https://github.com/user/project"
    meta["payload"]["cwd"] = str(checkout)  # the session ran in a checkout of a fork
    rollout.write_text("\n".join([json.dumps(meta), *lines[1:]]) + "\n")
    import_codex([rollout], settings(tmp_path / "landing"))
    assert {(t["org"], t["repo"]) for t in landed(tmp_path / "landing")} == {("user", "project")}


def _forked_child(parent: Path, child: Path, own: list[dict[str, Any]]) -> None:
    """A forked sub-agent rollout in the shape Codex writes one (its `session_meta` naming the
    parent, then the parent's `session_meta` and items copied in order, then its own items),
    assembled from a real parent rollout."""
    parent_lines = parent.read_text().splitlines()
    parent_id = json.loads(parent_lines[0])["payload"]["id"]
    child_id = "0f0f0f0f-1111-4222-8333-444444444444"
    meta = {
        "timestamp": "2026-01-05T10:00:00.000Z",
        "type": "session_meta",
        "payload": {
            "id": child_id, "session_id": parent_id, "forked_from_id": parent_id,
            "cwd": "/home/user/project", "thread_source": "subagent",
            "source": {"subagent": {"thread_spawn": {"parent_thread_id": parent_id, "depth": 1}}},
        },
    }  # fmt: skip
    body = [json.dumps(meta), *parent_lines, *(json.dumps(r) for r in own)]
    child.write_text("\n".join(body) + "\n")


OWN = [
    {"timestamp": "2026-01-05T10:00:05.000Z", "type": "event_msg",
     "payload": {"type": "user_message", "message": "Review the diff of the parser."}},
    {"timestamp": "2026-01-05T10:00:09.000Z", "type": "response_item",
     "payload": {"type": "message", "role": "assistant",
                 "content": [{"type": "output_text", "text": "The parser diff looks right."}]}},
]  # fmt: skip


@pytest.mark.parametrize("parent_known", ["same_import", "beside_the_child", "landed_before"])
def test_a_forked_sub_agent_does_not_land_its_parents_turns_twice(
    tmp_path: Path, parent_known: str
) -> None:
    sessions = tmp_path / "sessions" / "2026" / "01" / "05"
    sessions.mkdir(parents=True)
    parent = sessions / "rollout-2026-01-05T09-00-00-a1b2c3d4-e5f6-7890-abcd-ef1234567890.jsonl"
    shutil.copy(CODEX / "rollout-turn-1.jsonl", parent)
    child = sessions / "rollout-2026-01-05T10-00-00-0f0f0f0f-1111-4222-8333-444444444444.jsonl"
    _forked_child(parent, child, OWN)
    landing = tmp_path / "landing"
    first = import_codex([parent], settings(landing))
    parent_turns = first.turns_written
    if parent_known == "same_import":
        shutil.rmtree(landing)
        report = import_codex([sessions], settings(landing))
    elif parent_known == "beside_the_child":
        shutil.rmtree(landing)
        report = import_codex([child], settings(landing))
    else:
        (tmp_path / "moved").mkdir()
        shutil.move(parent, tmp_path / "moved" / parent.name)  # only its landed turns remain
        report = import_codex([child], settings(landing))
    child_turns = [t for t in landed(landing) if t["session_id"].startswith("0f0f0f0f")]
    assert [t["content"] for t in child_turns] == [
        "[task from the main agent to a sub-agent] Review the diff of the parser.",
        "[sub-agent] The parser diff looks right.",
    ]
    assert {t["origin"] for t in child_turns} == {"subagent-task", "subagent"}
    assert report.skipped["replayed_parent"] == parent_turns
    assert report.exit_code() == 0


def test_a_sub_agent_that_records_its_history_start_needs_no_parent(tmp_path: Path) -> None:
    parent_id = "a1b2c3d4-e5f6-7890-abcd-ef1234567890"
    head = {"timestamp": "2026-01-05T10:00:00Z", "ordinal": 0, "type": "session_meta",
            "payload": {"id": "0f0f0f0f-1111-4222-8333-444444444444", "cwd": "/home/user/project",
                        "thread_source": "subagent", "parent_thread_id": parent_id,
                        "subagent_history_start_ordinal": 3}}  # fmt: skip
    inherited = [{**OWN[0], "ordinal": 1, "payload": {**OWN[0]["payload"], "message": "old"}},
                 {**OWN[1], "ordinal": 2}]  # fmt: skip
    own = [{**OWN[0], "ordinal": 3}, {**OWN[1], "ordinal": 4}]
    path = tmp_path / "rollout-2026-01-05T10-00-00-0f0f0f0f-1111-4222-8333-444444444444.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in [head, *inherited, *own]))
    report = import_codex([path], settings(tmp_path / "landing"))
    assert report.skipped["replayed_parent"] == 2
    assert [t["turn_id"] for t in landed(tmp_path / "landing")] == ["L4", "L5"]


# -- the wrong importer, exit codes ----------------------------------------------------------


def test_a_file_in_the_other_agents_format_is_named_as_such(tmp_path: Path) -> None:
    codex_file = CODEX / "rollout-turn-1.jsonl"
    claude_file = LOG / "session_id_steering_order.jsonl"
    report = import_claude_code([codex_file], settings(tmp_path))
    assert [p.reason for p in report.errors] == ["codex_transcript"]
    assert "memflow import codex" in report.errors[0].detail and report.exit_code() == 2
    report = import_codex([claude_file], settings(tmp_path))
    assert [p.reason for p in report.errors] == ["claude_code_transcript"]
    assert "memflow import claude-code" in report.errors[0].detail and report.exit_code() == 2
    report = import_codex([LOG / "teammates"], settings(tmp_path))  # a Claude Code folder
    assert [p.reason for p in report.errors] == ["no_transcripts"] and report.exit_code() == 2
    assert landed(tmp_path) == []


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "pipelines.cli", "import", *args],
        capture_output=True, text=True, env=env, cwd=cwd, timeout=300,
    )  # fmt: skip


def test_memflow_imports_exit_code_reflects_this_input(tmp_path: Path) -> None:
    """It used to depend on what was imported before: a re-import of a file with a bad line
    turned 0 into 1."""
    landing = tmp_path / "landing"
    landing.mkdir()  # a named landing zone must exist (a typo'd path is refused)
    bad = tmp_path / "with-a-bad-line.jsonl"
    bad.write_text((LOG / "session_id_steering_order.jsonl").read_text() + "{not json\n")
    good = LOG / "session_id_steering_order.jsonl"
    runs = {
        "good": [good],
        "bad": [bad],
        "wrong": [CODEX / "rollout-turn-1.jsonl"],
        "missing": [tmp_path / "nope.jsonl"],
    }
    codes = {}
    for name, paths in runs.items():
        args = ["claude-code", *map(str, paths), "--landing", str(landing)]
        first, again = _cli(*args, cwd=tmp_path), _cli(*args, cwd=tmp_path)
        codes[name] = (first.returncode, again.returncode)
        if name == "wrong":
            assert "memflow import codex" in first.stderr
    assert codes == {"good": (0, 0), "bad": (1, 1), "wrong": (2, 2), "missing": (2, 2)}


# -- Codex's Stop hook: only what is new -------------------------------------------------------


def test_the_stop_hook_reads_only_what_is_new(tmp_path: Path) -> None:
    rollout = tmp_path / "rollout-2026-05-11T13-28-45-019e1695-0522-7c83-8b39-0dd379793f80.jsonl"
    source = (CODEX / "rollout-turn-2.jsonl").read_text().splitlines(keepends=True)
    landing = tmp_path / "landing"
    incremental = settings(landing, incremental=True)
    rollout.write_text("".join(source[:3]) + source[3][:20])  # a line still being written
    first = import_codex([rollout], incremental)
    with rollout.open("a") as fh:
        fh.write(source[3][20:] + "".join(source[4:]))
    second = import_codex([rollout], incremental)
    third = import_codex([rollout], incremental)
    full = import_codex([rollout], settings(tmp_path / "full"))
    assert first.records == 3 and second.records == len(source) - 3 and third.records == 0
    assert first.errors_total == second.errors_total == third.errors_total == 0
    assert first.turns_written + second.turns_written == full.turns_written
    assert readable(landing) == full.turns_written  # the offsets' dot folder is no landing file
    assert [t["turn_id"] for t in landed(landing)] == [
        t["turn_id"] for t in landed(tmp_path / "full")
    ]
    # a file rewritten shorter (its earlier state) is read from the start, landing nothing twice
    earlier = (CODEX / "rollout-turn-1.jsonl").read_text()
    rollout.write_text(earlier)
    again = import_codex([rollout], incremental)
    assert again.records == len(earlier.splitlines()) and again.turns_written == 0


def test_overlapping_stop_hooks_on_a_growing_rollout_land_each_turn_once(tmp_path: Path) -> None:
    """Codex runs its Stop hook after every turn; a slow one still runs when the next starts.
    Incremental imports that overlap while the rollout grows (threads: the landing lock and the
    offsets' lock are flock()s, which open file descriptions of one process also contend for)
    land every turn once, as one whole import does."""
    import threading

    rollout = tmp_path / "rollout-2026-05-11T13-28-45-019e1695-0522-7c83-8b39-0dd379793f80.jsonl"
    source = (CODEX / "rollout-turn-2.jsonl").read_text().splitlines(keepends=True)
    landing = tmp_path / "landing"
    reports: list[Any] = []
    rollout.write_text("")

    def stop_hook() -> None:
        reports.append(import_codex([rollout], settings(landing, incremental=True)))

    started: list[threading.Thread] = []
    for at in range(0, len(source), 3):  # 3 lines a time: a user message apart from its twin
        with rollout.open("a") as fh:
            fh.write("".join(source[at : at + 3]))
        hooks = [threading.Thread(target=stop_hook) for _ in range(3)]
        for hook in hooks:
            hook.start()
        started += hooks
        for hook in hooks[:2]:  # the third overlaps the next turn's hooks
            hook.join()
    for hook in started:
        hook.join()
    stop_hook()
    full = import_codex([rollout], settings(tmp_path / "full"))
    assert len(reports) == len(started) + 1 and all(r.errors_total == 0 for r in reports)
    assert sum(r.turns_written for r in reports) == full.turns_written
    # the ids a whole read gives (a read that ended between a message and its twin used to land
    # the twin it had seen, and a later whole import landed the other one again)
    assert [t["turn_id"] for t in landed(landing)] == [
        t["turn_id"] for t in landed(tmp_path / "full")
    ]
    assert import_codex([rollout], settings(landing)).turns_written == 0
    assert readable(landing) == full.turns_written


@pytest.mark.parametrize(
    "fixture", sorted(FIXTURES.glob("codex/*/rollout-*.jsonl")), ids=lambda p: p.name[:24]
)
def test_a_rollout_imported_a_line_at_a_time_lands_what_a_whole_read_lands(
    tmp_path: Path, fixture: Path
) -> None:
    """Every real rollout (both shapes, one with a bad line), grown a line at a time with an
    incremental import after each: the same turn ids as one whole import, and a whole import
    afterwards lands nothing more."""
    rollout = tmp_path / fixture.name
    landing = tmp_path / "landing"
    rollout.write_bytes(b"")
    for line in fixture.read_bytes().splitlines(keepends=True):
        with rollout.open("ab") as fh:
            fh.write(line)
        import_codex([rollout], settings(landing, incremental=True))
    import_codex([rollout], settings(tmp_path / "full"))
    ids = sorted(t["turn_id"] for t in landed(tmp_path / "full"))
    assert ids and sorted(t["turn_id"] for t in landed(landing)) == ids
    assert import_codex([rollout], settings(landing)).turns_written == 0


# -- tenants renamed by this version ------------------------------------------------------------


def test_re_importing_moves_a_sessions_files_from_its_old_tenant(tmp_path: Path) -> None:
    """`C++ tools` used to land as `local/C-tools` (shared with `C tools`); a re-import moves
    the session's files to its own tenant and lands nothing twice."""
    folder = tmp_path / "C++ tools"
    folder.mkdir()
    src = tmp_path / "transcript.jsonl"
    records = [
        {**json.loads(line), "cwd": str(folder)}
        for line in (LOG / "session_id_steering_order.jsonl").read_text().splitlines()
    ]
    src.write_text("".join(json.dumps(r) + "\n" for r in records))
    landing = tmp_path / "landing"
    old_mapper = TenantMapper(parse_map(f"{folder}=local/C-tools"))  # what earlier versions did
    before = import_claude_code([src], settings(landing, old_mapper))
    assert before.tenants == {"local/C-tools": 5}
    after = import_claude_code([src], settings(landing))
    (new,) = after.moved
    assert new.startswith("local/C-tools -> local/C-tools-") and after.moved[new] == 1
    assert after.turns_written == 0 and after.turns_already_landed == 5
    lines = landed(landing)
    assert {f"{t['org']}/{t['repo']}" for t in lines} == {new.split(" -> ")[1]}
    assert readable(landing) == 5
    assert not any((landing / "local" / "C-tools").glob("*.jsonl"))


# -- the one landing writer -----------------------------------------------------------------------


@pytest.mark.parametrize("trap", ["org", "repo", "lock"])
def test_imports_never_write_through_a_symlink_in_the_landing_zone(
    tmp_path: Path, trap: str
) -> None:
    """The importers' writer used to follow a symlinked tenant directory (architecture review);
    they now write through the landing writer's directory descriptors."""
    landing, outside = tmp_path / "landing", tmp_path / "outside"
    outside.mkdir()
    (landing / "local").mkdir(parents=True)
    if trap == "org":
        (landing / "local").rmdir()
        (landing / "local").symlink_to(outside, target_is_directory=True)
    elif trap == "repo":
        (landing / "local" / "project").symlink_to(outside, target_is_directory=True)
    else:
        (landing / "local" / "project").mkdir()
        victim = outside / "victim"
        victim.write_text("keep me")
        (landing / "local" / "project" / ".memflow-import.lock").symlink_to(victim)
    report = import_claude_code([LOG / "session_id_steering_order.jsonl"], settings(landing))
    assert [p.reason for p in report.errors] == ["landing_failed"]
    assert report.turns_written == 0 and report.exit_code() == 1
    assert sorted(p.name for p in outside.iterdir()) == ([] if trap != "lock" else ["victim"])
    if trap == "lock":
        assert (outside / "victim").read_text() == "keep me"


@pytest.mark.parametrize("trap", ["state", "offsets", "file"])
def test_offsets_are_never_read_or_written_through_a_link(tmp_path: Path, trap: str) -> None:
    """The Stop hook's per-file offsets live in a dot folder of the landing zone: a link put
    there (the folder, its offsets folder, one state file) is neither followed to write, nor
    trusted to skip what was not imported; the import lands everything and exits 0."""
    rollout = tmp_path / "rollout-2026-05-11T13-28-45-019e1695-0522-7c83-8b39-0dd379793f80.jsonl"
    shutil.copy(CODEX / "rollout-turn-2.jsonl", rollout)
    full = import_codex([rollout], settings(tmp_path / "full"))
    landing, outside = tmp_path / "landing", tmp_path / "outside"
    outside.mkdir()
    landing.mkdir()
    if trap == "state":
        (landing / ".memflow-import").symlink_to(outside, target_is_directory=True)
    elif trap == "offsets":
        (landing / ".memflow-import").mkdir()
        (landing / ".memflow-import" / "offsets").symlink_to(outside, target_is_directory=True)
    else:  # a valid state that says the whole file was read, behind a link
        seed = tmp_path / "seed"
        import_codex([rollout], settings(seed, incremental=True))
        (saved,) = (seed / ".memflow-import" / "offsets").glob("*.json")
        claimed = outside / "claimed.json"
        shutil.copy(saved, claimed)
        offsets = landing / ".memflow-import" / "offsets"
        offsets.mkdir(parents=True)
        (offsets / saved.name).symlink_to(claimed)
        # the same state as a plain file is trusted: nothing is read again
        shutil.copytree(seed / ".memflow-import", tmp_path / "trusted" / ".memflow-import")
        again = import_codex([rollout], settings(tmp_path / "trusted", incremental=True))
        assert again.records == 0
    report = import_codex([rollout], settings(landing, incremental=True))
    assert report.exit_code() == 0 and report.turns_written == full.turns_written
    assert sorted(p.name for p in outside.iterdir()) == ([] if trap != "file" else ["claimed.json"])
    assert readable(landing) == full.turns_written
