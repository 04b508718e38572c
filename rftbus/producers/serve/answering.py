"""The completion path behind the OpenAI routes: checks, rate limits, metrics, then a plain or a streamed answer.

Order: the request's own checks (400s), the model name (404), then the client's rate limits (429 with
Retry-After), then the work. A streamed answer runs as its own task: a client that leaves mid-stream stops
only its frames, never the answer's record. Tokens a request was charged and did not use are refunded.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from fastapi import Request
from fastapi.responses import JSONResponse, StreamingResponse

from rftbus.ground.config import Config
from rftbus.ground.models.tool_calls import CALL_OPEN
from rftbus.producers.serve import responses
from rftbus.ground.web.errors import NotFound
from rftbus.producers.serve.limits import RateLimiter
from rftbus.producers.serve.metrics import ServeMetrics
from rftbus.ground.models.prompt import default_task_id
from rftbus.producers.serve.protocol import ChatRequest, CompletionRequest
from rftbus.producers.serve.records import LivePrompt, RecordIds
from rftbus.producers.serve.service import Answer, LiveService


@dataclass
class Call:
    """One admitted completion request."""

    endpoint: str
    args: dict  # LiveService.complete's
    client: str
    charged: int
    started: float = field(default_factory=time.perf_counter)


class Answering:
    def __init__(self, cfg: Config, svc: LiveService, metrics: ServeMetrics | None):
        s = cfg.serve
        self.svc, self.metrics = svc, metrics
        self.limits = RateLimiter(s.rate_limit_requests_per_minute, s.rate_limit_tokens_per_minute)
        self.running: set[asyncio.Task] = set()  # streamed answers finish and are recorded even if the client left

    def prepare(self, request: Request, req: ChatRequest | CompletionRequest, prompt_ids: list[int], text: str,
                endpoint: str, images: list | None = None, **more) -> Call:
        svc = self.svc
        req.refuse_unsupported()
        names = svc.served_names()
        if req.model is not None and req.model not in names:
            raise NotFound(f"model {req.model!r} is not served here (this server serves "
                           f"{', '.join(map(repr, names))})", param="model", code="model_not_found")
        meta = {**(req.metadata or {}), "endpoint": endpoint, **({"user": req.user} if req.user else {})}
        svc.check_shape(prompt_ids, req.n)
        max_new = svc.max_new(req.limit(), len(prompt_ids), "max_tokens")
        client = svc.auth.identity(request.headers.get("authorization"), request.client.host if request.client else None)
        session_id = more.get("session_id")
        if session_id is not None:
            svc.sessions.check(session_id, client)
        charged = len(prompt_ids) + max_new * req.n
        self.limits.admit(client, charged)
        task_id = req.task_id or default_task_id(prompt_ids)  # (a VLM's prompt ids hold no pixels: its images' hashes do)
        if images and not req.task_id:
            task_id = default_task_id(prompt_ids + [b for i in images for b in bytes.fromhex(i.sha256)])
        args = {"prompt": LivePrompt(prompt_ids, text, task_id, list(images or [])), "n": req.n,
                "sampling": svc.sampling(req.temperature, req.top_p, req.top_k), "stops": req.stops(),
                "max_new": max_new, "metadata": meta, "adapter": svc.adapter_for(req.model), "client": client, **more}
        return Call(endpoint, args, client, charged)

    def _settle(self, call: Call, a: Answer | None, stream: bool) -> None:
        """Refund unused tokens and count the request."""
        used = 0
        if a is not None:
            used = len(a.group.prompt_ids) + sum(len(e.response_ids) for e in a.group.samples)
        self.limits.refund(call.client, call.charged - used)
        if self.metrics is not None and a is not None:
            m = self.metrics
            m.latency.labels(call.endpoint, str(stream).lower()).observe(time.perf_counter() - call.started)
            m.prompt_tokens.inc(len(a.group.prompt_ids))
            m.completion_tokens.inc(used - len(a.group.prompt_ids))
            m.requests.labels(call.endpoint, "200").inc()

    async def plain(self, call: Call, render: Callable[[Answer], dict]) -> JSONResponse:
        a = None
        try:
            a = await self.svc.complete(**call.args)
        finally:
            self._settle(call, a, False)
        return JSONResponse(render(a), headers=responses.headers(a))

    async def streamed(self, call: Call, chat: bool, req: ChatRequest | CompletionRequest) -> StreamingResponse:
        """Headers once the batch started (they name the version and the record ids), then tokens as sampled.
        An error before the first token is a plain HTTP error."""
        events, ids = responses.Events(), RecordIds.fresh(req.n)
        task = asyncio.create_task(self.svc.complete(**call.args, listener=events, ids=ids))
        self.running.add(task)
        task.add_done_callback(self.running.discard)
        task.add_done_callback(events.close)
        task.add_done_callback(lambda t: self._settle(call, None if t.cancelled() or t.exception() else t.result(),
                                                      True))
        first = await events.get()
        if first is None:  # done before its batch started: the ApiError (4xx/5xx) before anything was sent
            first = ("version", task.result().version)
        usage = bool((req.stream_options or {}).get("include_usage"))
        shown = call.args["stops"] + ([CALL_OPEN] if call.args.get("tools") else [])  # a call leaves as tool_calls
        on_first = None
        if self.metrics is not None:
            ttft = self.metrics.ttft.labels(call.endpoint)
            on_first = lambda: ttft.observe(time.perf_counter() - call.started)  # noqa: E731
        body = responses.stream(events, task, ids, self.svc.model_name, self.svc.tokenizer, chat, usage, shown,
                                on_first)
        return StreamingResponse(body, media_type="text/event-stream", headers=responses.stream_headers(ids, first[1]))


def retry_after(seconds: float) -> dict[str, str]:
    return {} if math.isinf(seconds) else {"Retry-After": str(max(1, math.ceil(seconds)))}
