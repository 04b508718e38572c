"""Pure logic of the proxy (no broker, no server): tokens, feedback validation, prompts, stop strings,
stream framing, the config section and its environment overrides."""

from __future__ import annotations

import pytest
from pydantic import SecretStr, ValidationError

from rftbus.ground.config import load_config
from rftbus.ground.models.config import ModelConfig
from rftbus.ground.models.prompt import PromptFormat
from rftbus.ground.models.tokenizer import build_char_tokenizer
from rftbus.producers.engines.base import Completion
from rftbus.ground.web.auth import Scope, TokenAuth
from rftbus.ground.web.errors import BadRequest, Forbidden, Unauthorized
from rftbus.ground.grades.request import FeedbackRequest
from rftbus.ground.models.prompt import default_task_id
from rftbus.producers.serve.protocol import (ChatRequest, CompletionRequest, chat_prompt, completion_prompt,
                                             cut_at_stop)
from rftbus.producers.serve.records import LivePrompt, RecentPrompts, live_group
from rftbus.producers.serve.responses import TextStream
from rftbus.ground.schemas import FeedbackKind, Source
from rftbus.ground.grades.rules import grades

TOK = build_char_tokenizer()
FMT = PromptFormat.for_model(TOK, ModelConfig())


def ids(text: str) -> list[int]:
    return TOK(text, add_special_tokens=False)["input_ids"]


def test_tokens_scopes():
    auth = TokenAuth([SecretStr("inference-1"), SecretStr("both-scope")], [SecretStr("feedback-1"), SecretStr("both-scope")])
    auth.check("Bearer inference-1", Scope.inference)
    auth.check("bearer  both-scope", Scope.feedback)
    with pytest.raises(Unauthorized, match="missing"):
        auth.check(None, Scope.inference)
    with pytest.raises(Unauthorized, match="Bearer <token>"):
        auth.check("Basic abc", Scope.inference)
    with pytest.raises(Unauthorized, match="invalid bearer token") as e:
        auth.check("Bearer inference-2", Scope.inference)
    assert "inference-2" not in e.value.message
    with pytest.raises(Forbidden):
        auth.check("Bearer inference-1", Scope.feedback)
    TokenAuth([], []).check(None, Scope.feedback)  # an open scope


def test_token_lists_from_the_environment_and_never_printed():
    cfg = load_config(environ={"RFTBUS_SERVE__INFERENCE_TOKENS": "tok-aaaa1, tok-bbbb2",
                               "RFTBUS_SERVE__FEEDBACK_TOKENS": "tok-cccc3"})
    assert [t.get_secret_value() for t in cfg.serve.inference_tokens] == ["tok-aaaa1", "tok-bbbb2"]
    assert "tok-aaaa1" not in repr(cfg) and "tok-cccc3" not in cfg.model_dump_json()


@pytest.mark.parametrize("body,kind", [
    ({"experience_id": "e1", "reward": -0.5}, FeedbackKind.reward),
    ({"experience_id": "e1", "rating": 5}, FeedbackKind.rating),
    ({"experience_id": "e1", "thumbs": True}, FeedbackKind.thumbs),
    ({"preferred_id": "a", "rejected_id": "b"}, FeedbackKind.preference),
    ({"experience_id": "e1", "correction": "42"}, FeedbackKind.correction),
])
def test_feedback_requests_become_what_the_streams_grade(body, kind):
    fb = FeedbackRequest.model_validate(body).to_record()
    assert fb.kind is kind and fb.experience_id == body.get("experience_id", body.get("preferred_id"))
    gs = grades(fb, (1.0, 5.0))  # the streams accept every record the API produces
    assert len(gs) == (2 if kind is FeedbackKind.preference else 1)


