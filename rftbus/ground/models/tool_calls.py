"""Tools in a conversation: rendered by the model's chat template, and tool calls parsed out of its answers.

A template that renders tools itself (Qwen2.5, Llama 3.1, ...: it reads the `tools` variable) gets them as
Hugging Face passes them: `tools=` and assistant messages with `tool_calls` whose arguments are objects. A
template that does not (SmolLM2-135M-Instruct's) gets the Hermes / Qwen2.5 convention written into the
conversation: the tool signatures in the system message, each call as `<tool_call>{"name", "arguments"}
</tool_call>` in the assistant's text, each tool result as `<tool_response>` in a user turn. Answers are
parsed for `<tool_call>` blocks holding a JSON object or a list of them (SmolLM2's own function-calling
format is the list).
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

TOOLS_SYSTEM = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{tools}\n</tools>\n\n"
    "For each function call, return a json object with function name and arguments within <tool_call></tool_call>"
    " XML tags:\n<tool_call>\n{{\"name\": <function-name>, \"arguments\": <args-json-object>}}\n</tool_call>")
CALL_OPEN = "<tool_call>"
_BLOCK = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)


class ToolCallError(ValueError):
    """A conversation's tool call or result that cannot be rendered (names the message)."""


def template_renders_tools(tokenizer: Any) -> bool:
    template = getattr(tokenizer, "chat_template", None) or ""
    return "tools" in (template if isinstance(template, str) else json.dumps(template))


def arguments(raw: Any, where: str) -> dict:
    """A call's arguments as an object (OpenAI sends a JSON string)."""
    if isinstance(raw, dict):
        return raw
    try:
        value = json.loads(raw or "{}")
    except (TypeError, json.JSONDecodeError) as e:
        raise ToolCallError(f"{where}: arguments are not JSON ({e})") from None
    if not isinstance(value, dict):
        raise ToolCallError(f"{where}: arguments must be a JSON object")
    return value


def call_text(name: str, args: dict) -> str:
    return f"{CALL_OPEN}\n{json.dumps({'name': name, 'arguments': args})}\n</tool_call>"


def for_template(msgs: list[dict], tools: list[dict] | None, native: bool) -> list[dict]:
    """The messages a chat template is given: tool calls' arguments as objects (native), or the conversation
    written in the Hermes convention (a template that ignores tools)."""
    out: list[dict] = []
    for i, m in enumerate(msgs):
        calls = m.get("tool_calls") or []
        parsed = [(c["function"]["name"], arguments(c["function"].get("arguments"), f"messages.{i}.tool_calls.{j}"))
                  for j, c in enumerate(calls)]
        if native:
            if calls:
                m = {**m, "content": m.get("content") or "", "tool_calls": [
                    {"type": "function", "id": c.get("id"), "function": {"name": n, "arguments": a}}
                    for c, (n, a) in zip(calls, parsed)]}
            out.append(m)
            continue
        if m["role"] == "tool":
            block = f"<tool_response>\n{m.get('content') or ''}\n</tool_response>"
            if out and out[-1].get("_tool_results"):  # consecutive results: one user turn (Qwen2.5's rendering)
                out[-1]["content"] += "\n" + block
            else:
                out.append({"role": "user", "content": block, "_tool_results": True})
            continue
        if calls:
            text = "\n".join([*([m["content"]] if m.get("content") else []), *(call_text(n, a) for n, a in parsed)])
            m = {"role": "assistant", "content": text}
        out.append({k: v for k, v in m.items() if k in ("role", "content")})
    if tools and not native:
        block = TOOLS_SYSTEM.format(tools="\n".join(json.dumps(t) for t in tools))
        if out and out[0]["role"] == "system":
            out[0] = {"role": "system", "content": f"{out[0]['content']}\n\n{block}"}
        else:
            out.insert(0, {"role": "system", "content": block})
    return [{k: v for k, v in m.items() if k != "_tool_results"} for m in out]


def parse(text: str) -> tuple[str | None, list[dict]]:
    """(content, OpenAI tool_calls) of an answer. Blocks that do not parse stay in the content as text."""
    calls: list[dict] = []
    kept = text
    for m in _BLOCK.finditer(text):
        try:
            value = json.loads(m.group(1))
        except json.JSONDecodeError:
            continue
        items = value if isinstance(value, list) else [value]
        if not items or not all(isinstance(c, dict) and isinstance(c.get("name"), str) for c in items):
            continue
        for c in items:
            args = c.get("arguments", c.get("parameters", {}))
            calls.append({"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
                          "function": {"name": c["name"], "arguments": args if isinstance(args, str)
                                       else json.dumps(args)}})
        kept = kept.replace(m.group(0), "")
    if not calls:
        return text, []
    return (kept.strip() or None), calls
