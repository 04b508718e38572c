"""GenAI spans read as model calls (rftbus/streams/traces): bodies built by the OpenTelemetry SDK and its own OTLP encoder,
in each form the semantic conventions use; spans that are no model call, or lack content, refused with a reason;
OTLP/JSON with hex ids. No broker."""

from __future__ import annotations

import json

import pytest

from otlp_export import otlp_body
from rftbus.streams.traces.genai import GenAICall, Refused, model_version, read_call
from rftbus.ground.otel.otlp import JSON, OtlpError, parse, spans

INPUT = [{"role": "system", "parts": [{"type": "text", "content": "Answer with the number."}]},
         {"role": "user", "parts": [{"type": "text", "content": "What is 7 times 8?"}]}]
OUTPUT = [{"role": "assistant", "parts": [{"type": "text", "content": "56"}], "finish_reason": "stop"}]


def _calls(body: bytes, **kw) -> list[GenAICall | Refused]:
    return [read_call(s, **kw) for s in spans(parse(body))]


def test_current_conventions_attributes_become_one_call_with_prompt_and_answer():
    def make(tracer):
        with tracer.start_as_current_span("chat smollm2-135m-instruct") as span:
            span.set_attributes({"gen_ai.operation.name": "chat", "gen_ai.request.model": "smollm2-135m-instruct",
                                 "gen_ai.response.model": "smollm2-135m-instruct-v7",
                                 "gen_ai.input.messages": json.dumps(INPUT), "gen_ai.output.messages": json.dumps(OUTPUT),
                                 "user.feedback": 1.0, "session.id": "s-1"})

    [call] = _calls(otlp_body(make), session_attr="session.id")
    assert isinstance(call, GenAICall), call
    assert call.messages == [{"role": "system", "content": "Answer with the number."},
                             {"role": "user", "content": "What is 7 times 8?"}]
    assert call.answer == "56" and call.finish_reason == "stop" and call.grade == 1.0 and call.session == "s-1"
    assert len(call.trace_id) == 32 and len(call.span_id) == 16 and call.end_ns >= call.start_ns > 0
    assert model_version(call, "smollm2-135m-instruct") == 7 and model_version(call, "other") is None


def test_earlier_conventions_span_events_and_a_grade_event():
    def make(tracer):
        with tracer.start_as_current_span("chat m") as span:
            span.set_attributes({"gen_ai.operation.name": "chat", "gen_ai.request.model": "m",
                                 "gen_ai.response.finish_reasons": ["stop"]})
            span.add_event("gen_ai.user.message", {"content": "2+2?"})
            span.add_event("gen_ai.choice", {"gen_ai.event.content": json.dumps(
                {"index": 0, "finish_reason": "length", "message": {"content": "4"}})})
            span.add_event("user.feedback", {"value": "thumbs_down"})

    [call] = _calls(otlp_body(make))
    assert isinstance(call, GenAICall), call
    assert call.messages == [{"role": "user", "content": "2+2?"}] and call.answer == "4"
    assert call.finish_reason == "length" and call.grade == 0.0 and call.session == call.trace_id


def test_spans_that_are_no_model_call_or_lack_content_are_refused_with_reasons():
    def make(tracer):
        with tracer.start_as_current_span("GET /health"):
            pass
        with tracer.start_as_current_span("embeddings") as span:
            span.set_attribute("gen_ai.operation.name", "embeddings")
        with tracer.start_as_current_span("chat m") as span:  # content capture off: no messages at all
            span.set_attributes({"gen_ai.operation.name": "chat", "gen_ai.request.model": "m"})
        with tracer.start_as_current_span("chat m") as span:  # messages that are not the conventions' shape
            span.set_attributes({"gen_ai.operation.name": "chat", "gen_ai.input.messages": "[{\"role\": 3}]",
                                 "gen_ai.output.messages": json.dumps(OUTPUT)})

    got = _calls(otlp_body(make))
    assert [r.reason for r in got if isinstance(r, Refused)] == ["not_genai", "not_genai", "no_content", "no_content"]
    assert "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT" in got[2].detail


def test_otlp_json_with_hex_ids_reads_like_protobuf_and_garbage_is_an_error():
    body = {"resourceSpans": [{"resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "agent"}}]},
            "scopeSpans": [{"spans": [{
                "traceId": "5b8efff798038103d269b633813fc60c", "spanId": "eee19b7ec3c1b174", "name": "chat m",
                "startTimeUnixNano": "1544712660000000000", "endTimeUnixNano": "1544712661000000000",
                "attributes": [{"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
                               {"key": "gen_ai.input.messages", "value": {"stringValue": json.dumps(INPUT[1:])}},
                               {"key": "gen_ai.output.messages", "value": {"stringValue": json.dumps(OUTPUT)}},
                               {"key": "user.feedback", "value": {"intValue": "1"}}]}]}]}]}
    [span] = spans(parse(json.dumps(body).encode(), JSON))
    assert span.trace_id == "5b8efff798038103d269b633813fc60c" and span.resource == {"service.name": "agent"}
    call = read_call(span)
    assert isinstance(call, GenAICall) and call.answer == "56" and call.grade == 1.0
    with pytest.raises(OtlpError, match="not JSON"):
        parse(b"{nope", JSON)
    with pytest.raises(OtlpError, match="not hex"):
        parse(json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "zz"}]}]}]}).encode(), JSON)
    with pytest.raises(OtlpError, match="protobuf"):
        parse(b"\xff\xff\xff garbage")
