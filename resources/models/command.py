"""Providers backed by an operator's own program: JSON on stdin, JSON on stdout.

The program runs without a shell, in its own process group (a timeout kills the whole group,
grandchildren included), with memflow's own `MEMFLOW_*` variables removed from its environment.
Its output is bounded; a failure raises ModelError naming the program and the tail of its
stderr, never what was sent to it.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shlex
import signal
import subprocess
import threading
from collections.abc import Sequence
from typing import IO, Any

from resources.models.base import (
    DEFAULT_MAX_DIMENSIONS,
    EMBED_BATCH,
    EmbeddingProvider,
    ExtractionBatch,
    ExtractionProvider,
    ModelError,
    TurnText,
)
from resources.models.guard import scrubbed_env
from resources.models.json_parse import MAX_CHARS, MAX_ITEMS, parse_triples
from resources.models.prompts import (
    MAX_KNOWN_ENTITIES,
    attach_turns,
    bounded_known_entities,
    chunk_turns,
)

MAX_OUTPUT_BYTES = 64 * 1024 * 1024
STDERR_TAIL = 2000


def command_argv(argv: Sequence[str] | str) -> list[str]:
    """An argument vector; a string is split like a shell would, but no shell runs it."""
    args = shlex.split(argv) if isinstance(argv, str) else [str(a) for a in argv]
    if not args or not args[0]:
        raise ValueError("the command is empty")
    return args


_INTERPRETERS = ("python", "node", "bash", "sh", "ruby", "perl", "deno", "bun", "uv")


def program_name(argv: Sequence[str]) -> str:
    """The program's name for messages: `extractor`, or `python extract.py` for a script.

    Only a basename and, after an interpreter, the script's basename: never other arguments,
    which may hold credentials."""
    name = os.path.basename(argv[0]) or argv[0]
    if name.startswith(_INTERPRETERS) and len(argv) > 1 and not argv[1].startswith("-"):
        return f"{name} {os.path.basename(argv[1])}"
    return name


class _Drain(threading.Thread):
    """Reads a pipe to its end: keeps the first `limit` bytes, or only the last `tail` ones."""

    def __init__(self, pipe: IO[bytes], limit: int | None = None, tail: int | None = None):
        super().__init__(daemon=True)
        self.pipe, self.limit, self.tail = pipe, limit, tail
        self.data = bytearray()
        self.overflow = False

    def run(self) -> None:
        while block := self.pipe.read(65536):
            if self.limit is not None and len(self.data) + len(block) > self.limit:
                self.overflow = True
                continue  # keep reading so the child never blocks on a full pipe
            self.data += block
            if self.tail is not None and len(self.data) > 2 * self.tail:
                del self.data[: -self.tail]


def _feed(pipe: IO[bytes], data: bytes) -> None:
    # The child may exit without reading everything; its exit status tells that story.
    with contextlib.suppress(OSError):
        pipe.write(data)
    with contextlib.suppress(OSError):
        pipe.close()


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()


def run_command(
    argv: Sequence[str] | str,
    payload: Any,
    timeout: float,
    *,
    max_output_bytes: int = MAX_OUTPUT_BYTES,
) -> str:
    """Run the program with `payload` as JSON on stdin; return its stdout as text."""
    args = command_argv(argv)
    name = program_name(args)
    data = json.dumps(payload, ensure_ascii=False).encode("utf-8")
    try:
        proc = subprocess.Popen(
            args,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=scrubbed_env(),
            start_new_session=True,
            close_fds=True,
        )
    except OSError as err:
        raise ModelError(f"command {name} could not start: {err.strerror or err}") from err
    assert proc.stdin and proc.stdout and proc.stderr
    out = _Drain(proc.stdout, limit=max_output_bytes)
    err = _Drain(proc.stderr, tail=STDERR_TAIL)
    feeder = threading.Thread(target=_feed, args=(proc.stdin, data), daemon=True)
    for thread in (out, err, feeder):
        thread.start()
    try:
        proc.wait(timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        timed_out = True
    # Kill the group whatever happened: a grandchild holding the pipes open would hang us.
    _kill_group(proc)
    proc.wait()
    for thread in (out, err, feeder):
        thread.join(timeout=5)
    for pipe in (proc.stdout, proc.stderr):
        pipe.close()
    tail = bytes(err.data[-STDERR_TAIL:]).decode("utf-8", "replace").strip()
    if timed_out:
        raise ModelError(f"command {name} timed out after {timeout:g}s and was killed")
    if proc.returncode != 0:
        status = (
            f"was killed by signal {-proc.returncode}"
            if proc.returncode < 0
            else f"exited with status {proc.returncode}"
        )
        raise ModelError(f"command {name} {status}" + (f": {tail}" if tail else ""))
    if out.overflow:
        raise ModelError(f"command {name} wrote more than {max_output_bytes} bytes")
    return bytes(out.data).decode("utf-8", "replace")


def run_json_command(
    argv: Sequence[str] | str,
    payload: Any,
    timeout: float,
    *,
    max_output_bytes: int = MAX_OUTPUT_BYTES,
) -> Any:
    """Run the program with `payload` as JSON on stdin; return its stdout decoded as JSON."""
    text = run_command(argv, payload, timeout, max_output_bytes=max_output_bytes)
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as err:
        name = program_name(command_argv(argv))
        raise ModelError(f"command {name} wrote output that is not JSON") from err


class CommandExtractionProvider(ExtractionProvider):
    """Sends `{"turns": [...], "known_entities": [...]}`; expects `{"triples": [...]}` or a list.

    The raw stdout goes through `parse_triples`, so a program's bad output is reported with
    the same reasons as a model's.
    """

    kind = "command"

    def __init__(
        self,
        argv: Sequence[str] | str,
        model_name: str | None = None,
        timeout: float = 300.0,
        max_turns_per_call: int = 200,
        max_chars_per_call: int = 200_000,
        *,
        max_known_entities: int = MAX_KNOWN_ENTITIES,
        max_items_per_call: int = MAX_ITEMS,
        max_answer_chars: int = MAX_CHARS,
    ) -> None:
        self._argv = command_argv(argv)
        self._model = model_name or program_name(self._argv)
        self._timeout = timeout
        self._max_turns = max_turns_per_call
        self._max_chars = max_chars_per_call
        self._max_known = max_known_entities
        self._max_items = max_items_per_call
        self._max_answer_chars = max_answer_chars

    @property
    def model(self) -> str:
        return f"command:{self._model}"

    def extract(self, turns: Sequence[TurnText], known_entities: Sequence[str]) -> ExtractionBatch:
        batch = ExtractionBatch()
        known = bounded_known_entities(known_entities, self._max_known)
        for chunk in chunk_turns(turns, self._max_turns, self._max_chars):
            payload = {
                "turns": [
                    {
                        "session_id": t.session_id,
                        "turn_id": t.turn_id,
                        "role": t.role,
                        "content": t.content,
                    }
                    for t in chunk
                ],
                "known_entities": known,
            }
            text = run_command(self._argv, payload, self._timeout)
            batch.calls += 1
            items, rejects = parse_triples(
                text, max_chars=self._max_answer_chars, max_items=self._max_items
            )
            attach_turns(items, chunk)
            batch.items.extend(items)
            where = f"turns {chunk[0].turn_id}..{chunk[-1].turn_id}"
            batch.rejects.extend((reason, f"{detail} ({where})") for reason, detail in rejects)
        return batch


def _vectors(answer: Any) -> list[Any] | None:
    if isinstance(answer, dict) and isinstance(answer.get("data"), list):
        rows = answer["data"]
        if all(isinstance(r, dict) for r in rows):
            if all(isinstance(r.get("index"), int) for r in rows):
                rows = sorted(rows, key=lambda r: r["index"])
            return [r.get("embedding") for r in rows]
        return None
    return answer if isinstance(answer, list) else None


def _check_vector(value: Any) -> list[float] | None:
    if not isinstance(value, list) or not value:
        return None
    out: list[float] = []
    for x in value:
        if isinstance(x, bool) or not isinstance(x, int | float) or not math.isfinite(x):
            return None
        out.append(float(x))
    return out


class CommandEmbeddingProvider(EmbeddingProvider):
    """Sends `{"model": m, "input": [...]}` in batches of EMBED_BATCH; expects
    `{"data": [{"embedding": [...]}, ...]}` or a bare list of vectors, one per input."""

    kind = "command"

    def __init__(
        self,
        argv: Sequence[str] | str,
        model: str,
        timeout: float = 300.0,
        *,
        batch_size: int = EMBED_BATCH,
        max_dimensions: int = DEFAULT_MAX_DIMENSIONS,
    ) -> None:
        if not model:
            raise ValueError("an embedding model name is required")
        self._argv = command_argv(argv)
        self._model = model
        self._timeout = timeout
        self._batch = batch_size
        self._max_dim = max_dimensions
        self.calls = 0
        self.dimensions: int | None = None

    @property
    def model(self) -> str:
        return self._model

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        name = program_name(self._argv)
        out: list[list[float]] = []
        for start in range(0, len(texts), self._batch):
            batch = list(texts[start : start + self._batch])
            answer = run_json_command(
                self._argv, {"model": self._model, "input": batch}, self._timeout
            )
            self.calls += 1
            vectors = _vectors(answer)
            if vectors is None or len(vectors) != len(batch):
                got = "an unusable answer" if vectors is None else f"{len(vectors)} vectors"
                raise ModelError(f"command {name} returned {got} for {len(batch)} inputs")
            for vector in vectors:
                checked = _check_vector(vector)
                if checked is None:
                    raise ModelError(f"command {name} returned a vector that is not numbers")
                if self.dimensions is None:
                    if len(checked) > self._max_dim:
                        raise ModelError(
                            f"command {name} returned {len(checked)} dimensions, "
                            f"over the limit of {self._max_dim}"
                        )
                    self.dimensions = len(checked)
                elif len(checked) != self.dimensions:
                    raise ModelError(
                        f"command {name} returned {len(checked)} dimensions, "
                        f"expected {self.dimensions}"
                    )
                out.append(checked)
        return out
