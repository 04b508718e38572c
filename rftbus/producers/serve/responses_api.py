"""OpenAI's Responses API (`POST /v1/responses`, the OpenAI Agents SDK's default) on the chat completions path.

A request becomes a chat request (instructions -> a system message; input text or items -> messages; function
tools -> chat tools) and is answered, recorded and graded exactly as a chat completion is: one group of one
sample, its experience id on the response (`rftbus.experience_ids`, the `X-Rftbus-Experience-Id` header). What
cannot be kept is refused with a 400 naming the field, never ignored: streaming (answer whole), stored
responses (`previous_response_id`: send the items), built-in tools (web search, files, ...), `n`, and a
`text.format` other than text.
"""

from __future__ import annotations

import time
from typing import Any

from pydantic import Field, ValidationError

from rftbus.producers.serve.protocol import ChatRequest, _Request, refuse_unless_text
from rftbus.producers.serve.service import Answer
from rftbus.ground.web.errors import BadRequest, bad_request

ROLES = ("system", "developer", "user", "assistant")


class ResponsesRequest(_Request):
    input: str | list[dict[str, Any]] = Field(min_length=1)
    instructions: str | None = None
    max_output_tokens: int | None = Field(None, ge=1)
    tools: list[dict[str, Any]] | None = Field(None, max_length=128)
    tool_choice: str | dict[str, Any] | None = None
    previous_response_id: str | None = None
    text: dict[str, Any] | None = None

    def refuse_unsupported(self) -> None:
        super().refuse_unsupported()
        if self.stream:
            raise BadRequest("stream is not supported on /v1/responses (the answer comes whole; chat completions "
                             "stream)", param="stream", code="unsupported")
        if self.n != 1:
            raise BadRequest("n is not a Responses API field; one answer per request", param="n")
        if self.previous_response_id:
            raise BadRequest("previous_response_id is not supported: rftbus serve stores no responses; send the "
                             "conversation's items in input", param="previous_response_id", code="unsupported")
        refuse_unless_text((self.text or {}).get("format"), "text.format")

    def limit(self) -> int | None:
        return self.max_output_tokens or self.max_tokens


def _text_of(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for i, part in enumerate(content):
            kind = part.get("type") if isinstance(part, dict) else None
            if kind not in ("input_text", "output_text", "text"):
                raise BadRequest(f"{where}.content.{i}: type {kind!r} is not supported (text parts only)",
                                 param=f"{where}.content", code="unsupported")
            text = part.get("text", "")
            if not isinstance(text, str):
                raise BadRequest(f"{where}.content.{i}.text must be a string", param=f"{where}.content.{i}.text")
            parts.append(text)
        return "".join(parts)
    raise BadRequest(f"{where}.content must be text or a list of text parts", param=f"{where}.content")


def _text_field(item: dict[str, Any], name: str, where: str, required: bool = True) -> str | None:
    """A field of an input item or a tool that must be a string (a 400 naming it otherwise)."""
    v = item.get(name)
    if v is None and not required:
        return None
    if not isinstance(v, str) or not v:
        raise BadRequest(f"{where}.{name} must be a non-empty string", param=f"{where}.{name}")
    return v


def _messages(req: ResponsesRequest) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "system", "content": req.instructions}] if req.instructions else []
    if isinstance(req.input, str):
        return out + [{"role": "user", "content": req.input}]
    for i, item in enumerate(req.input):
        where = f"input.{i}"
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role not in ROLES:
                raise BadRequest(f"{where}.role must be one of {', '.join(ROLES)}", param=f"{where}.role")
            out.append({"role": role, "content": _text_of(item.get("content"), where)})
        elif kind == "function_call":
            args = item.get("arguments") or "{}"
            if not isinstance(args, str):
                raise BadRequest(f"{where}.arguments must be a JSON string", param=f"{where}.arguments")
            call = {"id": _text_field(item, "call_id", where, False) or _text_field(item, "id", where, False),
                    "type": "function", "function": {"name": _text_field(item, "name", where), "arguments": args}}
            last = out[-1] if out else None
            if last is not None and last["role"] == "assistant" and last.get("tool_calls") is not None:
                last["tool_calls"].append(call)  # parallel calls: one assistant turn
            else:
                out.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item.get("output")
            out.append({"role": "tool", "tool_call_id": _text_field(item, "call_id", where),
                        "content": output if isinstance(output, str) else _text_of(output, where)})
        else:
            raise BadRequest(f"{where}: item type {kind!r} is not supported (message, function_call, "
                             "function_call_output)", param=f"{where}.type", code="unsupported")
    return out


