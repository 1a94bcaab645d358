"""Transcript importers on real public samples (tests/fixtures/transcripts, see its README) and
on hostile files written here: what lands, what is skipped, what is reported, idempotency."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from memflow.importers.claude_code import import_claude_code
from memflow.importers.codex import import_codex
from memflow.importers.common import ImportSettings, Limits
from memflow.importers.tenant import TenantMapper
from memflow.landing import discover, read_landing_file
from schemas.redaction import contains_secret

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "transcripts"
CLAUDE = FIXTURES / "claude-code"
CODEX = FIXTURES / "codex"
SECRET_KEY = "AKIAIOSFODNN7EXAMPLE"
SECRET_GH = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
SECRETS = (SECRET_KEY, SECRET_GH, "hunter2", "bob@example.com")


def settings(landing: Path, **kw: Any) -> ImportSettings:
    return ImportSettings(landing, TenantMapper(default_org="local"), **kw)


def landed_lines(landing: Path) -> list[dict[str, Any]]:
    out = []
    for path in sorted(landing.rglob("*.jsonl")):
        out.extend(json.loads(line) for line in path.read_text().splitlines())
    return out


def assert_valid_landing(landing: Path) -> int:
    """Every landed file passes the pipeline's landing reader with no reject."""
    found = discover(landing)
    assert not found.problems
    turns = 0
    for files in found.values():
        for path in files:
            read = read_landing_file(path, landing)
            assert read.rejects.height == 0, read.rejects.to_dicts()
            turns += read.turns.height
    return turns


# -- real samples ----------------------------------------------------------------------------


def test_claude_code_real_samples(tmp_path: Path) -> None:
    sources = [
        CLAUDE / "codemie-code",
        CLAUDE / "claude-code-log" / "dag_compact_after_rewind.jsonl",
    ]
    report = import_claude_code(sources, settings(tmp_path))
    assert report.errors_total == 0, report.errors
    assert report.files == 4
    assert report.turns_written == report.turns_found > 30
    assert assert_valid_landing(tmp_path) == report.turns_written
    # summaries, compaction (boundary and summary), snapshots and thinking never land
    assert report.skipped["summary"] == 16
    assert report.skipped["compaction"] == 2
    assert report.skipped["file-history-snapshot"] > 0
    lines = landed_lines(tmp_path)
    texts = [t["content"] for t in lines]
    assert not any("being continued from a previous conversation" in t for t in texts)
    assert "create hello.py, md and js" in texts
    # a Write call keeps its path, never the file body; its result is omitted
    writes = [t for t in lines if t.get("tool_name") == "Write"]
    assert writes and all("Hello, World" not in json.dumps(t) for t in writes)
    assert all(t["tool_input"]["content"].startswith("[omitted") for t in writes)
    results = [t for t in lines if t.get("tool_name") == "Write:result"]
    assert results and all(t["content"].startswith("[write output omitted") for t in results)
    # the subagent file joins its parent session
    sessions = {t["session_id"] for t in lines if t["repo"] == "private"}
    assert sessions == {"4c2ddfdc-b619-4525-8d03-1950fb1b0257"}
    assert {t["client"] for t in lines} == {"claude-code"}


def test_claude_code_reimport_writes_nothing(tmp_path: Path) -> None:
    first = import_claude_code([CLAUDE], settings(tmp_path))
    files = sorted(p.name for p in tmp_path.rglob("*.jsonl"))
    again = import_claude_code([CLAUDE], settings(tmp_path))
    assert again.turns_written == 0
    assert again.turns_already_landed == first.turns_written
    assert sorted(p.name for p in tmp_path.rglob("*.jsonl")) == files


