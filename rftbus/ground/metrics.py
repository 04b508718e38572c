"""Prometheus exposition shared by the HTTP apps (serve, studio) and `rftbus run`: one registry per app (several
apps may live in one process, as in tests), served at `/metrics` in the text format prometheus-client writes.

/metrics is unauthenticated, as Prometheus targets usually are: it carries counts and latencies, never prompts,
answers or tokens. Bind the app to a private address, or turn it off (serve.metrics, studio.metrics).
"""

from __future__ import annotations

import time
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Histogram, generate_latest

# seconds: from a few milliseconds (a cached page) to minutes (a long answer on a CPU)
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80, 160, 320)


def add_metrics_route(app: Any, registry: CollectorRegistry) -> None:
    """GET /metrics on a FastAPI app."""
    from fastapi.responses import Response

    @app.get("/metrics", include_in_schema=False)
    async def metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)


def time_requests(app: Any, registry: CollectorRegistry, prefix: str) -> None:
    """`<prefix>_request_seconds{route, status}`: every request's latency, by its route's path template (not the
    URL: ids stay out of the labels)."""
    hist = Histogram(f"{prefix}_request_seconds", "request latency by route", ["route", "status"],
                     buckets=LATENCY_BUCKETS, registry=registry)

    @app.middleware("http")
    async def timed(request: Any, call_next: Any) -> Any:
        t0 = time.perf_counter()
        response = await call_next(request)
        route = getattr(request.scope.get("route"), "path", "other")
        hist.labels(route, str(response.status_code)).observe(time.perf_counter() - t0)
        return response
