"""A GenAI span (OpenTelemetry's semantic conventions for generative AI) read as one model call: its operation,
models, the messages it was given and the answer it returned, in whichever form the instrumentation wrote them:

- attributes `gen_ai.input.messages` / `gen_ai.output.messages` (and `gen_ai.system_instructions`), the current
  conventions (JSON text or structured values, messages of typed `parts`), also inside a
  `gen_ai.client.inference.operation.details` event;
- span events per message, the earlier conventions: `gen_ai.system.message`, `gen_ai.user.message`,
  `gen_ai.assistant.message`, `gen_ai.tool.message` and `gen_ai.choice`, with `content` (or a JSON body);
- `gen_ai.content.prompt` / `gen_ai.content.completion` events carrying `gen_ai.prompt` / `gen_ai.completion`.

A span that is no model call, or is one without content, is a `Refused` with the reason the stage rejects it by;
nothing here raises on what a span holds."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from rftbus.ground.otel.otlp import Span

OPERATIONS = ("chat", "text_completion", "generate_content")
ROLES = ("system", "user", "assistant", "tool")


@dataclass(slots=True)
class Refused:
    reason: str  # not_genai | no_content | malformed_span (the stage adds unknown_model)
    detail: str


@dataclass(slots=True)
class GenAICall:
    trace_id: str
    span_id: str
    operation: str
    request_model: str | None
    response_model: str | None
    messages: list[dict[str, Any]]  # the prompt: [{role, content}, ...] (tool calls as `tool_calls`)
    answer: str
    finish_reason: str | None
    start_ns: int
    end_ns: int
    session: str | None = None  # the episode key: the configured attribute's value, else the trace id
    grade: float | None = None  # a grade the span itself carries (the configured attribute)
    tool_calls: list[dict[str, Any]] = field(default_factory=list)  # the answer's own tool calls
    fingerprint: str | None = None  # the response's system_fingerprint (rftbus serve: rftbus-v<version>)


def _json(v: Any) -> Any:
    if isinstance(v, (bytes, bytearray)):
        v = v.decode("utf-8", "replace")
    if isinstance(v, str):
        try:
            return json.loads(v)
        except json.JSONDecodeError:
            return v
    return v


def _text_of_parts(parts: Any) -> tuple[str, list[dict]]:
    """A message's text and tool calls from its `parts` (current conventions), or from plain content."""
    if isinstance(parts, str):
        return parts, []
    texts, calls = [], []
    for p in parts if isinstance(parts, list) else []:
        if not isinstance(p, dict):
            continue
        kind = p.get("type", "text")
        if kind == "text" and isinstance(p.get("content"), str):
            texts.append(p["content"])
        elif kind == "tool_call":
            calls.append({"id": p.get("id"), "name": p.get("name"), "arguments": p.get("arguments")})
        elif kind == "tool_call_response":
            resp = p.get("response") if "response" in p else p.get("result")
            texts.append(resp if isinstance(resp, str) else json.dumps(resp))
    return "".join(texts), calls


def _message(m: Any) -> dict[str, Any] | None:
    if not isinstance(m, dict):
        return None
    role = str(m.get("role", "")).lower()
    role = {"human": "user", "ai": "assistant", "model": "assistant"}.get(role, role)
    if role not in ROLES:
        return None
    text, calls = _text_of_parts(m["parts"]) if "parts" in m else (m.get("content"), m.get("tool_calls") or [])
    if not isinstance(text, str):
        text = "" if text is None else json.dumps(text)
    out: dict[str, Any] = {"role": role, "content": text}
    if calls:
        out["tool_calls"] = calls
    if isinstance(m.get("finish_reason"), str):
        out["finish_reason"] = m["finish_reason"]
    return out


def _messages(v: Any) -> list[dict[str, Any]] | None:
    v = _json(v)
    if not isinstance(v, list):
        return None
    out = [m for m in (_message(x) for x in v) if m is not None]
    return out if len(out) == len(v) else None


def _from_attributes(attrs: dict[str, Any]) -> tuple[list | None, list | None]:
    inp, outp = _messages(attrs.get("gen_ai.input.messages")), _messages(attrs.get("gen_ai.output.messages"))
    system = _json(attrs.get("gen_ai.system_instructions"))
    if inp is not None and system is not None:
        text, _ = _text_of_parts(system)
        if text and not (inp and inp[0]["role"] == "system"):
            inp = [{"role": "system", "content": text}, *inp]
    return inp, outp


