"""Issue 7's "done when": a landing zone of many tenants, some of whose files carry every kind
of trouble the red teams found (F1–F16; round 2: H3, M5, M6, L4–L6 and the retraction format),
ingests in ONE `memflow run` in a real subprocess:
every good turn and fact lands, every bad one is quarantined with a reason, the summary names
what was not read, no secret is stored anywhere (tables, graph, Dagster's event log, output),
and each tenant's materialization carries its own metadata."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from resources.tables import TableStore
from resources.vector.lite_server import stop_lite_server
from schemas.scope import Scope
from tests.pipeline.landing_fixtures import save, turn, write_jsonl

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]

# Every string below must never be stored, logged or printed.
SECRETS = {
    "maps": "AIzaSyRt-1234567890abcdefghijklmnopqrst",
    "amp_password": "Sup3r&Secret=RT9",
    "aws_in_session": "AKIAQ7RT4EXMPL2XYZ12",
    "ghp_in_turn": "ghp_" + "Rt7Kq9zX2mLw8VbN4cYs1HfJ0aPdE6uG3iKo",
    "sshpass": "SshPassRT4",
    "docker": "DockerPwRT3",
    "escaped": "EscSlashRT1",
}
GOOD = "2026-11-02T10:00:00Z"


def memflow(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pipelines.cli", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


def fact(org: str, repo: str, tid: str, ts: str, *triples: tuple, sid: str = "s1") -> dict:
    return save(
        org,
        repo,
        sid,
        tid,
        ts,
        [
            {"subject": s, "predicate": p, "object": o, **(extra[0] if extra else {})}
            for s, p, o, *extra in triples
        ],
    )


def build(root: Path, outside: Path) -> dict[str, int]:
    """The landing zone; returns how many facts each good tenant must end with."""
    # A clean tenant, to show it is never held back by the others.
    write_jsonl(
        root, "good", "r", "a.jsonl", [fact("good", "r", "1", GOOD, ("svc", "USES", "redis"))]
    )
    # F1: turns from 1970 and from the far future beside a good one.
    write_jsonl(
        root,
        "acme",
        "old",
        "a.jsonl",
        [
            turn("acme", "old", "s", "t0", "1970-01-01T00:00:00Z", "user", "ancient"),
            turn("acme", "old", "s", "t1", "2031-06-01T00:00:00Z", "user", "future"),
            fact("acme", "old", "t2", GOOD, ("billing", "USES", "stripe")),
        ],
    )
    # F2: an org directory whose name ends in a newline; F14: invalid scope names.
    for bad in ("nl\n", "my org", "a..b", "-dash"):
        write_jsonl(root, bad, "r", "x.jsonl", [fact(bad, "r", "1", GOOD, ("x", "USES", "y"))])
    # F3: secrets in prose that redaction must turn into stable text.
    write_jsonl(
        root,
        "acme",
        "chat",
        "a.jsonl",
        [
            turn(
                "acme",
                "chat",
                "s",
                "1",
                GOOD,
                "user",
                f"Here is the Maps key {SECRETS['maps']}: please restrict it to our domain.",
            ),
            turn(
                "acme",
                "chat",
                "s",
                "2",
                GOOD,
                "user",
                f"DATABASE_URL=postgres://app:{SECRETS['amp_password']}@db:5432/pay",
            ),
            turn("acme", "chat", "s", "3", GOOD, "user", f"sshpass -p {SECRETS['sshpass']} ssh h"),
            turn(
                "acme",
                "chat",
                "s",
                "4",
                GOOD,
                "user",
                f"docker login -u b -p {SECRETS['docker']} r",
            ),
            fact("acme", "chat", "5", GOOD, ("chat-svc", "USES", "postgres")),
        ],
    )
    # F4: symlinked files; F5: a FIFO; F6: a directory named *.jsonl.
    special = root / "acme" / "special"
    write_jsonl(
        root,
        "acme",
        "special",
        "a.jsonl",
        [fact("acme", "special", "1", GOOD, ("api", "USES", "kafka"))],
    )
    outside.write_text(
        json.dumps(turn("acme", "special", "s", "9", GOOD, "user", "OUTSIDE")) + "\n"
    )
    os.symlink(outside, special / "leak.jsonl")
    os.symlink("/etc/hostname", special / "host.jsonl")
    os.mkfifo(special / "pipe.jsonl")
    (special / "sub.jsonl").mkdir()
    # F9: names that differ in digits; F12: the same turn on two days in two files.
    write_jsonl(
        root,
        "acme",
        "merge",
        "a.jsonl",
        [
            fact(
                "acme",
                "merge",
                "1",
                GOOD,
                ("web-app", "USES", "Node 1.8"),
                ("web-app", "USES", "Node 18"),
                ("gw", "ROUTES_TO", "10.0.0.1"),
                ("gw", "ROUTES_TO", "100.0.1"),
                ("ml", "RUNS_ON", "Python 3.10"),
                ("ml", "RUNS_ON", "Python 3.1.0"),
                ("ml", "RUNS_ON", "python 3.10"),  # a spelling of a stored name: merged
                # item 5: dates people write
                ("db", "MIGRATED_TO", "postgres 16", {"valid_from": "2023-05-08"}),
                ("db", "BACKED_UP_BY", "barman", {"valid_from": "2023-05"}),
                ("db", "OWNED_BY", "platform", {"valid_from": "last tuesday"}),
            ),
            fact("acme", "merge", "d3", "2026-11-20T01:00:00Z", ("x1", "USES", "y1"), sid="sx"),
        ],
    )
    write_jsonl(
        root,
        "acme",
        "merge",
        "b.jsonl",
        [fact("acme", "merge", "d3", "2026-11-21T01:00:00Z", ("x2", "USES", "y2"), sid="sx")],
    )
    # F8: secrets in ids; F11: an escaped secret in a rejected line.
    write_jsonl(
        root,
        "acme",
        "ids",
        "a.jsonl",
        [
            fact(
                "acme",
                "ids",
                SECRETS["ghp_in_turn"],
                GOOD,
                ("ids-svc", "USES", "vault"),
                sid=f"sess-{SECRETS['aws_in_session']}",
            ),
            '{"org":"globex","repo":"ids","session_id":"s","turn_id":"t","ts":"' + GOOD + '",'
            '"role":"user","client":"c","content":"DATABASE_URL=postgres:\\/\\/app:'
            + SECRETS["escaped"]
            + '@db\\/x"}',
        ],
    )
    expected = build_round_two(root)
    return {
        **expected,
        "good/r": 1,
        "acme/old": 1,
        "acme/chat": 1,
        "acme/special": 1,
        "acme/merge": 10 - 1 + 1,  # 10 triples, python 3.10 merged, + the first of the dupes
        "acme/ids": 1,
    }


FORGED = "FAILED raw_turns [good/r]: forged by a directory name"


def build_round_two(root: Path) -> dict[str, int]:
    """The second red team's landing troubles; returns the facts each tenant must end with."""
    import datetime as dt

    import pandas as pd

    from tests.fuzz import bombs

    bomb_dir = root / "acme" / "bombs"
    write_jsonl(
        root, "acme", "bombs", "a.jsonl", [fact("acme", "bombs", "1", GOOD, ("a", "USES", "b"))]
    )
    (bomb_dir / "dictionary.parquet").write_bytes(bombs.dictionary_bomb(org="acme", repo="bombs"))
    (bomb_dir / "huge.parquet").write_bytes(bombs.huge_row(org="acme", repo="bombs"))
    ist = dt.timezone(dt.timedelta(hours=5, minutes=30))
    pd.DataFrame(
        {
            "org": ["acme"] * 3, "repo": ["bombs"] * 3, "session_id": ["pd"] * 3,
            "turn_id": ["1", "2", "3"], "role": ["user"] * 3, "content": ["x", "y", "z"],
            "client": ["pandas"] * 3,
            "ts": [dt.datetime(2026, 11, 2, 15, 30, i, tzinfo=ist) for i in range(3)],
        }
    ).to_parquet(bomb_dir / "pandas.parquet")  # fmt: skip
    spelled = [
        fact("acme", "tools", "1", GOOD, ("tool-a", "USES", "x")),
        fact("acme", "tools", "2", GOOD, ("tool-b", "USES", "y")),
        fact("acme", "tools", "3", GOOD, ("tool-c", "USES", "z")),
    ]
    for line, name in zip(
        spelled,
        ["mcp__memflow__upsert_graph_triples", "UPSERT_GRAPH_TRIPLES", "upsertGraphTriples"],
        strict=True,
    ):
        line["tool_name"] = name
    retract = turn("acme", "tools", "s1", "4", GOOD, "tool", "")
    retract |= {"tool_name": "mcp__memflow__retract_facts",
                "tool_input": {"retract": [{"entity": "never-stated"}], "by": "e2e"}}  # fmt: skip
    broken = turn("acme", "tools", "s1", "5", GOOD, "tool", "")
    broken |= {"tool_name": "retract_facts", "tool_input": {"retract": [{"fact_id": ""}]}}
    write_jsonl(root, "acme", "tools", "a.jsonl", [*spelled, retract, broken])
    lines_dir = root / "acme" / "lines"
    lines_dir.mkdir(parents=True)
    records = [
        json.dumps(fact("acme", "lines", str(i), GOOD + " ", (f"l{i}", "USES", "m"))).encode()
        for i in range(6)
    ]
    (lines_dir / "mac.jsonl").write_bytes(b"\r".join(records[:3]) + b"\r")
    sep = "\u2028".encode()
    (lines_dir / "joined.jsonl").write_bytes(
        records[3] + sep + records[4] + b"\n\xef\xbb\xbf" + records[5] + b"\n"
    )
    write_jsonl(
        root,
        "acme",
        "lines/.hidden",
        "kept-out.jsonl",
        [turn("acme", "lines", "h", "1", GOOD, "user", "x")],
    )
    write_jsonl(
        root, f"evil\n{FORGED}", "r", "x.jsonl", [turn("evil", "r", "s", "1", GOOD, "user", "x")]
    )
    return {"acme/bombs": 1, "acme/tools": 3, "acme/lines": 6}


