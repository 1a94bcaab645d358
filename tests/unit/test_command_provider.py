"""Command providers against real child processes (tests/support/extractor_cmd.py)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from resources.models.base import EMBED_BATCH, ModelError, TurnText
from resources.models.command import (
    CommandEmbeddingProvider,
    CommandExtractionProvider,
    run_command,
    run_json_command,
)
from tests.support.extractor_cmd import fake_vector

SAMPLE = str(Path(__file__).resolve().parents[1] / "support" / "extractor_cmd.py")
PY = sys.executable
TURNS = [
    TurnText("s1", "t1", "user", "billing-service uses postgresql for invoices."),
    TurnText("s1", "t2", "assistant", "ok. billing-service is deployed to eu-west-1"),
    TurnText("s2", "t3", "user", "nothing to see here"),
]


def inline(code: str) -> list[str]:
    return [PY, "-c", code]


def reasons(rejects: list[tuple[str, str]]) -> list[str]:
    return [r for r, _ in rejects]


def test_sample_program_extracts_triples_with_turns_and_known_names() -> None:
    provider = CommandExtractionProvider([PY, SAMPLE], model_name="rules-v1")
    batch = provider.extract(TURNS, ["PostgreSQL", "Billing-Service"])
    assert provider.model == "command:rules-v1"
    assert batch.rejects == []
    assert batch.calls == 1
    assert [
        (i["subject"], i["predicate"], i["object"], i["turn_id"], i["session_id"])
        for i in batch.items
    ] == [
        ("Billing-Service", "USES", "PostgreSQL", "t1", "s1"),
        ("Billing-Service", "DEPLOYED_TO", "eu-west-1", "t2", "s1"),
    ]
    assert {i["turn_id_source"] for i in batch.items} == {"model"}


def test_model_name_defaults_to_the_program_and_argv_may_be_a_string() -> None:
    provider = CommandExtractionProvider(f"{PY} {SAMPLE}")
    assert provider.model.startswith("command:python")
    assert provider.model.endswith(" extractor_cmd.py")
    assert provider.extract(TURNS[:1], []).items[0]["object"] == "postgresql"


def test_payload_has_turns_and_bounded_known_entities(tmp_path: Path) -> None:
    out = tmp_path / "payload.json"
    code = (
        "import json, sys; data = json.load(sys.stdin); "
        f"open({str(out)!r}, 'w').write(json.dumps(data)); print('[]')"
    )
    known = [f"e{i}" for i in range(300)]
    CommandExtractionProvider(inline(code), max_known_entities=200).extract(TURNS, known)
    payload = json.loads(out.read_text())
    assert payload["known_entities"] == known[:200]
    assert payload["turns"][0] == {
        "session_id": "s1",
        "turn_id": "t1",
        "role": "user",
        "content": TURNS[0].content,
    }


def test_environment_is_scrubbed_of_memflow_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMFLOW_SECRET_TOKEN", "parent-secret-9f8e7d")
    monkeypatch.setenv("MEMFLOW_API_KEYS", "tenant-key-1")
    monkeypatch.setenv("OPERATOR_VISIBLE", "yes")
    provider = CommandExtractionProvider(
        [PY, SAMPLE, "--report-env", "MEMFLOW_SECRET_TOKEN,MEMFLOW_API_KEYS,OPERATOR_VISIBLE"]
    )
    batch = provider.extract(TURNS[2:], [])
    seen = [i["object"] for i in batch.items if i["predicate"] == "HAS_VARIABLE"]
    assert seen == ["OPERATOR_VISIBLE"]


def test_bare_list_output_is_accepted() -> None:
    code = (
        "import json; print(json.dumps([{'subject': 'a', 'predicate': 'USES', "
        "'object': 'b', 'confidence': 0.8}]))"
    )
    batch = CommandExtractionProvider(inline(code)).extract(TURNS, [])
    assert [(i["subject"], i["turn_id"], i["turn_id_source"]) for i in batch.items] == [
        ("a", "t3", "last_turn")
    ]


def test_bad_output_is_reported_with_parser_reasons() -> None:
    batch = CommandExtractionProvider([PY, SAMPLE, "--garbage"]).extract(TURNS, [])
    assert batch.items == []
    assert reasons(batch.rejects) == ["no_json"]


def test_malformed_items_from_a_program_get_the_same_reasons() -> None:
    code = (
        'print(\'{"triples": [{"subject": "a", "predicate": "P", "object": "b", '
        '"confidence": "sure"}, {"subject": "c", "predicate": "P", "object": '
        '"d", "confidence": 1}, {"subject": "e"\')'
    )
    batch = CommandExtractionProvider(inline(code)).extract(TURNS, [])
    assert [i["subject"] for i in batch.items] == ["c"]
    assert reasons(batch.rejects) == ["truncated_output", "bad_confidence"]


def test_turns_are_chunked_into_several_runs(tmp_path: Path) -> None:
    log = tmp_path / "runs.log"
    provider = CommandExtractionProvider([PY, SAMPLE, "--log", str(log)], max_turns_per_call=2)
    batch = provider.extract(TURNS, [])
    assert batch.calls == 2
    assert [json.loads(line)["size"] for line in log.read_text().splitlines()] == [2, 1]


def test_non_zero_exit_names_the_program_and_stderr_but_not_stdin() -> None:
    provider = CommandExtractionProvider([PY, SAMPLE, "--fail"])
    with pytest.raises(ModelError) as err:
        provider.extract(TURNS, ["KnownEntityName"])
    message = str(err.value)
    assert "extractor_cmd.py exited with status 3" in message
    assert "model weights not found" in message
    assert "billing-service" not in message
    assert "KnownEntityName" not in message


def test_program_killed_by_a_signal() -> None:
    code = "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"
    with pytest.raises(ModelError, match="killed by signal 15"):
        run_command(inline(code), {}, timeout=30)


def test_missing_program() -> None:
    with pytest.raises(ModelError, match="could not start"):
        run_command(["/nonexistent/memflow-extractor"], {}, timeout=5)


def test_empty_command_is_a_configuration_error() -> None:
    with pytest.raises(ValueError):
        CommandExtractionProvider("")


def _dead(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


def test_timeout_kills_the_program_and_its_children(tmp_path: Path) -> None:
    log = tmp_path / "pids.log"
    code = (
        "import json, subprocess, sys, time; "
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
        f"open({str(log)!r}, 'w').write(json.dumps([child.pid])); time.sleep(60)"
    )
    # 5 s, not 1: under load 9 a program's interpreter had not started its child within 1 s
    with pytest.raises(ModelError, match="timed out after 5s"):
        run_command(inline(code), {"turns": []}, timeout=5)
    [grandchild] = json.loads(log.read_text())
    deadline = time.monotonic() + 10  # waiting for the reaper, not measuring speed
    while not _dead(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _dead(grandchild)


def test_timeout_through_the_extraction_provider() -> None:
    provider = CommandExtractionProvider([PY, SAMPLE, "--sleep", "30"], timeout=0.5)
    with pytest.raises(ModelError, match=r"command python\S* extractor_cmd\.py timed out"):
        provider.extract(TURNS, [])


def test_output_is_bounded() -> None:
    code = "import sys; sys.stdout.write('x' * 1_000_000)"
    with pytest.raises(ModelError, match="more than 1000 bytes"):
        run_command(inline(code), {}, timeout=30, max_output_bytes=1000)


def test_large_payload_to_a_program_that_does_not_read_it() -> None:
    assert run_json_command(inline("print('[1]')"), {"x": "y" * 2_000_000}, timeout=30) == [1]


def test_run_json_command_rejects_non_json() -> None:
    with pytest.raises(ModelError, match="not JSON"):
        run_json_command(inline("print('hello')"), {}, timeout=30)


def test_embedding_batches_of_64_in_order(tmp_path: Path) -> None:
    log = tmp_path / "embed.log"
    provider = CommandEmbeddingProvider([PY, SAMPLE, "--embed", "--log", str(log)], "fake-8d")
    texts = [f"entity number {i}" for i in range(150)]
    vectors = provider.embed(texts)
    assert EMBED_BATCH == 64
    assert [json.loads(line)["size"] for line in log.read_text().splitlines()] == [64, 64, 22]
    assert provider.calls == 3
    assert provider.dimensions == 8
    assert provider.model == "fake-8d"
    assert vectors == [pytest.approx(fake_vector(t)) for t in texts]


def test_embedding_payload_names_the_model(tmp_path: Path) -> None:
    out = tmp_path / "payload.json"
    code = (
        "import json, sys; data = json.load(sys.stdin); "
        f"open({str(out)!r}, 'w').write(json.dumps(data)); "
        "print(json.dumps([[0.5, 0.5] for _ in data['input']]))"
    )
    vectors = CommandEmbeddingProvider(inline(code), "bge-small").embed(["a", "b"])
    assert vectors == [[0.5, 0.5], [0.5, 0.5]]
    assert json.loads(out.read_text()) == {"model": "bge-small", "input": ["a", "b"]}


def test_embedding_empty_input_runs_nothing() -> None:
    provider = CommandEmbeddingProvider(["/nonexistent/embedder"], "m")
    assert provider.embed([]) == []
    assert provider.calls == 0


def test_embedding_one_vector_too_few() -> None:
    provider = CommandEmbeddingProvider([PY, SAMPLE, "--embed", "--short"], "m")
    with pytest.raises(ModelError, match="returned 2 vectors for 3 inputs"):
        provider.embed(["a", "b", "c"])


@pytest.mark.parametrize(
    ("answer", "match"),
    [
        ('[[1.0, "x"]]', "not numbers"),
        ("[[]]", "not numbers"),
        ("[[1.0, NaN]]", "not numbers"),
        ("[[true, 1.0]]", "not numbers"),
        ('{"data": [{"vector": [1.0]}]}', "not numbers"),
        ('{"data": "nope"}', "unusable answer"),
        ('"nope"', "unusable answer"),
    ],
)
def test_embedding_bad_answers(answer: str, match: str) -> None:
    code = f"import sys; sys.stdin.read(); print({answer!r})"
    with pytest.raises(ModelError, match=match):
        CommandEmbeddingProvider(inline(code), "m").embed(["a"])


def test_embedding_dimensions_must_stay_the_same() -> None:
    code = (
        "import json, sys; data = json.load(sys.stdin); "
        "print(json.dumps([[1.0] * (2 + i) for i, _ in enumerate(data['input'])]))"
    )
    with pytest.raises(ModelError, match="3 dimensions, expected 2"):
        CommandEmbeddingProvider(inline(code), "m").embed(["a", "b"])


def test_embedding_dimension_limit() -> None:
    code = "import sys; sys.stdin.read(); print([[0.1] * 20])"
    with pytest.raises(ModelError, match="over the limit of 16"):
        CommandEmbeddingProvider(inline(code), "m", max_dimensions=16).embed(["a"])


def test_embedding_data_rows_are_ordered_by_index() -> None:
    code = (
        "import sys, json; sys.stdin.read(); print(json.dumps({'data': ["
        "{'index': 1, 'embedding': [0.0, 1.0]}, {'index': 0, 'embedding': [1.0, 0.0]}]}))"
    )
    assert CommandEmbeddingProvider(inline(code), "m").embed(["a", "b"]) == [
        [1.0, 0.0],
        [0.0, 1.0],
    ]
