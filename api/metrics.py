"""Prometheus metrics, one registry per app (no process-global state)."""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Histogram

LATENCY_BUCKETS_S = (0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
SEARCH_BUCKETS_S = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300)


@dataclass
class Metrics:
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        r = self.registry
        self.request_seconds = Histogram(
            "meshplan_http_request_duration_seconds",
            "HTTP request latency",
            ["method", "route", "status"],
            buckets=LATENCY_BUCKETS_S,
            registry=r,
        )
        self.errors = Counter(
            "meshplan_http_errors_total",
            "Responses with status >= 400",
            ["route", "status"],
            registry=r,
        )
        self.search_seconds = Histogram(
            "meshplan_search_duration_seconds",
            "Wall time of plan searches",
            ["outcome"],
            buckets=SEARCH_BUCKETS_S,
            registry=r,
        )
        self.searches = Counter("meshplan_searches_total", "Plan searches started", registry=r)
        self.cache_hits = Counter(
            "meshplan_plan_cache_hits_total",
            "POST /v1/plans answered from a stored plan",
            registry=r,
        )
        self.single_flight_joins = Counter(
            "meshplan_single_flight_joins_total",
            "Requests that waited for an identical in-flight search",
            registry=r,
        )