@pytest.fixture(scope="module")
def troubled(tmp_path_factory: pytest.TempPathFactory):
    base = tmp_path_factory.mktemp("troubled")
    landing, data = base / "landing", base / "data"
    expected = build(landing, base / "outside.jsonl")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMFLOW_", "DAGSTER_"))}
    env.update(MEMFLOW_EMBEDDER="none", CI="true")
    try:
        run = memflow("run", "--landing", str(landing), "--data", str(data), env=env)
        status = memflow("status", "--data", str(data), "--json", env=env)
        yield landing, data, expected, run, status
    finally:
        stop_lite_server(data)


def test_one_run_lands_every_good_fact_and_fails_nothing(troubled) -> None:
    _, data, expected, run, _ = troubled
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "FAILED" not in run.stdout
    tables = TableStore(data)
    for tenant, n in expected.items():
        facts = tables.read("validated_facts", Scope.parse(tenant))
        assert facts is not None and facts.height == n, (tenant, facts)
    merge = tables.read("validated_facts", Scope("acme", "merge"))
    objects = set(merge["object"].to_list())
    assert {"Node 1.8", "Node 18", "10.0.0.1", "100.0.1", "Python 3.10", "Python 3.1.0"} <= objects
    dated = {r["object"]: r["valid_from"] for r in merge.to_dicts()}
    assert dated["postgres 16"].isoformat().startswith("2023-05-08T00:00")
    assert dated["barman"].isoformat().startswith("2023-05-01T00:00")
    assert "platform" in dated  # unparseable date: the fact is kept with the turn's time


