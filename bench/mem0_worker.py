"""Mem0's side of `bench/bench_vs_mem0.py`. Runs in Mem0's own virtual environment
(bench/.venv-mem0), never imports memflow, and talks JSON lines on stdin/stdout:

    -> {"op": "load", "model": PATH, "facts": [text, ...], "user": ID, "dir": PATH}
    <- {"ok": true, "added": N, "seconds": S}
    -> {"op": "search", "query": TEXT, "limit": 40}
    <- {"ok": true, "ms": elapsed, "embed_ms": elapsed of the embedding inside it, "n": hits}
    -> {"op": "embed", "query": TEXT}
    <- {"ok": true, "ms": elapsed}

Mem0 open source as a user sets it up for local memory: `Memory.from_config` with the FAISS
vector store and the Hugging Face (sentence-transformers) embedder loading the same
all-MiniLM-L6-v2 files memflow uses, `add(..., infer=False)` so no LLM is called, and
`search(query, filters={"user_id": ...}, limit=40)` (Mem0 2.x; `user_id=` in 1.x).
Offline: HF_HUB_OFFLINE, no telemetry, a dummy OpenAI key only because Mem0 builds its
default LLM client at start (it is never called).
Times are measured here, around the call, so the pipe is not part of them.
"""

from __future__ import annotations

import json
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ["MEM0_TELEMETRY"] = "False"
os.environ.setdefault("OPENAI_API_KEY", "sk-unused-offline")


def search(memory, query: str, user: str, limit: int):  # type: ignore[no-untyped-def]
    """Mem0 2.x takes the user as a filter; 1.x as a keyword."""
    try:
        return memory.search(query, filters={"user_id": user}, limit=limit)
    except TypeError:
        return memory.search(query, user_id=user, limit=limit)


def main() -> int:
    memory = None
    user = "bench"
    out = sys.stdout
    sys.stdout = sys.stderr  # library prints never corrupt the protocol
    for line in sys.stdin:
        req = json.loads(line)
        try:
            if req["op"] == "load":
                os.environ["MEM0_DIR"] = req["dir"]
                from mem0 import Memory

                user = req["user"]
                config = {
                    "vector_store": {
                        "provider": "faiss",
                        "config": {
                            "collection_name": "bench",
                            "path": os.path.join(req["dir"], "faiss"),
                            "embedding_model_dims": 384,
                        },
                    },
                    "embedder": {"provider": "huggingface", "config": {"model": req["model"]}},
                    "history_db_path": os.path.join(req["dir"], "history.db"),
                }
                memory = Memory.from_config(config)
                started = time.perf_counter()
                for text in req["facts"]:
                    memory.add([{"role": "user", "content": text}], user_id=user, infer=False)
                reply = {"added": len(req["facts"]), "seconds": time.perf_counter() - started}
            elif req["op"] == "search":
                assert memory is not None, "load first"
                embedder = memory.embedding_model
                inner = embedder.embed
                spent = [0.0]

                def timed(*a, _inner=inner, _spent=spent, **k):  # type: ignore[no-untyped-def]
                    t = time.perf_counter()
                    try:
                        return _inner(*a, **k)
                    finally:
                        _spent[0] += time.perf_counter() - t

                embedder.embed = timed
                try:
                    t = time.perf_counter()
                    found = search(memory, req["query"], user, req.get("limit", 40))
                    ms = (time.perf_counter() - t) * 1000.0
                finally:
                    embedder.embed = inner
                hits = found.get("results", found) if isinstance(found, dict) else found
                reply = {"ms": ms, "embed_ms": spent[0] * 1000.0, "n": len(hits)}
            elif req["op"] == "embed":
                assert memory is not None, "load first"
                t = time.perf_counter()
                memory.embedding_model.embed(req["query"], "search")
                reply = {"ms": (time.perf_counter() - t) * 1000.0}
            elif req["op"] == "versions":
                from importlib.metadata import version

                names = ("mem0ai", "faiss-cpu", "torch", "sentence-transformers", "transformers")
                reply = {"versions": {n: version(n) for n in names}}
            else:
                raise ValueError(f"unknown op {req['op']!r}")
            out.write(json.dumps({"ok": True, **reply}) + "\n")
        except Exception as exc:  # report, keep serving
            out.write(json.dumps({"ok": False, "error": f"{type(exc).__name__}: {exc}"}) + "\n")
        out.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
