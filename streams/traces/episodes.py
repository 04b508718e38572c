"""An OTLP trace export (one record of topics.spans) read into what the streams make of it: an experience group per
model call of the policy, a grade per graded trace, and a refusal per kind of span that cannot be trained.

- **A call is a group of one** (source `trace`: held for its grade like an answer `rftbus serve` recorded, but
  never the promotion gate's evidence, which is serve's own answers): its input messages rendered by
  the one prompt renderer (rftbus/models/prompt.py), its answer tokenized as the model writes a turn (the end of
  turn after an answer that stopped), `loss_mask` all true. Traces carry text, not logprobs: `logprobs` holds one 0.0
  per token and `behaviour_logprobs` is false, so the trainer takes the current policy's in their place at the step
  (trainer/step.py `with_behaviour`): the answer trains as if sampled now, uncorrected for the versions between.
- **Ids are the trace's**, so a span exported twice (a retry, a replay) is the same group, a `duplicate` downstream:
  the call that is its trace's root is `otel-<trace id>` (what a grade of the whole trace names: /v1/feedback with
  `trace_id`, or a grade on another span of the trace); a call nested under another span is
  `otel-<trace id>-<span id>`.
- **The version** is the one the span names (genai.model_version): `<model>-v<N>` as the response's model, or rftbus
  serve's fingerprint `rftbus-v<N>`; a span naming another model is refused `unknown_model`.
- **Grades**: on the call's own span the group carries its reward and waits for nothing; on another span of the
  trace it becomes a Feedback for the trace's root call (`TraceGrade`); otherwise the group waits for feedback
  like any served answer (streams.feedback_ttl_s).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rftbus.models.prompt import PromptFormat, default_task_id
from rftbus.otel.ids import PREFIX, episode_id
from rftbus.models.tool_calls import ToolCallError, arguments, call_text
from rftbus.schemas import Experience, ExperienceGroup, Feedback, FeedbackKind, Source
from rftbus.streams.traces.genai import GenAICall, Refused, model_version, number, read_call
from rftbus.streams.traces.otlp import OtlpError, Span, parse, spans

@dataclass(slots=True)
class TraceGrade:
    """A grade a trace carries outside its model call's span: a Feedback for the trace's root call."""

    feedback: Feedback


@dataclass(slots=True)
class Read:
    """What one export holds: groups to publish, grades to forward, refusals by reason (span ids and details)."""

    groups: list[ExperienceGroup] = field(default_factory=list)
    grades: list[TraceGrade] = field(default_factory=list)
    refused: dict[str, list[tuple[str, str]]] = field(default_factory=dict)  # reason -> [(span id, detail)]
    spans: int = 0

    def refuse(self, reason: str, span_id: str, detail: str) -> None:
        self.refused.setdefault(reason, []).append((span_id, detail))


class Episodes:
    """Reads exports for one served model (`model`: the name serve answers as, serve.served_model or model.name)."""

    def __init__(self, fmt: PromptFormat, model: str, grade_attribute: str = "user.feedback",
                 session_attribute: str | None = None, producer_id: str = "otel"):
        self.fmt, self.model = fmt, model
        self.grade_attribute, self.session_attribute = grade_attribute, session_attribute
        self.producer_id = producer_id

    def read(self, body: bytes) -> Read:
        """Raises OtlpError when `body` is not an OTLP trace export (the record is then `malformed`)."""
        out = Read()
        found = spans(parse(body))
        out.spans = len(found)
        for span in found:
            call = read_call(span, self.grade_attribute, self.session_attribute)
            if isinstance(call, Refused):
                grade = self._grade_elsewhere(span)
                if grade is not None:
                    out.grades.append(grade)
                else:
                    out.refuse(call.reason, span.span_id, call.detail)
                continue
            try:
                out.groups.append(self.group(call, span))
            except Unknown as e:
                out.refuse("unknown_model", span.span_id, str(e))
            except (ToolCallError, ValueError) as e:
                out.refuse("malformed_span", span.span_id, f"span {span.span_id}: {e}")
        return out

    def group(self, call: GenAICall, span: Span) -> ExperienceGroup:
        version = model_version(call, self.model)
        if version is None:
            raise Unknown(f"span {call.span_id}: model {call.response_model or call.request_model!r} is not "
                          f"{self.model!r} (or {self.model}-v<N>): rftbus did not answer it")
        prompt_ids, prompt_text = self.fmt.messages([openai_message(m) for m in call.messages])
        answer = call.answer + "".join(call_text(str(c.get("name")), arguments(c.get("arguments"), "tool call"))
                                       for c in call.tool_calls)
        if not answer:
            raise ValueError("an empty answer")
        ids = self.fmt.response(answer, ended=call.finish_reason in (None, "stop", "tool_calls"))
        eid = episode_id(call.trace_id, None if not span.parent_span_id else call.span_id)
        meta = {"trace_id": call.trace_id, "span_id": call.span_id, "origin": "otel"}
        service = span.resource.get("service.name")
        if isinstance(service, str):
            meta["service"] = service
        if call.session and call.session != call.trace_id:
            meta["session"] = call.session
        graded = call.grade is not None
        sample = Experience(
            experience_id=eid, response_ids=ids, logprobs=[0.0] * len(ids), loss_mask=[True] * len(ids),
            reward=call.grade, reward_components={"feedback": call.grade} if graded else {},  # type: ignore[dict-item]
            model_version=version, response_text=answer, finish_reason=call.finish_reason,
            generation_ms=max(0.0, (call.end_ns - call.start_ns) / 1e6),
            metadata={"feedback_kind": "span_attribute"} if graded else {}, behaviour_logprobs=False)
        return ExperienceGroup(group_id=eid, task_id=default_task_id(prompt_ids), source=Source.trace,
                               explorer_id=self.producer_id, prompt_ids=prompt_ids, prompt_text=prompt_text,
                               samples=[sample], created_at=max(1, call.end_ns // 1_000_000), metadata=meta)

    def _grade_elsewhere(self, span: Span) -> TraceGrade | None:
        """A grade on a span that is no model call: a Feedback for the trace's root call."""
        value = number(span.attributes.get(self.grade_attribute))
        for e in span.events:
            if value is None and e.name == self.grade_attribute:
                value = number(e.attributes.get("value", e.attributes.get(self.grade_attribute)))
        if value is None or len(span.trace_id) != 32:
            return None
        fb = Feedback(feedback_id=f"{PREFIX}{span.trace_id}-{span.span_id}-grade",
                      experience_id=episode_id(span.trace_id), kind=FeedbackKind.reward, reward=value,
                      annotator=str(span.resource.get("service.name") or "otel"),
                      created_at=max(1, span.end_ns // 1_000_000),
                      metadata={"trace_id": span.trace_id, "span_id": span.span_id, "origin": "otel"})
        return TraceGrade(fb)


class Unknown(ValueError):
    """A call answered by a model that is not rftbus's."""


def openai_message(m: dict[str, Any]) -> dict[str, Any]:
    """A message as genai.py reads it, in the OpenAI shape the prompt renderer takes (tool calls as functions)."""
    calls = m.get("tool_calls") or []
    if not calls:
        return m
    return {**m, "tool_calls": [{"id": c.get("id"), "type": "function",
                                 "function": {"name": c.get("name"), "arguments": c.get("arguments")}}
                                for c in calls]}


__all__ = ["Episodes", "OtlpError", "Read", "TraceGrade", "Unknown", "episode_id", "openai_message"]
