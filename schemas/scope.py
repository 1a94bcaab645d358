"""Tenant scope: the (org, repo) pair that travels with every row and every query."""

from __future__ import annotations

import re
from dataclasses import dataclass

from schemas.rules import SCOPE_PART

_PART = re.compile(SCOPE_PART)


def _holds_a_secret(value: str) -> bool:
    from schemas.redaction import contains_secret

    return contains_secret(value)


class ScopeError(ValueError):
    """An org (`tenant_id`) or repo (`ns`) is missing or not a valid org/repo name."""


@dataclass(frozen=True, slots=True)
class Scope:
    """`tenant_id` is the org, `ns` the repo (the graph). Both are required everywhere.

    A name that holds a secret (a token that fits the name's characters, ``ghp_...``,
    ``AKIA...``) is not valid: a scope is a directory, a partition key and a column of every
    row, none of which is redacted, so it could never be stored without the secret. The
    redaction engine loads when the first Scope is made, not when this module is imported
    (an agent hook that only spells a tenant never loads it)."""

    tenant_id: str
    ns: str

    def __post_init__(self) -> None:
        for label, value in (("tenant_id", self.tenant_id), ("ns", self.ns)):
            if not isinstance(value, str) or not value:
                raise ScopeError(f"{label} is required")
            if not _PART.fullmatch(value) or ".." in value:
                raise ScopeError(
                    f"{label} {value!r} is not a valid name "
                    "(letters, digits, '.', '_', '-'; at most 100 characters)"
                )
            if _holds_a_secret(value):  # the value is not shown: it is a secret
                raise ScopeError(f"{label} is not a valid name (it holds a secret)")

    @property
    def key(self) -> str:
        """The Dagster partition key and CLI spelling: ``org/repo``."""
        return f"{self.tenant_id}/{self.ns}"

    @classmethod
    def parse(cls, key: str) -> Scope:
        org, sep, repo = (key or "").partition("/")
        if not sep:
            raise ScopeError(f"tenant {key!r} must be spelled ORG/REPO")
        return cls(org, repo)

    def __str__(self) -> str:
        return self.key
