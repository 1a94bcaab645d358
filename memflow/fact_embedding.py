"""The fact sweep: embed the text of every fact that holds no vector of the model yet.

A fact's text is its statement, ``"<subject> <predicate in words> <object>"`` ("Maria volunteers
at homeless shelter"), built from the (already redacted) validated columns only. Fact vectors go
to the same embedding ledger as entity-name vectors, under their own model key
(`resources.vector.base.fact_vectors_key`), so the ledger stays the cursor: a killed run loses at
most one batch, a rerun embeds only facts whose text has no vector yet, and a model change
re-embeds everything under the new key while the old key keeps serving.

`fact_vector_table` is what the vector sink makes the store equal to: exactly the vectors of the
facts in the table (closed facts included: recall filters by time itself).
"""

from __future__ import annotations

import polars as pl

from memflow.embedding import EmbedReport, Progress, embed_missing
from resources.models.base import EMBED_BATCH, EmbeddingProvider
from resources.vector.base import fact_vectors_key
from resources.vector.ledger import EmbeddingLedger, vector_table
from schemas.scope import Scope

FACT_COLUMNS = ("fact_id", "subject", "predicate", "object")
TABLE_SCHEMA: dict[str, pl.DataType] = {
    "tenant_id": pl.String(),
    "ns": pl.String(),
    "fact_id": pl.String(),
    "model": pl.String(),
    "dim": pl.Int32(),
    "text_hash": pl.String(),
    "vector": pl.List(pl.Float32()),
}


def predicate_words(predicate: str) -> str:
    """``VOLUNTEERS_AT`` -> ``volunteers at``."""
    return " ".join(w for w in predicate.lower().split("_") if w)


def fact_text(subject: str, predicate: str, obj: str) -> str:
    """The text a fact is embedded (and read) as."""
    return f"{subject} {predicate_words(predicate)} {obj}"


def fact_texts(facts: pl.DataFrame) -> pl.DataFrame:
    """entity_id (= fact_id), name (= the fact's text): the shape the ledger sweep takes."""
    missing = set(FACT_COLUMNS) - set(facts.columns)
    if missing:
        raise ValueError(f"facts need columns {sorted(missing)}")
    if facts.is_empty():
        return pl.DataFrame(schema={"entity_id": pl.String, "name": pl.String})
    frame = facts.select(FACT_COLUMNS).unique("fact_id", keep="first", maintain_order=True)
    if any(frame[c].null_count() for c in FACT_COLUMNS):
        raise ValueError("facts with a null id, subject, predicate or object cannot be embedded")
    texts = [fact_text(s, p, o) for _, s, p, o in frame.iter_rows()]
    return pl.DataFrame({"entity_id": frame["fact_id"], "name": pl.Series(texts, dtype=pl.String)})


def _check_scope(facts: pl.DataFrame, scope: Scope) -> None:
    for column, value in (("tenant_id", scope.tenant_id), ("ns", scope.ns)):
        if (
            column in facts.columns
            and facts.height
            and (facts.filter(pl.col(column) != value).height or facts[column].null_count())
        ):
            raise ValueError(f"facts of another {column} than {scope.key} were given")


def embed_missing_facts(
    provider: EmbeddingProvider,
    ledger: EmbeddingLedger,
    scope: Scope,
    facts: pl.DataFrame,
    *,
    batch: int = EMBED_BATCH,
    progress: Progress | None = None,
) -> EmbedReport:
    """Embed the texts of `facts` (fact_id, subject, predicate, object) the ledger lacks for
    the provider's model; returns the sweep's report (its `model` is the fact-vector key)."""
    _check_scope(facts, scope)
    return embed_missing(
        provider,
        ledger,
        scope,
        fact_texts(facts),
        batch=batch,
        progress=progress,
        key=fact_vectors_key(provider.model),
    )


def fact_vector_table(
    ledger: EmbeddingLedger, model: str, scope: Scope, facts: pl.DataFrame
) -> pl.DataFrame:
    """`model`'s vectors of exactly the facts in `facts`, at their current text:
    tenant_id, ns, fact_id, model (the fact-vector key), dim, text_hash, vector."""
    key = fact_vectors_key(model)
    texts = fact_texts(facts)
    table = vector_table(ledger, key, scope, texts)  # no facts: an empty table
    return table.rename({"entity_id": "fact_id"}).select(list(TABLE_SCHEMA))
