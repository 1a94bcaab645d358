"""Partitions: tenants (`org/repo`) are dynamic; turns and triples are also split by day."""

from __future__ import annotations

from dagster import (
    DailyPartitionsDefinition,
    DynamicPartitionsDefinition,
    MultiPartitionKey,
    MultiPartitionsDefinition,
)

from schemas.scope import Scope

TENANTS = "tenants"
scope_partitions = DynamicPartitionsDefinition(name=TENANTS)
# end_offset=1: today's partition exists while today's turns are still arriving.
day_partitions = DailyPartitionsDefinition(start_date="2025-01-01", end_offset=1)
scope_day_partitions = MultiPartitionsDefinition(
    {"tenant": scope_partitions, "day": day_partitions}
)


def scope_day_key(scope: Scope, day: str) -> MultiPartitionKey:
    return MultiPartitionKey({"tenant": scope.key, "day": day})


def split_key(key: str | MultiPartitionKey) -> tuple[Scope, str | None]:
    """(scope, day) of a partition key of either partitions definition."""
    if isinstance(key, MultiPartitionKey):
        dims = key.keys_by_dimension
        return Scope.parse(dims["tenant"]), dims["day"]
    if "|" in key:
        # The string form of a multi-partition key: dimension values ordered by dimension name.
        day, tenant = key.split("|", 1)
        return Scope.parse(tenant), day
    return Scope.parse(key), None
