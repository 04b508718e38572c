"""Agents' traces become experiences, end to end with real parts (#59): the `openai` SDK instrumented by the official
`opentelemetry-instrumentation-openai-v2` (message content on the span) calls `rftbus serve` (its own recording off:
a plain model server, SmolLM2's tokenizer and chat template on two random layers); the SDK exports OTLP/HTTP to the
real OpenTelemetry Collector, whose Kafka exporter writes the session broker's spans topic; a real `rftbus streams`
worker turns each call into one experience (the prompt as the one renderer renders the call's messages), joins the
grades (an agent span's attribute, /v1/feedback by trace id) and rejects what is no model call, with its reason.
Skipped, with the reason, where there is no Go toolchain to build the Collector."""

from __future__ import annotations

import shutil
import time
import uuid

import httpx
import pytest
from conftest import make_config

from rftbus.apps.bench.processes import WorkerProcess, read_all
from rftbus.ground.kafka.clients import make_admin
from rftbus.ground.kafka.topics import create_topics
from rftbus.ground.models.loading import load_tokenizer
from rftbus.ground.models.prompt import prompt_format
from rftbus.ground.otel.build import ensure_collector
from rftbus.ground.otel.collector import Collector, CollectorSpec
from rftbus.producers.serve.server import BackgroundServer
from rftbus.ground.schemas import ExperienceGroup, Rejection, Source, make_codec
from serve_helpers import TOPIC_KEYS, free_port
from tests.conftest import REPO

pytestmark = pytest.mark.skipif(shutil.which("go") is None, reason="no Go toolchain here to build the Collector "
                                "(make install-otelcol builds it; https://go.dev/dl/)")

DECODE = make_codec(None).deserializer()
SERVED = "smol-test"
ASKED = ["What is 7 times 8?", "What is 6 times 9?"]


@pytest.fixture(scope="module")
def loop(broker, smollm2_two_layers, tmp_path_factory):
    """Topics, a streams worker reading spans, the Collector writing them, serve answering: (cfg, serve url, spec)."""
    tmp = tmp_path_factory.mktemp("traces")
    tag = uuid.uuid4().hex[:6]
    cfg = make_config(tmp, broker.broker.port, **{f"topics.{k}.name": f"tr{tag}.{k}" for k in TOPIC_KEYS}, **{
        "streams.app_id": f"tr{tag}", "streams.tick_interval_s": 0.5, "streams.commit_interval_s": 0.2,
        "streams.version_wait_s": 0.5, "streams.feedback_ttl_s": 120.0, "otel.enabled": True,
        "model.path": str(smollm2_two_layers), "serve.served_model": SERVED, "serve.record": False,
        "serve.port": free_port(), "serve.weights_wait_s": 2.0, "serve.id": f"serve-{tag}",
        "explorer.sampling.max_new_tokens": 6})
    create_topics(cfg, make_admin(cfg))
    spec = CollectorSpec(brokers=[cfg.bootstrap_servers], topic=cfg.topics.spans.name, http_port=free_port(),
                         grpc_port=free_port())
    collector = Collector(ensure_collector(REPO / ".rftbus" / "otelcol"), spec, tmp / "otelcol").start()
    worker = WorkerProcess(cfg, f"w{tag}", tmp / "worker.log")
    try:
        worker.wait_ready(120)
        with BackgroundServer(cfg) as server:
            yield cfg, server.url, spec
    finally:
        collector.stop()
        assert worker.stop() == 0, worker.tail()


def _wait_for(read, done, what: str, timeout_s: float = 90.0, explain=lambda: ""):
    deadline = time.monotonic() + timeout_s
    while True:
        got = read()
        if done(got) or time.monotonic() > deadline:
            assert done(got), f"{what}: {got} {explain()}"
            return got
        time.sleep(0.5)


