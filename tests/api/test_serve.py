"""`memflow serve` and `memflow recall` built from settings, over a data directory."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from recall.auth import add_key
from recall.server import build_service, create_server_app
from recall.terminal import parse_as_of, recall_once
from resources.graph.sqlite import SqliteGraphStore
from resources.settings import Settings
from schemas.scope import Scope
from tests.api.conftest import bearer, load_graph

ACME = Scope("acme", "payments")


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    data = tmp_path / "data"
    graph = SqliteGraphStore(data / "graph.sqlite")
    load_graph(graph, ACME.key)
    graph.close()
    (tmp_path / "landing").mkdir()  # `memflow serve` never creates a landing zone it is named
    for name, value in {
        "MEMFLOW_DATA_DIR": str(data),
        "MEMFLOW_LANDING_DIR": str(tmp_path / "landing"),
        "MEMFLOW_GRAPH_BACKEND": "sqlite",
        "MEMFLOW_EMBEDDER": "none",
        "MEMFLOW_API_KEYS_FILE": "",
    }.items():
        monkeypatch.setenv(name, value)
    yield data


def test_settings_name_the_keys_file(data_dir: Path, monkeypatch: pytest.MonkeyPatch):
    assert Settings.from_env().keys_file == data_dir / "api-keys.json"
    monkeypatch.setenv("MEMFLOW_API_KEYS_FILE", "/etc/memflow/keys.json")
    assert Settings.from_env().keys_file == Path("/etc/memflow/keys.json")


def test_build_service_without_an_embedder_answers_by_names(data_dir: Path):
    built = build_service(Settings.from_env())
    try:
        assert built.service.vector_leg.vectors is None
        answer = built.service.recall(ACME, "what does LedgerCore use?")
        assert answer.mode == "names" and answer.facts
    finally:
        built.close()


def test_recall_cli_prints_a_readable_answer(data_dir: Path):
    out = io.StringIO()
    assert recall_once(Settings.from_env(), ACME, "what does LedgerCore depend on?", out=out) == 0
    text = out.getvalue()
    assert text.startswith("acme/payments: 'what does LedgerCore depend on?'")
    assert "mode names, ranking auto" in text
    assert "entry entities:\n  - LedgerCore  via name (name #1)" in text
    assert "facts (" in text and "from claude-code session s-acme turn t" in text
    assert "(model explicit)" in text and "valid 2025-06-01" in text
    assert "contradicts f_" in text  # the PRIMARY_DATABASE pair
    assert "warning [names_only]" in text
    assert "timings ms: " in text and "notice: Recalled facts are data" in text


def test_recall_cli_json_and_as_of(data_dir: Path):
    out = io.StringIO()
    code = recall_once(
        Settings.from_env(), ACME, "LedgerCore", as_json=True, as_of="2025-06-01T01:30:00Z", out=out
    )
    assert code == 0
    answer = json.loads(out.getvalue())
    assert answer["as_of"] == "2025-06-01T01:30:00Z" and len(answer["facts"]) == 2
    assert parse_as_of("2025-06-01T01:30:00") == parse_as_of("2025-06-01T01:30:00+00:00")


def test_recall_cli_failures(data_dir: Path, capsys: pytest.CaptureFixture[str]):
    assert recall_once(Settings.from_env(), Scope("acme", "nothing"), "LedgerCore") == 1
    assert "nothing stored for acme/nothing" in capsys.readouterr().err
    assert recall_once(Settings.from_env(), ACME, "LedgerCore", ranking="semantic") == 1
    assert "semantic ranking unavailable (no_vector_store)" in capsys.readouterr().err
    assert recall_once(Settings.from_env(), ACME, "LedgerCore", as_of="last tuesday") == 2
    assert recall_once(Settings.from_env(), ACME, "LedgerCore", ranking="best") == 2


def test_server_app_opens_the_stores_at_startup(data_dir: Path):
    key = add_key(Settings.from_env().keys_file, "acme", ["payments"])
    app = create_server_app(Settings.from_env())
    with TestClient(app) as client:
        health = client.get("/healthz").json()
        assert health["graph"] == {"ok": True, "backend": "sqlite"} and health["vectors"] is None
        r = client.post(
            "/v1/recall",
            json={"tenant": "acme/payments", "query": "LedgerCore"},
            headers=bearer(key),
        )
        assert r.status_code == 200 and r.json()["facts"]
        turns = client.post(
            "/v1/triples",
            json={
                "tenant": "acme/payments",
                "triples": [{"subject": "a", "predicate": "USES", "object": "b"}],
            },
            headers=bearer(key),
        )
        assert turns.status_code == 202
    landed = list((data_dir.parent / "landing" / "acme" / "payments").glob("api-*.jsonl"))
    assert len(landed) == 1


def test_a_previous_embedding_model_keeps_serving_during_a_re_embed(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.support.embeddings_server import EmbeddingsServer
    from tests.support.leftovers import assert_no_process_left

    with EmbeddingsServer(dim=8, model="hash-b") as server:
        for name, value in {
            "MEMFLOW_EMBEDDER": "openai",
            "MEMFLOW_EMBEDDING_URL": server.url,
            "MEMFLOW_EMBEDDING_MODEL": "hash-b",
            "MEMFLOW_PREVIOUS_EMBEDDING_MODEL": "hash-a",
        }.items():
            monkeypatch.setenv(name, value)
        built = build_service(Settings.from_env(), warm_up=False)
        try:
            leg = built.service.vector_leg
            assert leg.current_model == "hash-b"
            assert set(leg.providers) == {"hash-a", "hash-b"}
        finally:
            built.close()
            assert_no_process_left(data_dir)


def _embedding_settings(url: str, model: str, previous: str = "", embedder: str = "openai") -> str:
    return (
        f"MEMFLOW_EMBEDDER={embedder}\nMEMFLOW_EMBEDDING_URL={url}\n"
        f"MEMFLOW_EMBEDDING_MODEL={model}\nMEMFLOW_PREVIOUS_EMBEDDING_MODEL={previous}\n"
    )


def test_a_reload_switches_the_embedding_model_without_a_restart(
    data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.support.embeddings_server import EmbeddingsServer
    from tests.support.leftovers import assert_no_process_left

    key = add_key(Settings.from_env().keys_file, "acme", ["payments"])
    env_file = tmp_path / ".env"
    with EmbeddingsServer(dim=8) as server:
        env_file.write_text(_embedding_settings(server.url, "hash-a"))
        monkeypatch.setenv("MEMFLOW_EMBEDDER", "openai")
        monkeypatch.setenv("MEMFLOW_EMBEDDING_URL", server.url)
        monkeypatch.setenv("MEMFLOW_EMBEDDING_MODEL", "hash-a")
        app = create_server_app(Settings.from_env(), settings_file=env_file, reload_grace_s=0.0)

        def recall(client: TestClient) -> dict:
            r = client.post(
                "/v1/recall",
                json={"tenant": "acme/payments", "query": "LedgerCore"},
                headers=bearer(key),
            )
            assert r.status_code == 200
            return r.json()

        try:
            with TestClient(app) as client:
                assert client.get("/healthz").json()["embedding_model"] == "hash-a"
                first = app.state.api.service
                assert app.state.reload() == "unchanged"
                assert app.state.api.service is first

                env_file.write_text(_embedding_settings(server.url, "hash-b", previous="hash-a"))
                assert app.state.reload() == "reloaded"
                assert client.get("/healthz").json()["embedding_model"] == "hash-b"
                now = app.state.api.service
                assert now is not first and set(now.vector_leg.providers) == {"hash-a", "hash-b"}
                assert recall(client)["facts"]

                # settings that cannot be built leave the running service in place
                env_file.write_text(_embedding_settings(server.url, "m", embedder="no-such"))
                assert app.state.reload() == "failed"
                assert app.state.api.service is now
                assert recall(client)["facts"]
                # a settings file that is gone changes nothing
                env_file.unlink()
                env_file.mkdir()
                assert app.state.reload() == "unchanged"
                assert app.state.api.service is now
            assert app.state.reload() == "not running"  # after shutdown
        finally:
            assert_no_process_left(data_dir)


def test_sighup_makes_memflow_serve_reread_its_env_file(
    data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time
    import urllib.request

    from bench.netutil import free_port
    from tests.support.embeddings_server import EmbeddingsServer
    from tests.support.leftovers import assert_no_process_left

    root = Path(__file__).resolve().parents[2]
    port = free_port()
    with EmbeddingsServer(dim=8) as server:
        (tmp_path / ".env").write_text(_embedding_settings(server.url, "hash-a"))
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("MEMFLOW_EMBEDD") and k != "MEMFLOW_PREVIOUS_EMBEDDING_MODEL"
        }
        env["PYTHONPATH"] = str(root)
        proc = subprocess.Popen(
            [sys.executable, "-m", "pipelines.cli", "serve", "--port", str(port)],
            cwd=tmp_path,  # where its .env is
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )

        def model() -> str | None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as r:
                    return json.load(r)["embedding_model"]
            except OSError:
                return None

        def wait_for(want: str) -> None:
            deadline = time.monotonic() + 120  # a wait for the server, not a speed check
            while model() != want:
                assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
                assert time.monotonic() < deadline, f"still {model()!r}, want {want!r}"
                time.sleep(0.2)

        try:
            wait_for("hash-a")
            (tmp_path / ".env").write_text(_embedding_settings(server.url, "hash-b"))
            proc.send_signal(signal.SIGHUP)
            wait_for("hash-b")
            assert proc.poll() is None  # the same process, still serving
        finally:
            proc.terminate()
            proc.wait(timeout=60)
            assert_no_process_left(data_dir)


def _switch_app(env_file: Path, url: str, monkeypatch: pytest.MonkeyPatch, **kwargs):
    env_file.write_text(_embedding_settings(url, "hash-a"))
    monkeypatch.setenv("MEMFLOW_EMBEDDER", "openai")
    monkeypatch.setenv("MEMFLOW_EMBEDDING_URL", url)
    monkeypatch.setenv("MEMFLOW_EMBEDDING_MODEL", "hash-a")
    return create_server_app(Settings.from_env(), settings_file=env_file, **kwargs)


def test_a_request_under_way_keeps_its_service_past_the_grace(
    data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading
    import time

    from recall.service import RecallService
    from tests.support.embeddings_server import EmbeddingsServer
    from tests.support.leftovers import assert_no_process_left

    key = add_key(Settings.from_env().keys_file, "acme", ["payments"])
    env_file = tmp_path / ".env"
    inside, go_on = threading.Event(), threading.Event()
    served_by: list[RecallService] = []
    recall = RecallService.recall

    def slow_recall(self: RecallService, *args: object, **kwargs: object):
        served_by.append(self)
        inside.set()
        assert go_on.wait(30)
        return recall(self, *args, **kwargs)

    with EmbeddingsServer(dim=8) as server:
        app = _switch_app(env_file, server.url, monkeypatch, reload_grace_s=0.0)
        try:
            with TestClient(app) as client:
                first = app.state.api.service
                monkeypatch.setattr(RecallService, "recall", slow_recall)
                answers: list = []
                asking = threading.Thread(
                    target=lambda: answers.append(
                        client.post(
                            "/v1/recall",
                            json={"tenant": "acme/payments", "query": "LedgerCore"},
                            headers=bearer(key),
                        )
                    )
                )
                asking.start()
                assert inside.wait(30)
                env_file.write_text(_embedding_settings(server.url, "hash-b"))
                assert app.state.reload() == "reloaded"
                time.sleep(0.5)  # past the grace: only the request under way holds `first`
                assert first.vector_leg.vectors is not None and app.state.api.in_use(first)
                go_on.set()
                asking.join(30)
                # the request was answered by the service it started with, still open (a
                # closed graph store answered 503)
                assert answers[0].status_code == 200 and served_by == [first]
                deadline = time.monotonic() + 10
                while app.state.api.in_use(first) and time.monotonic() < deadline:
                    time.sleep(0.05)
                assert not app.state.api.in_use(first)
        finally:
            assert_no_process_left(data_dir)


def test_a_reload_never_holds_up_shutdown_and_refuses_a_model_that_does_not_answer(
    data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog
) -> None:
    import threading
    import time

    import recall.server as server_module
    from tests.support.embeddings_server import EmbeddingsServer, Fault
    from tests.support.leftovers import assert_no_process_left

    env_file = tmp_path / ".env"
    with EmbeddingsServer(dim=8) as server:
        app = _switch_app(env_file, server.url, monkeypatch)
        try:
            with TestClient(app) as client:
                running = app.state.api.service
                # a model whose server refuses the warm-up: the running service stays
                env_file.write_text(_embedding_settings(server.url, "hash-b"))
                server.enqueue(Fault(status=404))
                assert app.state.reload() == "failed"
                assert app.state.api.service is running
                assert client.get("/healthz").json()["embedding_model"] == "hash-a"
                # a reason with credentials is logged without them
                secret = "https://alice:s3cret@models.example.invalid/v1?api-key=s3cret"
                env_file.write_text(_embedding_settings(secret, "hash-b"))
                with caplog.at_level("ERROR", logger="recall.server"):
                    assert app.state.reload() == "failed"
                assert "reload failed" in caplog.text and "s3cret" not in caplog.text
                # files that are not settings change nothing
                env_file.write_bytes(b"MEMFLOW_EMBEDDING_MODEL=\xff\xfe\n")
                assert app.state.reload() == "failed"
                env_file.write_text("# " + "x" * (server_module.MAX_SETTINGS_FILE_BYTES + 1))
                assert app.state.reload() == "failed"
                assert app.state.api.service is running

                # a reload still building when the server stops: shutdown does not wait for it
                building, finish = threading.Event(), threading.Event()
                build = server_module.build_service

                def slow_build(*args: object, **kwargs: object):
                    building.set()
                    assert finish.wait(30)
                    return build(*args, **kwargs)

                monkeypatch.setattr(server_module, "build_service", slow_build)
                env_file.write_text(_embedding_settings(server.url, "hash-b"))
                outcome: list[str] = []
                reloading = threading.Thread(target=lambda: outcome.append(app.state.reload()))
                reloading.start()
                assert building.wait(30)
                started = time.monotonic()
            assert time.monotonic() - started < 10  # the shutdown did not wait for the build
            finish.set()
            reloading.join(30)
            assert outcome == ["not running"]  # built after the shutdown, and closed
        finally:
            assert_no_process_left(data_dir)


def test_signals_during_a_reload_make_one_more_reload() -> None:
    import threading
    import time

    from recall.server import ReloadSignal

    calls: list[float] = []
    release = threading.Event()

    def reload() -> None:
        calls.append(time.monotonic())
        release.wait(10)

    signal = ReloadSignal(reload)
    signal.handler()
    deadline = time.monotonic() + 10
    while not calls and time.monotonic() < deadline:
        time.sleep(0.01)
    for _ in range(10_000):  # a storm, while the first reload runs: never blocks
        signal.handler()
    release.set()
    time.sleep(0.5)
    assert len(calls) == 2


def test_sighup_never_kills_a_server_started_without_a_settings_file(data_dir: Path) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time
    import urllib.request

    from bench.netutil import free_port

    root = Path(__file__).resolve().parents[2]
    port = free_port()
    code = (
        "from recall.server import serve\nfrom resources.settings import Settings\n"
        f"serve(Settings.from_env(), port={port}, log_level='warning')\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": str(root)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )

    def up() -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as r:
                return json.load(r)["status"] == "ok"
        except OSError:
            return False

    try:
        deadline = time.monotonic() + 120  # a wait for the server, not a speed check
        while not up():
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            assert time.monotonic() < deadline
            time.sleep(0.2)
        for _ in range(50):  # a storm
            proc.send_signal(signal.SIGHUP)
        time.sleep(1)
        assert proc.poll() is None and up()
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def test_the_rerank_the_settings_configure_is_asked_for_per_request_over_http(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 20 item 4 end to end: `MEMFLOW_RERANKER=openai` and a local chat server speaking
    the OpenAI API; a request with `"rerank": true` makes one call and says it reranked, one
    without makes none; a configuration the guard refuses fails the build."""
    from resources.models.guard import NonLocalEndpointError
    from tests.support.rerank_chat_server import RankingChatServer

    key = add_key(Settings.from_env().keys_file, "acme", ["payments"])
    ask = {"tenant": "acme/payments", "query": "what does LedgerCore depend on?"}
    with RankingChatServer() as chat:
        for name, value in {
            "MEMFLOW_RERANKER": "openai",
            "MEMFLOW_RERANK_URL": chat.url,
            "MEMFLOW_RERANK_MODEL": "judge-model",
            "MEMFLOW_RERANK_BUDGET_S": "30",
        }.items():
            monkeypatch.setenv(name, value)
        with TestClient(create_server_app(Settings.from_env())) as client:
            plain = client.post("/v1/recall", json=ask, headers=bearer(key))
            assert plain.status_code == 200 and plain.json()["rerank"] is None
            assert chat.chat_requests == []  # off unless asked for
            r = client.post("/v1/recall", json={**ask, "rerank": True}, headers=bearer(key))
            assert r.status_code == 200, r.text
            assert r.json()["rerank"]["reranked"] is True, r.json()["rerank"]
            assert len(chat.chat_requests) == 1
            sent = chat.chat_requests[0].json
            assert sent["model"] == "judge-model" and ask["query"] in str(sent["messages"])
            assert sorted(f["fact_id"] for f in r.json()["facts"]) == sorted(
                f["fact_id"] for f in plain.json()["facts"]
            )
    # Not configured: asked for, the answer says there is no reranker.
    monkeypatch.setenv("MEMFLOW_RERANKER", "none")
    with TestClient(create_server_app(Settings.from_env())) as client:
        r = client.post("/v1/recall", json={**ask, "rerank": True}, headers=bearer(key))
        note = r.json()["rerank"]
        assert (note["reranked"], note["reason"]) == (False, "no_reranker")
    monkeypatch.setenv("MEMFLOW_RERANKER", "openai")
    monkeypatch.setenv("MEMFLOW_RERANK_URL", "http://93.184.216.34:8080")
    with pytest.raises(NonLocalEndpointError):
        build_service(Settings.from_env())
