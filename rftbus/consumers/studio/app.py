"""The studio's FastAPI app: pages (server-rendered, one small script, `pages.py`) and the JSON calls they make
(`api.py`), over what they share (`state.Studio`).

Scopes (serve's tokens): the feedback queue and grading need `feedback`; the dashboard, the experience
browser and SQL need `read`. Mounted by `rftbus serve` under /studio (grades then go through serve's own
feedback path) or run alone by `rftbus studio`.
"""

from __future__ import annotations

from contextlib import asynccontextmanager

import anyio
from fastapi import FastAPI, Request
from fastapi.responses import RedirectResponse, Response
from prometheus_client import CollectorRegistry, Counter

from rftbus.ground.config import Config
from rftbus.consumers.analytics.backends import AnalyticsError
from rftbus.ground.metrics import add_metrics_route, time_requests
from rftbus.ground.web.errors import ApiError, BodyLimit, Unavailable

from . import api, pages
from .grading import Publisher
from .state import Studio


def create_studio(cfg: Config, publisher: Publisher | None = None) -> FastAPI:
    st = Studio(cfg, publisher)
    app = FastAPI(title="rftbus studio", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.studio = st
    if cfg.studio.metrics:  # Prometheus: page and API latency by route, grades by kind
        registry = CollectorRegistry()
        time_requests(app, registry, "rftbus_studio")
        add_metrics_route(app, registry)
        st.grades = Counter("rftbus_studio_grades", "grades published from the studio, by kind", ["kind"],
                            registry=registry)
    app.add_exception_handler(ApiError, pages.refused)  # type: ignore[arg-type]

    @app.exception_handler(AnalyticsError)
    async def analytics_down(request: Request, exc: AnalyticsError) -> Response:
        return pages.refused(request, Unavailable(f"analytics cannot be read: {exc}", code="analytics_unavailable"))

    app.include_router(pages.router)
    app.include_router(api.router)
    return app


def standalone(cfg: Config) -> FastAPI:
    """`rftbus studio`: the studio at /studio, / sending there, its Kafka producer closed at shutdown."""
    studio = create_studio(cfg)

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        yield
        await anyio.to_thread.run_sync(studio.state.studio.publisher.close)

    app = FastAPI(title="rftbus studio", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.add_middleware(BodyLimit, max_bytes=cfg.serve.max_body_bytes)  # serve's limit, before any body is read
    app.mount("/studio", studio)

    @app.get("/", include_in_schema=False)
    async def root():
        return RedirectResponse("/studio/", status_code=303)

    @app.get("/healthz")
    async def healthz():
        return {"status": "ok"}

    return app


__all__ = ["create_studio", "standalone"]
