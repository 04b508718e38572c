"""The real OpenTelemetry Collector in the loop (#59): built once from its Go modules by its own builder
(rftbus/ground/otel/build.py, cached like the Kafka jars), run with rftbus's configuration against the session broker; a
plain opentelemetry-sdk client exports spans over OTLP/HTTP, the Collector's Kafka exporter writes them, and each
record decodes (rftbus/streams/traces) to the model call the agent made, keyed by its trace id. Skipped, with the reason,
where there is no Go toolchain."""

from __future__ import annotations

import json
import shutil
import socket
import time
import uuid

import pytest

from rftbus.ground.kafka.clients import make_admin
from rftbus.ground.kafka.read import read_to_end
from rftbus.ground.kafka.topics import create_new
from rftbus.ground.otel.build import ensure_collector
from rftbus.ground.otel.collector import Collector, CollectorSpec
from rftbus.streams.traces.genai import GenAICall, Refused, read_call
from rftbus.ground.otel.otlp import parse, spans
from tests.conftest import REPO

pytestmark = pytest.mark.skipif(shutil.which("go") is None, reason="no Go toolchain here to build the Collector "
                                "(make install-otelcol builds it; https://go.dev/dl/)")


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def collector_binary():
    return ensure_collector(REPO / ".rftbus" / "otelcol")


def test_spans_an_sdk_client_sends_the_collector_land_on_kafka_as_model_calls(broker, collector_binary, tmp_path):
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    topic = f"test.spans.{uuid.uuid4().hex[:8]}"
    from confluent_kafka.admin import NewTopic

    create_new(make_admin(broker), [NewTopic(topic, 2, 1)])  # (rftbus declares its topics; the broker creates none)
    spec = CollectorSpec(brokers=[broker.bootstrap_servers], topic=topic, http_port=_port(), grpc_port=_port())
    col = Collector(collector_binary, spec, tmp_path / "otelcol").start()
    try:
        provider = TracerProvider(resource=Resource.create({"service.name": "agent"}))
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(
            endpoint=f"http://127.0.0.1:{spec.http_port}/v1/traces")))
        tracer = provider.get_tracer("agent")
        with tracer.start_as_current_span("agent turn"):  # the agent's own span: not a model call
            with tracer.start_as_current_span("chat smollm2-135m-instruct") as span:
                span.set_attributes({
                    "gen_ai.operation.name": "chat", "gen_ai.request.model": "smollm2-135m-instruct",
                    "gen_ai.input.messages": json.dumps([{"role": "user", "parts": [
                        {"type": "text", "content": "What is 6 times 7?"}]}]),
                    "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [
                        {"type": "text", "content": "42"}], "finish_reason": "stop"}]),
                    "user.feedback": "up"})
                trace_id = format(span.get_span_context().trace_id, "032x")
        assert provider.force_flush(10_000)
        provider.shutdown()
        found, deadline = [], time.monotonic() + 60
        while not found and time.monotonic() < deadline:
            found = list(read_to_end(broker, topic, strict=False, timeout_s=5))
            time.sleep(0.5)
        assert found, f"nothing on {topic}; the Collector's log:\n{(tmp_path / 'otelcol' / 'otelcol.log').read_text()}"
        assert all(m.key() == bytes.fromhex(trace_id) or m.key() == trace_id.encode() for m in found), \
            [m.key() for m in found]
        got = [read_call(s) for m in found for s in spans(parse(m.value()))]
        calls = [c for c in got if isinstance(c, GenAICall)]
        assert [r.reason for r in got if isinstance(r, Refused)] == ["not_genai"]
        assert len(calls) == 1 and calls[0].trace_id == trace_id
        assert calls[0].messages == [{"role": "user", "content": "What is 6 times 7?"}]
        assert calls[0].answer == "42" and calls[0].grade == 1.0
    finally:
        col.stop()
