"""#45: `POST /v1/responses` (OpenAI's Responses API, the Agents SDK's default) through the official SDK and real
HTTP: answered and recorded as a chat completion is (the same prompt for the same conversation, an experience id
on the response), function-call items rendered as chat tool calls, and what cannot be kept refused by name."""

from __future__ import annotations

import httpx
import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rftbus.producers.serve.responses_api import body
from rftbus.producers.serve.service import Answer
from rftbus.ground.schemas import Experience, ExperienceGroup, Source
from tests.integration.test_serve import INF, serving, topic

TOOLS_CHAT = [{"type": "function", "function": {"name": "add", "description": "Add.", "parameters": {
    "type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}}}}]
TOOLS_RESPONSES = [{"type": "function", "name": "add", "description": "Add.",
                    "parameters": TOOLS_CHAT[0]["function"]["parameters"]}]


@pytest.fixture(scope="module")
def env(broker, tmp_path_factory):
    with serving(tmp_path_factory.mktemp("responses"), broker) as both:
        yield both


def recorded(cfg, experience_id: str) -> ExperienceGroup:
    recs = topic(cfg, "raw", lambda rs: any(experience_id in r.experience_ids() for _, r in rs))
    return next(r for _, r in recs if experience_id in r.experience_ids())


def test_the_sdk_gets_an_answer_recorded_like_a_chat_completion(env):
    cfg, server = env
    sdk = openai.OpenAI(base_url=server.url + "/v1", api_key=INF, max_retries=0)
    r = sdk.responses.create(model=cfg.model.name, instructions="add", input="1+2=", max_output_tokens=4, metadata={"run": "r1"})
    assert r.object == "response" and r.status in ("completed", "incomplete")
    assert isinstance(r.output_text, str) and r.usage.output_tokens >= 1
    eid = r.model_extra["rftbus"]["experience_ids"][0]
    group = recorded(cfg, eid)
    assert group.source == Source.live and group.metadata["endpoint"] == "responses"
    assert group.metadata["run"] == "r1" and group.samples[0].reward is None  # graded later, by experience id
    chat = httpx.post(server.url + "/v1/chat/completions", headers={"Authorization": f"Bearer {INF}"}, timeout=60,
                      json={"messages": [{"role": "system", "content": "add"}, {"role": "user", "content": "1+2="}],
                            "max_tokens": 4}).json()
    assert recorded(cfg, chat["rftbus"]["experience_ids"][0]).prompt_ids == group.prompt_ids


@pytest.mark.timeout(600)
def test_function_call_items_are_the_chat_conversation_with_tool_calls(broker, tmp_path, smollm2_folder):
    """Tools need a chat template: the real SmolLM2 (the tiny model has none)."""
    with serving(tmp_path, broker, **{"model.name": "smollm2-135m-instruct", "serve.weights_wait_s": 0.0,
                                      "model.cache_dir": str(smollm2_folder.parent)}) as (cfg, server):
        the_same_conversation(cfg, server)


def the_same_conversation(cfg, server) -> None:
    items = [{"role": "user", "content": [{"type": "input_text", "text": "2+3?"}]},
             {"type": "function_call", "call_id": "c1", "name": "add", "arguments": '{"a": 2, "b": 3}'},
             {"type": "function_call_output", "call_id": "c1", "output": "5"}]
    messages = [{"role": "user", "content": "2+3?"},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "5"}]
    h = {"Authorization": f"Bearer {INF}"}
    resp = httpx.post(server.url + "/v1/responses", headers=h, timeout=60,
                      json={"input": items, "tools": TOOLS_RESPONSES, "max_output_tokens": 3})
    chat = httpx.post(server.url + "/v1/chat/completions", headers=h, timeout=60,
                      json={"messages": messages, "tools": TOOLS_CHAT, "max_tokens": 3})
    assert resp.status_code == chat.status_code == 200, (resp.text, chat.text)
    a = recorded(cfg, resp.json()["rftbus"]["experience_ids"][0])
    b = recorded(cfg, chat.json()["rftbus"]["experience_ids"][0])
    assert a.prompt_ids == b.prompt_ids and a.prompt_text == b.prompt_text


@pytest.mark.parametrize("extra, param", [
    ({"stream": True}, "stream"),
    ({"previous_response_id": "resp_1"}, "previous_response_id"),
    ({"tools": [{"type": "web_search"}]}, "tools.0.type"),
    ({"text": {"format": {"type": "json_schema", "name": "x", "schema": {}}}}, "text.format"),
    ({"input": [{"type": "input_image", "image_url": "http://x"}]}, "input.0.type"),
    ({"response_format": {"type": "json_object"}}, "response_format"),
])
def test_what_cannot_be_kept_is_refused_by_name(env, extra, param):
    _cfg, server = env
    r = httpx.post(server.url + "/v1/responses", headers={"Authorization": f"Bearer {INF}"}, timeout=60,
                   json={"input": "1+2=", **extra})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param, r.json()


def test_a_tool_call_answer_is_function_call_items():
    group = ExperienceGroup(task_id="t", explorer_id="s", prompt_ids=[1, 2], source=Source.live, samples=[
        Experience(response_ids=[5, 6, 7], logprobs=[0.0] * 3, loss_mask=[True] * 3, model_version=4)])
    call = {"id": "call_9", "type": "function", "function": {"name": "add", "arguments": '{"a": 1}'}}
    out = body(Answer(group=group, texts=[""], completions=[], version=4, tool_calls=[[call]]), "m")
    assert [o["type"] for o in out["output"]] == ["function_call"]
    assert out["output"][0]["call_id"] == "call_9" and out["output"][0]["arguments"] == '{"a": 1}'
    assert out["usage"] == {"input_tokens": 2, "output_tokens": 3, "total_tokens": 5,
                            "input_tokens_details": {"cached_tokens": 0}, "output_tokens_details": {"reasoning_tokens": 0}}
    assert out["rftbus"]["model_version"] == 4 and out["status"] == "completed"


# Body shapes near the Responses API's: every field of a request and of its items, with values of every JSON type.
_json = st.recursive(st.none() | st.booleans() | st.integers(-3, 3) | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=4),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner,
                                                                                 max_size=3), max_leaves=6)
_kinds = st.sampled_from(["message", "function_call", "function_call_output", "function_call", "input_text", None])
_val = st.none() | st.integers(-2, 2) | st.text(max_size=3) | _json  # a field's value: often of the wrong type
_item = st.fixed_dictionaries({}, optional={
    "type": _kinds | _json, "role": st.sampled_from(["user", "assistant", "system", "tool", "developer"]) | _json,
    "content": _json | st.lists(st.fixed_dictionaries({"type": st.sampled_from(["input_text", "output_text",
                                                                                "input_image"]) | _json},
                                                      optional={"text": _json}), max_size=2),
    "name": _val, "arguments": _val, "call_id": _val, "id": _val, "output": _val})
_tool = st.fixed_dictionaries({}, optional={"type": st.just("function") | _json, "name": _val,
                                            "description": _val, "parameters": _val})
_junk = st.fixed_dictionaries({}, optional={  # the request's own fields, of any type
    "input": st.text(max_size=6) | _json, "instructions": _json, "max_output_tokens": st.integers(-1, 3) | _json,
    "tool_choice": st.sampled_from(["auto", "none", "required"]) | _json, "text": _json, "temperature": _json,
    "stop": _json, "metadata": _json, "model": _json, "n": _json, "stream": _json, "user": _json})
_conversation = st.fixed_dictionaries({"input": st.lists(_item, min_size=1, max_size=3)},  # items and tools
                                      optional={"tools": st.lists(_tool, max_size=2), "instructions": _val})
_body = _junk | _conversation


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(data=_body)
def test_every_malformed_body_is_a_400_naming_its_field_never_a_500(env, data):
    """#63: several malformed bodies escaped as 500 (a validation error of the chat request a Responses request
    becomes). Whatever the shape: 200, or a 4xx in the OpenAI error shape that names the field when it is one."""
    _cfg, server = env
    data = {"max_output_tokens": 2, **data}
    r = httpx.post(server.url + "/v1/responses", headers={"Authorization": f"Bearer {INF}"}, timeout=60, json=data)
    assert r.status_code == 200 or 400 <= r.status_code < 500, (data, r.status_code, r.text)
    if r.status_code != 200:
        err = r.json()["error"]
        assert err["message"] and err["type"], r.text