def test_every_bad_line_is_quarantined_with_a_reason_and_lines_balance(troubled) -> None:
    _, data, _, _, status = troubled
    assert status.returncode == 0, status.stderr[-2000:]
    report = json.loads(status.stdout)
    for t in report["tenants"]:
        acc = t["accounting"]
        assert acc["lines_accounted"] and acc["triples_accounted"], t["tenant"]
    tables = TableStore(data)

    def reasons(tenant: str) -> dict[str, str]:
        q = tables.read("quarantine", Scope.parse(tenant))
        return dict(zip(q["reason"], q["severity"], strict=True))

    assert {"ts_before_history_start", "ts_in_future"} <= set(reasons("acme/old"))
    assert reasons("acme/merge").get("duplicate_turn") == "error"
    assert "warning" in reasons("acme/merge").values()  # the unparseable valid_from
    assert "scope_mismatch" in reasons("acme/ids")
    special = tables.read_table("raw_turns", Scope("acme", "special"))
    assert special["content"].to_list() != [] and "OUTSIDE" not in " ".join(
        c or "" for c in special["content"].to_list()
    )
    merges = tables.read("fact_merges", Scope("acme", "merge"))
    assert merges["object"].to_list() == ["python 3.10"]


def test_what_no_tenant_reads_is_listed_with_its_lines(troubled) -> None:
    _, data, _, run, _ = troubled
    problems = TableStore(data).read_zone("landing_problems")
    by_path = {r["path"]: r for r in problems.to_dicts()}
    for bad in ("my org/r", "a..b/r", "-dash/r"):
        entry = next(r for p, r in by_path.items() if p.startswith(bad.split("/")[0]))
        assert entry["reason"] == "invalid_scope" and entry["lines"] == 1, entry
    kinds = {r["reason"] for p, r in by_path.items() if p.startswith("acme/special/")}
    assert {"symlink", "not_a_regular_file", "nested_directory"} <= kinds
    assert "invalid_scope" in run.stderr or "invalid_scope" in run.stdout


