"""The lexical leg: identifier-aware tokenization and a BM25 index (bm25s) over short texts.

One implementation serves every graph backend: it only needs the scope's entity names,
aliases and types (and fact texts), read through the `GraphStore` interface.

Tokenization, in order: Unicode NFKC; camelCase / PascalCase split (before case folding, as
it needs the case); casefold; split on anything that is not a letter or digit (so kebab-case,
snake_case, dotted names and paths fall apart); drop stop words; Snowball (Porter 2) stemming.
Each compound chunk also yields its parts joined, so "payments-api", "payments_api",
"PaymentsApi" and "paymentsapi" all meet on the token "paymentsapi", while "payments api" still
matches the parts. "C++", "C#" and "F#" keep their symbol, as they do in entity keys.
"""

from __future__ import annotations

import re
import threading
import unicodedata
from collections.abc import Sequence

import bm25s
import numpy as np
import Stemmer

# Whitespace-separated chunks are cut further at every non-alphanumeric character.
_CHUNK = re.compile(r"\S+")
_WORD = re.compile(r"[^\W_]+(?:\+\+|#)?")
# camelCase, PascalCase, ACRONYMWord and digit boundaries: "PgBouncer" -> Pg Bouncer,
# "HTTPServer" -> HTTP Server, "PostgreSQL16" -> Postgre SQL 16.
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+|[^\W\d_]+")
_HAS_INNER_CAPITAL = re.compile(r"[a-z][A-Z]|[A-Z]{2}[a-z]")

# Function words of questions and statements, dropped from queries and documents alike. Kept
# to words that are never a name worth finding; "go" (the language) is deliberately absent.
STOP_WORDS: frozenset[str] = frozenset(
    {
        "a", "about", "above", "after", "again", "all", "also", "am", "an", "and", "any", "are",
        "as", "at", "be", "been", "being", "but", "by", "can", "could", "did", "do", "does",
        "doing", "done", "for", "from", "had", "has", "have", "having", "here", "how", "i", "if",
        "in", "into", "is", "it", "its", "itself", "just", "me", "my", "myself", "no", "nor",
        "not", "of", "on", "or", "our", "ours", "ourselves", "should", "so", "such", "than",
        "that", "the", "their", "theirs", "them", "then", "there", "these", "they", "this",
        "those", "to", "too", "use", "used", "uses", "using", "very", "was", "we", "were", "what",
        "when", "where", "which", "while", "who", "whom", "whose", "why", "will", "with", "would",
        "you", "your", "yours",
    }
)  # fmt: skip
# "use" and its forms are in half of all memories ("X USES Y") and questions ("which db do
# we use"); like "is" or "have" they say nothing about which fact is meant.

_STEMMER_LOCAL = threading.local()


def _stemmer() -> Stemmer.Stemmer:
    # PyStemmer objects are not documented as thread-safe; one per thread is cheap.
    stemmer = getattr(_STEMMER_LOCAL, "stemmer", None)
    if stemmer is None:
        stemmer = Stemmer.Stemmer("english")
        _STEMMER_LOCAL.stemmer = stemmer
    return stemmer


def _words(chunk: str) -> list[str]:
    """Casefolded words of one whitespace-free chunk, camelCase split, plus its compound."""
    pieces = _WORD.findall(chunk)
    words: list[str] = []
    for piece in pieces:
        if _HAS_INNER_CAPITAL.search(piece):
            parts = [p.casefold() for p in _CAMEL.findall(piece)]
            words.extend(parts)
            if len(parts) > 1:
                words.append(piece.casefold())
        else:
            words.append(piece.casefold())
    if len(pieces) > 1:
        words.append("".join(p.casefold() for p in pieces))
    return words


def tokenize(text: str) -> list[str]:
    """Stemmed, stop-word-free tokens of `text` (duplicates kept: they are term frequency)."""
    if not text:
        return []
    normal = unicodedata.normalize("NFKC", text)
    words: list[str] = []
    for chunk in _CHUNK.findall(normal):
        words.extend(w for w in _words(chunk) if w not in STOP_WORDS)
    return _stemmer().stemWords(words) if words else []


def query_tokens(text: str) -> list[str]:
    """Tokens of a query, each once (BM25 sums over distinct query terms)."""
    return list(dict.fromkeys(tokenize(text)))


class BM25Index:
    """BM25 over a fixed list of documents, given as token lists. Immutable once built.

    `scores()` returns one float per document (0 for no match) so callers can combine the
    lexical signal with others in numpy without a second lookup.
    """

    def __init__(self, docs: Sequence[Sequence[str]], *, k1: float = 1.2, b: float = 0.75) -> None:
        self.size = len(docs)
        self._model: bm25s.BM25 | None = None
        self._vocab: dict[str, int] = {}
        if self.size and any(docs):
            model = bm25s.BM25(k1=k1, b=b)
            model.index([list(d) for d in docs], show_progress=False)
            self._model = model
            self._vocab = model.vocab_dict

    def scores(self, tokens: Sequence[str]) -> np.ndarray:
        """BM25 score of every document for the query tokens (unknown tokens are ignored)."""
        ids = [self._vocab[t] for t in tokens if t in self._vocab]
        if self._model is None or not ids:
            return np.zeros(self.size, dtype=np.float32)
        return self._model.get_scores_from_ids(ids)

    def top(self, tokens: Sequence[str], n: int) -> list[tuple[int, float, int]]:
        """Up to `n` (doc index, score, rank) with score > 0, best first.

        Equal scores share a rank ("1224" competition ranking), so fusion never rewards an
        arbitrary order among ties; within a tie the order is by doc index.
        """
        scores = self.scores(tokens)
        hits = np.flatnonzero(scores > 0)
        if hits.size == 0:
            return []
        order = np.lexsort((hits, -scores[hits]))[:n]
        top = scores[hits[order]]
        ranks = np.searchsorted(-top, -top, side="left") + 1
        return [(int(hits[i]), float(s), int(r)) for i, s, r in zip(order, top, ranks, strict=True)]
