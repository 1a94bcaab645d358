"""The fuzz suite's secret scan finds exactly what a search for each mark finds."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.fuzz.planted import _lenient_decode, scan, text_secret, token


def _secrets(seed: int, n: int):
    rng = random.Random(seed)
    return [token(rng) if i % 2 else text_secret(rng) for i in range(n)]


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32), n=st.integers(1, 12), data=st.data())
def test_the_scan_equals_a_search_per_mark(seed: int, n: int, data: st.DataObject) -> None:
    secrets = _secrets(seed, n)
    pieces = data.draw(
        st.lists(
            st.one_of(
                st.text(max_size=40),
                # a whole carrier, a secret's first mark, or a mark cut short by one character
                st.sampled_from([s.carrier for s in secrets]),
                st.sampled_from([s.marks[0] for s in secrets]),
                st.sampled_from([s.marks[-1][:-1] for s in secrets]),
                # JSON-escaped, as an event log stores it
                st.sampled_from([s.secret.replace("/", "\\/") for s in secrets]),
            ),
            max_size=8,
        )
    )
    haystack = " ".join(pieces)
    decoded = _lenient_decode(haystack)
    plain = [s for s in secrets if s.found_in(haystack) or s.found_in(decoded)]
    assert scan(haystack, secrets) == plain