@pytest.mark.parametrize("body,needle", [
    ({"experience_id": "e1"}, "got none"),
    ({"experience_id": "e1", "reward": float("nan")}, "finite"),
    ({"experience_id": "e1", "reward": 1, "correction": "x"}, "got reward, correction"),
    ({"preferred_id": "a"}, "both preferred_id and rejected_id"),
    ({"preferred_id": "a", "rejected_id": "b", "experience_id": "c"}, "must be preferred_id or rejected_id"),
    ({"experience_id": "e1", "reward": 1, "prompt": "p"}, "only used with a correction"),
    ({"experience_id": "e" * 200, "reward": 1}, "experience_id"),
])
def test_bad_feedback_requests(body, needle):
    with pytest.raises(ValidationError, match=needle):
        FeedbackRequest.model_validate(body)


def test_rating_scale_check():
    assert FeedbackRequest(experience_id="e", rating=6).check_rating((1, 5)) is not None
    assert FeedbackRequest(experience_id="e", rating=5).check_rating((1, 5)) is None


def test_the_simulated_follow_up_turn_is_one_serve_takes():
    from rftbus.apps.simulate.runner import follow_up

    turns = follow_up([{"role": "user", "content": "1+2="}], "4")
    assert chat_prompt(FMT, ChatRequest.model_validate({"messages": turns}))[1].endswith("user: wrong\nassistant: ")
    with pytest.raises(BadRequest, match="tool_call_id"):  # what it sent before: refused, every time
        chat_prompt(FMT, ChatRequest.model_validate({"messages": [*turns[:2], {"role": "tool", "content": "wrong"}]}))


def test_prompts():
    req = ChatRequest.model_validate({"messages": [{"role": "user", "content": [{"type": "text", "text": "1+"},
                                                                                {"type": "text", "text": "2="}]}]})
    assert chat_prompt(FMT, req) == (ids("1+2="), "1+2=", [])
    conv = ChatRequest.model_validate({"messages": [{"role": "system", "content": "add"},
                                                    {"role": "user", "content": "1+2="}]})
    assert chat_prompt(FMT, conv)[1] == "system: add\nuser: 1+2=\nassistant: "
    with pytest.raises(BadRequest) as e:
        chat_prompt(FMT, ChatRequest.model_validate({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}))
    assert e.value.param == "messages.0.content.0.type"
    assert completion_prompt(FMT, CompletionRequest(prompt=[5, 6]))[0] == [5, 6]
    assert completion_prompt(FMT, CompletionRequest(prompt=["3+3="]))[0] == ids("3+3=")
    with pytest.raises(BadRequest, match="only one prompt"):
        completion_prompt(FMT, CompletionRequest(prompt=["a", "b"]))
    assert default_task_id(ids("1+1=")) == default_task_id(ids("1+1=")) != default_task_id(ids("1+2="))


def test_response_format_other_than_text_is_refused_by_name_not_ignored():
    """#45: JSON mode was silently ignored: a client relying on it got free text as if it were JSON."""
    ChatRequest.model_validate({"messages": [{"role": "user", "content": "x"}],
                                "response_format": {"type": "text"}}).refuse_unsupported()
    for fmt in ({"type": "json_object"}, {"type": "json_schema", "json_schema": {"name": "a", "schema": {}}}):
        with pytest.raises(BadRequest) as e:
            ChatRequest.model_validate({"messages": [{"role": "user", "content": "x"}],
                                        "response_format": fmt}).refuse_unsupported()
        assert e.value.param == "response_format" and e.value.code == "unsupported"
        assert fmt["type"] in str(e.value)


def test_unsupported_fields_are_refused_by_name():
    CompletionRequest.model_validate({"prompt": "x", "presence_penalty": 0, "top_logprobs": 0}).refuse_unsupported()
    with pytest.raises(BadRequest, match="frequency_penalty") as e:
        CompletionRequest.model_validate({"prompt": "x", "frequency_penalty": 0.5}).refuse_unsupported()
    assert e.value.param == "frequency_penalty"


def test_stop_strings_cut_tokens_after_the_stop_and_text_before_it():
    resp = ids("12=3 and more")
    k, text = cut_at_stop(TOK, resp, [" and", "="])
    assert text == "12" and resp[:k] == ids("12=")
    assert cut_at_stop(TOK, resp, ["zz"]) is None and cut_at_stop(TOK, resp, []) is None


