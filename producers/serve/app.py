"""The FastAPI app: OpenAI-compatible routes that record live traffic, and the feedback route.

Order of checks on every request: body size (middleware, before anything is parsed) -> bearer token
of the route's scope -> body validation (400 naming the field) -> work. Bodies are parsed after
authentication, so an unauthenticated caller learns nothing about what a valid body looks like.
Nothing here logs headers or bodies; uvicorn's access log has method, path and status only.
"""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager

import anyio
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse

from rftbus.config import Config
from rftbus.models.tool_calls import CALL_OPEN
from rftbus.producers.serve import responses
from rftbus.producers.serve.auth import Scope
from rftbus.producers.serve.errors import ApiError, BadRequest, BodyLimit, NotFound, parse
from rftbus.producers.serve.feedback import FeedbackRequest, valid_id
from rftbus.producers.serve.mounts import mounted, mounted_scopes
from rftbus.producers.serve.protocol import (ChatRequest, CompletionRequest, LoadAdapter, UnloadAdapter, _Request,
                                             chat_prompt,
                                             completion_prompt, default_task_id)
from rftbus.producers.serve.records import LivePrompt, RecordIds
from rftbus.producers.serve.sessions import SESSION_HEADER
from rftbus.producers.serve.service import LiveService

def _error_response(err: ApiError) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if err.status == 401 else None
    return JSONResponse(err.body(), status_code=err.status, headers=headers)


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
    app.add_exception_handler(ApiError, lambda _req, exc: _error_response(exc))

    def check_model(req: _Request) -> None:
        names = svc.served_names()
        if req.model is not None and req.model not in names:
            raise NotFound(f"model {req.model!r} is not served here (this server serves "
                           f"{', '.join(map(repr, names))})", param="model", code="model_not_found")

    def prepared(req: ChatRequest | CompletionRequest, prompt_ids: list[int], text: str, endpoint: str) -> dict:
        """The arguments of LiveService.complete, every check done (a bad request is a 400 before any stream)."""
        req.refuse_unsupported()
        check_model(req)
        meta = {**(req.metadata or {}), "endpoint": endpoint, **({"user": req.user} if req.user else {})}
        svc.check_shape(prompt_ids, req.n)
        return {"prompt": LivePrompt(prompt_ids, text, req.task_id or default_task_id(prompt_ids)), "n": req.n,
                "sampling": svc.sampling(req.temperature, req.top_p, req.top_k), "stops": req.stops(),
                "max_new": svc.max_new(req.limit(), len(prompt_ids), "max_tokens"), "metadata": meta,
                "adapter": svc.adapter_for(req.model)}

    running: set[asyncio.Task] = set()  # streamed answers finish and are recorded even if the client left

    async def streamed(args: dict, chat: bool, req: ChatRequest | CompletionRequest) -> StreamingResponse:
        """Headers once the batch started (they name the version and the record ids), then tokens as sampled.
        An error before the first token is a plain HTTP error."""
        events, ids = responses.Events(), RecordIds.fresh(req.n)
        task = asyncio.create_task(svc.complete(**args, listener=events, ids=ids))
        running.add(task)
        task.add_done_callback(running.discard)
        task.add_done_callback(events.close)
        first = await events.get()
        if first is None:  # done before its batch started: the ApiError (4xx/5xx) before anything was sent
            first = ("version", task.result().version)
        usage = bool((req.stream_options or {}).get("include_usage"))
        shown = args["stops"] + ([CALL_OPEN] if args.get("tools") else [])  # a tool call leaves as tool_calls
        body = responses.stream(events, task, ids, svc.model_name, svc.tokenizer, chat, usage, shown)
        return StreamingResponse(body, media_type="text/event-stream", headers=responses.stream_headers(ids, first[1]))

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
        ids, text = chat_prompt(svc.prompt, req)
        tools = bool(req.tools_in_play())
        args = {**prepared(req, ids, text, "chat.completions"), "session_id": session_of(request), "tools": tools}
        if req.stream:
            return await streamed(args, True, req)
        a = await svc.complete(**args)
        return JSONResponse(responses.chat_body(a, svc.model_name, svc.tokenizer, req.logprobs),
                            headers=responses.headers(a))

    async def completions(request: Request):
        svc.auth.check(request.headers.get("authorization"), Scope.inference)
        req = await parse(request, CompletionRequest)
        ids, text = completion_prompt(svc.prompt, req)
        args = {**prepared(req, ids, text, "completions"), "session_id": session_of(request)}
        if req.stream:
            return await streamed(args, False, req)
        a = await svc.complete(**args)
        body = responses.completion_body(a, svc.model_name, svc.tokenizer, req.logprobs,
                                         req.return_tokens_as_token_ids)
        return JSONResponse(body, headers=responses.headers(a))

    for prefix in ("", "/sessions/{session_id}"):  # an agent's base URL names its episode
        app.post(prefix + "/v1/chat/completions")(chat_completions)
        app.post(prefix + "/v1/completions")(completions)
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

    @app.post("/v1/feedback", status_code=202)
    async def feedback(request: Request):
        svc.auth.check(request.headers.get("authorization"), Scope.feedback)
        req = await parse(request, FeedbackRequest)
        fbs, expert = await svc.publish_feedback(req)
        fb = fbs[0]
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
