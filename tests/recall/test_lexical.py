from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from recall.lexical import BM25Index, query_tokens, tokenize


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("pgbouncer", {"pgbouncer"}),
        ("PgBouncer", {"pg", "bouncer", "pgbouncer"}),
        ("payments-api", {"payment", "api", "paymentsapi"}),
        ("payments_api", {"payment", "api", "paymentsapi"}),
        ("PaymentsApi", {"payment", "api", "paymentsapi"}),
        ("PostgreSQL 16", {"postgr", "sql", "postgresql", "16"}),
        ("src/recall/service.py", {"src", "recal", "servic", "py", "srcrecallservicepi"}),
        ("HTTPServer", {"http", "server", "httpserver"}),
        ("C++ and C#", {"c++", "c#"}),
        ("Ｐｏｓｔｇｒｅｓ", {"postgr"}),  # NFKC folds fullwidth letters
        ("STRASSE straße", {"strass"}),  # casefold: ß == ss
        ("which database do we use?", {"databas"}),  # question and stop words dropped
    ],
)
def test_tokenize_identifiers(text: str, expected: set[str]) -> None:
    assert set(tokenize(text)) == expected


def test_query_tokens_are_distinct_and_ordered() -> None:
    assert query_tokens("deploy deploys DEPLOYED to k8s") == ["deploy", "k8s"]


def _index(*docs: str) -> BM25Index:
    return BM25Index([tokenize(d) for d in docs])


def test_every_spelling_of_an_identifier_finds_it() -> None:
    index = _index("PgBouncer connection pooler", "PostgreSQL database", "Redis cache")
    for query in ("pgbouncer", "pg bouncer", "PgBouncer", "pg-bouncer", "PG_BOUNCER"):
        assert index.top(query_tokens(query), 3)[0][0] == 0, query


def test_rare_term_outranks_common_term() -> None:
    index = _index("user WORKED_ON PAY-1", "user WORKED_ON PAY-2", "user PREFERS_EDITOR Neovim")
    top = index.top(query_tokens("which editor does the user prefer"), 3)
    assert top[0][0] == 2
    assert top[0][1] > top[1][1] > 0


def test_ties_share_a_rank_and_order_by_position() -> None:
    index = _index("ledger-service-1", "ledger-service-2", "Istio service mesh", "Redis")
    top = index.top(query_tokens("service mesh"), 10)
    assert top[0][0] == 2 and top[0][2] == 1
    assert [(row, rank) for row, _, rank in top[1:]] == [(0, 2), (1, 2)]


def test_no_match_and_empty_corpus() -> None:
    assert _index("Redis cache").top(query_tokens("kubernetes"), 5) == []
    assert _index("Redis cache").top([], 5) == []
    empty = BM25Index([])
    assert empty.top(["redis"], 5) == []
    assert empty.scores(["redis"]).size == 0


# --- pseudo-relevance feedback ----------------------------------------------------------------

_WORDS = st.sampled_from([f"w{i}" for i in range(12)])
_DOCS = st.lists(st.lists(_WORDS, min_size=0, max_size=6), min_size=1, max_size=12)


@settings(max_examples=200, deadline=None)
@given(docs=_DOCS, query=st.lists(_WORDS, min_size=0, max_size=3))
def test_feedback_only_adds_and_is_off_at_weight_zero(docs, query) -> None:
    index = BM25Index(docs)
    base = index.scores(query)
    off = index.feedback_scores(query, docs=15, terms=30, weight=0.0)
    assert np.array_equal(off, base)
    fed = index.feedback_scores(query, docs=15, terms=30, weight=0.75)
    assert fed.shape == base.shape
    assert np.all(fed >= base - 1e-6)  # expansion adds, never takes away
    # No first-pass match, nothing to learn from: the scores stay as they were.
    if not (base > 0).any():
        assert np.array_equal(fed, base)
    # The expansion never outweighs the best first-pass score by more than `weight`.
    if (base > 0).any():
        assert fed.max() <= base.max() * 1.75 + 1e-5


@settings(max_examples=200, deadline=None)
@given(docs=_DOCS, word=_WORDS)
def test_a_words_postings_are_its_dense_scores(docs, word) -> None:
    # Feedback reads one word at a time from the sparse index (`_postings`): the same scores,
    # document for document, as the dense `scores([word])` it replaced.
    index = BM25Index(docs)
    dense = np.zeros(index.size, np.float32)
    docs_of, values = index._postings(word)
    assert len(set(docs_of.tolist())) == docs_of.size
    dense[docs_of] = values
    assert np.array_equal(dense, index.scores([word]))


