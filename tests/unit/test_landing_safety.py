"""The landing zone as an attacker or a careless user leaves it: symlinks (F4), FIFOs (F5),
directories named like files (F6), directories that are no scope (F14), files replaced or
changed while read (F15), duplicate turns across files (F12), secrets in rejected records and
ids (F11, F8: routing), odd names. Only regular files `discover` lists are ever opened, nothing
blocks, nothing raises, every line is accounted for."""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from hypothesis import given
from hypothesis import strategies as st

from memflow.landing import (
    REJECT_COLUMNS,
    TURN_COLUMNS,
    LandingFileError,
    TenantRead,
    count_records,
    discover,
    fingerprint,
    landing_problems,
    read_landing_file,
    read_tenant_files,
    split_duplicates,
)
from memflow.landing import files as landing_files
from memflow.landing import format as landing_format
from schemas.ids import turn_key
from schemas.scope import Scope
from schemas.tables import LANDING_PROBLEMS

NOW = datetime(2026, 12, 1, tzinfo=UTC)
SCOPE = Scope("acme", "r")


def turn(n: int, *, ts: str = "2026-11-20T10:00:00Z", session: str = "s", **kw: Any) -> dict:
    line = {
        "org": "acme",
        "repo": "r",
        "session_id": session,
        "turn_id": f"t{n}",
        "ts": ts,
        "role": "user",
        "content": f"turn {n}",
        "client": "claude-code",
    }
    line.update(kw)
    return line


def body(lines: list[dict]) -> bytes:
    return b"".join(json.dumps(x).encode() + b"\n" for x in lines)


def land(root: Path, name: str, lines: list[dict], org: str = "acme", repo: str = "r") -> Path:
    folder = root / org / repo
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_bytes(body(lines))
    return path


