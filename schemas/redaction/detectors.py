"""Every detector, by family: the order only numbers them (spans are merged by position)."""

from __future__ import annotations

from schemas.redaction import (
    assignments,
    commands,
    connections,
    cookies,
    email,
    keys,
    library,
    prose,
    tokens,
)
from schemas.redaction._base import _Detector

_DETECTORS: tuple[_Detector, ...] = (
    *library.DETECTORS,
    *keys.DETECTORS,
    *tokens.DETECTORS,
    *connections.DETECTORS,
    *assignments.DETECTORS,
    *prose.DETECTORS,
    *commands.DETECTORS,
    *cookies.DETECTORS,
    *email.DETECTORS,
)
