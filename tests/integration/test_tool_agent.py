"""#34: a tool-using agent (the OpenAI SDK, two tools, three turns) against `rftbus serve` with the real
SmolLM2-135M-Instruct: every call is recorded as the conversation its chat template renders, tool calls and
`role: tool` results included, and read back with fastavro alone; the loss mask covers the answer only.

SmolLM2-135M's template ignores `tools`, so the conversation is written in the Hermes convention
(rftbus/ground/models/tool_calls.py); this test spells that conversation out by hand and compares byte for byte.
The model itself never emitted a `<tool_call>` in 16 samples (two-shot included), so the agent calls the tools
the model called, else the ones the script names: parsing is tested on strings (tests/unit/test_tool_calls.py).
"""

from __future__ import annotations

import io
import json
import uuid

import fastavro
import pytest
from conftest import make_config

from rftbus.ground.kafka.clients import make_admin
from rftbus.ground.kafka.read import read_to_end
from rftbus.ground.kafka.topics import create_topics
from rftbus.ground.models.loading import load_tokenizer
from rftbus.producers.serve.server import BackgroundServer
from tests.conftest import REPO
from tests.integration.test_serve import TOPIC_KEYS, free_port

TOOLS = [{"type": "function", "function": {"name": "add", "description": "Add two numbers.", "parameters": {
              "type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}}}},
         {"type": "function", "function": {"name": "multiply", "description": "Multiply two numbers.", "parameters": {
              "type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}}}}]
RUN = {"add": lambda a, b: a + b, "multiply": lambda a, b: a * b}
SCRIPT = [("add", {"a": 2, "b": 3}), ("multiply", {"a": 5, "b": 4})]


def hermes(messages: list[dict]) -> list[dict]:
    """The conversation as the Hermes convention writes it, by hand (not through rftbus)."""
    sig = "\n".join(json.dumps(t) for t in TOOLS)
    system = ("# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with "
              f"function signatures within <tools></tools> XML tags:\n<tools>\n{sig}\n</tools>\n\nFor each function "
              "call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:"
              "\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>")
    out = [{"role": "system", "content": system}]
    for m in messages:
        if m["role"] == "tool":
            out.append({"role": "user", "content": f"<tool_response>\n{m['content']}\n</tool_response>"})
        elif m.get("tool_calls"):
            calls = [f"<tool_call>\n{json.dumps({'name': c['function']['name'], 'arguments': json.loads(c['function']['arguments'])})}\n</tool_call>"
                     for c in m["tool_calls"]]
            out.append({"role": "assistant", "content": "\n".join(([m["content"]] if m.get("content") else []) + calls)})
        else:
            out.append({"role": m["role"], "content": m["content"]})
    return out


def fastavro_groups(cfg) -> dict[str, dict]:
    """group_id -> the raw topic's group, read with fastavro alone (single-object encoding: 10-byte header)."""
    schema = fastavro.schema.load_schema(str(REPO / "rftbus" / "ground" / "schemas" / "ExperienceGroup.avsc"))
    out = {}
    for m in read_to_end(cfg, cfg.topics.raw.name, timeout_s=20):
        g = fastavro.schemaless_reader(io.BytesIO(m.value()[10:]), schema, None)
        out[g["group_id"]] = g
    return out


@pytest.mark.timeout(600)
def test_a_tool_using_agent_is_recorded_as_its_template_renders_it(broker, tmp_path, smollm2_folder):
    openai = pytest.importorskip("openai")
    tag = uuid.uuid4().hex[:6]
    cfg = make_config(tmp_path, broker.broker.port, **{f"topics.{k}.name": f"tc{tag}.{k}" for k in TOPIC_KEYS}, **{
        "model.name": "smollm2-135m-instruct", "model.cache_dir": str(smollm2_folder.parent),
        "serve.port": free_port(), "serve.weights_wait_s": 0.0, "explorer.sampling.max_new_tokens": 24})
    create_topics(cfg, make_admin(cfg))
    tok = load_tokenizer(cfg.model)
    messages: list[dict] = [{"role": "user", "content": "What is (2+3)*4? Use the tools."}]
    calls = []  # (group id, the messages it was asked with, the answer's raw text)
    with BackgroundServer(cfg) as s:
        sdk = openai.OpenAI(base_url=s.url + "/v1", api_key="none", max_retries=0)
        for turn in range(3):
            raw = sdk.chat.completions.with_raw_response.create(model="smollm2-135m-instruct", messages=messages,
                                                                tools=TOOLS, temperature=0.7)
            resp = raw.parse()
            msg = resp.choices[0].message
            calls.append((raw.headers["X-Rftbus-Group-Id"], [dict(m) for m in messages], msg))
            if turn == 2:
                break
            made = [(c.function.name, json.loads(c.function.arguments)) for c in msg.tool_calls or []]
            name, args = (made or [SCRIPT[turn]])[0]
            cid = f"call_{turn}"
            messages.append({"role": "assistant", "content": None, "tool_calls": [
                {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]})
            messages.append({"role": "tool", "tool_call_id": cid,
                             "content": str(RUN[name](**args)) if name in RUN else "unknown tool"})
    groups = fastavro_groups(cfg)
    for gid, asked, msg in calls:
        g = groups[gid]
        want = tok.apply_chat_template(hermes(asked), add_generation_prompt=True, tokenize=False)
        assert g["prompt_text"] == want
        assert g["prompt_ids"] == tok(want, add_special_tokens=False)["input_ids"]
        [e] = g["samples"]
        assert len(e["loss_mask"]) == len(e["response_ids"]) == len(e["logprobs"]) and all(e["loss_mask"])
        answer = tok.decode(e["response_ids"], skip_special_tokens=True)
        assert answer == e["response_text"] and (msg.content or "") in answer
        ended = "<|im_end|>" if e["finish_reason"] == "stop" else ""
        # prompt + answer is the conversation the template renders with the answer as the assistant's turn
        full = tok.apply_chat_template(hermes(asked) + [{"role": "assistant", "content": answer}], tokenize=False)
        assert tok.decode(g["prompt_ids"] + e["response_ids"]) == full[:len(want) + len(answer) + len(ended)]
    assert "<tool_response>\n5\n</tool_response>" in groups[calls[1][0]]["prompt_text"]
    assert "<tool_response>\n20\n</tool_response>" in groups[calls[2][0]]["prompt_text"] or \
        calls[1][2].tool_calls  # (the model's own call, when it made one)
