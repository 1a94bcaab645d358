from __future__ import annotations

import pytest

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
