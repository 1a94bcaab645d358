"""Prometheus metrics of the recall API (prometheus-client, one registry per app).

Label values come from closed sets (mode, error code, route template, status class) or, for
`tenant`, from a scope the caller's key was granted. Queries, entity names and raw paths never
become labels. A key allowed every repo of its org could still name many repos, so distinct
tenant values are capped at `max_tenants`; later ones are counted as "other".
"""

from __future__ import annotations

import threading

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from schemas.scope import Scope

LATENCY_BUCKETS = (
    0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
)  # fmt: skip
OTHER_TENANT = "other"
DEFAULT_MAX_TENANTS = 1000
CONTENT_TYPE = CONTENT_TYPE_LATEST


class ApiMetrics:
    def __init__(self, *, max_tenants: int = DEFAULT_MAX_TENANTS) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.max_tenants = max_tenants
        self._tenants: set[str] = set()
        self._lock = threading.Lock()
        self.recalls = Counter(
            "memflow_recalls",
            "Recall answers by tenant and mode (names, hybrid, semantic, skipped).",
            ["tenant", "mode"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "memflow_recall_latency_seconds",
            "Time to answer a recall inside the API, by mode.",
            ["mode"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.errors = Counter(
            "memflow_api_errors",
            "Error answers by code (unauthorized, tenant_not_found, semantic_unavailable, ...).",
            ["code"],
            registry=self.registry,
        )
        self.requests = Counter(
            "memflow_api_requests",
            "Requests by route template and status class.",
            ["route", "status"],
            registry=self.registry,
        )
        self.accepted = Counter(
            "memflow_api_accepted",
            "Items landed for the pipeline by kind (turns, triples).",
            ["tenant", "kind"],
            registry=self.registry,
        )

    def tenant_label(self, scope: Scope) -> str:
        """Only call with a scope the request's key was granted."""
        key = scope.key
        with self._lock:
            if key in self._tenants:
                return key
            if len(self._tenants) < self.max_tenants:
                self._tenants.add(key)
                return key
        return OTHER_TENANT

    def recall(self, scope: Scope, mode: str, seconds: float) -> None:
        self.recalls.labels(self.tenant_label(scope), mode).inc()
        self.latency.labels(mode).observe(seconds)

    def error(self, code: str) -> None:
        self.errors.labels(code).inc()

    def request(self, route: str, status: int) -> None:
        self.requests.labels(route, f"{status // 100}xx").inc()

    def landed(self, scope: Scope, kind: str, n: int) -> None:
        self.accepted.labels(self.tenant_label(scope), kind).inc(n)

    def render(self) -> bytes:
        return generate_latest(self.registry)
