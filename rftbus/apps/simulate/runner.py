"""K agents asking `rftbus serve` through the official OpenAI SDK, and graders posting their feedback
late to `/v1/feedback`; the live reward of what was served goes to answers.jsonl (live_reward.py).

An agent asks a train task of the configured taskset (n=1 mostly, n=2 for `n2_share`), scores each
choice with the taskset's scorer (what the live reward is), hands the answers to the graders (graders.py),
and with `multi_turn_share` follows a wrong answer with a second turn carrying the tool's verdict. Each task an
agent asks is one session (`X-Rftbus-Session-Id`, its turns included), as a user's conversation is: behind the
promotion gate a session keeps the version it started with.
Feedback posts are retried with the same feedback_id while the proxy answers 503 or is down (a restart).
With `simulate.traced` the agents are instrumented with opentelemetry-instrumentation-openai-v2 and their traces go
to the run's Collector; the graders grade each call by its trace id (the traces are what trains: serve.record off).
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import signal
import time
from collections import Counter, deque
from typing import Any

import httpx

from rftbus.ground.config import Config
from rftbus.producers.serve.sessions import SESSION_HEADER
from rftbus.apps.simulate.graders import Answer, Post, plan
from rftbus.apps.simulate.live_reward import answers_path
from rftbus.ground.status import StatusFile
from rftbus.ground.tasksets import get_taskset
from rftbus.ground.schemas import Task

log = logging.getLogger("rftbus.apps.simulate")
RETRYABLE = (502, 503, 504)


def base_url(cfg: Config) -> str:
    if cfg.simulate.url:
        return cfg.simulate.url.rstrip("/")
    host = "127.0.0.1" if cfg.serve.host in ("0.0.0.0", "::", "") else cfg.serve.host
    return f"http://{host}:{cfg.serve.port}/v1"


def follow_up(messages: list[dict], answer: str) -> list[dict]:
    """The second turn after a wrong answer: the answer, then the checker's verdict as the next user turn (short: the
    toy model's context is 64 tokens). Not `role: tool`: a tool message answers a tool call by its tool_call_id, and
    serve refuses one without (every follow-up was a 400 since serve checked it)."""
    return [*messages, {"role": "assistant", "content": answer}, {"role": "user", "content": "wrong"}]


def _token(tokens) -> str:
    return tokens[0].get_secret_value() if tokens else "none"


class Simulator:
    def __init__(self, cfg: Config, ident: str = "sim"):
        self.cfg, self.sc, self.ident = cfg, cfg.simulate, ident
        self.rng = random.Random(self.sc.seed)
        ts = get_taskset(cfg.taskset.name, **cfg.taskset.params)
        self.taskset = ts
        self.tasks: list[Task] = list(ts.tasks("train", self.sc.tasks, seed=cfg.taskset.seed))
        self.url = base_url(cfg)
        self.counts: Counter[str] = Counter()
        self.latency_ms: deque[float] = deque(maxlen=2000)
        self.recent: deque[float] = deque(maxlen=500)  # scores of the last answers (the live view)
        self.pending_posts = 0
        self.held_now = 0  # posts waiting for the model to move on (graders.late_versions)
        # Posts past the pool's size wait here. Queued inside httpx's pool instead, each change of the pool
        # scans every queued request (httpcore's _assign_requests_to_connections, O(connections x requests):
        # encode/httpcore PR #1035, httpx issue #3215): at 80 requests/s, 1,756 queued posts took the
        # simulator's whole core and stopped its agents for minutes.
        self.post_slots = asyncio.Semaphore(self.sc.posts_in_flight)
        self.stop = asyncio.Event()
        self.next_slot = time.monotonic()
        self.status = StatusFile(cfg.state_dir, "simulate", ident, self.sc.status_interval_s)
        path = answers_path(cfg.state_dir)
        path.parent.mkdir(parents=True, exist_ok=True)
        self.answers = open(path, "a", buffering=1)
        self.tasks_posted: set[asyncio.Task] = set()
        self.tracer: Any = None  # simulate.traced: the agents' tracer (trace_calls)
        self.follower: Any = None  # the published weights (graders.late_share: grades held back by versions)
        if self.sc.graders.late_share:
            from rftbus.ground.weights.follower import WeightFollower

            self.follower = WeightFollower(cfg, prefetch=False).start()

    # ---- agents ------------------------------------------------------------------------------
    async def _pace(self) -> None:
        if self.sc.rate_per_s is None:
            return
        now = time.monotonic()
        self.next_slot = max(self.next_slot + 1.0 / self.sc.rate_per_s, now)
        await asyncio.sleep(self.next_slot - now)

    async def agent(self, client: Any, k: int) -> None:
        rng = random.Random(f"{self.sc.seed}:agent:{k}")
        episode = 0
        while not self.stop.is_set():
            await self._pace()
            task = rng.choice(self.tasks)
            episode += 1
            session = f"{self.ident}-{k}-{episode}-{rng.getrandbits(32):08x}"
            n = 2 if rng.random() < self.sc.n2_share else 1
            messages = [{"role": "user", "content": task.prompt}]
            try:
                answers = await self.ask(client, task, messages, n, rng, prompt=task.prompt, session=session)
                if (self.sc.multi_turn_share and answers and not answers[0].exact
                        and rng.random() < self.sc.multi_turn_share):
                    self.counts["multi_turn"] += 1
                    await self.ask(client, task, follow_up(messages, answers[0].text), 1, rng, prompt=None,
                                   session=session)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # one failed request is reported; the agent goes on
                self.counts[f"request_error.{type(e).__name__}"] += 1
                self.counts["request_errors"] += 1
                await asyncio.sleep(min(2.0, 0.1 * (1 + self.counts["request_errors"] % 10)))

    async def ask(self, client: Any, task: Task, messages: list[dict], n: int, rng: random.Random,
                  prompt: str | None, session: str | None = None) -> list[Answer]:
        t = time.monotonic()
        trace_id = None
        if self.tracer is not None:  # one trace per call: an agent's turn around the instrumented call
            n, prompt = 1, None  # (a trace grade is a score: no second choice to prefer, no correction)
            with self.tracer.start_as_current_span("agent turn") as turn:
                resp = await self._create(client, task, messages, n, session)
                trace_id = f"{turn.get_span_context().trace_id:032x}"
        else:
            resp = await self._create(client, task, messages, n, session)
        self.latency_ms.append((time.monotonic() - t) * 1000)
        version = int((resp.model_extra or {}).get("rftbus", {}).get("model_version", -1))
        answers = []
        now = time.time()
        for c in resp.choices:
            text = c.message.content or ""
            sc = self.taskset.score(text, task.answer or "")
            a = Answer((c.model_extra or {})["experience_id"], text, float(sc["reward"]), bool(sc.get("exact", 0.0)))
            answers.append(a)
            self.recent.append(a.score)
            self.answers.write(json.dumps({"t": round(now, 3), "v": version, "r": round(a.score, 4),
                                           "x": int(a.exact), "n": n, "turn": 1 if prompt else 2}) + "\n")
        self.counts["requests"] += 1
        self.counts["answers"] += len(answers)
        posts, ungraded = plan(self.sc.graders, answers, self.taskset.expert(task), prompt, rng)
        self.counts["ungraded"] += ungraded
        if trace_id is not None:  # graded by the trace's id: the traces stage joins it to the call
            for p in posts:
                p.body = {"trace_id": trace_id, **{k: v for k, v in p.body.items() if k != "experience_id"}}
        loop = asyncio.get_running_loop()
        answered = version if version >= 0 else self._published()
        for p in posts:
            self.pending_posts += 1
            loop.call_later(p.delay_s, self._spawn_post, p, answered + p.versions_late if p.versions_late else None)
        return answers

    async def _create(self, client: Any, task: Task, messages: list[dict], n: int, session: str | None) -> Any:
        return await client.chat.completions.create(
            model=self.cfg.serve.served_model or self.cfg.model.name, messages=messages, n=n,
            max_tokens=self.sc.max_tokens, temperature=self.sc.temperature, metadata={"task_class": self.taskset.name},
            extra_body={"task_id": task.task_id}, extra_headers={SESSION_HEADER: session} if session else None)

    def trace_calls(self) -> Any:
        """simulate.traced: the OpenAI SDK instrumented by opentelemetry-instrumentation-openai-v2 (message content
        on the span, the current GenAI conventions), spans batched to the run's Collector; the provider."""
        import os

        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        os.environ.setdefault("OTEL_SEMCONV_STABILITY_OPT_IN", "gen_ai_latest_experimental")
        os.environ.setdefault("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "span_only")
        o = self.cfg.otel
        host = "127.0.0.1" if o.host in ("0.0.0.0", "::", "") else o.host
        provider = TracerProvider(resource=Resource.create({"service.name": f"rftbus-simulate-{self.ident}"}))
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(
            endpoint=f"http://{host}:{o.http_port}/v1/traces"), schedule_delay_millis=500))
        OpenAIInstrumentor().instrument(tracer_provider=provider)
        self.tracer = provider.get_tracer("rftbus.apps.simulate")
        return provider

    def _published(self) -> int:
        return self.follower.version if self.follower is not None else 0

    # ---- graders -----------------------------------------------------------------------------
    def _spawn_post(self, p: Post, after_version: int | None = None) -> None:
        t = asyncio.ensure_future(self.post(p) if after_version is None else self.post_after(p, after_version))
        self.tasks_posted.add(t)
        t.add_done_callback(self.tasks_posted.discard)

    def feedback_client(self) -> httpx.AsyncClient:
        n = self.sc.posts_in_flight
        return httpx.AsyncClient(timeout=30.0, limits=httpx.Limits(max_connections=n, max_keepalive_connections=n),
                                 headers={"Authorization": f"Bearer {_token(self.cfg.serve.feedback_tokens)}"})

    async def post_after(self, p: Post, version: int) -> None:
        """Post `p` once the published weights reach `version` (a grade held back by versions, not seconds)."""
        self.counts["feedback_held_for_versions"] += 1
        self.held_now += 1
        try:
            while self._published() < version and not self.stop.is_set():
                await asyncio.sleep(0.5)
        finally:
            self.held_now -= 1
        if self.stop.is_set():  # (still pending: counted in feedback_unposted_at_stop)
            return
        await self.post(p)

    async def post(self, p: Post) -> None:
        try:
            for attempt in range(30):
                try:
                    async with self.post_slots:
                        r = await self.http.post(f"{self.url}/feedback", json=p.body)
                except httpx.HTTPError:
                    r = None
                if r is not None and r.status_code < 300:
                    self.counts[f"feedback.{p.kind}"] += 1
                    self.counts["feedback_posted"] += 1
                    return
                if r is not None and r.status_code not in RETRYABLE:
                    self.counts[f"feedback_refused.{r.status_code}"] += 1
                    log.warning("feedback %s refused %s: %s", p.kind, r.status_code, r.text[:300])
                    return
                self.counts["feedback_retries"] += 1
                await asyncio.sleep(min(5.0, 0.2 * 2 ** attempt))
            self.counts["feedback_given_up"] += 1
        finally:
            self.pending_posts -= 1

    # ---- status and main -----------------------------------------------------------------------
    def snapshot(self) -> dict:
        lat = sorted(self.latency_ms)
        recent = list(self.recent)
        return {"state": "running", "url": self.url, **dict(self.counts), "feedback_pending": self.pending_posts,
                "feedback_held_now": self.held_now,
                "live_reward_recent": round(sum(recent) / len(recent), 4) if recent else None,
                "request_p50_ms": round(lat[len(lat) // 2], 1) if lat else None}

    async def main(self) -> dict:
        from openai import AsyncOpenAI

        loop = asyncio.get_running_loop()
        for s in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(s, self.stop.set)
        provider = self.trace_calls() if self.sc.traced else None  # (before the client: its calls are traced)
        client = AsyncOpenAI(base_url=self.url, api_key=_token(self.cfg.serve.inference_tokens), max_retries=5,
                             timeout=60.0)
        self.http = self.feedback_client()
        self.status.start()
        agents = [asyncio.create_task(self.agent(client, k)) for k in range(self.sc.agents)]
        try:
            deadline = None if self.sc.duration_s is None else time.monotonic() + self.sc.duration_s
            while not self.stop.is_set():
                self.status.update(**self.snapshot())
                if deadline is not None and time.monotonic() > deadline:
                    break
                try:
                    await asyncio.wait_for(self.stop.wait(), timeout=self.sc.status_interval_s)
                except asyncio.TimeoutError:
                    pass
        finally:
            self.stop.set()
            for a in agents:
                a.cancel()
            await asyncio.gather(*agents, return_exceptions=True)
            await client.close()
            self.counts["feedback_unposted_at_stop"] = self.pending_posts  # timers not fired + posts cut short
            for t in list(self.tasks_posted):
                t.cancel()
            await self.http.aclose()
            if self.follower is not None:
                self.follower.stop()
            if provider is not None:  # the last batch of spans out before the run stops the Collector
                provider.shutdown()
            self.answers.close()
            snap = {**self.snapshot(), "state": "stopped"}
            self.status.update(**snap)
            self.status.stop()
        return snap


def run(cfg: Config, ident: str = "sim") -> dict:
    return asyncio.run(Simulator(cfg, ident).main())
