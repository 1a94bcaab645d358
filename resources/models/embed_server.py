"""A small OpenAI-compatible embeddings server over an in-process embedding provider.

    python -m resources.models.embed_server --host 127.0.0.1 --port 8081 --model all-MiniLM-L6-v2

Serves `POST /v1/embeddings` (float or base64 encoding), `GET /v1/models` and `GET /health`.
It has no authentication, so it binds to loopback only. The model is loaded before the port
opens: once `/health` answers, embeddings are ready.
"""

from __future__ import annotations

import argparse
import base64
import ipaddress
from collections.abc import Sequence
from typing import Literal

import numpy as np
from fastapi import FastAPI, HTTPException
from pydantic import BaseModel, ConfigDict, Field

from resources.models.base import EmbeddingProvider, ModelError

MAX_INPUTS = 2048
MAX_INPUT_CHARS = 32_768


class EmbeddingRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    input: str | list[str] = Field(description="One text or a list of texts.")
    model: str | None = None
    encoding_format: Literal["float", "base64"] = "float"


def create_app(provider: EmbeddingProvider) -> FastAPI:
    app = FastAPI(title="memflow embeddings", version="1")
    served = provider.model

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"status": "ok", "model": served}

    @app.get("/v1/models")
    def models() -> dict[str, object]:
        return {"object": "list", "data": [{"id": served, "object": "model", "owned_by": "local"}]}

    # A plain `def`: encoding is CPU-bound, so FastAPI runs it in its thread pool.
    @app.post("/v1/embeddings")
    def embeddings(request: EmbeddingRequest) -> dict[str, object]:
        if request.model and request.model.lower() != served.lower():
            raise HTTPException(404, f"model {request.model!r} is not served here ({served!r} is)")
        texts = [request.input] if isinstance(request.input, str) else request.input
        if not texts or len(texts) > MAX_INPUTS:
            raise HTTPException(400, f"input must hold 1..{MAX_INPUTS} texts")
        if any(len(t) > MAX_INPUT_CHARS for t in texts):
            raise HTTPException(400, f"each input must be at most {MAX_INPUT_CHARS} characters")
        try:
            vectors = provider.embed(texts)
        except ModelError as err:
            raise HTTPException(503, "the embedding model failed") from err
        return {
            "object": "list",
            "model": served,
            "data": [
                {
                    "object": "embedding",
                    "index": i,
                    "embedding": _encode(v, request.encoding_format),
                }
                for i, v in enumerate(vectors)
            ],
            "usage": {"prompt_tokens": 0, "total_tokens": 0},
        }

    return app


def _encode(vector: Sequence[float], fmt: str) -> list[float] | str:
    if fmt == "base64":
        return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")
    return list(vector)


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="resources.models.embed_server", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1", help="loopback address to bind")
    parser.add_argument("--port", type=int, default=8081)
    parser.add_argument(
        "--model",
        default=None,
        help="sentence-transformers model name or path (default: the bundled all-MiniLM-L6-v2)",
    )
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)
    if not _loopback(args.host):
        parser.error(f"--host {args.host!r} is not a loopback address; this server has no auth")

    import uvicorn

    from resources.models.st_embeddings import SentenceTransformerEmbeddingProvider

    provider = SentenceTransformerEmbeddingProvider(args.model, device=args.device)
    print(f"loading {provider.model} ({provider.dim} dimensions)", flush=True)
    uvicorn.run(create_app(provider), host=args.host, port=args.port, log_level="warning")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
