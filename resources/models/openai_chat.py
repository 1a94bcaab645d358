"""Extraction through a local model server speaking the OpenAI chat-completions API.

Ollama, llama.cpp's server, vLLM, LM Studio and LocalAI all answer `POST /v1/chat/completions`.
The endpoint must be local (loopback or private) unless the operator allow-lists its host.
Transport errors, timeouts, 429 and 5xx are retried with backoff (`retry.py`); anything else, or
exhaustion, raises ModelError naming the endpoint (never the API key). What the model answers is
untrusted and goes through `parse_triples`; what cannot be used comes back as rejects.

Structured output: by default each request asks for the answer's JSON schema
(`response_format: {"type": "json_schema", ...}`, `prompts.TRIPLES_SCHEMA`), which Ollama,
vLLM and llama.cpp's server enforce by constrained decoding. `json_object` is not the default:
it only promises some JSON object, and models behind Ollama have answered it with the schema
instead of the data (Graphiti #868). A server that refuses the format (400 or 422) is asked
again without it, and so is every later request of the provider: the prompt asks for the same
JSON, and the defensive parsing reads it.
"""

from __future__ import annotations

import functools
import json
import ssl
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from resources.models.base import ExtractionBatch, ExtractionProvider, ModelError, TurnText
from resources.models.guard import check_local_endpoint
from resources.models.json_parse import MAX_CHARS, MAX_ITEMS, parse_triples
from resources.models.prompts import (
    MAX_KNOWN_ENTITIES,
    TRIPLES_FORMAT,
    attach_turns,
    build_messages,
    chunk_turns,
)
from resources.models.retry import raise_for_retry, retrying

MAX_RESPONSE_BYTES = 8 * 1024 * 1024
# What `response_format` asks for: the answer's schema, any JSON object, or nothing.
RESPONSE_FORMATS = ("json_schema", "json_object", "none")


@dataclass(slots=True)
class CallStats:
    """Cumulative over the provider's life: logical calls, HTTP requests, retries, tokens."""

    calls: int = 0
    requests: int = 0
    retries: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0


@functools.cache
def _tls_context() -> ssl.SSLContext:
    # Loading the CA bundle costs ~0.4 s; every provider (and test) shares one context.
    return httpx.create_ssl_context()


class _ResponseTooLarge(Exception):
    pass


class _ResponseFormatRejected(Exception):
    pass


def endpoint_name(url: str) -> str:
    """The URL as error messages may show it: no user info, query or fragment."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def api_root(base_url: str) -> str:
    """`http://host:port` from `http://host:port`, `.../` or `.../v1`."""
    root = base_url.strip().rstrip("/")
    return root[: -len("/v1")] if root.endswith("/v1") else root


def _tokens(usage: Any, key: str) -> int:
    value = usage.get(key) if isinstance(usage, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _message_text(data: Any, where: str) -> tuple[str, dict[str, Any]]:
    """The assistant's text and the usage block; a body without choices is a protocol error."""
    try:
        message = data["choices"][0]["message"]
    except (KeyError, IndexError, TypeError) as err:
        raise ModelError(f"model endpoint {where} answered without choices[0].message") from err
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, list):  # content parts: [{"type": "text", "text": "..."}]
        content = "".join(
            p.get("text", "")
            for p in content
            if isinstance(p, dict) and isinstance(p.get("text"), str)
        )
    usage = data.get("usage") if isinstance(data, dict) else None
    return (content if isinstance(content, str) else ""), (usage if isinstance(usage, dict) else {})