def test_a_stream_sends_text_as_tokens_arrive_and_never_a_stop_string():
    s = TextStream(TOK, [])
    assert [s.add(t) for t in ids("abc d") + [TOK.eos_token_id]] == ["a", "b", "c", " ", "d", ""]
    assert s.finish("abc d") == ""
    # a stop string: its first characters are held back until they cannot be a stop any more
    s = TextStream(TOK, ["xyz"])
    sent = [s.add(t) for t in ids("axybxyzc")]
    assert sent == ["", "", "a", "x", "y", "b", "", ""] and s.stopped
    assert "".join(sent) + s.finish("axyb") == "axyb"  # the final answer ends before the stop
    # the answer the server cut differently than the stream guessed: nothing is sent twice or unsent
    s = TextStream(TOK, [])
    assert "".join(s.add(t) for t in ids("abc")) == "abc"
    assert s.finish("ab") == "" and s.finish("abcd") == "d"


def test_live_group_and_recent_prompts():
    prompt = LivePrompt(ids("1+1="), "1+1=", "t1")
    comps = [Completion(ids("2"), [-0.1], "length", "2", {"logprob_kind": "sampling"}),
             Completion(ids("3x"), [-0.2, -0.3], "stop", "3x", {})]
    g = live_group(prompt, comps, 4, "serve-x", 12.5, {"endpoint": "completions"})
    assert g.source is Source.live and g.task_id == "t1" and g.prompt_ids == prompt.ids and len(g.samples) == 2
    assert all(e.reward is None and e.model_version == 4 for e in g.samples)
    assert g.samples[1].loss_mask == [True, True] and g.metadata == {"endpoint": "completions"}
    assert g.samples[0].metadata == {"logprob_kind": "sampling"}
    recent = RecentPrompts(2)
    for i in range(3):
        recent.add(f"e{i}", prompt)
    assert recent.get("e0") is None and recent.get("e2") is prompt


def test_record_budget_is_all_or_none(tmp_path):
    """A real librdkafka producer pointed at nothing: records wait, the byte budget fills, a batch that
    does not fit is refused whole."""
    from rftbus.ground.kafka.clients import make_producer
    from rftbus.producers.serve.recorder import BufferFull, Recorder

    cfg = load_config(overrides={"state_dir": str(tmp_path), "kafka": {"bootstrap_servers": "127.0.0.1:9"}}, environ={})
    rec = Recorder(make_producer(cfg, **{"message.timeout.ms": 500}), max_bytes=100, name="t").start()
    futs = rec.send_many([("t", b"k", b"x" * 39), ("t", b"k", b"x" * 39)])
    assert rec.inflight_bytes == 80 and rec.inflight == 2
    with pytest.raises(BufferFull, match="80 of 100 bytes"):
        rec.send_many([("t", None, b"x" * 10), ("t", None, b"x" * 11)])
    assert rec.inflight_bytes == 80  # nothing of the refused batch was taken
    for f in futs:  # librdkafka gives up at message.timeout.ms: the callers see it
        with pytest.raises(Exception, match="t:"):
            f.result(timeout=30)
    assert rec.inflight_bytes == 0 and rec.stats()["t_failed"] == 2
    assert rec.close(1.0) == 0


def test_one_rating_rule_over_http_and_kafka():
    from rftbus.ground.schemas import Feedback
    from rftbus.ground.grades.rules import BadFeedback

    scale = (1.0, 5.0)
    for rating in (6.0, 0.5, float("nan")):
        problem = FeedbackRequest.model_construct(rating=rating, experience_id="e1").check_rating(scale)
        assert problem and "streams.rating_scale" in problem
        with pytest.raises(BadFeedback, match="streams.rating_scale"):  # over Kafka: refused, no longer clamped
            grades(Feedback(experience_id="e1", kind=FeedbackKind.rating, rating=rating), scale)
    assert grades(Feedback(experience_id="e1", kind=FeedbackKind.rating, rating=5.0), scale)[0].reward == 1.0


