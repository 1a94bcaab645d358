"""Small landing zones written by tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SECRET_TOKEN = "ghp_" + "Ab3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1dF3hJ5"
SECRET_PASSWORD = "hunter2-Sup3rS3cret!"


def turn(
    org: str, repo: str, sid: str, tid: str, ts: str, role: str, content: str, **extra: Any
) -> dict[str, Any]:
    return {
        "org": org,
        "repo": repo,
        "session_id": sid,
        "turn_id": tid,
        "ts": ts,
        "role": role,
        "content": content,
        "client": "claude-code",
        **extra,
    }


def save(org: str, repo: str, sid: str, tid: str, ts: str, triples: list[dict]) -> dict:
    return turn(
        org,
        repo,
        sid,
        tid,
        ts,
        "tool",
        "",
        tool_name="upsert_graph_triples",
        tool_input={"triples": triples},
    )


def write_jsonl(root: Path, org: str, repo: str, name: str, lines: list[Any]) -> Path:
    folder = root / org / repo
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    with path.open("w", encoding="utf-8") as fh:
        for line in lines:
            fh.write(line if isinstance(line, str) else json.dumps(line, ensure_ascii=False))
            fh.write("\n")
    return path


def small_landing(root: Path) -> Path:
    """Two tenants, two days, one malformed line, one secret, one bad predicate."""
    a = [
        turn(
            "acme",
            "api",
            "s1",
            "1",
            "2026-11-02T09:00:00+01:00",
            "user",
            f"We use Postgres 16. The db password={SECRET_PASSWORD} never commit it.",
        ),
        save(
            "acme",
            "api",
            "s1",
            "2",
            "2026-11-02T09:01:00+01:00",
            [
                {"subject": "payments-api", "predicate": "uses", "object": "PostgreSQL"},
                {"subject": "payments-api", "predicate": "likes!!!", "object": "coffee"},
                {"subject": f"token {SECRET_TOKEN}", "predicate": "USED_BY", "object": "ci"},
            ],
        ),
        "{not json",
        save(
            "acme",
            "api",
            "s2",
            "1",
            "2026-11-03T10:00:00Z",
            [
                {"subject": "Payments API", "predicate": "DEPENDS_ON", "object": "postgresql"},
            ],
        ),
    ]
    b = [
        save(
            "globex",
            "ml",
            "s9",
            "1",
            "2026-11-02T12:00:00-05:00",
            [
                {"subject": "trainer", "predicate": "USES", "object": "PyTorch", "confidence": 0.9},
            ],
        ),
    ]
    write_jsonl(root, "acme", "api", "session-1.jsonl", a)
    write_jsonl(root, "globex", "ml", "session-9.jsonl", b)
    return root
