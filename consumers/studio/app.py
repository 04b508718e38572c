"""The studio's FastAPI app: pages (server-rendered, one small script) and the JSON calls they make.

Scopes (serve's tokens): the feedback queue and grading need `feedback`; the dashboard, the experience
browser and SQL need `read`. Mounted by `rftbus serve` under /studio (grades then go through serve's own
feedback path) or run alone by `rftbus studio`.
"""

from __future__ import annotations

import threading
import time
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
from prometheus_client import CollectorRegistry, Counter
from fastapi import FastAPI, Request
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates

from rftbus.config import Config
from rftbus.metrics import add_metrics_route, time_requests
from rftbus.consumers.analytics.backends import AnalyticsError
from rftbus.web.auth import Scope, TokenAuth
from rftbus.web.errors import (ApiError, BadRequest, BodyLimit, NotFound, Unauthorized, Unavailable,
                                           parse)
from rftbus.producers.serve.feedback import FeedbackRequest
from rftbus.status import run_started

from . import access, dashboard, data
from .grading import KafkaPublisher, Publisher

HERE = Path(__file__).parent
STATIC = {"studio.js": "text/javascript", "studio.css": "text/css"}


class Studio:
    """What the routes share: config, tokens, where grades go, the dashboard's cache."""

    def __init__(self, cfg: Config, publisher: Publisher | None = None):
        self.cfg = cfg
        self.auth = TokenAuth.from_config(cfg.serve)
        self.publisher = publisher or KafkaPublisher(cfg)
        self.cache = data.Cache(cfg.studio.cache_s)
        self.templates = Jinja2Templates(directory=str(HERE / "templates"))
        self._kafka_quiet_until = 0.0

    def lags(self) -> list[dict] | None:
        from rftbus.kafka import inspect
        from rftbus.kafka.clients import make_admin
        from rftbus.kafka.committed import CommittedOffsets

        try:
            with CommittedOffsets(self.cfg) as committed:
                c = self.cfg
                stages = {c.explorer.group_id, c.streams.app_id, c.trainer.group_id, c.analytics.group_id}
                names = {t.name for t in c.topics.all().values()}
                return inspect.as_dicts(inspect.groups_info(make_admin(c), committed, timeout=c.studio.lag_timeout_s,
                                                            only=stages, topics=names))
        except Exception:  # noqa: BLE001 - Kafka away or slow: the panel says lags are unknown, the rest still draws
            return None

    def since_ms(self, window: str) -> int:
        """`run`: from the start of the last `rftbus run` on this state folder (all if none); `all`: 0."""
        if window not in ("run", "all"):
            raise BadRequest("window is run or all", param="window")
        started = run_started(self.cfg.state_dir) if window == "run" else None
        return int(started * 1000) if started else 0

    def dashboard(self, window: str) -> dashboard.Dashboard:
        since = self.since_ms(window)

        def make() -> dashboard.Dashboard:
            # Kafka's lags beside the analytics queries, waited for at most studio.lag_timeout_s in all: a
            # broker that is down (the run has ended) must not hold the page.
            # Kafka that did not answer lately (the run has ended) is asked again but not waited for.
            t0 = time.monotonic()
            box: list[list[dict] | None] = []
            asking = threading.Thread(target=lambda: box.append(self.lags()), name="studio-lags", daemon=True)
            asking.start()
            with data.reading(self.cfg) as r:
                d = dashboard.build(self.cfg, r, None, since)
            wait = 0.0 if time.monotonic() < self._kafka_quiet_until else self.cfg.studio.lag_timeout_s
            asking.join(max(0.0, wait - (time.monotonic() - t0)))
            lags = box[0] if box else None
            if lags is None:
                self._kafka_quiet_until = time.monotonic() + 15.0
            d.panels[-1] = dashboard.lag_panel(lags, self.cfg.studio.lag_timeout_s)
            return d
        return self.cache.get(f"dashboard:{since}", make)


