"""Bearer keys for the recall API: each key is mapped to one org and some (or all) of its repos.

Keys file (JSON, path in ``MEMFLOW_API_KEYS_FILE``, default ``<data_dir>/api-keys.json``)::

    {"version": 1,
     "keys": [{"id": "k_3f9a...", "sha256": "<hex digest of the key>", "org": "acme",
               "repos": ["payments", "web"], "metrics": false, "created": "2026-...Z"}]}

- Only the SHA-256 of a key is stored; the plaintext is shown once, by `add_key`.
- ``repos`` is a list of repo names or ``"*"`` (every repo of the org, present and future).
- ``metrics: true`` lets the key read ``GET /metrics`` (which lists tenant names).
- ``admin: true`` lets the key erase a tenant it covers (``DELETE /v1/tenants/{org}/{repo}``,
  the MCP tool ``erase_memory``): irreversible, so no ordinary key may.
- The file is re-read when it changes (checked at most every `RELOAD_INTERVAL_S`), so
  `add_key` / `remove_key` take effect on a running server.

A presented key is hashed and compared with every stored digest by `hmac.compare_digest`,
without stopping at the first match, so the time taken does not depend on which digest (if any)
matched or how much of it did.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import secrets
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from schemas.scope import Scope, ScopeError

KEY_PREFIX = "mf_"
MAX_KEY_CHARS = 256
RELOAD_INTERVAL_S = 2.0
FILE_VERSION = 1
ALL_REPOS = "*"
# token68 (RFC 7235) is what a bearer credential may contain.
_TOKEN68 = re.compile(r"^[A-Za-z0-9\-._~+/]+=*$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


class KeyFileError(ValueError):
    """The keys file cannot be read or does not have the documented shape."""


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a valid key speaks for. `repos` is None for every repo of `org`."""

    key_id: str
    org: str
    repos: frozenset[str] | None
    metrics: bool = False
    admin: bool = False

    @property
    def by(self) -> str:
        """How writes record who asked (retractions keep it): the key's id, never the key."""
        return f"key:{self.key_id}"

    def allows(self, scope: Scope) -> bool:
        return scope.tenant_id == self.org and (self.repos is None or scope.ns in self.repos)


@dataclass(frozen=True, slots=True)
class _Entry:
    digest: bytes
    principal: Principal


def parse_bearer(header: str | None) -> str | None:
    """The credential of an ``Authorization: Bearer <key>`` header, or None if malformed."""
    if not header or len(header) > MAX_KEY_CHARS + 16:
        return None
    scheme, _, credential = header.partition(" ")
    if scheme.lower() != "bearer" or not credential or not _TOKEN68.match(credential):
        return None
    return credential


def _entry(raw: Any, index: int) -> _Entry:
    if not isinstance(raw, dict):
        raise KeyFileError(f"keys[{index}] is not an object")
    digest, org, repos = raw.get("sha256"), raw.get("org"), raw.get("repos")
    if not isinstance(digest, str) or not _HEX64.match(digest):
        raise KeyFileError(f"keys[{index}].sha256 is not a lowercase hex SHA-256 digest")
    try:
        Scope(org, "probe")
        if repos != ALL_REPOS:
            if not isinstance(repos, list):
                raise KeyFileError(f"keys[{index}].repos must be a list of repos or '*'")
            for repo in repos:
                Scope(org, repo)
    except ScopeError as exc:
        raise KeyFileError(f"keys[{index}]: {exc}") from exc
    key_id = raw.get("id") if isinstance(raw.get("id"), str) else f"k_{digest[:12]}"
    return _Entry(
        bytes.fromhex(digest),
        Principal(
            key_id=key_id,
            org=org,
            repos=None if repos == ALL_REPOS else frozenset(repos),
            metrics=raw.get("metrics") is True,
            admin=raw.get("admin") is True,
        ),
    )


