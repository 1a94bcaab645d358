"""memflow resources. Plain classes here import no Dagster; `resources.dagster` wraps them."""
