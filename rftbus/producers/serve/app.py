"""The FastAPI app: OpenAI-compatible routes that record live traffic, and the feedback route.

Order of checks on every request: body size (middleware, before anything is parsed) -> bearer token
of the route's scope -> body validation (400 naming the field) -> work. Bodies are parsed after
authentication, so an unauthenticated caller learns nothing about what a valid body looks like.
Nothing here logs headers or bodies; uvicorn's access log has method, path and status only.
"""

from __future__ import annotations

from contextlib import asynccontextmanager

import anyio
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response

from rftbus.ground.config import Config
from rftbus.ground.metrics import add_metrics_route
from rftbus.producers.serve import responses
from rftbus.producers.serve.answering import Answering, retry_after
from rftbus.ground.web.auth import Scope
from rftbus.ground.web.errors import ApiError, BadRequest, BodyLimit, NotFound, parse
from rftbus.ground.grades.request import FeedbackRequest, valid_id
from rftbus.producers.serve.mounts import mounted, mounted_scopes
from rftbus.producers.serve.responses_api import ResponsesRequest, as_chat, body as responses_body
from rftbus.producers.serve.protocol import (ChatRequest, CompletionRequest, LoadAdapter, UnloadAdapter, chat_prompt,
                                             completion_prompt)
from rftbus.producers.serve.sessions import SESSION_HEADER
from rftbus.producers.serve.limits import RateLimited
from rftbus.producers.serve.metrics import ServeMetrics
from rftbus.producers.serve.service import LiveService

def _error_response(err: ApiError) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if err.status == 401 else {}
    if isinstance(err, RateLimited):
        headers.update(retry_after(err.retry_after_s))
    return JSONResponse(err.body(), status_code=err.status, headers=headers or None)


def served_scopes(cfg: Config) -> set[Scope]:
    """The scopes this server answers: the read scope only where a mount (the studio) answers it."""
    pushes = {Scope.weights} if cfg.serve.accept_lora_pushes else set()
    return {Scope.inference, Scope.feedback} | pushes | mounted_scopes(cfg)


