from __future__ import annotations

import pytest

from recall.gate import SkipReason, gate


@pytest.mark.parametrize(
    ("query", "reason"),
    [
        ("", SkipReason.EMPTY),
        ("   \n\t", SkipReason.EMPTY),
        (None, SkipReason.EMPTY),
        ("hi", SkipReason.GREETING),
        ("Hi!", SkipReason.GREETING),
        ("thanks!", SkipReason.GREETING),
        ("Thank you so much :)", SkipReason.GREETING),
        ("good morning", SkipReason.GREETING),
        ("Hello there, team", SkipReason.GREETING),
        ("ＨＥＬＬＯ", SkipReason.GREETING),  # fullwidth, NFKC-normalised
        ("???", SkipReason.NO_WORDS),
        ("🙂🎉👍", SkipReason.NO_WORDS),
        ("... --- !!!", SkipReason.NO_WORDS),
    ],
)
def test_skipped_queries_name_their_reason(query: str | None, reason: SkipReason) -> None:
    assert gate(query) is reason


@pytest.mark.parametrize(
    "query",
    [
        "which database do we use?",
        "hi, which database do we use?",
        "thanks, now fix the pgbouncer pool size",
        "404",
        "good",  # an adjective alone is not a greeting
        "you there",  # no greeting word at all
        "PostgreSQL 16",
        "数据库",  # letters of any script are words
    ],
)
def test_questions_pass(query: str) -> None:
    assert gate(query) is None


def test_long_run_of_greeting_words_is_still_a_question() -> None:
    assert gate("hi hi hi hi hi hi hi") is None