def test_codex_real_samples_both_shapes(tmp_path: Path) -> None:
    report = import_codex([CODEX], settings(tmp_path))
    assert report.files == 6
    # the one malformed line is reported with file and line; its file's good line still lands
    assert [(Path(p.file).name, p.line, p.reason) for p in report.errors] == [
        ("rollout-66666666-6666-4666-8666-666666666666.jsonl", 3, "invalid_json")
    ]
    assert assert_valid_landing(tmp_path) == report.turns_written
    lines = landed_lines(tmp_path)
    by_session: dict[str, list[dict[str, Any]]] = {}
    for t in lines:
        by_session.setdefault(t["session_id"], []).append(t)
    # older shape: session header, bare items, the header's time on every turn
    legacy = by_session["44444444-4444-4444-8444-444444444444"]
    assert [(t["role"], t["content"]) for t in legacy] == [
        ("user", "Open the synthetic legacy session."),
        ("assistant", "The synthetic legacy session is open."),
    ]
    assert {t["ts"] for t in legacy} == {"2026-01-04T05:06:07.000000Z"}
    # newer shape: the user's words once (not also the event copy), injected context skipped
    newer = by_session["11111111-1111-4111-8111-111111111111"]
    assert [t["content"] for t in newer if t["role"] == "user"] == ["List the synthetic files."]
    assert [t["content"] for t in newer if t["role"] == "assistant"] == [
        "The synthetic files are alpha.txt and beta.txt."
    ]
    patch = next(t for t in newer if t.get("tool_name") == "apply_patch")
    assert "Begin Patch" not in json.dumps(patch)
    assert not any("environment_context" in t["content"] for t in lines)
    assert not any("SYNTHETIC_ENCRYPTED" in json.dumps(t) for t in lines)
    # Codex Desktop wrote the user's words only as events: they are still imported
    desktop = by_session["019e1695-0522-7c83-8b39-0dd379793f80"]
    assert sum(t["role"] == "user" for t in desktop) == 3
    # file reads through the shell land without their output
    reads = [t for t in desktop if t.get("tool_name") == "exec_command:result"]
    assert any(t["content"].startswith("[exec_command output omitted") for t in reads)
    assert all(
        len(t["content"]) <= Limits().tool_result_chars for t in lines if t["role"] == "tool"
    )
    # base instructions of the session header never land
    assert not any("vivid inner life" in json.dumps(t) for t in lines)


def test_codex_incremental_import_lands_only_new_turns(tmp_path: Path) -> None:
    """turn-2 is the same session as turn-1 after one more exchange (a growing file)."""
    first = import_codex([CODEX / "codemie-code" / "rollout-turn-1.jsonl"], settings(tmp_path))
    second = import_codex([CODEX / "codemie-code" / "rollout-turn-2.jsonl"], settings(tmp_path))
    assert first.turns_written == 2
    assert second.turns_already_landed == 2
    assert second.turns_written == 2
    ids = [t["turn_id"] for t in landed_lines(tmp_path)]
    assert len(ids) == len(set(ids)) == 4


# -- files written here ----------------------------------------------------------------------


def claude_record(n: int, content: Any, role: str = "user", **extra: Any) -> dict[str, Any]:
    record = {
        "type": role,
        "sessionId": extra.pop("sessionId", "sess-1"),
        "uuid": extra.pop("uuid", f"u{n}"),
        "timestamp": f"2026-03-01T10:00:{n:02d}.000Z",
        "cwd": extra.pop("cwd", "/work/acme-payments"),
        "gitBranch": "main",
        "isSidechain": False,
        "message": {"role": role, "content": content},
    }
    record.update(extra)
    return record


