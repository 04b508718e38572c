"""Traced model calls become experience groups (rftbus/streams/traces/episodes.py) with SmolLM2's real tokenizer and chat
template: the prompt is the one renderer's, ids are the trace's, the version the one the span names, a grade on
another span becomes a Feedback for the trace's root call; and the trainer takes the current policy's logprobs for an
answer that came without any (rftbus/trainer/step.py). No broker."""

from __future__ import annotations

import json

import pytest
import torch

from otlp_export import otlp_body
from rftbus.ground.models.config import ModelConfig
from rftbus.ground.models.prompt import PromptFormat, default_task_id
from rftbus.ground.otel.ids import episode_id
from rftbus.ground.schemas import ExperienceGroup, FeedbackKind, Source, make_codec
from rftbus.streams.traces.episodes import Episodes
from rftbus.ground.otel.otlp import OtlpError
from rftbus.trainer.batch import Row, collate
from rftbus.trainer.step import with_behaviour

MODEL = "smollm2-135m-instruct"
ASK = [{"role": "user", "content": "What is 7 times 8?"}]


@pytest.fixture(scope="module")
def fmt(smollm2_folder):
    from transformers import AutoTokenizer

    return PromptFormat.for_model(AutoTokenizer.from_pretrained(smollm2_folder), ModelConfig(name=MODEL))


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
    body = otlp_body(lambda t: ids.append(_chat(t)))
    read = Episodes(fmt, MODEL).read(body)
    assert not read.refused and not read.grades and read.spans == 1
    [g] = read.groups
    trace = f"{ids[0]:032x}"
    prompt_ids, _ = fmt.messages(ASK)
    assert g.group_id == episode_id(trace, g.metadata["span_id"]) == f"otel-{trace}-{g.metadata['span_id']}"
    assert g.source is Source.trace
    assert g.prompt_ids == prompt_ids and g.task_id == default_task_id(prompt_ids)
    [s] = g.samples
    assert s.experience_id == g.group_id and s.model_version == 3 and s.reward is None
    assert s.response_ids == fmt.response("56") and s.response_ids[-1] == fmt.end_of_turn  # the turn ended
    assert s.logprobs == [0.0] * len(s.response_ids) and s.behaviour_logprobs is False
    assert all(s.loss_mask) and s.response_text == "56" and g.metadata["trace_id"] == trace
    codec = make_codec(None)  # the record round-trips through the project's .avsc files
    back = codec.decode(codec.encode(g, None))
    assert isinstance(back, ExperienceGroup) and back.samples[0].behaviour_logprobs is False
    assert back.source is Source.trace


def test_versions_grades_and_refusals(fmt):
    def make(tracer):
        with tracer.start_as_current_span("agent run") as root:  # an agent's own span, graded: the trace's grade
            root.set_attribute("user.feedback", "up")
            _chat(tracer, answer="54", finish="length", **{"user.feedback": 0.0})  # graded on its own span
            _chat(tracer, answer="56")  # waits for the trace's grade (the stage joins it)
            _chat(tracer, model="gpt-4o")  # another model answered
            with tracer.start_as_current_span("tool lookup"):
                pass
        with tracer.start_as_current_span("review") as later:  # another trace's grade, alone in the export
            later.add_event("user.feedback", {"value": 0.5})

    read = Episodes(fmt, MODEL).read(otlp_body(make))
    own, waiting = read.groups
    assert own.group_id == f"otel-{own.metadata['trace_id']}-{own.metadata['span_id']}"
    [s] = own.samples
    assert s.reward == 0.0 and s.reward_components == {"feedback": 0.0}  # graded on its own span
    assert s.metadata["feedback_kind"] == "span_attribute"
    assert s.response_ids == fmt.response("54", ended=False) and s.finish_reason == "length"
    assert waiting.samples[0].reward is None and waiting.metadata["trace_id"] == own.metadata["trace_id"]
    trace = own.metadata["trace_id"]
    assert read.grades[trace].value == 1.0
    [other] = [t for t in read.grades if t != trace]
    fb = read.grades[other].feedback("otel-x-y")  # what the stage writes for each call of that trace
    assert fb.kind is FeedbackKind.reward and fb.reward == 0.5 and fb.experience_id == "otel-x-y"
    assert fb.feedback_id == read.grades[other].feedback("otel-x-y").feedback_id  # written again: the same one
    assert sorted(read.refused) == ["not_genai", "unknown_model"]
    assert "gpt-4o" in read.refused["unknown_model"][0][1]
    with pytest.raises(OtlpError):
        Episodes(fmt, MODEL).read(b"\x0a\xff not protobuf")