def create_app(cfg: Config, service: LiveService | None = None) -> FastAPI:
    svc = service or LiveService(cfg)
    svc.auth.check_exposure(cfg.serve.host, cfg.serve.allow_open, served_scopes(cfg))

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        await anyio.to_thread.run_sync(svc.start)
        try:
            yield
        finally:
            await anyio.to_thread.run_sync(svc.stop)

    app = FastAPI(title="rftbus serve", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.service = svc
    app.add_middleware(BodyLimit, max_bytes=cfg.serve.max_body_bytes)
    metrics = ServeMetrics(lambda: svc.generator.version, lambda: svc.records.inflight) if cfg.serve.metrics else None
    answering = Answering(cfg, svc, metrics)

    def on_error(_req: Request, exc: ApiError) -> JSONResponse:
        if metrics is not None:
            metrics.rejected(exc.status, exc.code)
        return _error_response(exc)
    app.add_exception_handler(ApiError, on_error)  # type: ignore[arg-type]  # (starlette types handlers loosely)
    if metrics is not None:
        add_metrics_route(app, metrics.registry)

    for plugin in mounted(cfg):  # the browser console (its grades through this service's feedback path)
        app.mount(plugin.path, plugin.app(cfg, svc))

    @app.get("/healthz")
    async def healthz():
        return {"status": "ok", "model": svc.model_name, "model_version": svc.generator.version}

    async def models(request: Request):
        svc.auth.check(request.headers.get("authorization"), Scope.inference)
        versions = {n: v for n, (_, v) in svc.generator.adapters.items()}
        return {"object": "list", "data": [
            {"id": n, "object": "model", "created": 0, "owned_by": "rftbus",
             "model_version": versions.get(n, svc.generator.version)} for n in svc.served_names()]}

    def session_of(request: Request) -> str | None:
        """The episode a call belongs to: the `/sessions/{id}/v1` base URL, else the session header."""
        sid = request.path_params.get("session_id") or request.headers.get(SESSION_HEADER)
        if sid is not None and not valid_id(sid):
            raise BadRequest(f"session id {sid[:40]!r} is not an id (letters, digits, ':._-', up to 128)",
                             param="session_id")
        return sid

    async def chat_completions(request: Request):
        svc.auth.check(request.headers.get("authorization"), Scope.inference)
        req = await parse(request, ChatRequest)
        ids, text, images = chat_prompt(svc.prompt, req, svc.image_of if svc.reads_images else None)
        call = answering.prepare(request, req, ids, text, "chat.completions", images, session_id=session_of(request),
                                 tools=bool(req.tools_in_play()))
        if req.stream:
            return await answering.streamed(call, True, req)
        return await answering.plain(call, lambda a: responses.chat_body(a, svc.model_name, svc.tokenizer,
                                                                         req.logprobs))

    async def responses_api(request: Request):
        svc.auth.check(request.headers.get("authorization"), Scope.inference)
        chat = as_chat(await parse(request, ResponsesRequest))
        ids, text, _ = chat_prompt(svc.prompt, chat)
        call = answering.prepare(request, chat, ids, text, "responses", session_id=session_of(request),
                                 tools=bool(chat.tools_in_play()))
        return await answering.plain(call, lambda a: responses_body(a, svc.model_name))

    async def completions(request: Request):
        svc.auth.check(request.headers.get("authorization"), Scope.inference)
        req = await parse(request, CompletionRequest)
        ids, text = completion_prompt(svc.prompt, req)
        call = answering.prepare(request, req, ids, text, "completions", session_id=session_of(request))
        if req.stream:
            return await answering.streamed(call, False, req)
        return await answering.plain(call, lambda a: responses.completion_body(
            a, svc.model_name, svc.tokenizer, req.logprobs, req.return_tokens_as_token_ids))

    for prefix in ("", "/sessions/{session_id}"):  # an agent's base URL names its episode
        app.post(prefix + "/v1/chat/completions")(chat_completions)
        app.post(prefix + "/v1/completions")(completions)
        app.post(prefix + "/v1/responses")(responses_api)
        app.get(prefix + "/v1/models")(models)

    if cfg.serve.accept_lora_pushes:  # vLLM's runtime LoRA API: this serve as another's upstream
        @app.post("/v1/load_lora_adapter")
        async def load_lora_adapter(request: Request):
            svc.auth.check(request.headers.get("authorization"), Scope.weights)
            req = await parse(request, LoadAdapter)
            await anyio.to_thread.run_sync(svc.load_adapter, req.lora_name, req.lora_path)
            return PlainTextResponse(f"Success: LoRA adapter '{req.lora_name}' added successfully.")

        @app.post("/v1/unload_lora_adapter")
        async def unload_lora_adapter(request: Request):
            svc.auth.check(request.headers.get("authorization"), Scope.weights)
            req = await parse(request, UnloadAdapter)
            if req.lora_name == svc.model_name or not svc.generator.remove_adapter(req.lora_name):
                raise NotFound(f"no adapter {req.lora_name!r} is loaded", param="lora_name")
            return PlainTextResponse(f"Success: LoRA adapter '{req.lora_name}' removed successfully.")

    @app.post("/v1/traces")
    async def traces(request: Request):
        """OTLP/HTTP (protobuf or JSON bodies): agents' traces straight to topics.spans where no Collector is wanted,
        split by trace as the Collector's exporter splits them (otel.enabled)."""
        svc.auth.check(request.headers.get("authorization"), Scope.inference)
        if not cfg.otel.reads_traces:
            raise NotFound("nothing reads traces here: set otel.enabled (the streams' traces stage)", param="otel")
        content_type = request.headers.get("content-type", "application/x-protobuf")
        await svc.publish_traces(await request.body(), content_type)
        from rftbus.ground.otel.otlp import export_response

        body, media = export_response(content_type)
        return Response(body, media_type=media)

    @app.post("/v1/feedback", status_code=202)
    async def feedback(request: Request):
        svc.auth.check(request.headers.get("authorization"), Scope.feedback)
        req = await parse(request, FeedbackRequest)
        if req.trace_id is not None:  # a whole agent trace (otel): a grade span on it, joined by the traces stage
            grade_id = await svc.publish_trace_grade(req)
            if metrics is not None:
                metrics.feedback.labels(req.kind.value).inc()
            return JSONResponse({"status": "accepted", "feedback_id": grade_id, "trace_id": req.trace_id,
                                 "kind": req.kind.value, "topic": cfg.topics.spans.name}, status_code=202)
        fbs, expert = await svc.publish_feedback(req)
        fb = fbs[0]
        if metrics is not None:
            metrics.feedback.labels(req.kind.value).inc()
        body: dict[str, object] = {"status": "accepted", "feedback_id": req.feedback_id or fb.feedback_id,
                "experience_id": fb.experience_id, "kind": fb.kind.value, "topic": cfg.topics.feedback.name}
        if req.session_id is not None:
            body.update(session_id=req.session_id, feedback_ids=[f.feedback_id for f in fbs],
                        experience_ids=[f.experience_id for f in fbs], credited=[f.reward for f in fbs])
            body["feedback_id"] = fb.metadata["episode_feedback_id"]
        if expert is not None:
            body["expert_experience_id"] = expert.samples[0].experience_id
        return JSONResponse(body, status_code=202)

    return app
