"""Outside systems as plain classes: table store, graph and vector stores, model providers,
settings. Only `configurable.py` imports Dagster (the ConfigurableResources wrapping them)."""
