from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipelines.cli import main
from recall.auth import hash_key


def test_keys_add_list_remove(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    keys = tmp_path / "keys.json"
    assert main(["keys", "add", "--org", "acme", "--repos", "api,web", "--keys", str(keys)]) == 0
    key = capsys.readouterr().out.strip()
    stored = keys.read_text()
    assert key not in stored and hash_key(key) in stored
    assert main(["keys", "list", "--keys", str(keys)]) == 0
    (entry,) = json.loads(capsys.readouterr().out)
    assert entry["org"] == "acme" and entry["repos"] == ["api", "web"] and "sha256" not in entry
    assert main(["keys", "remove", entry["id"], "--keys", str(keys)]) == 0
    assert main(["keys", "remove", entry["id"], "--keys", str(keys)]) == 1