def test_an_episode_grade_is_credited_to_each_call_and_an_ungraded_episode_is_named():
    from rftbus.producers.serve.sessions import Sessions
    from rftbus.ground.schemas.verify import check_limits
    from rftbus.ground.schemas.view import GroupView, SampleView
    from rftbus.ground.config.streams import StreamsConfig

    s = Sessions(max_sessions=2, max_calls=3)
    for turn in range(3):
        assert s.next_turn("a", "me") == turn
        s.recorded("a", turn, [f"e{turn}"])
    with pytest.raises(BadRequest, match="max_calls_per_session"):
        s.next_turn("a", "me")
    req = FeedbackRequest(session_id="a", rating=5, feedback_id="ep1")
    same = req.episode(s.calls("a"), (1, 5), "same", 0.9)
    assert [(f.experience_id, f.kind, f.rating) for f in same] == [(f"e{i}", FeedbackKind.rating, 5) for i in range(3)]
    assert [f.feedback_id for f in same] == ["ep1:0.0", "ep1:1.0", "ep1:2.0"]  # a retried grade: the same records
    disc = FeedbackRequest(session_id="a", thumbs="up").episode(s.calls("a"), (1, 5), "discounted", 0.5)
    assert [f.reward for f in disc] == [0.25, 0.5, 1.0] and {f.metadata["session_id"] for f in disc} == {"a"}
    s.next_turn("x", "other"), s.next_turn("y", "other"), s.next_turn("z", "other")  # another client's budget ...
    assert s.calls("a")  # ... never evicts mine
    s.next_turn("b", "me"), s.next_turn("c", "me")  # only my last two sessions are remembered
    with pytest.raises(Exception, match="no calls recorded"):
        s.calls("a")
    for bad in ({"session_id": "a", "experience_id": "e1", "reward": 1.0}, {"session_id": "a", "correction": "x"}):
        with pytest.raises(ValidationError, match="session_id grades an episode"):
            FeedbackRequest(**bad)
    g = GroupView("g", "t", Source.live, "serve", 3, [SampleView("e", None, 0, {}, 2, 2, 2, True)], {"session_id": "a"}, b"")
    assert check_limits(g, 0, StreamsConfig()).reason == "episode_no_feedback"
    g.metadata = {}
    assert check_limits(g, 0, StreamsConfig()).reason == "no_feedback"


def test_a_session_belongs_to_the_client_that_opened_it():
    from rftbus.ground.web.errors import Forbidden
    from rftbus.producers.serve.sessions import Sessions

    s = Sessions(max_sessions=4, max_calls=2)
    assert s.next_turn("a", "alice") == 0
    for call in (lambda: s.check("a", "mallory"), lambda: s.next_turn("a", "mallory")):
        with pytest.raises(Forbidden, match="opened by another client"):
            call()
    assert s.next_turn("a", "alice") == 1  # mallory's tries neither joined nor used up alice's calls
    with pytest.raises(BadRequest, match="max_calls_per_session"):
        s.check("a", "alice")


# -- serve behind the gate: pins per client, retired versions, a decision whose weights do not load (#63) ------------

class _Loads:
    """A weights follower whose versions load unless named missing."""

    def __init__(self, missing=()):
        self.missing = set(missing)

    def load(self, version):
        from rftbus.ground.errors import RftbusError

        if version in self.missing:
            raise RftbusError(f"no file for v{version}")
        return {"v": version}


def _gated(tmp_path, max_sessions=3, missing=()):
    from rftbus.producers.serve import gated as g
    from tests.conftest import make_config

    cfg = make_config(tmp_path, 9, **{"gate.enabled": True, "trainer.lora": {"r": 2, "alpha": 4,
                                                                              "target_modules": ["q_proj"]}})
    added, removed = [], []
    gv = g.GatedVersions(cfg, lambda name, payload, v: added.append(name), lambda m: None, max_sessions,
                         remove_adapter=removed.append)
    gv.weights = {"": _Loads(missing)}
    return gv, added, removed