def within(seconds: float, fn: Callable[[], Any]) -> Any:
    """Run `fn` in a thread; fail (instead of hanging the suite) if it blocks."""
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["value"] = fn()
        except BaseException as exc:
            out["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"blocked for more than {seconds} s"
    if "error" in out:
        raise out["error"]
    return out["value"]


def accounted(read: TenantRead) -> None:
    assert read.records == read.turns.height + read.rejects.height
    for f in read.files:
        if f.read:
            assert f.records == f.turns + f.rejects, f


# --------------------------------------------------------------------------------- F4 symlinks


def test_f4_symlinked_files_are_never_read(tmp_path: Path) -> None:
    """F4: `read_tenant_day` read every *.jsonl by name, symlinks included: outside turns
    became facts and /etc/hostname reached quarantine.record."""
    root = tmp_path / "landing"
    land(root, "a.jsonl", [turn(1)])
    outside = tmp_path / "outside.jsonl"
    outside.write_bytes(body([turn(9, content="OUTSIDE-FILE-LINE-1 db_host=10.1.2.3")]))
    private = tmp_path / "private.txt"
    private.write_text("PRIVATE TEXT\n")
    (root / "acme" / "r" / "leak.jsonl").symlink_to(outside)
    (root / "acme" / "r" / "host.jsonl").symlink_to(private)

    found = discover(root)
    assert [p.name for p in found[SCOPE]] == ["a.jsonl"]
    assert {(p.path, p.reason) for p in found.problems} == {
        ("acme/r/leak.jsonl", "symlink"),
        ("acme/r/host.jsonl", "symlink"),
    }
    for files in (
        None,
        found[SCOPE],
        [root / "acme" / "r" / n for n in ("leak.jsonl", "host.jsonl")],
    ):
        read = read_tenant_files(root, SCOPE, files, now=NOW)
        text = read.turns.write_csv() + read.rejects.write_csv()
        assert "OUTSIDE" not in text and "PRIVATE" not in text
        accounted(read)
    read = read_tenant_files(root, SCOPE, now=NOW)
    assert read.turns["turn_id"].to_list() == ["t1"]
    assert {(p.path, p.reason, p.lines) for p in read.problems} == {
        ("acme/r/leak.jsonl", "symlink", None),
        ("acme/r/host.jsonl", "symlink", None),
    }
    one = read_landing_file(root / "acme" / "r" / "leak.jsonl", root)
    assert one.problem is not None and one.problem.reason == "symlink" and one.records == 0
    with pytest.raises(LandingFileError, match="symlink"):
        fingerprint(root / "acme" / "r" / "host.jsonl", root)


def test_f4_symlinked_directories_on_the_way_are_not_followed(tmp_path: Path) -> None:
    root = tmp_path / "landing"
    elsewhere = tmp_path / "elsewhere" / "r"
    elsewhere.mkdir(parents=True)
    (elsewhere / "x.jsonl").write_bytes(body([turn(1, repo="r")]))
    (root / "acme").mkdir(parents=True)
    (root / "acme" / "r").symlink_to(elsewhere)  # the repo directory is a link
    (root / "evil").symlink_to(tmp_path / "elsewhere")  # the org directory is a link
    found = discover(root)
    assert dict(found) == {}
    assert {(p.path, p.reason) for p in found.problems} == {
        ("acme/r", "symlink"),
        ("evil", "symlink"),
    }
    for given_files in (None, [root / "acme" / "r" / "x.jsonl"]):
        read = read_tenant_files(root, SCOPE, given_files, now=NOW)
        assert read.turns.height == 0 and read.records == 0
        assert [p.reason for p in read.problems] == ["symlink"]
    evil = read_landing_file(root / "evil" / "r" / "x.jsonl", root)
    assert evil.problem is not None and evil.problem.reason == "symlink"


def test_files_given_outside_the_tenant_are_not_opened(tmp_path: Path) -> None:
    root = tmp_path / "landing"
    land(root, "a.jsonl", [turn(1)])
    other = land(root, "b.jsonl", [turn(2, org="globex")], org="globex")
    outside = tmp_path / "x.jsonl"
    outside.write_bytes(body([turn(3)]))
    hidden = land(root, ".c.jsonl", [turn(4)])
    (root / "acme" / "link").symlink_to(tmp_path)
    given_files = [other, outside, hidden, root / "acme/link/../r/a.jsonl"]
    read = read_tenant_files(root, SCOPE, given_files, now=NOW)
    assert [p.reason for p in read.problems] == ["not_in_tenant"] * 3
    # ".." is resolved by name, never through the link: it is the tenant's own a.jsonl
    assert read.turns["turn_id"].to_list() == ["t1"]
    assert [f.source_file for f in read.files] == ["acme/r/a.jsonl"]


# ------------------------------------------------------------------------ F5 FIFOs and devices


def test_f5_a_fifo_never_blocks(tmp_path: Path) -> None:
    """F5: a FIFO named *.jsonl made `memflow run` block forever in open()."""
    root = tmp_path / "landing"
    land(root, "a.jsonl", [turn(1)])
    fifo = root / "acme" / "r" / "pipe.jsonl"
    os.mkfifo(fifo)
    found = within(5, lambda: discover(root))
    assert [p.name for p in found[SCOPE]] == ["a.jsonl"]
    assert [(p.path, p.reason) for p in found.problems] == [
        ("acme/r/pipe.jsonl", "not_a_regular_file")
    ]
    assert "FIFO" in found.problems[0].detail
    read = within(5, lambda: read_tenant_files(root, SCOPE, [fifo, root / "acme/r/a.jsonl"]))
    assert read.turns["turn_id"].to_list() == ["t1"]
    assert [(p.reason, p.lines) for p in read.problems] == [("not_a_regular_file", None)]
    assert within(5, lambda: read_landing_file(fifo, root)).problem.reason == "not_a_regular_file"
    with pytest.raises(LandingFileError):
        within(5, lambda: fingerprint(fifo, root))
    assert within(5, lambda: count_records(root, "acme/r/pipe.jsonl")) is None
    problems = within(5, lambda: landing_problems(root))
    assert problems.to_dicts() == [
        {
            "path": "acme/r/pipe.jsonl",
            "reason": "not_a_regular_file",
            "detail": found.problems[0].detail,
            "lines": None,
            "tenant_id": "acme",
            "ns": "r",
        }
    ]


def test_f5_a_file_swapped_for_a_fifo_after_discovery_never_blocks(tmp_path: Path) -> None:
    """The time-of-check gap: discover saw a regular file, a FIFO is there when it is read."""
    root = tmp_path / "landing"
    path = land(root, "a.jsonl", [turn(1)])
    found = discover(root)
    path.unlink()
    os.mkfifo(path)
    read = within(5, lambda: read_tenant_files(root, SCOPE, found[SCOPE], now=NOW))
    assert read.turns.height == 0
    assert [p.reason for p in read.problems] == ["not_a_regular_file"]


def test_a_device_is_never_opened(tmp_path: Path) -> None:
    root = tmp_path / "landing"
    (root / "acme" / "r").mkdir(parents=True)
    dev = root / "acme" / "r" / "zero.jsonl"
    try:
        os.mknod(dev, 0o600 | 0o020000, os.makedev(1, 5))  # /dev/zero: endless if read
    except (PermissionError, OSError):
        pytest.skip("cannot create a device node here")
    read = within(5, lambda: read_tenant_files(root, SCOPE, [dev], now=NOW))
    assert [p.reason for p in read.problems] == ["not_a_regular_file"]
    assert "character device" in read.problems[0].detail


# ------------------------------------------------------------------- F6 nested directories


def test_f6_a_directory_named_like_a_landing_file_is_not_opened(tmp_path: Path) -> None:
    """F6: a directory `sub.jsonl` was reported as nested_directory, then opened."""
    root = tmp_path / "landing"
    land(root, "a.jsonl", [turn(1)])
    sub = root / "acme" / "r" / "sub.jsonl"
    sub.mkdir()
    (sub / "inner.jsonl").write_bytes(body([turn(5), turn(6)]))
    found = discover(root)
    assert [(p.path, p.reason) for p in found.problems] == [
        ("acme/r/sub.jsonl", "nested_directory")
    ]
    read = read_tenant_files(root, SCOPE, [*found[SCOPE], sub], now=NOW)
    assert read.turns["turn_id"].to_list() == ["t1"]
    assert [(p.reason, p.lines) for p in read.problems] == [("nested_directory", 2)]
    assert read_landing_file(sub, root).problem.reason == "nested_directory"
    accounted(read)


# -------------------------------------------------------------- F14 invalid scope directories

BAD_NAMES = ["a..b", "my org", "ácme", "-dash", "x" * 101, "tab\there", "nl\n", "ünï", "trail."]


def test_f14_lines_under_invalid_scope_names_are_counted(tmp_path: Path) -> None:
    """F14: lines under directories that are no valid scope were on stderr only."""
    root = tmp_path / "landing"
    for i, name in enumerate(BAD_NAMES):
        land(root, "x.jsonl", [turn(1), turn(2)][: 1 + i % 2], org=name, repo="r")
    land(root, "y.jsonl", [turn(1)], org="acme", repo="re..po")
    land(root, "ok.jsonl", [turn(1)])
    (root / "acme" / "r" / "old").mkdir()
    (root / "acme" / "r" / "old" / "deep").mkdir()
    (root / "acme" / "r" / "old" / "deep" / "z.jsonl").write_bytes(body([turn(7)] * 3) + b"\n\n")
    (root / "acme" / "r" / "old" / "z.parquet").write_bytes(b"not parquet")
    (root / "acme" / "stray.jsonl").write_bytes(body([turn(8)] * 4))

    table = landing_problems(root)
    assert dict(table.schema) == LANDING_PROBLEMS
    rows = {(r["path"], r["reason"]): r["lines"] for r in table.to_dicts()}
    for i, name in enumerate(BAD_NAMES):
        if name == "trail.":
            continue
        assert rows[(f"{name}/r", "invalid_scope")] == 1 + i % 2, name
    assert rows[("acme/re..po", "invalid_scope")] == 1
    assert rows[("acme/r/old", "nested_directory")] == 4  # 3 lines + 1 unreadable Parquet
    assert rows[("acme/stray.jsonl", "misplaced_file")] == 4
    assert all(r["detail"] for r in table.to_dicts())
    invalid = table.filter(pl.col("reason") == "invalid_scope")
    assert invalid["tenant_id"].null_count() == invalid.height
    nested = table.filter(pl.col("reason") == "nested_directory").row(0, named=True)
    assert (nested["tenant_id"], nested["ns"]) == ("acme", "r")


def test_names_with_newlines_quotes_and_bad_bytes_stay_readable(tmp_path: Path) -> None:
    root = tmp_path / "landing"
    odd = ['x"y.jsonl', "new\nline.jsonl", "back\\slash.jsonl", "sp ace.jsonl", "é.jsonl"]
    for i, name in enumerate(odd):
        land(root, name, [turn(i)])
    raw = os.fsencode(root / "acme" / "r") + b"/bad\xffbyte.jsonl"
    with open(raw, "wb") as fh:
        fh.write(body([turn(99)]))
    read = read_tenant_files(root, SCOPE, now=NOW)
    assert read.turns.height == 6 and read.rejects.height == 0
    sources = set(read.turns["source_file"].to_list())
    assert "acme/r/bad\\xffbyte.jsonl" in sources
    assert 'acme/r/x"y.jsonl' in sources and "acme/r/new\nline.jsonl" in sources
    assert {fp.path for fp in read.fingerprints} == sources
    read.turns.write_parquet(tmp_path / "t.parquet")  # every name is storable text


# ------------------------------------------------------------------ F15 files changing mid-read


def test_f15_a_file_replaced_while_read_is_read_whole_in_one_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """F15: a file atomically replaced during a run: 18,000 lines neither ingested nor
    reported. Reading goes through one fd and notices the replacement (the old inode's ctime
    moves when it is unlinked): it reads the file again, and describes the version it read."""
    root = tmp_path / "landing"
    old = body([turn(i, ts="2026-11-01T00:00:00Z") for i in range(2000)])
    new = body([turn(i, ts="2026-11-11T00:00:00Z", session="new") for i in range(1500)])
    path = root / "acme" / "r" / "big.jsonl"
    path.parent.mkdir(parents=True)
    path.write_bytes(old)
    monkeypatch.setattr(landing_files, "_CHUNK", 4096)
    real_read = landing_files._Source.read
    calls = {"n": 0}

    def read_then_replace(self: landing_files._Source, n: int = 4096) -> bytes:
        calls["n"] += 1
        if calls["n"] == 3:  # mid-file: the writer renames a new version into place
            tmp = path.with_name(".big.jsonl.tmp")
            tmp.write_bytes(new)
            os.replace(tmp, path)
        return real_read(self, n)

    monkeypatch.setattr(landing_files._Source, "read", read_then_replace)
    read = read_tenant_files(root, SCOPE, now=NOW)
    (fp,) = read.fingerprints
    assert calls["n"] > 3  # the first attempt was cut short by the replacement
    assert fp.sha256 == hashlib.sha256(new).hexdigest() and fp.size == len(new)
    assert read.turns.height == 1500 and set(read.turns["session_id"]) == {"new"}
    assert (read.turns["day"].unique().to_list(), read.rejects.height) == (["2026-11-11"], 0)
    accounted(read)
    assert fp.same_stat(path.stat())


def test_f15_a_file_changed_in_place_is_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "landing"
    path = land(root, "a.jsonl", [turn(i) for i in range(300)])
    monkeypatch.setattr(landing_files, "_CHUNK", 1024)
    real_read = landing_files._Source.read
    appended = {"done": False}

    def append_once(self: landing_files._Source, n: int = 1024) -> bytes:
        if not appended["done"]:
            appended["done"] = True
            with open(path, "ab") as fh:
                fh.write(body([turn(1000)]))
        return real_read(self, n)

    monkeypatch.setattr(landing_files._Source, "read", append_once)
    read = read_tenant_files(root, SCOPE, now=NOW)
    assert read.turns.height == 301
    assert read.fingerprints[0].sha256 == hashlib.sha256(path.read_bytes()).hexdigest()


def test_f15_a_file_that_keeps_changing_is_skipped_and_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "landing"
    path = land(root, "a.jsonl", [turn(i) for i in range(50)])
    real_read = landing_files._Source.read

    # The sources themselves, held: an id of a collected one can come back for the next.
    touched: list[landing_files._Source] = []

    def always_append(self: landing_files._Source, n: int = 1 << 20) -> bytes:
        data = real_read(self, n)
        if not any(s is self for s in touched):  # once per attempt: it changes under every read
            touched.append(self)
            with open(path, "ab") as fh:
                fh.write(body([turn(5000 + len(touched))]))
        return data

    monkeypatch.setattr(landing_files._Source, "read", always_append)
    read = read_tenant_files(root, SCOPE, now=NOW)
    assert read.turns.height == 0 and read.fingerprints == []
    (problem,) = read.problems
    assert problem.reason == "changed_during_read" and problem.lines and problem.lines >= 50


def test_f15_a_real_race_always_yields_exactly_one_version(tmp_path: Path) -> None:
    """A writer thread keeps renaming two versions into place while the reader reads."""
    root = tmp_path / "landing"
    versions = [
        body([turn(i, content="A" * 50) for i in range(400)]),
        body([turn(i, content="B" * 70, session="b") for i in range(300)]),
    ]
    digests = {hashlib.sha256(v).hexdigest(): v for v in versions}
    path = root / "acme" / "r" / "race.jsonl"
    path.parent.mkdir(parents=True)
    path.write_bytes(versions[0])
    stop = threading.Event()

    def writer() -> None:
        i = 0
        while not stop.is_set():
            tmp = path.with_name(f".race.{i}.tmp")
            tmp.write_bytes(versions[i % 2])
            os.replace(tmp, path)
            i += 1

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 3
        reads = 0
        while time.monotonic() < deadline:
            read = read_tenant_files(root, SCOPE, now=NOW)
            reads += 1
            if read.problems:  # vanished between listing and opening is a fair outcome
                assert {p.reason for p in read.problems} <= {"vanished", "changed_during_read"}
                continue
            (fp,) = read.fingerprints
            version = digests[fp.sha256]
            assert fp.size == len(version)
            assert read.turns.height == version.count(b"\n")
            accounted(read)
    finally:
        stop.set()
        thread.join()
    assert reads > 5


# ------------------------------------------------------------------ F12 duplicates across files


def test_f12_the_same_turn_in_two_files_on_different_days_is_one_turn(tmp_path: Path) -> None:
    """F12: the same session_id + turn_id in files of two days was ingested twice."""
    root = tmp_path / "landing"
    land(root, "a.jsonl", [turn(3, ts="2026-11-20T10:00:00Z", content="day 1")])
    land(root, "b.jsonl", [turn(3, ts="2026-11-21T10:00:00Z", content="day 2"), turn(4)])
    read = read_tenant_files(root, SCOPE, now=NOW)
    assert read.turns.select("turn_id", "content").rows() == [("t3", "day 1"), ("t4", "turn 4")]
    (dup,) = read.rejects.to_dicts()
    assert (dup["reason"], dup["source_file"], dup["line_no"]) == (
        "duplicate_turn",
        "acme/r/b.jsonl",
        1,
    )
    assert "acme/r/a.jsonl" in dup["detail"]
    accounted(read)
    # A later run that only reads b.jsonl knows t3 is stored: it is a duplicate again.
    stored = read.turns["turn_key"]
    later = read_tenant_files(root, SCOPE, [root / "acme/r/b.jsonl"], ingested_keys=stored)
    assert later.turns["turn_id"].to_list() == []
    assert later.rejects["reason"].to_list() == ["duplicate_turn", "duplicate_turn"]


def _turns(rows: list[tuple[str, str, int, str, int]]) -> pl.DataFrame:
    out = []
    for session, turn_id, day, source, line_no in rows:
        out.append(
            {
                "turn_key": turn_key("acme", "r", session, turn_id),
                "tenant_id": "acme",
                "ns": "r",
                "day": f"2026-11-{day:02d}",
                "session_id": session,
                "turn_id": turn_id,
                "ts": datetime(2026, 11, day, tzinfo=UTC),
                "role": "user",
                "client": "c",
                "content": "",
                "tool_name": None,
                "tool_input_json": None,
                "source_file": source,
                "line_no": line_no,
            }
        )
    return pl.DataFrame(out, schema=TURN_COLUMNS) if out else pl.DataFrame(schema=TURN_COLUMNS)


rows_strategy = st.lists(
    st.tuples(
        st.sampled_from(["s1", "s2"]),
        st.sampled_from(["t1", "t2", "t3"]),
        st.integers(1, 28),
        st.sampled_from(["acme/r/a.jsonl", "acme/r/b.jsonl"]),
        st.integers(1, 50),
    ),
    max_size=30,
)


@given(rows=rows_strategy, ingested=st.sets(st.sampled_from(["s1", "s2"]), max_size=2))
def test_split_duplicates_keeps_each_turn_once_and_rejects_the_rest(
    rows: list[tuple[str, str, int, str, int]], ingested: set[str]
) -> None:
    turns = _turns(rows)
    stored = {turn_key("acme", "r", s, "t1") for s in ingested}
    kept, rejects = split_duplicates(turns, stored)
    assert kept.height + rejects.height == turns.height
    assert kept["turn_key"].n_unique() == kept.height
    assert not set(kept["turn_key"]) & stored
    assert set(kept["turn_key"]) == set(turns["turn_key"]) - stored
    assert dict(rejects.schema) == REJECT_COLUMNS
    assert set(rejects["reason"]) <= {"duplicate_turn"}
    for key in set(kept["turn_key"]):  # the earliest (ts, file, line) was kept
        group = turns.filter(pl.col("turn_key") == key).sort("ts", "source_file", "line_no")
        winner = kept.filter(pl.col("turn_key") == key).row(0, named=True)
        assert winner["ts"] == group["ts"][0] and winner["line_no"] == group["line_no"][0]


# --------------------------------------------------------------- F11, F8: the redaction hooks


def test_f11_every_rejected_record_goes_through_the_one_record_function(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[str] = []

    def fake(raw: str, limit: int) -> str:
        seen.append(raw)
        return f"<redacted {len(raw)}>"[:limit]

    monkeypatch.setattr(landing_format, "_redact_record", fake)
    root = tmp_path / "landing"
    land(root, "a.jsonl", [turn(1), turn(2, role="system"), turn(3, org="globex")])
    with open(root / "acme/r/a.jsonl", "ab") as fh:
        fh.write(b'{"oops\n' + b"x" * 3000 + b"\n\xff\xfe\n")
    read = read_tenant_files(root, SCOPE, now=NOW, max_line_bytes=2000)
    records = [r for r in read.rejects["record"].to_list() if r is not None]
    assert len(records) == 5 and all(r.startswith("<redacted") for r in records)
    assert len(seen) == 5


def test_f11_escaped_and_clipped_secrets_never_stay_in_a_record(tmp_path: Path) -> None:
    root = tmp_path / "landing"
    escaped = turn(1, org="globex", content="DATABASE_URL=postgres:\\/\\/app:EscSlashRT1@db\\/x")
    path = land(root, "a.jsonl", [escaped])
    path.write_bytes(path.read_bytes().replace(b"\\\\/", b"\\/"))
    read = read_tenant_files(root, SCOPE, now=NOW)
    assert "EscSlashRT1" not in read.rejects["record"][0]


def test_f8_every_id_field_goes_through_the_one_id_function(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(landing_format, "_redact_id", lambda v: f"ID({v})")
    landing_format._redacted_id.cache_clear()
    try:
        root = tmp_path / "landing"
        land(root, "AKIA.jsonl", [turn(1), turn(2, role="system")])
        read = read_tenant_files(root, SCOPE, now=NOW)
        row = read.turns.row(0, named=True)
        assert (row["session_id"], row["turn_id"], row["client"]) == (
            "ID(s)",
            "ID(t1)",
            "ID(claude-code)",
        )
        assert row["source_file"] == "ID(acme/r/AKIA.jsonl)"
        assert row["turn_key"] == turn_key("acme", "r", "ID(s)", "ID(t1)")
        rej = read.rejects.row(0, named=True)
        assert (rej["session_id"], rej["turn_id"], rej["source_file"]) == (
            "ID(s)",
            "ID(t2)",
            "ID(acme/r/AKIA.jsonl)",
        )
        assert read.fingerprints[0].path == "ID(acme/r/AKIA.jsonl)"
        (root / "acme" / "r" / "AKIA-link.jsonl").symlink_to(root / "acme/r/AKIA.jsonl")
        assert [p.path for p in discover(root).problems] == ["ID(acme/r/AKIA-link.jsonl)"]
    finally:
        landing_format._redacted_id.cache_clear()


# ---------------------------------------------------------------------------- accounting


def test_every_line_of_a_tenant_is_a_turn_a_reject_or_a_counted_problem(tmp_path: Path) -> None:
    root = tmp_path / "landing"
    land(root, "a.jsonl", [turn(1), turn(2, role="x"), turn(1)])
    (root / "acme/r/b.jsonl").write_bytes(b"{bad\n\n" + body([turn(3, ts="1970-01-01T00:00:00Z")]))
    (root / "acme/r/sub").mkdir()
    (root / "acme/r/sub/c.jsonl").write_bytes(body([turn(4)] * 2))
    os.mkfifo(root / "acme/r/p.jsonl")
    read = within(10, lambda: read_tenant_files(root, SCOPE, now=NOW))
    accounted(read)
    assert read.records == 5
    assert read.rejects_by_reason() == {
        "bad_role": 1,
        "duplicate_turn": 1,
        "invalid_json": 1,
        "ts_before_history_start": 1,
    }
    assert {(p.reason, p.lines) for p in read.problems} == {
        ("nested_directory", 2),
        ("not_a_regular_file", None),
    }
    assert read.problems_frame().height == 2
