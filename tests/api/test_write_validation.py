"""F1 and F2 through the API (issue 7 item 2): `POST /v1/turns` and `/v1/triples` check scope
names and timestamps with the very rules ingestion uses, so a key holder cannot land what would
stop ingestion: a 422 with a clear reason, and nothing is written."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memflow.landing import read_tenant_files
from recall.api import create_app
from recall.auth import KeyRing
from recall.server import create_server_app
from recall.service import RecallService
from resources.settings import Settings
from schemas.rules import DEFAULT_TIME_WINDOW, TimeWindow
from schemas.scope import Scope
from tests.api.conftest import World, bearer


def _files(landing: Path) -> list[Path]:
    return sorted(p for p in landing.rglob("*") if p.is_file())


def _dirs(landing: Path) -> list[str]:
    return sorted(str(p.relative_to(landing)) for p in landing.rglob("*") if p.is_dir())


def _turn(ts: str, turn_id: str = "t1") -> dict:
    return {
        "session_id": "s",
        "turn_id": turn_id,
        "ts": ts,
        "role": "user",
        "content": "x",
        "client": "c",
    }


def _future(days: int) -> str:
    return (datetime.now(UTC) + timedelta(days=days)).isoformat().replace("+00:00", "Z")


# -------------------------------------------------------------------------------- F1: ts


@pytest.mark.parametrize(
    ("ts", "reason", "setting"),
    [
        ("1970-01-01T00:00:00Z", "ts_before_history_start", "MEMFLOW_HISTORY_START"),
        ("1999-12-31T23:59:59Z", "ts_before_history_start", "MEMFLOW_HISTORY_START"),
        ("2031-01-01T00:00:00Z", "ts_in_future", "MEMFLOW_FUTURE_TOLERANCE_HOURS"),
        ("9999-12-31T00:00:00Z", "ts_in_future", "MEMFLOW_FUTURE_TOLERANCE_HOURS"),
    ],
)
def test_f1_turns_outside_the_window_answer_422_naming_the_setting(
    client: TestClient, world: World, landing: Path, ts: str, reason: str, setting: str
):
    """F1 via the API: `POST /v1/turns` answered 202 for ts 2001 and 2031, then the next
    `memflow run` failed for every tenant."""
    r = client.post(
        "/v1/turns",
        json={"tenant": "acme/payments", "turns": [_turn("2026-11-20T00:00:00Z"), _turn(ts, "t2")]},
        headers=bearer(world.keys["acme_payments"]),
    )
    assert r.status_code == 422, r.text
    err = r.json()["error"]
    assert err["code"] == "turns_rejected"
    assert [(d["index"], d["reason"]) for d in err["details"]] == [(1, reason)]
    assert setting in err["details"][0]["detail"]
    assert _files(landing) == []


def test_the_window_is_the_apps_and_ingestion_reads_what_it_accepts(
    world: World, service: RecallService, landing: Path
):
    window = TimeWindow.from_settings({"MEMFLOW_HISTORY_START": "2025-01-01"})
    app = create_app(
        service=service, keys=KeyRing(world.keys_file), landing_dir=landing, window=window
    )
    h = bearer(world.keys["acme_payments"])
    with TestClient(app, raise_server_exceptions=False) as client:
        refused = client.post(
            "/v1/turns",
            json={"tenant": "acme/payments", "turns": [_turn("2001-01-01T00:00:00Z")]},
            headers=h,
        )
        assert refused.status_code == 422
        assert refused.json()["error"]["details"][0]["reason"] == "ts_before_history_start"
        ok = client.post(
            "/v1/turns",
            json={
                "tenant": "acme/payments",
                "turns": [_turn(_future(0)), _turn(_future(-400), "t2")],
            },
            headers=h,
        )
        assert ok.status_code == 202, ok.text
    read = read_tenant_files(landing, Scope("acme", "payments"), window=window)
    assert read.turns.height == 2 and read.rejects.height == 0 and not read.problems


def test_the_server_takes_the_window_from_its_settings(tmp_path: Path):
    cfg = Settings(
        {
            "MEMFLOW_DATA_DIR": str(tmp_path / "data"),
            "MEMFLOW_LANDING_DIR": str(tmp_path / "landing"),
            "MEMFLOW_HISTORY_START": "1990-05",
            "MEMFLOW_FUTURE_TOLERANCE_HOURS": "2",
        }
    )
    app = create_server_app(cfg)
    window = app.state.api.window
    assert window == TimeWindow(datetime(1990, 5, 1, tzinfo=UTC), timedelta(hours=2))
    assert create_server_app(Settings()).state.api.window == DEFAULT_TIME_WINDOW
    with pytest.raises(SystemExit, match="MEMFLOW_HISTORY_START"):
        create_server_app(cfg.with_values(MEMFLOW_HISTORY_START="the dawn of time"))


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    ts=st.one_of(
        st.datetimes(
            min_value=datetime(1900, 1, 1),
            max_value=datetime(2100, 1, 1),
            timezones=st.sampled_from([UTC]),
        ).map(lambda t: t.isoformat()),
        st.sampled_from(
            ["1999-12-31T23:59:59.999999Z", "2000-01-01T00:00:00Z", _future(1), _future(2)]
        ),
    )
)
def test_what_the_api_accepts_ingestion_accepts(
    client: TestClient, world: World, landing: Path, ts: str
):
    r = client.post(
        "/v1/turns",
        json={"tenant": "acme/web", "turns": [_turn(ts)]},
        headers=bearer(world.keys["acme_all"]),
    )
    assert r.status_code in (202, 422), r.text
    read = read_tenant_files(landing, Scope("acme", "web"))
    if r.status_code == 202:
        assert read.turns["turn_id"].to_list().count("t1") >= 1
        assert read.rejects.filter(read.rejects["reason"] != "duplicate_turn").height == 0
    else:
        assert r.json()["error"]["details"][0]["reason"] in (
            "ts_before_history_start",
            "ts_in_future",
        )


# -------------------------------------------------------------------------- F2: scope names

BAD_TENANTS = [
    "acme/payments\n",
    "acme\n/payments",
    "acme/payments\r",
    "acme/payments ",
    "acme/pay ments",
    "acme/..",
    "acme/re..po",
    "../acme/payments",
    "acme/payments/x",
    "acme/payments\x00",
    "acme/\tpayments",
    "acme/-payments",
    "acme/" + "p" * 101,
    "acme/pâyments",
]


@pytest.mark.parametrize("tenant", BAD_TENANTS)
@pytest.mark.parametrize("endpoint", ["/v1/turns", "/v1/triples"])
def test_f2_scope_names_ingestion_would_refuse_answer_422(
    client: TestClient, world: World, landing: Path, tenant: str, endpoint: str
):
    """F2: `"tenant": "acme/payments-api\\n"` answered 202 with a `*` key and created the
    directory `payments-api\\n`; the next run failed its blocking check for every tenant."""
    body: dict = {"tenant": tenant}
    if endpoint == "/v1/turns":
        body["turns"] = [_turn("2026-11-20T00:00:00Z")]
    else:
        body["triples"] = [{"subject": "a", "predicate": "USES", "object": "b"}]
    r = client.post(endpoint, json=body, headers=bearer(world.keys["acme_all"]))
    assert r.status_code in (404, 422), r.text
    if r.status_code == 422:
        assert r.json()["error"]["code"] == "invalid_request"
    assert "\n" not in r.text.replace("\\n", "")
    assert _dirs(landing) == []


@pytest.mark.parametrize(
    ("org", "repo"), [("acme", "payments\n"), ("acme\n", "payments"), ("acme", ".."), ("acme", "")]
)
def test_f2_org_and_repo_fields_are_checked_alike(
    client: TestClient, world: World, landing: Path, org: str, repo: str
):
    r = client.post(
        "/v1/turns",
        json={"org": org, "repo": repo, "turns": [_turn("2026-11-20T00:00:00Z")]},
        headers=bearer(world.keys["acme_all"]),
    )
    assert r.status_code == 422
    assert _dirs(landing) == []


def test_odd_ids_that_ingestion_stores_are_accepted_and_read_back(
    client: TestClient, world: World, landing: Path
):
    """Ids are data, not names: quotes, newlines, SQL, NUL are stored as sent, and ingestion
    reads exactly what the API accepted."""
    odd = ['a"b', "line\nbreak", "'; DROP TABLE facts;--", "nul\x00id", "x" * 200]
    turns = [{**_turn("2026-11-20T00:00:00Z", f"t{i}"), "session_id": s} for i, s in enumerate(odd)]
    r = client.post(
        "/v1/turns",
        json={"tenant": "acme/web", "turns": turns},
        headers=bearer(world.keys["acme_all"]),
    )
    assert r.status_code == 202, r.text
    read = read_tenant_files(landing, Scope("acme", "web"))
    assert sorted(read.turns["session_id"].to_list()) == sorted(odd)
    assert read.rejects.height == 0


@pytest.mark.parametrize("link", ["org", "repo"])
def test_writes_never_go_through_a_symlinked_tenant_directory(
    client: TestClient, world: World, landing: Path, tmp_path: Path, link: str
):
    """The write side of F4: a planted symlink must not send API writes out of the landing
    zone (where the reader, which follows no symlink, would never read them back)."""
    outside = tmp_path / "outside"
    (outside / "payments").mkdir(parents=True)
    if link == "org":
        (landing / "acme").symlink_to(outside)
    else:
        (landing / "acme").mkdir()
        (landing / "acme" / "payments").symlink_to(outside / "payments")
    r = client.post(
        "/v1/turns",
        json={"tenant": "acme/payments", "turns": [_turn("2026-11-20T00:00:00Z")]},
        headers=bearer(world.keys["acme_payments"]),
    )
    assert r.status_code == 503 and r.json()["error"]["code"] == "landing_unavailable"
    assert list(outside.rglob("*.jsonl")) == [] and list(outside.rglob(".*")) == []
