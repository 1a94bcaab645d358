"""Partitions: one dynamic partition per tenant (`org/repo`), shared by every asset.

Days are not a partition dimension: the per-tenant assets are incremental (only new or changed
landing files are read, only turns not yet extracted by the current model are extracted), and
a date range is re-extracted by materializing one tenant with `ExtractConfig` (see
`assets.triples`). At 10,000 tenants that is 10,000 partitions per asset, far under Dagster's
guidance of about 100,000, however long the history.
"""

from __future__ import annotations

from dagster import DynamicPartitionsDefinition

from schemas.scope import Scope

# The partitions definition's name stays "tenants" so existing instances keep their partitions.
TENANTS = "tenants"
scope_partitions = DynamicPartitionsDefinition(name=TENANTS)


def scope_of(key: str) -> Scope:
    """The scope of a partition key (`org/repo`)."""
    return Scope.parse(key)
