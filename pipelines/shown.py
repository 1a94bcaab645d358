"""Values as a terminal or a log may show them: a path, a tenant name or an error message never
starts a line of its own or rewrites one.

Landing paths, tenant names and error text come from outside (a directory named
`x\\nFAILED acme/api: ...`, an ANSI escape in a file name). `shown` writes every control
character (C0, DEL, C1), the Unicode line and paragraph separators and the bidirectional
overrides as escapes (`\\n`, `\\x1b`, `\\u2028`), and leaves every other character, non-ASCII
letters included, as it is.
"""

from __future__ import annotations

import re

_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def shown(value: object) -> str:
    """`value` as text with no character that could forge or hide a line."""
    text = value if isinstance(value, str) else str(value)
    return _UNSAFE.sub(_escape, text)
