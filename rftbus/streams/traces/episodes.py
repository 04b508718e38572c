"""An OTLP trace export (one record of topics.spans) read into what the streams make of it: an experience group per
model call of the policy, a grade per graded trace, and a refusal per kind of span that cannot be trained.

- **A call is a group of one** (source `trace`: held for its grade like an answer `rftbus serve` recorded, but
  never the promotion gate's evidence, which is serve's own answers): its input messages rendered by
  the one prompt renderer (rftbus/ground/models/prompt.py), its answer tokenized as the model writes a turn (the end of
  turn after an answer that stopped), `loss_mask` all true. Traces carry text, not logprobs: `logprobs` holds one 0.0
  per token and `behaviour_logprobs` is false, so the trainer takes the current policy's in their place at the step
  (rftbus/trainer/step.py `with_behaviour`): the answer trains as if sampled now, uncorrected for the versions between.
- **Ids are the trace's**, `otel-<trace id>-<span id>` (rftbus/ground/otel/ids.py), so a span exported twice (a retry, a
  replay) is the same group, a `duplicate` downstream.
- **The version** is the one the span names (genai.model_version): `<model>-v<N>` as the response's model, or rftbus
  serve's fingerprint `rftbus-v<N>`; a span naming another model is refused `unknown_model`.
- **Grades**: one on the call's own span (the configured attribute, or an event of that name) is the group's reward.
  One on any other span of the trace (an agent's span around its calls, a later "feedback" span, or the span serve
  writes for /v1/feedback `trace_id`) grades the trace: a `TraceGrade`, which the stage (stage.py) joins to every
  call of the trace, whichever export each comes in.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rftbus.ground.models.prompt import PromptFormat, default_task_id
from rftbus.ground.otel.ids import PREFIX, episode_id
from rftbus.ground.models.tool_calls import ToolCallError, arguments, call_text
from rftbus.ground.schemas import Experience, ExperienceGroup, Feedback, FeedbackKind, Source
from rftbus.ground.otel.otlp import OtlpError, Span, parse, spans
from rftbus.ground.grades.rules import Grade, apply_grade
from rftbus.streams.traces.genai import GenAICall, Refused, model_version, read_call, span_grade


@dataclass(slots=True)
class TraceGrade:
    """A grade a span other than a model call's carries: for every call of its trace."""

    trace_id: str
    value: float
    span_id: str  # the grading span: with the trace, what makes the grade one (a re-export is the same grade)
    annotator: str
    at_ms: int

    def feedback(self, experience_id: str) -> Feedback:
        """The Feedback that grades one call of the trace (its id derived: written again, it is the same one)."""
        return Feedback(feedback_id=f"{PREFIX}grade-{self.trace_id}-{self.span_id}:{experience_id}",
                        experience_id=experience_id, kind=FeedbackKind.reward, reward=self.value,
                        annotator=self.annotator, created_at=self.at_ms,
                        metadata={"trace_id": self.trace_id, "span_id": self.span_id, "origin": "otel"})


@dataclass(slots=True)
class Read:
    """What one export holds: groups to publish, grades to forward, refusals by reason (span ids and details)."""

    groups: list[ExperienceGroup] = field(default_factory=list)
    grades: dict[str, TraceGrade] = field(default_factory=dict)  # trace id -> its grade (the export's last)
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
                grade = self.trace_grade(span)
                if grade is not None:
                    out.grades[span.trace_id] = grade
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
        eid = episode_id(call.trace_id, call.span_id)
        meta = {"trace_id": call.trace_id, "span_id": call.span_id, "origin": "otel"}
        service = span.resource.get("service.name")
        if isinstance(service, str):
            meta["service"] = service
        if call.session and call.session != call.trace_id:
            meta["session"] = call.session
        sample = Experience(
            experience_id=eid, response_ids=ids, logprobs=[0.0] * len(ids), loss_mask=[True] * len(ids),
            model_version=version, response_text=answer, finish_reason=call.finish_reason,
            generation_ms=max(0.0, (call.end_ns - call.start_ns) / 1e6), behaviour_logprobs=False)
        if call.grade is not None:  # graded on its own span: the record carries it, as a joined grade would
            apply_grade(sample, Grade(eid, call.grade, {"feedback_kind": "span_attribute"}))
        return ExperienceGroup(group_id=eid, task_id=default_task_id(prompt_ids), source=Source.trace,
                               explorer_id=self.producer_id, prompt_ids=prompt_ids, prompt_text=prompt_text,
                               samples=[sample], created_at=max(1, call.end_ns // 1_000_000), metadata=meta)

    def trace_grade(self, span: Span) -> TraceGrade | None:
        """The grade a span that is no model call carries (attribute, or an event of that name), if any."""
        value = span_grade(span, self.grade_attribute)
        if value is None or len(span.trace_id) != 32:
            return None
        return TraceGrade(span.trace_id, value, span.span_id, str(span.resource.get("service.name") or "otel"),
                          max(1, span.end_ns // 1_000_000))


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
