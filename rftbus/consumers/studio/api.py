"""The studio's JSON calls: login/logout (the HttpOnly token cookie), the grading queue and a grader's own
grades and new grades (`feedback` scope), the analytics schema and SQL (`read` scope; the query runs in
the analytics sandbox, rftbus/consumers/analytics/query.py)."""

from __future__ import annotations

import json
import time

import anyio
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from rftbus.ground.config import Config
from rftbus.consumers.analytics.backends import AnalyticsError
from rftbus.consumers.analytics.jail import TooManyReaders
from rftbus.ground.grades.request import FeedbackRequest
from rftbus.ground.web.auth import Scope
from rftbus.ground.web.errors import BadRequest, NotFound, TooManyRequests, Unauthorized, parse

from . import access, data
from .state import GRADER, GRADER_OR_READER, READER, studio_of

router = APIRouter(prefix="/api")


@router.post("/login")
async def login(request: Request):
    auth = studio_of(request).auth
    body = await _json(request)
    token, name = str(body.get("token") or "").strip(), access.clean_name(body.get("name"))
    allowed = auth.allowed(f"Bearer {token}" if token else None) - {Scope.weights}  # (not the studio's)
    if token and allowed == set(auth.open_scopes()) - {Scope.weights}:
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


@router.post("/logout")
async def logout(request: Request):
    resp = JSONResponse({"status": "signed out"})
    resp.delete_cookie(access.TOKEN_COOKIE, path=request.scope.get("root_path") or "/")
    return resp


@router.get("/queue", dependencies=[GRADER])
def queue(request: Request, order: str = "newest", task: str = ""):
    cfg = studio_of(request).cfg
    if order not in ("newest", "oldest"):
        raise BadRequest("order is newest or oldest", param="order")
    with data.reading(cfg) as r:
        groups = data.queue(r, cfg.streams.feedback_ttl_s, cfg.studio.queue_limit, order == "oldest", task)
        tasks = data.queue_tasks(r, cfg.streams.feedback_ttl_s)
    now = time.time() * 1000
    return {"groups": [{**g.__dict__, "age_s": round(max(0.0, now - g.created_ms) / 1000, 1)} for g in groups],
            "tasks": tasks}


@router.get("/mine", dependencies=[GRADER])
def mine(request: Request):
    me = access.annotator(request)
    with data.reading(studio_of(request).cfg) as r:
        return {"annotator": me, "grades": data.mine(r, me)}


@router.post("/feedback", status_code=202, dependencies=[GRADER])
async def feedback(request: Request):
    st = studio_of(request)
    if "json" not in request.headers.get("content-type", ""):
        raise BadRequest("send the grade as JSON (Content-Type: application/json)", code="invalid_content_type")
    req = await parse(request, FeedbackRequest)
    req = req.model_copy(update={"annotator": access.annotator(request)})
    if req.correction is not None and not req.prompt:
        req = req.model_copy(update={"prompt": await anyio.to_thread.run_sync(_prompt_of, st.cfg, req.target)})
    fb = await st.publisher.publish(req)
    if st.grades is not None:
        st.grades.labels(fb.kind.value).inc()
    return JSONResponse({"status": "accepted", "feedback_id": fb.feedback_id, "experience_id": fb.experience_id,
                         "kind": fb.kind.value, "annotator": fb.annotator, "topic": st.cfg.topics.feedback.name},
                        status_code=202)


@router.get("/schema", dependencies=[READER])
async def schema(request: Request):
    from rftbus.consumers.analytics.schema import describe
    from rftbus.consumers.analytics.statement import CALLABLE

    return {"tables": describe(studio_of(request).cfg.analytics.database), "functions": sorted(CALLABLE)}


@router.post("/sql", dependencies=[READER])
async def sql(request: Request):
    body = await _json(request)
    text, params = body.get("sql"), body.get("params") or {}
    if not isinstance(text, str) or not text.strip():
        raise BadRequest("sql: a query is needed", param="sql")
    if not isinstance(params, dict):
        raise BadRequest("params: an object of name: value", param="params")
    from rftbus.consumers.analytics.query import run_query

    try:
        res = await anyio.to_thread.run_sync(run_query, studio_of(request).cfg, text,
                                             {str(k): str(v) for k, v in params.items()})
    except TooManyReaders as e:
        raise TooManyRequests(str(e), code="too_many_queries") from None
    except AnalyticsError as e:
        raise BadRequest(str(e), param="sql", code="query_failed") from None
    return {"columns": res.columns, "types": res.types, "rows": res.rows}


async def _json(request: Request) -> dict:
    try:
        body = json.loads(await request.body() or b"{}")
    except ValueError as e:
        raise BadRequest(f"body is not valid JSON: {e}", code="invalid_json") from None
    if not isinstance(body, dict):
        raise BadRequest("body must be a JSON object", code="invalid_json")
    return body


@router.get("/image/{group_id}/{k}", dependencies=[GRADER_OR_READER])
def image(request: Request, group_id: str, k: int):
    """Picture k of a group's prompt (a VLM's), for the queue and the experience page: the bytes from the record
    on Kafka, hash-checked; 404 naming what is missing."""
    cfg = studio_of(request).cfg
    with data.reading(cfg) as r:
        found = data.image(cfg, r, group_id, k)
    if found is None:
        raise NotFound(f"group {group_id[:80]} has no image {k}", param="group_id")
    media, body = found
    return Response(body, media_type=media, headers={"Cache-Control": "private, max-age=3600"})


def _prompt_of(cfg: Config, experience_id: str) -> str | None:
    """A correction's prompt, from the recorded experience (so it can become a demonstration)."""
    with data.reading(cfg) as r:
        rows = r.rows("SELECT any(prompt_text) AS p FROM {db}.experiences WHERE experience_id = {id:String}",
                      {"id": experience_id})
    return rows[0]["p"] if rows and rows[0]["p"] else None
