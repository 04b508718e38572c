"""Traced model calls become experience groups (streams/traces/episodes.py) with SmolLM2's real tokenizer and chat
template: the prompt is the one renderer's, ids are the trace's, the version the one the span names, a grade on
another span becomes a Feedback for the trace's root call; and the trainer takes the current policy's logprobs for an
answer that came without any (trainer/step.py). No broker."""

from __future__ import annotations

import json

import pytest
import torch
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from rftbus.models.config import ModelConfig
from rftbus.models.prompt import PromptFormat, default_task_id
from rftbus.otel.ids import episode_id
from rftbus.schemas import ExperienceGroup, FeedbackKind, Source, make_codec
from rftbus.streams.traces.episodes import Episodes
from rftbus.streams.traces.otlp import OtlpError
from rftbus.trainer.batch import Row, collate
from rftbus.trainer.step import with_behaviour

MODEL = "smollm2-135m-instruct"
ASK = [{"role": "user", "content": "What is 7 times 8?"}]


@pytest.fixture(scope="module")
def fmt(smollm2_folder):
    from transformers import AutoTokenizer

    return PromptFormat.for_model(AutoTokenizer.from_pretrained(smollm2_folder), ModelConfig(name=MODEL))


def _export(make) -> bytes:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    make(provider.get_tracer("agent"))
    return encode_spans(exporter.get_finished_spans()).SerializeToString()


def _chat(tracer, answer="56", model=f"{MODEL}-v3", finish="stop", **extra):
    with tracer.start_as_current_span(f"chat {MODEL}") as span:
        span.set_attributes({"gen_ai.operation.name": "chat", "gen_ai.request.model": MODEL,
                             "gen_ai.response.model": model, "gen_ai.input.messages": json.dumps(
                                 [{"role": "user", "parts": [{"type": "text", "content": ASK[0]["content"]}]}]),
                             "gen_ai.output.messages": json.dumps([{"role": "assistant", "finish_reason": finish,
                                                                    "parts": [{"type": "text", "content": answer}]}]),
                             **extra})
        return span.get_span_context().trace_id


def test_a_root_call_is_a_group_of_one_rendered_by_the_one_renderer(fmt):
    ids: list[int] = []
    body = _export(lambda t: ids.append(_chat(t)))
    read = Episodes(fmt, MODEL).read(body)
    assert not read.refused and not read.grades and read.spans == 1
    [g] = read.groups
    trace = f"{ids[0]:032x}"
    prompt_ids, _ = fmt.messages(ASK)
    assert g.group_id == episode_id(trace) == f"otel-{trace}" and g.source is Source.trace
    assert g.prompt_ids == prompt_ids and g.task_id == default_task_id(prompt_ids)
    [s] = g.samples
    assert s.experience_id == g.group_id and s.model_version == 3 and s.reward is None
    assert s.response_ids == fmt.response("56") and s.response_ids[-1] == fmt.end_of_turn  # the turn ended
    assert s.logprobs == [0.0] * len(s.response_ids) and s.behaviour_logprobs is False
    assert all(s.loss_mask) and s.response_text == "56" and g.metadata["trace_id"] == trace
    codec = make_codec(None)  # the record round-trips through the project's .avsc files
    back = codec.decode(codec.encode(g))
    assert isinstance(back, ExperienceGroup) and back.samples[0].behaviour_logprobs is False
    assert back.source is Source.trace


def test_versions_grades_and_refusals(fmt):
    def make(tracer):
        with tracer.start_as_current_span("agent run") as root:  # an agent's own span, graded
            root.set_attribute("user.feedback", "up")
            _chat(tracer, answer="54", finish="length", **{"user.feedback": 0.0})  # nested, graded on itself
            _chat(tracer, model="gpt-4o")  # another model answered
            with tracer.start_as_current_span("tool lookup"):
                pass

    read = Episodes(fmt, MODEL).read(_export(make))
    [g] = read.groups
    [s] = g.samples
    assert g.group_id.startswith("otel-") and g.group_id.count("-") == 2  # otel-<trace>-<span>: a nested call
    assert s.reward == 0.0 and s.reward_components == {"feedback": 0.0}  # graded on its own span
    assert s.response_ids == fmt.response("54", ended=False) and s.finish_reason == "length"
    [grade] = read.grades  # the agent span's grade: for the trace's root call
    fb = grade.feedback
    assert fb.kind is FeedbackKind.reward and fb.reward == 1.0
    assert fb.experience_id == f"otel-{g.metadata['trace_id']}"
    assert sorted(read.refused) == ["not_genai", "unknown_model"]
    assert "gpt-4o" in read.refused["unknown_model"][0][1]
    with pytest.raises(OtlpError):
        Episodes(fmt, MODEL).read(b"\x0a\xff not protobuf")


def test_serve_fingerprint_names_the_version(fmt):
    body = _export(lambda t: _chat(t, model=MODEL, **{"gen_ai.openai.response.system_fingerprint": "rftbus-v12"}))
    [g] = Episodes(fmt, MODEL).read(body).groups
    assert g.samples[0].model_version == 12


def test_the_step_takes_the_current_policy_for_answers_without_behaviour_logprobs(fmt):
    body = _export(lambda t: _chat(t))
    [traced] = Episodes(fmt, MODEL).read(body).groups
    served = make_codec(None).decode(make_codec(None).encode(traced))
    assert isinstance(served, ExperienceGroup)
    served.samples[0].behaviour_logprobs = True
    served.samples[0].logprobs = [-0.5] * len(served.samples[0].response_ids)
    batch = collate([Row(traced, traced.samples[0]), Row(served, served.samples[0])], pad_id=0, max_len=512)
    assert batch.behav_known is not None and batch.behav_known.tolist() == [False, True]
    current = torch.full_like(batch.behav_logp, -2.0)
    out = with_behaviour(batch, current)
    assert out.behav_known is None
    assert torch.all(out.behav_logp[0][batch.response[0]] == -2.0)  # the traced row: the current policy's
    assert torch.all(out.behav_logp[1][batch.response[1]] == -0.5)  # the served row: its own, untouched
    both = collate([Row(served, served.samples[0])], pad_id=0, max_len=512)
    assert both.behav_known is None  # nothing to stand in for: the batch is as before