def _from_events(span: Span) -> tuple[list | None, list | None]:
    inp: list[dict] = []
    outp: list[dict] = []
    for e in span.events:
        a = e.attributes
        if e.name == "gen_ai.client.inference.operation.details":
            i, o = _from_attributes(a)
            inp, outp = i or inp, o or outp
        elif e.name in ("gen_ai.system.message", "gen_ai.user.message", "gen_ai.assistant.message",
                        "gen_ai.tool.message"):
            body = _json(a.get("gen_ai.event.content", a))
            body = body if isinstance(body, dict) else {"content": body}
            m = _message({"role": e.name.split(".")[1], **body})
            if m is not None:
                inp.append(m)
        elif e.name == "gen_ai.choice":
            body = _json(a.get("gen_ai.event.content", a))
            msg = body.get("message", body) if isinstance(body, dict) else {"content": body}
            m = _message({"role": "assistant", **(msg if isinstance(msg, dict) else {"content": msg})})
            if m is not None:
                m["finish_reason"] = body.get("finish_reason") if isinstance(body, dict) else None
                outp.append(m)
        elif e.name == "gen_ai.content.prompt":
            inp = _messages(a.get("gen_ai.prompt")) or inp
        elif e.name == "gen_ai.content.completion":
            outp = _messages(a.get("gen_ai.completion")) or outp
    return inp or None, outp or None


def number(v: Any) -> float | None:
    if isinstance(v, bool):
        return 1.0 if v else 0.0
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str):
        lowered = v.strip().lower()
        if lowered in ("up", "thumbs_up", "good", "positive"):
            return 1.0
        if lowered in ("down", "thumbs_down", "bad", "negative"):
            return 0.0
        try:
            return float(lowered)
        except ValueError:
            return None
    return None


def span_grade(span: Span, grade_attr: str) -> float | None:
    """The grade `span` carries: its attribute `grade_attr`, else an event of that name (its `value`)."""
    grade = number(span.attributes.get(grade_attr))
    for e in span.events:
        if grade is None and e.name == grade_attr:
            grade = number(e.attributes.get("value", e.attributes.get(grade_attr)))
    return grade


def read_call(span: Span, grade_attr: str = "user.feedback", session_attr: str | None = None) -> GenAICall | Refused:
    """The model call `span` records, or why it is not one that can be trained."""
    a = span.attributes
    op = a.get("gen_ai.operation.name")
    if op is None:
        return Refused("not_genai", f"span {span.span_id} ({span.name!r}) has no gen_ai.operation.name")
    if op not in OPERATIONS:
        return Refused("not_genai", f"span {span.span_id}: gen_ai.operation.name {op!r} is not a model call "
                       f"({', '.join(OPERATIONS)})")
    if len(span.trace_id) != 32 or len(span.span_id) != 16:
        return Refused("malformed_span", f"span {span.span_id!r}: trace and span ids must be 16 and 8 bytes")
    inp, outp = _from_attributes(a)
    if inp is None or outp is None:
        ei, eo = _from_events(span)
        inp, outp = inp or ei, outp or eo
    if not inp or not outp:
        missing = "input" if not inp else "output"
        return Refused("no_content", f"span {span.span_id}: no {missing} messages (capture message content in the "
                       "instrumentation, e.g. OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=span_only)")
    answer = outp[0]
    reasons = a.get("gen_ai.response.finish_reasons")
    finish = answer.get("finish_reason") or (reasons[0] if isinstance(reasons, list) and reasons else None)
    grade = span_grade(span, grade_attr)
    session = a.get(session_attr) if session_attr else None
    return GenAICall(
        trace_id=span.trace_id, span_id=span.span_id, operation=str(op),
        request_model=_str(a.get("gen_ai.request.model")), response_model=_str(a.get("gen_ai.response.model")),
        messages=[{k: v for k, v in m.items() if k != "finish_reason"} for m in inp], answer=answer["content"],
        finish_reason=finish, start_ns=span.start_ns, end_ns=span.end_ns,
        session=str(session) if session is not None else span.trace_id, grade=grade,
        tool_calls=answer.get("tool_calls") or [],
        fingerprint=_str(a.get("openai.response.system_fingerprint", a.get("gen_ai.openai.response.system_fingerprint"))))


def _str(v: Any) -> str | None:
    return v if isinstance(v, str) and v else None


VERSIONED = re.compile(r"^(?P<model>.+)-v(?P<version>\d+)$")


def model_version(call: GenAICall, model: str) -> int | None:
    """The rftbus weight version that answered `call`, or None (an unknown model): `<model>-v<N>` as the response's
    model (an upstream vLLM serving each version as an adapter) is N; `<model>` itself is the version in the
    system fingerprint `rftbus-v<N>` (rftbus serve), else 0 (the base weights)."""
    name = call.response_model or call.request_model
    if not name:
        return None
    m = VERSIONED.match(name)
    if m and m["model"] == model:
        return int(m["version"])
    if name != model:
        return None
    f = re.fullmatch(r"rftbus-v(\d+)", call.fingerprint or "")
    return int(f[1]) if f else 0
