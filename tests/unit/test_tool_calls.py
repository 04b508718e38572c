"""Tool calls (#34), the logic apart from any model: parsing answers, writing a conversation for a template with
or without tool support, and the stream's framing of an answer that called a tool."""

from __future__ import annotations

import asyncio
import json

import pytest

from rftbus.ground.models.config import ModelConfig
from rftbus.ground.models.prompt import PromptFormat
from rftbus.ground.models.tokenizer import build_char_tokenizer
from rftbus.ground.models.tool_calls import ToolCallError, for_template, parse
from rftbus.producers.engines.base import Completion
from rftbus.producers.serve.records import LivePrompt, RecordIds, live_group
from rftbus.producers.serve.responses import stream
from rftbus.producers.serve.service import Answer

CALL = {"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'}}


def test_answers_are_parsed_for_tool_calls_in_either_format():
    content, calls = parse('Let me add.\n<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>')
    assert content == "Let me add." and [c["function"]["name"] for c in calls] == ["add"]
    assert json.loads(calls[0]["function"]["arguments"]) == {"a": 1, "b": 2} and calls[0]["id"].startswith("call_")
    # SmolLM2's own: a list in one block; an unclosed last block (the stop token ended it)
    _, calls = parse('<tool_call>[{"name": "a", "arguments": {}}, {"name": "b", "arguments": {"x": 1}}]')
    assert [c["function"]["name"] for c in calls] == ["a", "b"]
    for text in ("no call here", "<tool_call>{not json}</tool_call>", '<tool_call>{"arguments": {}}</tool_call>'):
        assert parse(text) == (text, [])  # what does not parse stays the answer's text


def test_a_template_without_tools_gets_the_hermes_convention():
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "1+2?"},
            {"role": "assistant", "content": None, "tool_calls": [CALL, {**CALL, "id": "c2"}]},
            {"role": "tool", "tool_call_id": "c1", "content": "3"}, {"role": "tool", "tool_call_id": "c2", "content": "3"}]
    out = for_template(msgs, [{"type": "function", "function": {"name": "add"}}], native=False)
    assert out[0]["role"] == "system" and out[0]["content"].startswith("Be brief.\n\n# Tools") and '"add"' in out[0]["content"]
    assert out[2] == {"role": "assistant", "content": '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n'
                      '</tool_call>\n<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>'}
    assert out[3] == {"role": "user", "content": "<tool_response>\n3\n</tool_response>\n<tool_response>\n3\n</tool_response>"}
    assert len(out) == 4
    with pytest.raises(ToolCallError, match=r"messages.1.tool_calls.0: arguments are not JSON"):
        for_template([msgs[1], {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{"}}]}],
                     None, native=False)


def test_a_template_with_tools_renders_them_itself():
    tok = build_char_tokenizer()
    tok.chat_template = ("{% for t in tools or [] %}[tool {{ t.function.name }}]{% endfor %}{% for m in messages %}"
                         "<{{ m.role }}>{{ m.content }}{% for c in m.tool_calls or [] %}{{ c.function.name }}"
                         "({{ c.function.arguments.a }}){% endfor %}{% endfor %}{% if add_generation_prompt %}<a>{% endif %}")
    fmt = PromptFormat.for_model(tok, ModelConfig(chat_template=True))
    _, text = fmt.messages([{"role": "user", "content": "q"}, {"role": "assistant", "content": None, "tool_calls": [CALL]},
                            {"role": "tool", "content": "3"}], [{"type": "function", "function": {"name": "add"}}])
    assert text == "[tool add]<user>q<assistant>add(1)<tool>3<a>"  # arguments handed over as an object


def test_a_streamed_tool_call_leaves_as_tool_calls_not_as_text():
    import string

    tok = build_char_tokenizer(string.printable)
    raw = 'ok <tool_call>{"name": "add", "arguments": {"a": 1}}</tool_call>'
    ids = tok(raw, add_special_tokens=False)["input_ids"]

    async def frames() -> list[dict]:
        events: asyncio.Queue = asyncio.Queue()
        for t in ids:
            events.put_nowait(("token", 0, t))
        events.put_nowait(None)
        rec = RecordIds.fresh(1)
        content, calls = parse(raw)
        group = live_group(LivePrompt([1], "p", "t"), [Completion(ids, [-0.1] * len(ids), "stop", raw)], 0, "s", 1.0, {},
                           rec)
        done = asyncio.get_running_loop().create_future()
        done.set_result(Answer(group, [content or ""], [], 0, [calls]))
        out = [f async for f in stream(events, done, rec, "m", tok, True, False, ["<tool_call>"])]
        return [json.loads(f[6:]) for f in out if f.startswith(b"data: {")]

    chunks = asyncio.run(frames())
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text.strip() == "ok" and "<tool" not in text
    [delta] = [c["choices"][0]["delta"]["tool_calls"] for c in chunks if "tool_calls" in c["choices"][0]["delta"]]
    assert delta[0]["index"] == 0 and delta[0]["function"]["name"] == "add"
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