def _decide(gv, decision, version, serving, candidate=None):
    from rftbus.ground.schemas import GateDecision

    gv._fold(GateDecision(decision_id=f"{decision}:{version}", model=gv.model, decision=decision, version=version,
                          serving=serving, candidate=candidate, canary_share=0.5 if candidate is not None else 0.0,
                          gate="gate", reason="r"))


def test_pins_are_per_client_and_a_pinned_session_never_changes_version(tmp_path, monkeypatch):
    from rftbus.producers.serve import gated as g

    monkeypatch.setattr(g, "DECISION_WAIT_S", 0.0)
    gv, added, removed = _gated(tmp_path, max_sessions=3)
    _decide(gv, "promote", 0, 0)
    gv._caught_up()
    assert gv.route("mine", client="a").version == 0
    _decide(gv, "canary", 1, 0, 1)
    _decide(gv, "promote", 1, 1)  # v0 retired: still loaded while "mine" is pinned to it
    for i in range(50):  # another client's new sessions never evict a's pin
        gv.route(f"b-{i}", client="b")
    assert gv.route("mine", client="a").version == 0 and "v0" not in removed
    assert len(gv.pins["b"]) == 3  # each client keeps its own last serve.max_sessions
    for i in range(3):  # a's own newer sessions do evict a's oldest
        gv.route(f"a-{i}", client="a")
    _decide(gv, "canary", 2, 1, 2)  # the next decision unloads what nobody is pinned to
    assert "v0" in removed and gv.route("mine", client="a").version in (1, 2)  # a new session now


def test_more_retired_versions_than_the_bound_unload_the_oldest_and_its_sessions_are_told(tmp_path, monkeypatch):
    from rftbus.producers.serve import gated as g

    monkeypatch.setattr(g, "DECISION_WAIT_S", 0.0)
    monkeypatch.setattr(g, "MAX_RETIRED", 2)
    gv, added, removed = _gated(tmp_path, max_sessions=100)
    _decide(gv, "promote", 0, 0)
    gv._caught_up()
    pinned = {}
    for v in range(1, 6):
        pinned[v - 1] = gv.route(f"s{v - 1}", client="a").version
        _decide(gv, "canary", v, v - 1, v)
        _decide(gv, "promote", v, v)
    assert pinned == {v: v for v in range(5)}
    assert removed == ["v0", "v1", "v2"] and len(gv.retired) == 2 and len(gv.loaded) == 3
    with pytest.raises(g.SessionRetired, match="start a new session"):
        gv.route("s0", client="a")
    assert gv.route("s4", client="a").version == 4


def test_a_restart_serves_the_newest_promoted_version_that_loads_and_skips_a_canary_that_does_not(tmp_path,
                                                                                                   monkeypatch):
    from rftbus.producers.serve import gated as g

    monkeypatch.setattr(g, "DECISION_WAIT_S", 0.0)
    gv, added, _ = _gated(tmp_path, missing={0, 2, 3})
    _decide(gv, "promote", 0, 0)
    _decide(gv, "canary", 1, 0, 1)
    _decide(gv, "promote", 1, 1)
    _decide(gv, "canary", 2, 1, 2)
    _decide(gv, "promote", 2, 2)  # its file is gone: the promoted version before it serves
    _decide(gv, "canary", 3, 2, 3)  # not loadable either: no canary, nothing blocked
    assert added == []  # nothing loaded while catching up
    gv._caught_up()
    assert added == ["v1"] and gv.serving.version == 1 and gv.canary is None and gv.given_up == 2
    gv.weights[""].missing.clear()
    _decide(gv, "hold", 3, 2, 3)  # a later decision is not blocked behind one given up
    assert gv.serving.version == 2 and gv.canary.version == 3
