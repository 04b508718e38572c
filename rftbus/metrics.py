"""Prometheus exposition shared by the HTTP apps (serve, studio) and `rftbus run`: one registry per app (several
apps may live in one process, as in tests), served at `/metrics` in the text format prometheus-client writes.

/metrics is unauthenticated, as Prometheus targets usually are: it carries counts and latencies, never prompts,
answers or tokens. Bind the app to a private address, or turn it off (serve.metrics, studio.metrics).
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

# seconds: from a few milliseconds (a cached page) to minutes (a long answer on a CPU)
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80, 160, 320)


def add_metrics_route(app: Any, registry: CollectorRegistry) -> None:
    """GET /metrics on a FastAPI app."""
    from fastapi.responses import Response

    @app.get("/metrics", include_in_schema=False)
    async def metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
