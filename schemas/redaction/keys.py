from __future__ import annotations

import re

from schemas.redaction._base import (
    _Detector,
)

_PRIVATE_KEY_GATE = ("private key", "putty-user-key-file")

DETECTORS: tuple[_Detector, ...] = (
    # A whole PEM block, not only its header line (all the library flags); a block with no END
    # (cut by a length cap) is cut to the end of the text.
    _Detector(
        "private_key",
        re.compile(
            r"-{4,5} ?BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)? ?-{4,5}[\s\S]*?"
            r"(?:-{4,5} ?END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)? ?-{4,5}|\Z)"
        ),
        _PRIVATE_KEY_GATE,
        skip_atoms=True,
    ),
    _Detector(
        "private_key",
        re.compile(r"PuTTY-User-Key-File-\d+:[\s\S]*?(?:Private-MAC:[ \t]*[0-9a-fA-F]+|\Z)"),
        _PRIVATE_KEY_GATE,
        skip_atoms=True,
    ),
)