def test_instrumented_openai_calls_become_experiences_and_their_grades_join(loop, monkeypatch):
    from openai import OpenAI
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    cfg, url, spec = loop
    # the instrumentation's switches: the current GenAI conventions, message content on the span
    monkeypatch.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", "gen_ai_latest_experimental")
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "span_only")
    provider = TracerProvider(resource=Resource.create({"service.name": "agent"}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(
        endpoint=f"http://127.0.0.1:{spec.http_port}/v1/traces"), schedule_delay_millis=200))
    OpenAIInstrumentor().instrument(tracer_provider=provider)
    try:
        client = OpenAI(base_url=f"{url}/v1", api_key="none")
        tracer = provider.get_tracer("agent")
        answers = {}
        with tracer.start_as_current_span("agent turn") as turn:  # graded by the agent on its own span
            r = client.chat.completions.create(model=SERVED, messages=[{"role": "user", "content": ASKED[0]}],
                                               max_tokens=6)
            answers[ASKED[0]] = r.choices[0].message.content
            turn.set_attribute("user.feedback", 1.0)
            first_trace = f"{turn.get_span_context().trace_id:032x}"
        r = client.chat.completions.create(model=SERVED, messages=[{"role": "user", "content": ASKED[1]}],
                                           max_tokens=6)  # a call of its own: the root of its trace
        answers[ASKED[1]] = r.choices[0].message.content
        with tracer.start_as_current_span("GET /health"):  # the agent's other work: no model call
            pass
        assert provider.force_flush(30_000)
    finally:
        OpenAIInstrumentor().uninstrument()
        provider.shutdown()

    def traced() -> dict[str, ExperienceGroup]:
        return {g.metadata.get("trace_id", ""): g for g in read_all(cfg, cfg.topics.raw.name, decode=DECODE,
                                                                    idle_s=0.3) if g.source is Source.trace}

    groups = _wait_for(traced, lambda d: len(d) == 2, "two traced calls on raw")
    fmt = prompt_format(load_tokenizer(cfg.model), cfg.model)
    by_prompt = {tuple(g.prompt_ids): g for g in groups.values()}
    for asked in ASKED:  # each call: the prompt the one renderer makes of its messages, the answer it returned
        g = by_prompt[tuple(fmt.messages([{"role": "user", "content": asked}])[0])]
        [s] = g.samples
        assert s.response_text == answers[asked] and s.response_ids == fmt.response(answers[asked],
                                                                                     ended=s.finish_reason == "stop")
        assert s.behaviour_logprobs is False and s.model_version == 0 and g.metadata["service"] == "agent"
    second = next(t for t in groups if t != first_trace)
    with httpx.Client(base_url=url, timeout=30) as c:  # a grade of the whole trace, by its id, after the fact
        r = c.post("/v1/feedback", json={"trace_id": second, "thumbs": "up"})
        assert r.status_code == 202 and r.json()["topic"] == cfg.topics.spans.name, r.text

    def curated() -> dict[str, float | None]:
        return {e.experience_id: e.reward for role in ("curated", "curated_priority")
                for g in read_all(cfg, getattr(cfg.topics, role).name, decode=DECODE, idle_s=0.3) for e in g.kept()}

    ids = {groups[t].samples[0].experience_id for t in (first_trace, second)}

    def rejections() -> list[Rejection]:
        return [r for r in read_all(cfg, cfg.topics.rejected.name, decode=DECODE, idle_s=0.3)
                if isinstance(r, Rejection)]

    got = _wait_for(curated, lambda d: ids <= set(d), "both calls curated with their grades",
                    explain=lambda: [(r.stage, r.reason, r.detail[:200]) for r in rejections()])
    assert {got[i] for i in ids} == {1.0}
    traces = [r for r in rejections() if r.stage == "traces"]
    assert [r.reason for r in traces] == ["not_genai"] and "GET /health" in traces[0].detail


def test_serve_takes_otlp_http_itself_where_no_collector_is_wanted(loop):
    """POST /v1/traces on serve: an OTLP/JSON body (hex ids, as the spec writes them) of two traces is split by
    trace onto the spans topic and each GenAI call becomes an experience; a body that is not OTLP is a 400."""
    import os

    cfg, url, _ = loop
    traces = [os.urandom(16).hex() for _ in range(2)]

    def span(trace: str, answer: str) -> dict:
        attrs = {"gen_ai.operation.name": "chat", "gen_ai.request.model": SERVED, "gen_ai.response.model": SERVED,
                 "gen_ai.input.messages": '[{"role": "user", "parts": [{"type": "text", "content": "2 x 3?"}]}]',
                 "gen_ai.output.messages": '[{"role": "assistant", "parts": [{"type": "text", "content": "%s"}], '
                                           '"finish_reason": "stop"}]' % answer}
        return {"traceId": trace, "spanId": os.urandom(8).hex(), "name": "chat", "startTimeUnixNano": "1",
                "endTimeUnixNano": "2", "attributes": [{"key": k, "value": {"stringValue": v}} for k, v in attrs.items()]}

    body = {"resourceSpans": [{"resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "json"}}]},
                               "scopeSpans": [{"spans": [span(traces[0], "6"), span(traces[1], "7")]}]}]}
    with httpx.Client(base_url=url, timeout=30) as c:
        r = c.post("/v1/traces", json=body)
        assert r.status_code == 200 and r.json() == {}, r.text
        bad = c.post("/v1/traces", content=b"{not json", headers={"content-type": "application/json"})
        assert bad.status_code == 400 and "not JSON" in bad.json()["error"]["message"]

    def traced() -> dict[str, ExperienceGroup]:
        return {g.metadata.get("trace_id", ""): g for g in read_all(cfg, cfg.topics.raw.name, decode=DECODE,
                                                                    idle_s=0.3) if g.source is Source.trace}

    got = _wait_for(traced, lambda d: set(traces) <= set(d), "both traces' calls on raw")
    assert {got[t].samples[0].response_text for t in traces} == {"6", "7"}
    assert {got[t].metadata["service"] for t in traces} == {"json"}
