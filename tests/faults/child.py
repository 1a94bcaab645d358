"""A pipeline run in its own process, for kill -9 tests: `python -m tests.faults.child ...`."""

from __future__ import annotations

import argparse
import sys

from dagster import DagsterInstance, materialize

from assets.partitions import TENANTS
from pipelines.definitions import ALL_ASSETS
from pipelines.io import DeltaTablesIOManager
from resources.configurable import (
    EmbeddingModelResource,
    ExtractionModelResource,
    GraphStoreResource,
    Storage,
    VectorStoreResource,
)
from schemas.scope import Scope


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--landing", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--home", required=True)
    p.add_argument("--tenant", required=True)
    p.add_argument("--embed-url", default="")
    p.add_argument("--gremlin-url", default="", help="graph store: this Gremlin server")
    p.add_argument("--milvus-uri", default="", help="vector store: this Milvus server")
    p.add_argument("--select", nargs="+", required=True)
    args = p.parse_args()
    scope = Scope.parse(args.tenant)
    embedding = (
        EmbeddingModelResource(provider="openai", base_url=args.embed_url, model="hash-model")
        if args.embed_url
        else EmbeddingModelResource(provider="none")
    )
    resources = {
        "tables": DeltaTablesIOManager(data_dir=args.data),
        "storage": Storage(landing_dir=args.landing, data_dir=args.data),
        "extraction": ExtractionModelResource(provider="none"),
        "embedding": embedding,
        "graph": (
            GraphStoreResource(backend="gremlin", gremlin_url=args.gremlin_url)
            if args.gremlin_url
            else GraphStoreResource(backend="sqlite", data_dir=args.data)
        ),
        "vectors": VectorStoreResource(uri=args.milvus_uri, data_dir=args.data),
    }
    with DagsterInstance.local_temp(args.home) as instance:
        if scope.key not in instance.get_dynamic_partitions(TENANTS):
            instance.add_dynamic_partitions(TENANTS, [scope.key])
        result = materialize(
            ALL_ASSETS,
            selection=args.select,
            partition_key=scope.key,
            instance=instance,
            resources=resources,
            raise_on_error=False,
        )
    return 0 if result.success else 1


if __name__ == "__main__":
    sys.exit(main())