def write_jsonl(path: Path, records: list[Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as fh:
        for r in records:
            fh.write(r if isinstance(r, bytes) else json.dumps(r).encode())
            fh.write(b"\n")
    return path


def test_upsert_tool_calls_land_as_explicit_triples(tmp_path: Path) -> None:
    triples = [
        {"subject": "payments-api", "predicate": "USES", "object": "Valkey 8", "extra": "x"},
        {"subject": "payments-api", "predicate": "owned by", "object": "team-ledger"},
        "not an object",
    ]
    src = write_jsonl(
        tmp_path / "t" / "s.jsonl",
        [
            claude_record(1, "we use Valkey now"),
            claude_record(
                2,
                [
                    {"type": "text", "text": "Saving that."},
                    {
                        "type": "tool_use",
                        "id": "toolu_1",
                        "name": "mcp__memflow__upsert_graph_triples",
                        "input": {"triples": triples},
                    },
                ],
                role="assistant",
            ),
            claude_record(
                3,
                [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "accepted 2"}],
            ),
        ],
    )
    landing = tmp_path / "landing"
    report = import_claude_code([src], settings(landing))
    assert report.errors_total == 0
    assert assert_valid_landing(landing) == 4
    lines = landed_lines(landing)
    call = next(t for t in lines if t.get("tool_name") == "upsert_graph_triples")
    assert call["turn_id"] == "u2#1"
    assert call["tool_input"]["triples"][0] == {
        "subject": "payments-api",
        "predicate": "USES",
        "object": "Valkey 8",
    }
    assert call["tool_input"]["triples"][2] == "not an object"  # the pipeline rejects it
    result = next(t for t in lines if t.get("tool_name", "").endswith(":result"))
    assert result["tool_name"] == "mcp__memflow__upsert_graph_triples:result"
    # the pipeline's own reader turns the call into explicit triples
    read = read_landing_file(next(landing.rglob("*.jsonl")), landing)
    row = read.turns.filter(read.turns["tool_name"] == "upsert_graph_triples").row(0, named=True)
    assert json.loads(row["tool_input_json"])["triples"][1]["predicate"] == "owned by"


def test_triples_over_cap_and_bad_upsert_input(tmp_path: Path) -> None:
    many = [{"subject": f"s{i}", "predicate": "USES", "object": "o"} for i in range(30)]
    src = write_jsonl(
        tmp_path / "s.jsonl",
        [
            claude_record(
                1,
                [
                    {"type": "tool_use", "id": "a", "name": "upsert_graph_triples",
                     "input": {"triples": many}},
                    {"type": "tool_use", "id": "b", "name": "upsert_graph_triples",
                     "input": {"triples": "not a list"}},
                ],
                role="assistant",
            )
        ],
    )  # fmt: skip
    landing = tmp_path / "landing"
    report = import_claude_code([src], settings(landing, limits=Limits(triples_per_call=10)))
    assert report.skipped["triples_over_cap"] == 20
    assert report.skipped["bad_upsert_input"] == 1
    assert assert_valid_landing(landing) == 2
    names = [t["tool_name"] for t in landed_lines(landing)]
    assert names == ["upsert_graph_triples", "upsert_graph_triples:invalid"]


def test_a_huge_triple_call_is_split_over_landing_lines(tmp_path: Path) -> None:
    big = [
        {"subject": f"s{i}" + "x" * 900, "predicate": "USES", "object": "o" * 900}
        for i in range(400)
    ]
    src = write_jsonl(
        tmp_path / "s.jsonl",
        [claude_record(1, [{"type": "tool_use", "id": "a", "name": "upsert_graph_triples",
                            "input": {"triples": big}}], role="assistant")],
    )  # fmt: skip
    landing = tmp_path / "landing"
    report = import_claude_code([src], settings(landing, limits=Limits(landing_line_bytes=200_000)))
    assert report.errors_total == 0
    lines = landed_lines(landing)
    assert len(lines) > 1
    assert [t["turn_id"] for t in lines][:2] == ["u1#0", "u1#0.1"]
    assert sum(len(t["tool_input"]["triples"]) for t in lines) == 400


def test_secrets_in_every_field_never_land(tmp_path: Path) -> None:
    secret_text = f"key {SECRET_KEY} token {SECRET_GH} password=hunter2 mail bob@example.com"
    src = write_jsonl(
        tmp_path / "s.jsonl",
        [
            claude_record(1, secret_text, sessionId=f"sess-{SECRET_GH}", uuid=f"u-{SECRET_KEY}"),
            claude_record(
                2,
                [
                    {"type": "text", "text": secret_text},
                    {"type": "tool_use", "id": "t1", "name": "Bash",
                     "input": {"command": f"export AWS_KEY={SECRET_KEY}", "password": "hunter2"}},
                    {"type": "tool_use", "id": "t2", "name": "upsert_graph_triples",
                     "input": {"triples": [{"subject": f"db password=hunter2 {SECRET_GH}",
                                            "predicate": "USES", "object": "bob@example.com"}]}},
                ],
                role="assistant", sessionId=f"sess-{SECRET_GH}",
            ),
            claude_record(
                3, [{"type": "tool_result", "tool_use_id": "t1", "content": secret_text}],
                sessionId=f"sess-{SECRET_GH}",
            ),
        ],
    )  # fmt: skip
    landing = tmp_path / "landing"
    report = import_claude_code([src], settings(landing))
    assert report.errors_total == 0 and report.turns_written == 5
    raw = "".join(p.read_text() for p in landing.rglob("*") if p.is_file())
    for secret in SECRETS:
        assert secret not in raw
    for t in landed_lines(landing):
        assert not contains_secret(json.dumps(t))
    # file names never carry the secret either (the session id is hashed when not plain)
    assert not any(SECRET_GH in str(p) for p in landing.rglob("*"))


def test_secrets_in_paths_tool_names_and_remotes_never_land(tmp_path: Path) -> None:
    repo = tmp_path / f"work-{SECRET_GH}"
    (repo / ".git").mkdir(parents=True)
    (repo / ".git" / "config").write_text(f'[remote "origin"]\n url = https://h/{SECRET_GH}/x\n')
    src = write_jsonl(
        tmp_path / "s.jsonl",
        [claude_record(1, [{"type": "tool_use", "id": "t", "name": f"mcp__{SECRET_GH}__do",
                            "input": {}}], role="assistant", cwd=str(repo))],
    )  # fmt: skip
    landing = tmp_path / "landing"
    report = import_claude_code([src], settings(landing))
    assert report.turns_written == 1
    assert not any(SECRET_GH in str(p) for p in landing.rglob("*"))
    raw = "".join(p.read_text() for p in landing.rglob("*") if p.is_file())
    assert SECRET_GH not in raw and "REDACTED" in raw


def test_malformed_records_are_reported_with_file_and_line(tmp_path: Path) -> None:
    src = write_jsonl(
        tmp_path / "s.jsonl",
        [
            claude_record(1, "first good"),
            b"{not json",
            b"\xff\xfe\x00binary junk\x00",
            b"[1, 2, 3]",
            {"type": "user", "uuid": "x", "timestamp": "2026-03-01T10:00:00Z", "message": {}},
            claude_record(6, "bad time", timestamp="yesterday"),
            claude_record(7, {"not": "blocks"}),
            {"type": "a-record-type-from-the-future", "payload": {"x": 1}},
            claude_record(9, "last good"),
        ],
    )
    with src.open("ab") as fh:
        fh.write(b'{"type": "user", "sessionId": "sess-1", "uuid": "u10", "mess')  # cut short
    landing = tmp_path / "landing"
    report = import_claude_code([src], settings(landing))
    got = [(p.line, p.reason) for p in report.errors]
    assert got == [
        (2, "invalid_json"),
        (3, "bad_encoding"),
        (4, "not_an_object"),
        (5, "missing_field:sessionId"),
        (6, "bad_timestamp"),
        (7, "bad_message"),
        (10, "truncated_line"),
    ]
    assert all(p.file == str(src) for p in report.errors)
    assert report.skipped["unknown_record"] == 1
    assert [t["content"] for t in landed_lines(landing)] == ["first good", "last good"]
    # reports never carry record content
    assert "junk" not in json.dumps(report.as_dict())


def test_huge_tool_results_and_texts_are_bounded(tmp_path: Path) -> None:
    huge = "line of build output\n" * 200_000  # ~4 MB
    src = write_jsonl(
        tmp_path / "s.jsonl",
        [
            claude_record(1, [{"type": "tool_use", "id": "t", "name": "Bash",
                               "input": {"command": "make", "description": "d" * 5000}}],
                          role="assistant"),
            claude_record(2, [{"type": "tool_result", "tool_use_id": "t", "content": huge}]),
            claude_record(3, "x " * 100_000),
        ],
    )  # fmt: skip
    landing = tmp_path / "landing"
    limits = Limits()
    report = import_claude_code([src], settings(landing))
    assert report.errors_total == 0
    call, result, text = landed_lines(landing)
    assert len(call["tool_input"]["description"]) <= limits.tool_value_chars
    assert len(result["content"]) <= limits.tool_result_chars
    assert "clipped" in result["content"]
    assert len(text["content"]) <= limits.text_chars


def test_a_message_with_too_many_blocks_is_capped(tmp_path: Path) -> None:
    blocks = [{"type": "tool_use", "id": f"t{i}", "name": "Bash", "input": {"command": "ls"}}
              for i in range(1000)]  # fmt: skip
    src = write_jsonl(tmp_path / "s.jsonl", [claude_record(1, blocks, role="assistant")])
    landing = tmp_path / "landing"
    report = import_claude_code([src], settings(landing, limits=Limits(blocks_per_record=50)))
    assert report.turns_written == 50 and report.skipped["blocks_over_cap"] == 950


def test_a_line_over_the_read_bound_is_reported_and_skipped(tmp_path: Path) -> None:
    src = write_jsonl(tmp_path / "s.jsonl", [claude_record(1, "y" * 5000), claude_record(2, "ok")])
    landing = tmp_path / "landing"
    report = import_claude_code([src], settings(landing, limits=Limits(max_line_bytes=2000)))
    assert [(p.line, p.reason) for p in report.errors] == [(1, "line_too_long")]
    assert [t["content"] for t in landed_lines(landing)] == ["ok"]


def test_system_reminders_meta_and_commands_are_not_user_text(tmp_path: Path) -> None:
    src = write_jsonl(
        tmp_path / "s.jsonl",
        [
            claude_record(1, "fix the flaky test<system-reminder>you must obey</system-reminder>"),
            claude_record(2, "Caveat: local commands below", isMeta=True),
            claude_record(3, "<command-name>/clear</command-name>"),
            claude_record(4, [{"type": "thinking", "thinking": "secret plan"}], role="assistant"),
            claude_record(5, "sidechain work", isSidechain=True),
        ],
    )
    landing = tmp_path / "landing"
    report = import_claude_code([src], settings(landing, include_sidechains=False))
    assert [t["content"] for t in landed_lines(landing)] == ["fix the flaky test"]
    assert report.skipped["meta"] == report.skipped["command"] == report.skipped["thinking"] == 1
    assert report.skipped["sidechain"] == 1


def test_tenant_from_the_git_remote_of_the_working_directory(tmp_path: Path) -> None:
    repo = tmp_path / "checkout" / "weird name!"
    (repo / ".git").mkdir(parents=True)
    (repo / ".git" / "config").write_text(
        '[core]\n\tbare = false\n[remote "upstream"]\n\turl = https://x.org/other/thing\n'
        '[remote "origin"]\n\turl = https://user:tok@github.com/Acme-Corp/payments.git\n'
    )
    src = write_jsonl(tmp_path / "s.jsonl", [claude_record(1, "hi there", cwd=str(repo / "src"))])
    landing = tmp_path / "landing"
    import_claude_code([src], settings(landing))
    assert [(t["org"], t["repo"]) for t in landed_lines(landing)] == [("Acme-Corp", "payments")]


def test_concurrent_imports_of_one_session_land_each_turn_once(tmp_path: Path) -> None:
    src = write_jsonl(tmp_path / "s.jsonl", [claude_record(n, f"turn {n}") for n in range(1, 40)])
    landing = tmp_path / "landing"
    reports = []

    def run() -> None:
        reports.append(import_claude_code([src], settings(landing)))

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(r.turns_written for r in reports) == 39
    ids = [t["turn_id"] for t in landed_lines(landing)]
    assert len(ids) == len(set(ids)) == 39


def test_missing_paths_and_symlinks_are_reported(tmp_path: Path) -> None:
    (tmp_path / "link.jsonl").symlink_to(
        CLAUDE / "claude-code-log" / "dag_compact_after_rewind.jsonl"
    )
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "inner.jsonl").symlink_to(tmp_path / "link.jsonl")
    landing = tmp_path / "landing"
    report = import_claude_code(
        [tmp_path / "nope", tmp_path / "link.jsonl", folder], settings(landing)
    )
    assert [p.reason for p in report.errors] == ["not_found", "symlink"]
    assert report.files == 0 and not landing.exists()