class OpenAIChatExtractionProvider(ExtractionProvider):
    """Candidate triples from a local chat model; one HTTP call per chunk of turns."""

    kind = "openai"

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        allow_hosts: Iterable[str] = (),
        timeout: float = 60.0,
        max_retries: int = 3,
        temperature: float = 0.0,
        max_turns_per_call: int = 20,
        max_chars_per_call: int = 12_000,
        *,
        max_known_entities: int = MAX_KNOWN_ENTITIES,
        max_tokens: int | None = 4096,
        json_mode: bool = False,
        response_format: str = "json_schema",
        backoff: float = 0.5,
        max_backoff: float = 8.0,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
        max_answer_chars: int = MAX_CHARS,
        max_items_per_call: int = MAX_ITEMS,
    ) -> None:
        if not model:
            raise ValueError("an extraction model name is required")
        if max_retries < 0:
            raise ValueError("max_retries must be >= 0")
        if json_mode:  # the earlier switch: any JSON object
            response_format = "json_object"
        if response_format not in RESPONSE_FORMATS:
            raise ValueError(f"response_format must be one of {', '.join(RESPONSE_FORMATS)}")
        check_local_endpoint(base_url, allow_hosts)
        root = api_root(base_url)
        self._model = model
        self._url = f"{root}/v1/chat/completions"
        self._models_url = f"{root}/v1/models"
        self.endpoint = endpoint_name(self._url)
        self._temperature = temperature
        self._max_turns = max_turns_per_call
        self._max_chars = max_chars_per_call
        self._max_known = max_known_entities
        self._max_tokens = max_tokens
        self.response_format = response_format  # "none" once the server refused one
        self._attempts = max_retries + 1
        self._backoff = backoff
        self._max_backoff = max_backoff
        self._max_response_bytes = max_response_bytes
        self._max_answer_chars = max_answer_chars
        self._max_items = max_items_per_call
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        # trust_env=False: a proxy from the environment must never see local model traffic.
        self._client = httpx.Client(
            timeout=httpx.Timeout(timeout),
            headers=headers,
            trust_env=False,
            verify=_tls_context(),
        )
        self.stats = CallStats()

    @property
    def model(self) -> str:
        return f"openai-compatible:{self._model}"

    def extract(self, turns: Sequence[TurnText], known_entities: Sequence[str]) -> ExtractionBatch:
        batch = ExtractionBatch()
        for chunk in chunk_turns(turns, self._max_turns, self._max_chars):
            where = f"turns {chunk[0].turn_id}..{chunk[-1].turn_id}"
            messages = build_messages(chunk, known_entities, self._max_known)
            try:
                data = self._complete(messages)
            except _ResponseTooLarge:
                batch.calls += 1
                batch.rejects.append(
                    (
                        "response_too_large",
                        f"answer over {self._max_response_bytes} bytes ({where})",
                    )
                )
                continue
            text, usage = _message_text(data, self.endpoint)
            batch.calls += 1
            batch.prompt_tokens += _tokens(usage, "prompt_tokens")
            batch.completion_tokens += _tokens(usage, "completion_tokens")
            items, rejects = parse_triples(
                text, max_chars=self._max_answer_chars, max_items=self._max_items
            )
            attach_turns(items, chunk)
            batch.items.extend(items)
            batch.rejects.extend((reason, f"{detail} ({where})") for reason, detail in rejects)
        self.stats.calls += batch.calls
        self.stats.prompt_tokens += batch.prompt_tokens
        self.stats.completion_tokens += batch.completion_tokens
        return batch

    def available_models(self) -> list[str]:
        """Model ids the server lists at /v1/models (a readiness probe)."""

        @retrying(
            self._attempts,
            self._backoff,
            endpoint=endpoint_name(self._models_url),
            max_delay=self._max_backoff,
        )
        def call() -> Any:
            response = raise_for_retry(
                self._client.get(self._models_url), endpoint_name(self._models_url)
            )
            return response.json()

        try:
            data = call()
        except ValueError as err:
            raise ModelError(
                f"model endpoint {endpoint_name(self._models_url)} returned a body that is not JSON"
            ) from err
        rows = data.get("data") if isinstance(data, dict) else None
        return [r["id"] for r in rows or [] if isinstance(r, dict) and isinstance(r.get("id"), str)]

    def _complete(self, messages: list[dict[str, str]]) -> Any:
        body: dict[str, Any] = {
            "model": self._model,
            "messages": messages,
            "temperature": self._temperature,
            "stream": False,
        }
        if self._max_tokens:
            body["max_tokens"] = self._max_tokens
        if self.response_format != "none":
            body["response_format"] = (
                TRIPLES_FORMAT if self.response_format == "json_schema" else {"type": "json_object"}
            )
            try:
                return self._send(body)
            except _ResponseFormatRejected:
                # The server does not take this format; the prompt asks for JSON anyway.
                self.response_format = "none"
                del body["response_format"]
        return self._send(body)

    def _send(self, body: dict[str, Any]) -> Any:
        attempts = 0

        @retrying(
            self._attempts, self._backoff, endpoint=self.endpoint, max_delay=self._max_backoff
        )
        def attempt() -> httpx.Response:
            nonlocal attempts
            attempts += 1
            self.stats.requests += 1
            if attempts > 1:
                self.stats.retries += 1
            with self._client.stream("POST", self._url, json=body) as streamed:
                content = self._read_bounded(streamed)
                response = httpx.Response(
                    streamed.status_code,
                    headers=streamed.headers,
                    content=content,
                    request=streamed.request,
                )
            if response.status_code in (400, 422) and "response_format" in body:
                raise _ResponseFormatRejected
            return raise_for_retry(response, self.endpoint)

        response = attempt()
        try:
            return json.loads(response.content)
        except ValueError as err:
            raise ModelError(
                f"model endpoint {self.endpoint} returned a body that is not JSON"
            ) from err

    def _read_bounded(self, response: httpx.Response) -> bytes:
        chunks: list[bytes] = []
        size = 0
        for part in response.iter_bytes():
            size += len(part)
            if size > self._max_response_bytes:
                raise _ResponseTooLarge
            chunks.append(part)
        return b"".join(chunks)

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> OpenAIChatExtractionProvider:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