def create_studio(cfg: Config, publisher: Publisher | None = None) -> FastAPI:
    st = Studio(cfg, publisher)
    app = FastAPI(title="rftbus studio", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.studio = st
    T = st.templates
    grades = None
    if cfg.studio.metrics:  # Prometheus: page and API latency by route, grades by kind
        registry = CollectorRegistry()
        time_requests(app, registry, "rftbus_studio")
        add_metrics_route(app, registry)
        grades = Counter("rftbus_studio_grades", "grades published from the studio, by kind", ["kind"],
                         registry=registry)

    def page(request: Request, template: str, code: int = 200, **ctx) -> HTMLResponse:
        allowed = access.scopes(st.auth, request)
        return T.TemplateResponse(request, template, {"can_grade": Scope.feedback in allowed,
                                                  "can_read": Scope.read in allowed, "cfg": cfg.studio, **ctx},
                                  status_code=code)

    def refused(request: Request, err: ApiError) -> Response:
        path, root = request.url.path, request.scope.get("root_path", "")
        if (path[len(root):] if root and path.startswith(root) else path).startswith("/api/"):
            return JSONResponse(err.body(), status_code=err.status)
        return page(request, "error.html", err.status, message=err.message, status=err.status)

    app.add_exception_handler(ApiError, refused)  # type: ignore[arg-type]

    @app.exception_handler(AnalyticsError)
    async def analytics_down(request: Request, exc: AnalyticsError) -> Response:
        return refused(request, Unavailable(f"analytics cannot be read: {exc}", code="analytics_unavailable"))

    def need(request: Request, scope: Scope) -> None:
        access.check(st.auth, request, scope)

    # -- pages -------------------------------------------------------------------------------------
    @app.get("/", include_in_schema=False)
    async def home(request: Request):
        allowed = access.scopes(st.auth, request)
        target = "queue" if Scope.feedback in allowed else "dashboard" if Scope.read in allowed else "login"
        return RedirectResponse(str(request.url_for(target)), status_code=303)

    @app.get("/login", name="login")
    async def login_page(request: Request):
        return page(request, "login.html", name=access.clean_name(request.cookies.get(access.NAME_COOKIE)))

    @app.get("/queue", name="queue")
    async def queue_page(request: Request):
        need(request, Scope.feedback)
        return page(request, "queue.html", me=access.annotator(request))

    @app.get("/dashboard", name="dashboard")
    def dashboard_page(request: Request, window: str = "run"):
        need(request, Scope.read)
        return page(request, "dashboard.html", d=st.dashboard(window), window=window)

    @app.get("/fragments/dashboard", name="dashboard_fragment")
    def dashboard_fragment(request: Request, window: str = "run"):
        need(request, Scope.read)
        return page(request, "panels.html", d=st.dashboard(window))

    @app.get("/experience", name="experience")
    def experience_page(request: Request, id: str = ""):  # noqa: A002 - the query parameter's name
        need(request, Scope.read)
        if not id.strip():
            return page(request, "experience.html", p=None, q="")
        if len(id) > 200:
            raise BadRequest("an id is at most 200 characters", param="id")
        with data.reading(cfg) as r:
            p = data.path(r, id)
        return page(request, "experience.html", 200 if p.found else 404, p=p, q=id.strip())

    @app.get("/static/{name}", name="static")
    async def static(name: str):
        if name not in STATIC:
            raise NotFound(f"no such file {name}")
        return FileResponse(HERE / "static" / name, media_type=STATIC[name],
                            headers={"Cache-Control": "max-age=300"})

    # -- JSON calls ---------------------------------------------------------------------------------
    @app.post("/api/login")
    async def login(request: Request):
        body = await _json(request)
        token, name = str(body.get("token") or "").strip(), access.clean_name(body.get("name"))
        allowed = st.auth.allowed(f"Bearer {token}" if token else None) - {Scope.weights}  # (not the studio's)
        if token and allowed == set(st.auth.open_scopes()) - {Scope.weights}:
            raise Unauthorized("this token is not one of serve's tokens", code="invalid_token")
        if not allowed & {Scope.feedback, Scope.read}:
            raise Unauthorized("a token is needed: a grader's (serve.feedback_tokens) or a reader's "
                               "(serve.read_tokens)", code="missing_token")
        resp = JSONResponse({"scopes": sorted(s.value for s in allowed)})
        path = request.scope.get("root_path") or "/"
        if token:
            resp.set_cookie(access.TOKEN_COOKIE, token, httponly=True, samesite="strict", path=path)
        resp.set_cookie(access.NAME_COOKIE, name, httponly=True, samesite="strict", path=path)
        return resp

    @app.post("/api/logout")
    async def logout(request: Request):
        resp = JSONResponse({"status": "signed out"})
        path = request.scope.get("root_path") or "/"
        resp.delete_cookie(access.TOKEN_COOKIE, path=path)
        return resp

    @app.get("/api/queue")
    def queue(request: Request, order: str = "newest", task: str = ""):
        need(request, Scope.feedback)
        if order not in ("newest", "oldest"):
            raise BadRequest("order is newest or oldest", param="order")
        with data.reading(cfg) as r:
            groups = data.queue(r, cfg.streams.feedback_ttl_s, cfg.studio.queue_limit, order == "oldest", task)
            tasks = data.queue_tasks(r, cfg.streams.feedback_ttl_s)
        now = time.time() * 1000
        return {"groups": [{**g.__dict__, "age_s": round(max(0.0, now - g.created_ms) / 1000, 1)} for g in groups],
                "tasks": tasks}

    @app.get("/api/mine")
    def mine(request: Request):
        need(request, Scope.feedback)
        me = access.annotator(request)
        with data.reading(cfg) as r:
            return {"annotator": me, "grades": data.mine(r, me)}

    @app.post("/api/feedback", status_code=202)
    async def feedback(request: Request):
        need(request, Scope.feedback)
        if "json" not in request.headers.get("content-type", ""):
            raise BadRequest("send the grade as JSON (Content-Type: application/json)", code="invalid_content_type")
        req = await parse(request, FeedbackRequest)
        req = req.model_copy(update={"annotator": access.annotator(request)})
        if req.correction is not None and not req.prompt:
            req = req.model_copy(update={"prompt": await anyio.to_thread.run_sync(_prompt_of, cfg, req.target)})
        fb = await st.publisher.publish(req)
        if grades is not None:
            grades.labels(fb.kind.value).inc()
        return JSONResponse({"status": "accepted", "feedback_id": fb.feedback_id, "experience_id": fb.experience_id,
                             "kind": fb.kind.value, "annotator": fb.annotator, "topic": cfg.topics.feedback.name},
                            status_code=202)

    @app.get("/api/schema")
    async def schema(request: Request):
        need(request, Scope.read)
        from rftbus.consumers.analytics.schema import describe
        from rftbus.consumers.analytics.statement import CALLABLE

        return {"tables": describe(cfg.analytics.database), "functions": sorted(CALLABLE)}

    @app.post("/api/sql")
    async def sql(request: Request):
        need(request, Scope.read)
        body = await _json(request)
        text, params = body.get("sql"), body.get("params") or {}
        if not isinstance(text, str) or not text.strip():
            raise BadRequest("sql: a query is needed", param="sql")
        if not isinstance(params, dict):
            raise BadRequest("params: an object of name: value", param="params")
        from rftbus.consumers.analytics.query import run_query

        try:
            res = await anyio.to_thread.run_sync(run_query, cfg, text, {str(k): str(v) for k, v in params.items()})
        except AnalyticsError as e:
            raise BadRequest(str(e), param="sql", code="query_failed") from None
        return {"columns": res.columns, "types": res.types, "rows": res.rows}

    return app


async def _json(request: Request) -> dict:
    import json

    try:
        body = json.loads(await request.body() or b"{}")
    except ValueError as e:
        raise BadRequest(f"body is not valid JSON: {e}", code="invalid_json") from None
    if not isinstance(body, dict):
        raise BadRequest("body must be a JSON object", code="invalid_json")
    return body


def _prompt_of(cfg: Config, experience_id: str) -> str | None:
    """A correction's prompt, from the recorded experience (so it can become a demonstration)."""
    with data.reading(cfg) as r:
        rows = r.rows("SELECT any(prompt_text) AS p FROM {db}.experiences WHERE experience_id = {id:String}",
                      {"id": experience_id})
    return rows[0]["p"] if rows and rows[0]["p"] else None


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