def _tools(req: ResponsesRequest) -> list[dict[str, Any]] | None:
    if not req.tools:
        return None
    out = []
    for i, tool in enumerate(req.tools):
        if tool.get("type") != "function":
            raise BadRequest(f"tools.{i}: type {tool.get('type')!r} is not supported (function tools only)",
                             param=f"tools.{i}.type", code="unsupported")
        _text_field(tool, "name", f"tools.{i}")
        _text_field(tool, "description", f"tools.{i}", required=False)
        if tool.get("parameters") is not None and not isinstance(tool["parameters"], dict):
            raise BadRequest(f"tools.{i}.parameters must be a JSON schema object", param=f"tools.{i}.parameters")
        out.append({"type": "function", "function": {k: tool[k] for k in ("name", "description", "parameters")
                                                     if tool.get(k) is not None}})
    return out


def as_chat(req: ResponsesRequest) -> ChatRequest:
    """The chat request a Responses request is answered as (a field that cannot be kept is a 400 first)."""
    req.refuse_unsupported()
    data = {k: v for k, v in req.model_dump(exclude_none=True).items()
            if k in ("model", "temperature", "top_p", "top_k", "stop", "seed", "user", "metadata", "task_id")}
    choice = req.tool_choice if isinstance(req.tool_choice, str) or req.tool_choice is None else "named"
    try:
        return ChatRequest.model_validate({**data, "messages": _messages(req), "tools": _tools(req),
                                           "tool_choice": choice, "max_completion_tokens": req.limit()})
    except ValidationError as e:  # a field the chat request checks further: named in the chat request's terms
        raise bad_request(e, " (in the chat request this Responses request becomes)") from None


def body(a: Answer, model: str) -> dict[str, Any]:
    """The Responses API object for a one-sample answer: a message item, or function_call items."""
    e, text = a.group.samples[0], a.texts[0]
    output: list[dict[str, Any]] = []
    calls = a.tool_calls[0] if a.tool_calls else None
    if text and (not calls or text.strip()):
        output.append({"type": "message", "id": f"msg_{e.experience_id}", "status": "completed", "role": "assistant",
                       "content": [{"type": "output_text", "text": text, "annotations": []}]})
    for j, call in enumerate(calls or []):
        fn = call["function"]
        output.append({"type": "function_call", "id": f"fc_{e.experience_id}_{j}", "status": "completed",
                       "call_id": call.get("id") or f"call_{e.experience_id}_{j}", "name": fn["name"],
                       "arguments": fn["arguments"] if isinstance(fn["arguments"], str) else str(fn["arguments"])})
    p, c = len(a.group.prompt_ids), len(e.response_ids)
    incomplete = a.finish_reason(0) == "length"
    return {"id": f"resp_{a.group.group_id}", "object": "response", "created_at": int(time.time()), "model": model,
            "status": "incomplete" if incomplete else "completed",
            "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
            "output": output, "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
            "usage": {"input_tokens": p, "output_tokens": c, "total_tokens": p + c,
                      "input_tokens_details": {"cached_tokens": 0}, "output_tokens_details": {"reasoning_tokens": 0}},
            "experience_id": e.experience_id,
            "rftbus": {"experience_ids": a.group.experience_ids(), "group_id": a.group.group_id,
                       "model_version": a.version}}