def test_serve_fingerprint_names_the_version(fmt):
    body = otlp_body(lambda t: _chat(t, model=MODEL, **{"gen_ai.openai.response.system_fingerprint": "rftbus-v12"}))
    [g] = Episodes(fmt, MODEL).read(body).groups
    assert g.samples[0].model_version == 12


def test_the_step_takes_the_current_policy_for_answers_without_behaviour_logprobs(fmt):
    body = otlp_body(lambda t: _chat(t))
    [traced] = Episodes(fmt, MODEL).read(body).groups
    served = make_codec(None).decode(make_codec(None).encode(traced, None))
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


def test_the_stage_joins_a_trace_grade_to_its_calls_in_either_order(fmt):
    """The traces stage's table (a dict here) across two exports of one trace: calls first, then the grade (a
    Feedback per waiting call); and a call that comes after the grade carries it in its record."""
    from types import SimpleNamespace

    from opentelemetry import trace as otel_trace

    from rftbus.ground.config import load_config
    from rftbus.ground.schemas import Feedback
    from rftbus.streams.outputs import Emitter
    from rftbus.streams.telemetry import Counters
    from rftbus.streams.traces.stage import Traces

    cfg = load_config(overrides={}, environ={})
    codec = make_codec(None)
    names = {"raw": "raw", "feedback": "feedback", "rejected": "rejected"}
    emit = Emitter(None, codec.encode, names, dict.fromkeys(names, 4), 1 << 20)
    table: dict[bytes, bytes] = {}
    stage = Traces(cfg, emit, Counters(), Episodes(fmt, MODEL), table)
    ctx: dict = {}

    def first(tracer):
        with tracer.start_as_current_span("agent run") as root:
            ctx["root"] = root
            _chat(tracer)
            _chat(tracer, answer="57")

    def grade(tracer):
        parent = otel_trace.set_span_in_context(otel_trace.NonRecordingSpan(ctx["root"].get_span_context()))
        with tracer.start_as_current_span("user thumbs", context=parent) as span:
            span.set_attribute("user.feedback", True)
        with tracer.start_as_current_span("late call", context=parent):
            _chat(tracer, answer="56")

    def outs(body: bytes, offset: int):
        return stage.outputs(SimpleNamespace(value=body, key=b"k", partition=1), f"spans/1/{offset}")

    o1 = outs(otlp_body(first), 0)
    assert [o.role for o in o1] == ["raw", "raw", "rejected"]  # (the agent's own span: not_genai)
    calls = [codec.decode(o.value) for o in o1 if o.role == "raw"]
    assert all(isinstance(g, ExperienceGroup) and g.samples[0].reward is None for g in calls)
    o2 = outs(otlp_body(grade), 1)
    fbs = [codec.decode(o.value) for o in o2 if o.role == "feedback"]
    assert all(isinstance(f, Feedback) and f.reward == 1.0 for f in fbs)
    assert sorted(f.experience_id for f in fbs) == sorted(g.group_id for g in calls)
    [late] = [codec.decode(o.value) for o in o2 if o.role == "raw"]
    assert late.samples[0].reward == 1.0 and late.samples[0].metadata["feedback_kind"] == "trace_grade"
    assert [o.partition for o in o2 if o.role == "raw"] == [emit.key_partition("raw", late.group_id.encode())]
    assert json.loads(next(iter(table.values())))["calls"] == []  # graded: nothing waits any more
