"""The recall gate: queries that cannot ask the memory anything are skipped with a reason."""

from __future__ import annotations

import re
import unicodedata
from enum import StrEnum

MAX_GREETING_WORDS = 6


class SkipReason(StrEnum):
    EMPTY = "empty"  # nothing but whitespace
    NO_WORDS = "no_words"  # no letter or digit at all: punctuation, emoji, symbols
    GREETING = "greeting"  # only greetings, thanks or farewells


# A query is a greeting when every word is in GREETING_WORDS and one of them is in
# GREETING_CORE ("thank you" is a greeting, "you" alone is not).
GREETING_CORE: frozenset[str] = frozenset(
    {
        "hi", "hii", "hiya", "hello", "hallo", "hey", "heya", "howdy", "yo", "greetings", "sup",
        "morning", "afternoon", "evening", "night", "thanks", "thank", "thx", "ty", "tysm",
        "cheers", "bye", "goodbye", "cya", "gm", "gn", "welcome",
    }
)  # fmt: skip
GREETING_WORDS: frozenset[str] = GREETING_CORE | frozenset(
    {
        "good", "there", "you", "all", "everyone", "folks", "team", "again", "so", "much", "very",
        "a", "lot", "ok", "okay", "great", "nice", "and", "have", "day", "dear", "friend", "buddy",
    }
)  # fmt: skip
_WORD = re.compile(r"[^\W_]+")


def gate(query: str | None) -> SkipReason | None:
    """The reason to skip `query`, or None when it should be answered."""
    text = unicodedata.normalize("NFKC", query or "")
    if not text.strip():
        return SkipReason.EMPTY
    words = [w.casefold() for w in _WORD.findall(text)]
    if not words:
        return SkipReason.NO_WORDS
    if (
        len(words) <= MAX_GREETING_WORDS
        and all(w in GREETING_WORDS for w in words)
        and any(w in GREETING_CORE for w in words)
    ):
        return SkipReason.GREETING
    return None
