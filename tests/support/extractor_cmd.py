"""A sample operator program for memflow's command providers (stdlib only).

Extraction (default): reads `{"turns": [...], "known_entities": [...]}` on stdin and writes
`{"triples": [...]}` for sentences like "billing-service uses PostgreSQL"; a known entity's
spelling is reused. Embedding (`--embed`): reads `{"model": m, "input": [texts]}` and writes
`{"data": [{"index": i, "embedding": [...]}]}` with deterministic vectors.

    CommandExtractionProvider(["python", "tests/support/extractor_cmd.py"])
    CommandEmbeddingProvider(["python", "tests/support/extractor_cmd.py", "--embed"], "fake-8d")

The other flags exist so tests can make it misbehave: --sleep, --fail, --garbage, --short,
--report-env, --log, --spawn-sleeper.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import re
import subprocess
import sys
import time
from typing import Any

RELATIONS = {
    "uses": "USES",
    "depends on": "DEPENDS_ON",
    "is deployed to": "DEPLOYED_TO",
    "prefers": "PREFERS",
}
_SENTENCE = re.compile(r"([\w.\-/]+) (" + "|".join(RELATIONS) + r") ([\w.\-/]+)", re.IGNORECASE)


def fake_vector(text: str, dim: int = 8) -> list[float]:
    """A deterministic unit vector for `text` (tests compute the same to check order)."""
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    raw = [(digest[i % len(digest)] - 127.5) / 127.5 for i in range(dim)]
    norm = math.sqrt(sum(x * x for x in raw)) or 1.0
    return [x / norm for x in raw]


def extract(request: dict[str, Any]) -> list[dict[str, Any]]:
    known = {name.lower(): name for name in request.get("known_entities", [])}
    triples = []
    for turn in request.get("turns", []):
        for subject, relation, obj in _SENTENCE.findall(turn.get("content", "")):
            triples.append(
                {
                    "subject": known.get(subject.lower(), subject),
                    "predicate": RELATIONS[relation.lower()],
                    "object": known.get(obj.lower(), obj),
                    "confidence": 0.9,
                    "turn_id": turn.get("turn_id"),
                }
            )
    return triples


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--embed", action="store_true", help="act as an embedding program")
    parser.add_argument("--dim", type=int, default=8, help="embedding dimensions")
    parser.add_argument("--sleep", type=float, default=0.0, help="seconds to wait first")
    parser.add_argument("--fail", action="store_true", help="exit 3 with a message on stderr")
    parser.add_argument("--garbage", action="store_true", help="write non-JSON output")
    parser.add_argument("--short", action="store_true", help="return one vector too few")
    parser.add_argument("--report-env", default="", help="comma-separated variables to report")
    parser.add_argument("--log", default="", help="append one JSON line per run to this file")
    parser.add_argument(
        "--spawn-sleeper", action="store_true", help="leave a grandchild holding stdout"
    )
    args = parser.parse_args(argv)

    request = json.load(sys.stdin)
    if args.log:
        with open(args.log, "a", encoding="utf-8") as log:
            size = len(request.get("input", request.get("turns", [])))
            log.write(json.dumps({"pid": os.getpid(), "size": size}) + "\n")
    if args.spawn_sleeper:
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    if args.sleep:
        time.sleep(args.sleep)
    if args.fail:
        print("extractor failed: model weights not found", file=sys.stderr)
        return 3
    if args.garbage:
        sys.stdout.write("Traceback (most recent call last):\n  oops, not JSON\n")
        return 0

    if args.embed:
        texts = request["input"]
        if args.short:
            texts = texts[:-1]
        data = [{"index": i, "embedding": fake_vector(t, args.dim)} for i, t in enumerate(texts)]
        json.dump({"object": "list", "model": request.get("model"), "data": data}, sys.stdout)
        return 0

    triples = extract(request)
    for name in filter(None, args.report_env.split(",")):
        if name in os.environ:
            triples.append(
                {
                    "subject": "environment",
                    "predicate": "HAS_VARIABLE",
                    "object": name,
                    "confidence": 1.0,
                }
            )
    json.dump({"triples": triples}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