def read_keys_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The parsed file (an empty one when it does not exist); raises KeyFileError if invalid."""
    p = Path(path)
    if not p.exists():
        return {"version": FILE_VERSION, "keys": []}
    try:
        data = json.loads(p.read_text("utf-8"))
    except (OSError, ValueError) as exc:
        raise KeyFileError(f"{p}: {type(exc).__name__}: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("keys"), list):
        raise KeyFileError(f'{p}: expected {{"version": 1, "keys": [...]}}')
    for i, raw in enumerate(data["keys"]):
        _entry(raw, i)
    return data


def _write_keys_file(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=2)
        fh.write("\n")
    os.replace(tmp, path)


def add_key(
    path: str | os.PathLike[str],
    org: str,
    repos: Sequence[str] | str,
    *,
    metrics: bool = False,
    admin: bool = False,
) -> str:
    """Create a key for `org` and `repos` (names, or "*" for all), store its SHA-256 in the
    keys file (created with mode 0600) and return the plaintext key: it is shown only once."""
    if isinstance(repos, str) and repos != ALL_REPOS:
        repos = [r.strip() for r in repos.split(",") if r.strip()]
    repo_list: list[str] | str = ALL_REPOS if repos == ALL_REPOS else sorted(set(repos))
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    digest = hash_key(key)
    entry = {
        "id": f"k_{digest[:12]}",
        "sha256": digest,
        "org": org,
        "repos": repo_list,
        "metrics": metrics,
        "admin": admin,
        "created": datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
    }
    _entry(entry, 0)  # validates org and repos before anything is written
    p = Path(path)
    data = read_keys_file(p)
    data["keys"].append(entry)
    data["version"] = FILE_VERSION
    _write_keys_file(p, data)
    return key


def remove_key(path: str | os.PathLike[str], key_id: str) -> bool:
    """Revoke the key with id `key_id`; True if it was there."""
    p = Path(path)
    data = read_keys_file(p)
    kept = [k for k in data["keys"] if k.get("id") != key_id]
    if len(kept) == len(data["keys"]):
        return False
    data["keys"] = kept
    _write_keys_file(p, data)
    return True


def list_keys(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Key ids with their org, repos and flags (never digests)."""
    return [{k: v for k, v in raw.items() if k != "sha256"} for raw in read_keys_file(path)["keys"]]


class KeyRing:
    """The keys a server accepts: from a file (reloaded when it changes) or given directly.

    A keys file that becomes invalid keeps the last good keys in force (and `error` says why),
    so a bad edit never opens or closes the API by accident.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        keys: Iterable[tuple[str, Principal]] = (),
        reload_interval_s: float = RELOAD_INTERVAL_S,
    ) -> None:
        self.path = Path(path) if path is not None else None
        self.reload_interval_s = reload_interval_s
        self.error: str | None = None
        self._static = [_Entry(bytes.fromhex(hash_key(k)), p) for k, p in keys]
        self._entries: list[_Entry] = list(self._static)
        self._stamp: tuple[int, int] | None = None
        self._checked = 0.0
        self._lock = threading.Lock()
        if self.path is not None:
            self._reload(force=True)

    @classmethod
    def from_plaintext(cls, keys: dict[str, Principal]) -> KeyRing:
        """A fixed key ring (tests, embedding): plaintext key -> principal."""
        return cls(keys=keys.items())

    def __len__(self) -> int:
        return len(self._entries)

    def _file_stamp(self) -> tuple[int, int] | None:
        assert self.path is not None
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return None
        return (st.st_mtime_ns, st.st_size)

    def _reload(self, *, force: bool = False) -> None:
        if self.path is None:
            return
        now = time.monotonic()
        if not force and now - self._checked < self.reload_interval_s:
            return
        with self._lock:
            self._checked = now
            stamp = self._file_stamp()
            if not force and stamp == self._stamp:
                return
            try:
                data = read_keys_file(self.path)
                entries = [_entry(raw, i) for i, raw in enumerate(data["keys"])]
            except KeyFileError as exc:
                self.error = str(exc)
                return
            self._entries = self._static + entries
            self._stamp = stamp
            self.error = None

    def authenticate(self, authorization: str | None) -> Principal | None:
        """The principal of a valid ``Bearer`` header, else None."""
        self._reload()
        credential = parse_bearer(authorization)
        if credential is None:
            return None
        presented = hashlib.sha256(credential.encode("utf-8")).digest()
        found: Principal | None = None
        for entry in self._entries:
            # No early exit: every stored digest is compared.
            if hmac.compare_digest(presented, entry.digest):
                found = entry.principal
        return found

    def reload_now(self) -> None:
        self._reload(force=True)