def test_no_secret_anywhere(troubled) -> None:
    _, data, _, run, status = troubled
    haystacks: list[str] = [run.stdout, run.stderr, status.stdout]
    for path in data.rglob("*"):
        if path.is_file() and path.suffix == ".parquet":
            haystacks.append(json.dumps(pl.read_parquet(path).to_dicts(), default=str))
        elif path.is_file() and path.suffix in (".db", ".sqlite") and "milvus" not in str(path):
            with sqlite3.connect(path) as db:
                haystacks.append("\n".join(db.iterdump()))
        elif path.is_file() and path.suffix in (".json", ".log", ".out", ".err"):
            haystacks.append(path.read_text(errors="replace"))
    text = "\n".join(haystacks)
    leaked = [name for name, secret in SECRETS.items() if secret in text]
    assert not leaked


def test_round_two_troubles_are_read_or_quarantined_never_dropped(troubled) -> None:
    _, data, _, run, _ = troubled
    tables = TableStore(data)

    def rejects(tenant: str) -> dict[str, int]:
        q = tables.read_table("turn_rejects", Scope.parse(tenant))
        return dict(q.group_by("reason").len().iter_rows()) if q is not None else {}

    assert rejects("acme/bombs") == {"file_too_large": 1, "row_too_large": 1}
    bombs = tables.read_table("raw_turns", Scope("acme", "bombs"))
    assert sorted(bombs.filter(pl.col("session_id") == "pd")["turn_id"]) == ["1", "2", "3"]
    assert sorted(bombs.filter(pl.col("turn_id").is_in(["t-0", "t-2"]))["turn_id"]) == [
        "t-0",
        "t-2",
    ]
    assert rejects("acme/tools") == {"bad_tool_input": 1}
    tools = tables.read_table("raw_turns", Scope("acme", "tools"))
    named = dict(zip(tools["turn_id"], tools["tool_name"], strict=True))
    assert named == {"1": "upsert_graph_triples", "2": "upsert_graph_triples",
                     "3": "upsert_graph_triples", "4": "retract_facts"}  # fmt: skip
    (kept,) = tools.filter(pl.col("turn_id") == "4")["tool_triples"].to_list()
    assert json.loads(kept) == {"retract": [{"entity": "never-stated"}], "by": "e2e"}
    assert rejects("acme/lines") == {}
    problems = {r["path"]: r for r in tables.read_zone("landing_problems").to_dicts()}
    assert problems["acme/lines/.hidden"]["reason"] == "hidden_directory"
    assert problems["acme/lines/.hidden"]["lines"] == 1
    printed = (run.stdout + run.stderr).splitlines()
    assert not [line for line in printed if line.startswith("FAILED")], printed
    assert any("\\x0aFAILED raw_turns" in line for line in printed), printed


def test_each_tenant_has_its_own_metadata(troubled) -> None:
    _, data, _, _, _ = troubled
    from dagster import AssetKey, DagsterInstance

    with DagsterInstance.from_ref(
        DagsterInstance.local_temp(str(data / "dagster")).get_ref()
    ) as instance:
        records = instance.fetch_materializations(AssetKey("raw_turns"), limit=100).records
    rows = {r.asset_materialization.partition: r.asset_materialization.metadata for r in records}
    assert rows["good/r"]["rows_out"].value == 1
    assert rows["acme/chat"]["rows_out"].value == 5
    assert rows["acme/old"]["rows_out"].value == 1