def _dense_feedback(index: BM25Index, tokens: list[str], *, docs: int, terms: int, weight: float):
    """The feedback as first written, one dense `scores([word])` per word: the oracle for the
    sparse reading (`_postings`) that replaced it."""
    base = index.scores(tokens)
    hits = np.flatnonzero(base > 0)
    if hits.size <= docs:
        return base
    matched = sum((index.scores([t]) > 0).astype(np.int32) for t in set(tokens))
    strong = hits[matched[hits] > matched[hits].min()]
    if strong.size == 0:
        return base
    best = strong[np.lexsort((strong, -base[strong]))[:docs]]
    top = float(base[best[0]])
    mass: dict[str, float] = {}
    for d in best.tolist():
        for t in index._docs[d]:
            if t not in tokens:
                mass[t] = mass.get(t, 0.0) + float(base[d]) / top / len(index._docs[d])
    if not mass:
        return base
    n = index.size
    chosen = sorted(
        ((w * np.log((n + 1) / (index._df.get(t, 0) + 0.5)), t) for t, w in mass.items()),
        key=lambda wt: (-wt[0], wt[1]),
    )[:terms]
    extra = np.zeros(n, dtype=np.float64)
    for w, t in chosen:
        if w > 0:
            extra += w * index.scores([t])
    peak = float(extra.max())
    return base if peak <= 0 else (base + weight * top * extra / peak).astype(np.float32)


@settings(max_examples=300, deadline=None)
@given(
    docs=st.lists(st.lists(_WORDS, min_size=0, max_size=8), min_size=1, max_size=40),
    query=st.lists(st.sampled_from([f"w{i}" for i in range(12)] + ["unknown"]), max_size=5),
    depth=st.integers(1, 6),
    terms=st.integers(1, 8),
)
def test_feedback_equals_the_dense_computation(docs, query, depth, terms) -> None:
    index = BM25Index(docs)
    got = index.feedback_scores(query, docs=depth, terms=terms, weight=0.5)
    want = _dense_feedback(index, query, docs=depth, terms=terms, weight=0.5)
    assert got.dtype == want.dtype
    assert np.array_equal(got, want)


def test_feedback_reaches_a_fact_that_shares_no_query_word() -> None:
    docs = [
        tokenize("Caroline attended LGBTQ support group"),
        tokenize("Caroline support group meets Tuesdays counseling"),
        tokenize("Melanie painted sunrise lake"),
        tokenize("support group counseling helped Caroline transition"),
        tokenize("Caroline went hiking"),
        tokenize("counseling sessions every Tuesday"),
        tokenize("Melanie bought running shoes"),
    ]
    index = BM25Index(docs)
    query = query_tokens("Which support group did Caroline attend?")
    base = index.scores(query)
    fed = index.feedback_scores(query, docs=3, terms=5, weight=0.75)
    # "counseling" and "tuesdays", words of the facts that match the question best, reach a
    # fact that shares no word with it; unrelated facts gain nothing.
    assert base[5] == 0 < fed[5]
    assert fed[2] == base[2] == 0 and fed[6] == base[6] == 0
    assert int(np.argmax(fed)) == int(np.argmax(base)) == 0


def test_no_feedback_from_facts_that_only_share_the_weakest_word() -> None:
    # Every fact names Maria and nothing else of the question: no fact is told apart, so
    # there is nothing to learn from.
    docs = [tokenize(f"Maria mentioned topic {c}") for c in "abcdefgh"]
    docs += [tokenize("Maria joined gym"), tokenize("Maria talked about news")]
    index = BM25Index(docs)
    query = query_tokens("What did Maria share in June?")
    base = index.scores(query)
    assert (base > 0).all()
    assert np.array_equal(index.feedback_scores(query, docs=3, terms=5, weight=0.75), base)


def test_feedback_is_deterministic() -> None:
    docs = [tokenize(t) for t in ("a b c", "b c d", "c d e", "d e f", "e f g")]
    index = BM25Index(docs)
    first = index.feedback_scores(["c"], docs=2, terms=3, weight=0.5)
    assert all(
        np.array_equal(first, index.feedback_scores(["c"], docs=2, terms=3, weight=0.5))
        for _ in range(5)
    )


@pytest.mark.parametrize("weight", [float("nan"), float("inf"), 0.0, -1.0])
def test_feedback_with_a_weight_that_is_not_a_positive_number_is_off(weight: float) -> None:
    docs = [tokenize(f"alpha beta {w}") for w in ("gamma", "delta", "eps", "zeta")] + [
        tokenize("alpha only")
    ]
    index = BM25Index(docs)
    base = index.scores(["alpha", "gamma"])
    assert np.array_equal(
        index.feedback_scores(["alpha", "gamma"], docs=1, terms=3, weight=weight), base
    )