@pytest.mark.parametrize(
    ("record", "reason"),
    [
        ({"timestamp": "nope", "type": "response_item", "payload": {"type": "message"}},
         "bad_timestamp"),
        ({"type": "message", "role": "user", "content": "no header before me"}, "bad_timestamp"),
    ],
)  # fmt: skip
def test_codex_records_without_time_are_reported(
    tmp_path: Path, record: dict[str, Any], reason: str
) -> None:
    src = write_jsonl(tmp_path / "rollout-x-11111111-2222-3333-4444-555555555555.jsonl", [record])
    report = import_codex([src], settings(tmp_path / "landing"))
    assert [(p.line, p.reason) for p in report.errors] == [(1, reason)]


def test_codex_mcp_upsert_with_namespace(tmp_path: Path) -> None:
    args = json.dumps({"triples": [{"subject": "api", "predicate": "USES", "object": "Kafka"}]})
    src = write_jsonl(
        tmp_path / "rollout-2026-01-01T00-00-00-11111111-2222-3333-4444-555555555555.jsonl",
        [
            {"timestamp": "2026-01-01T00:00:00Z", "type": "session_meta",
             "payload": {"id": "11111111-2222-3333-4444-555555555555", "cwd": "/nowhere/api",
                         "git": {"repository_url": "git@github.com:acme/api.git"}}},
            {"timestamp": "2026-01-01T00:00:01Z", "type": "response_item",
             "payload": {"type": "function_call", "name": "upsert_graph_triples",
                         "namespace": "mcp__memflow__", "arguments": args, "call_id": "c1"}},
        ],
    )  # fmt: skip
    landing = tmp_path / "landing"
    import_codex([src], settings(landing))
    (turn,) = landed_lines(landing)
    assert (turn["org"], turn["repo"]) == ("acme", "api")  # the recorded remote
    assert turn["tool_name"] == "upsert_graph_triples"
    assert turn["tool_input"]["triples"][0]["object"] == "Kafka"
