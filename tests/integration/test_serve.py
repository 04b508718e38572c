"""`rftbus serve` through real HTTP (uvicorn on a local port) and the real broker: completions are
recorded as live Experiences with ids, feedback and corrections land on their topics, auth and body
limits answer 4xx naming the problem, new weights are picked up, an upstream endpoint is forwarded to."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest
from pydantic import SecretStr
from conftest import make_config
from serve_helpers import TOPIC_KEYS, free_port

from rftbus.ground.weights.store_transport import store_url
from rftbus.ground.kafka.clients import make_admin, make_producer
from rftbus.ground.kafka.read import read_to_end
from rftbus.ground.kafka.topics import create_topics
from rftbus.ground.models.loading import load_policy, load_tokenizer
from rftbus.ground.web.auth import OpenScopeRefused, Scope, TokenAuth
from rftbus.producers.serve.server import BackgroundServer
from rftbus.ground.schemas import ExperienceGroup, FeedbackKind, Source, WeightVersion, make_codec
from rftbus.ground.weights import WeightStore

INF, FB = "inf-" + uuid.uuid4().hex, "fb-" + uuid.uuid4().hex
CODEC = make_codec(None)
DECODE = CODEC.deserializer()


def serve_config(tmp, port, tag, **more):
    return make_config(tmp, port, **{f"topics.{k}.name": f"sv{tag}.{k}" for k in TOPIC_KEYS}, **{
        "serve.port": free_port(), "serve.inference_tokens": [INF], "serve.feedback_tokens": [FB],
        "serve.ack_timeout_s": 10.0, "serve.weights_wait_s": 5.0, "serve.id": f"serve-{tag}",
        "serve.max_body_bytes": 4096, "serve.status_interval_s": 0.2, "explorer.sampling.max_new_tokens": 6,
        **more})


@contextmanager
def serving(tmp, broker, **more) -> Iterator[tuple]:
    """(config, server): `serve_config` on the session broker, its own topics created, serve running."""
    cfg = serve_config(tmp, broker.broker.port, uuid.uuid4().hex[:6], **more)
    create_topics(cfg, make_admin(cfg))
    with BackgroundServer(cfg) as server:
        yield cfg, server


@pytest.fixture(scope="module")
def env(broker, tmp_path_factory):
    with serving(tmp_path_factory.mktemp("serve"), broker) as both:
        yield both


def client(server, token=INF) -> httpx.Client:
    return httpx.Client(base_url=server.url, timeout=60, headers={"Authorization": f"Bearer {token}"})


def topic(cfg, key: str, want=lambda recs: True, timeout=30.0) -> list:
    """(key, record) of a topic, polled until `want` holds."""
    deadline = time.monotonic() + timeout
    while True:
        recs = [(m.key().decode() if m.key() else None, DECODE(m.value(), None))
                for m in read_to_end(cfg, getattr(cfg.topics, key).name, strict=False, timeout_s=10)]
        if want(recs) or time.monotonic() > deadline:
            return recs
        time.sleep(0.3)


class Recorded:
    """One recorded experience seen with its group: the sample's fields, else the group's."""

    def __init__(self, group: ExperienceGroup, index: int):
        self.group, self.sample_index, self.group_size = group, index, len(group.samples)
        self.sample = group.samples[index]
        self.metadata = {**group.metadata, **self.sample.metadata}  # request's, then the completion's own

    def __getattr__(self, name):
        return getattr(self.sample, name) if hasattr(self.sample, name) else getattr(self.group, name)


def flat(recs) -> list[tuple[str, Recorded]]:
    return [(key, Recorded(g, i)) for key, g in recs if isinstance(g, ExperienceGroup) for i in range(len(g.samples))]


def recorded(cfg, ids: list[str]) -> dict[str, Recorded]:
    recs = topic(cfg, "raw", lambda rs: set(ids) <= {e.experience_id for _, e in flat(rs)})
    out = {}
    for key, e in flat(recs):
        if e.experience_id in ids:
            assert key == e.group_id  # the Kafka key, as the streams expect
            out[e.experience_id] = e
    assert set(out) == set(ids), f"not recorded: {set(ids) - set(out)}"
    return out


def test_completion_is_recorded_with_its_id(env):
    cfg, server = env
    tok = load_tokenizer(cfg.model)
    r = client(server).post("/v1/completions", json={"model": "tiny", "prompt": "12+30=", "max_tokens": 5,
                                                     "logprobs": 1, "temperature": 0.7})
    assert r.status_code == 200, r.text
    body = r.json()
    [choice] = body["choices"]
    exp_id = r.headers["X-Rftbus-Experience-Id"]
    assert exp_id == choice["experience_id"] == body["rftbus"]["experience_ids"][0]
    e = recorded(cfg, [exp_id])[exp_id]
    assert e.source is Source.live and e.reward is None and e.model_version == 0
    assert e.explorer_id == cfg.serve.id and e.group_size == 1 and e.sample_index == 0
    assert e.prompt_ids == tok("12+30=", add_special_tokens=False)["input_ids"] and e.prompt_text == "12+30="
    assert 0 < len(e.response_ids) <= 5 and len(e.logprobs) == len(e.loss_mask) == len(e.response_ids) and all(e.loss_mask)
    assert e.logprobs == pytest.approx(choice["logprobs"]["token_logprobs"]) and all(lp <= 0 for lp in e.logprobs)
    assert tok.decode(e.response_ids, skip_special_tokens=True) == choice["text"] == e.response_text
    assert e.task_id.startswith("live:") and e.metadata["endpoint"] == "completions"
    assert e.metadata["logprob_temperature"] == "0.7" and e.finish_reason == choice["finish_reason"]
    assert body["usage"]["prompt_tokens"] == 6 and body["usage"]["completion_tokens"] == len(e.response_ids)


def test_chat_with_the_openai_sdk_stream_and_groups(env):
    openai = pytest.importorskip("openai")
    cfg, server = env
    sdk = openai.OpenAI(base_url=server.url + "/v1", api_key=INF, max_retries=0)
    assert [m.id for m in sdk.models.list().data] == ["tiny"]
    raw = sdk.chat.completions.with_raw_response.create(
        model="tiny", messages=[{"role": "user", "content": "7+8="}], n=3, max_tokens=4,
        extra_body={"task_id": "chat-task-1", "metadata": {"agent": "sdk-test"}})
    resp = raw.parse()
    ids = raw.headers["X-Rftbus-Experience-Id"].split(",")
    assert len(ids) == 3 and [c.experience_id for c in resp.choices] == ids
    recs = recorded(cfg, ids)
    assert {e.group_id for e in recs.values()} == {resp.rftbus["group_id"]}  # one request with n = one group
    assert sorted(e.sample_index for e in recs.values()) == [0, 1, 2] and {e.group_size for e in recs.values()} == {3}
    assert {e.task_id for e in recs.values()} == {"chat-task-1"} and recs[ids[0]].metadata["agent"] == "sdk-test"
    for c in resp.choices:
        assert recs[c.experience_id].response_text == c.message.content
    # streaming: the SDK parses the chunks; the id is in the header before the first chunk
    with sdk.chat.completions.with_streaming_response.create(
            model="tiny", messages=[{"role": "user", "content": "1+1="}], max_tokens=6, stream=True,
            stream_options={"include_usage": True}) as s:
        exp_id = s.headers["X-Rftbus-Experience-Id"]
        chunks = list(s.parse())
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finals = [c.choices[0] for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finals) == 1 and finals[0].experience_id == exp_id
    assert chunks[-1].usage is not None and chunks[-1].usage.prompt_tokens == 4
    assert recorded(cfg, [exp_id])[exp_id].response_text == text
    # /v1/completions streams too, n choices by index, each closed by its own final chunk with its id
    with sdk.completions.with_streaming_response.create(model="tiny", prompt="2+5=", n=2, max_tokens=5,
                                                        stream=True) as s:
        ids = s.headers["X-Rftbus-Experience-Id"].split(",")
        chunks = list(s.parse())
    texts = {i: "".join(c.choices[0].text for c in chunks if c.choices and c.choices[0].index == i) for i in (0, 1)}
    finals = {c.choices[0].index: c.choices[0] for c in chunks if c.choices and c.choices[0].finish_reason}
    assert len(ids) == 2 and [finals[i].experience_id for i in (0, 1)] == ids
    recs = recorded(cfg, ids)
    assert [recs[ids[i]].response_text for i in (0, 1)] == [texts[0], texts[1]]


def test_feedback_of_every_kind_arrives_on_the_feedback_topic(env):
    cfg, server = env
    c = client(server)
    ids = c.post("/v1/completions", json={"prompt": "3+4=", "n": 4, "max_tokens": 4}).headers[
        "X-Rftbus-Experience-Id"].split(",")
    recs = recorded(cfg, ids)
    f = client(server, FB)
    bodies = [{"experience_id": ids[0], "reward": 0.25, "annotator": "grader-1"},
              {"experience_id": ids[1], "rating": 4},
              {"experience_id": ids[2], "thumbs": "down"},
              {"preferred_id": ids[3], "rejected_id": ids[2]},
              {"experience_id": ids[3], "correction": "7", "feedback_id": "fb-fixed-1"}]
    answers = []
    for b in bodies:
        r = f.post("/v1/feedback", json=b)
        assert r.status_code == 202, r.text
        answers.append(r.json())
    want = {a["feedback_id"] for a in answers}
    got = {fb.feedback_id: (k, fb) for k, fb in topic(cfg, "feedback", lambda rs: want <= {x.feedback_id for _, x in rs})
           if fb.feedback_id in want}
    assert set(got) == want
    by_kind = {fb.kind: (k, fb) for k, fb in got.values()}
    assert by_kind[FeedbackKind.reward][1].reward == 0.25 and by_kind[FeedbackKind.reward][1].annotator == "grader-1"
    assert by_kind[FeedbackKind.rating][1].rating == 4.0 and by_kind[FeedbackKind.thumbs][1].thumbs_up is False
    k, pref = by_kind[FeedbackKind.preference]
    assert (pref.preferred_id, pref.rejected_id, pref.experience_id, k) == (ids[3], ids[2], ids[3], ids[3])
    for key, fb in got.values():
        assert key == fb.experience_id  # keyed by experience id: what the streams' join expects
    # the correction also became a demonstration of the recorded prompt on the expert topic
    k, corr = by_kind[FeedbackKind.correction]
    assert corr.feedback_id == "fb-fixed-1" and corr.correction == "7"
    expert_id = answers[-1]["expert_experience_id"]
    assert expert_id == "fb-fixed-1:correction"
    [(key, demo)] = [(k2, e) for k2, e in flat(topic(cfg, "expert", lambda rs: any(
        e.experience_id == expert_id for _, e in flat(rs)))) if e.experience_id == expert_id]
    tok = load_tokenizer(cfg.model)
    assert demo.source is Source.expert and demo.prompt_ids == recs[ids[3]].prompt_ids and demo.reward == 1.0
    assert demo.response_ids == tok("7", add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    assert demo.logprobs == [0.0] * len(demo.response_ids) and all(demo.loss_mask) and key == demo.group_id
    assert demo.task_id == recs[ids[3]].task_id and demo.group.metadata["corrected_from"] == ids[3]
    # a correction for an experience this server never recorded needs the prompt
    r = f.post("/v1/feedback", json={"experience_id": "unknown-exp", "correction": "x"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "prompt"
    r = f.post("/v1/feedback", json={"experience_id": "unknown-exp", "correction": "19", "prompt": "12+7="})
    assert r.status_code == 202 and r.json()["expert_experience_id"].endswith(":correction")


def test_tokens_and_scopes(env):
    _, server = env
    bare = httpx.Client(base_url=server.url, timeout=30)
    r = bare.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "1+1="}]})
    assert r.status_code == 401 and "missing bearer token" in r.json()["error"]["message"]
    assert r.headers["WWW-Authenticate"] == "Bearer"
    assert bare.get("/v1/models").status_code == 401
    assert bare.post("/v1/feedback", json={"experience_id": "a", "reward": 1}).status_code == 401
    wrong = client(server, "not-a-real-token")
    assert wrong.post("/v1/completions", json={"prompt": "1"}).json()["error"]["code"] == "invalid_token"
    r = client(server, INF).post("/v1/feedback", json={"experience_id": "a", "reward": 1})
    assert r.status_code == 403 and "feedback scope" in r.json()["error"]["message"]
    assert client(server, FB).post("/v1/completions", json={"prompt": "1"}).status_code == 403
    # authentication comes before the body is even parsed
    assert bare.post("/v1/completions", content=b"{not json").status_code == 401


@pytest.mark.parametrize("path,body,status,names", [
    ("/v1/chat/completions", {"messages": []}, 400, "messages"),
    ("/v1/chat/completions", {"messages": [{"role": "robot", "content": "hi"}]}, 400, "messages.0.role"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": "many"}, 400, "max_tokens"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "temperature": 9}, 400, "temperature"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function"}]}, 400, "tools"),
    ("/v1/chat/completions", {"model": "gpt-9", "messages": [{"role": "user", "content": "hi"}]}, 404, "model"),
    ("/v1/completions", {"prompt": "1+1=", "n": 99}, 400, "n"),
    ("/v1/completions", {"prompt": "1+1=", "max_tokens": 61}, 400, "max_tokens"),  # over the tiny model's context
    ("/v1/completions", {"prompt": [1, 2, 99999]}, 400, "prompt"),
    ("/v1/completions", {"prompt": ""}, 400, "prompt"),
    ("/v1/completions", {}, 400, "prompt"),
    ("/v1/feedback", {"experience_id": "e1"}, 400, "exactly one of"),
    ("/v1/feedback", {"experience_id": "e1", "reward": 1, "thumbs": "up"}, 400, "got reward, thumbs"),
    ("/v1/feedback", {"experience_id": "e1", "rating": 11}, 400, "rating"),
    ("/v1/feedback", {"experience_id": "e1", "thumbs": "sideways"}, 400, "thumbs"),
    ("/v1/feedback", {"reward": 1}, 400, "experience_id"),
    ("/v1/feedback", {"experience_id": "bad id!", "reward": 1}, 400, "experience_id"),
    ("/v1/feedback", {"experience_id": "e1", "reward": 1, "score": 3}, 400, "score"),
    ("/v1/feedback", {"preferred_id": "a", "rejected_id": "a"}, 400, "must differ"),
])
def test_malformed_bodies_get_4xx_naming_the_field(env, path, body, status, names):
    _, server = env
    r = client(server, FB if path == "/v1/feedback" else INF).post(path, json=body)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert names in err["message"], err
    if names.replace(".", "").isalnum():
        assert err["param"] == names or names in err["message"]


def test_oversized_and_broken_bodies(env):
    _, server = env
    c = client(server)
    big = {"messages": [{"role": "user", "content": "1" * 5000}]}
    r = c.post("/v1/chat/completions", json=big)
    assert r.status_code == 413 and "serve.max_body_bytes is 4096" in r.json()["error"]["message"]

    def chunked():  # no Content-Length: the limit is enforced on what arrives
        for _ in range(10):
            yield b"x" * 1000
    r = c.post("/v1/completions", content=chunked())
    assert r.status_code == 413 and "over" in r.json()["error"]["message"]
    r = c.post("/v1/completions", content=b'{"prompt": "1+1=", ')
    assert r.status_code == 400 and "not valid JSON" in r.json()["error"]["message"]


def test_new_weight_version_is_picked_up(env, tmp_path):
    cfg, server = env
    tok = load_tokenizer(cfg.model)
    state = {k: v + 0.01 for k, v in load_policy(cfg.model, tok).state_dict().items()}
    saved = WeightStore(store_url(cfg)).save(cfg.model.name, 1, state)
    rec = WeightVersion(model=cfg.model.name, version=1, step=1, uri=saved.uri, sha256=saved.sha256, bytes=saved.bytes)
    p = make_producer(cfg)
    p.produce(cfg.topics.weights.name, key=rec.model, value=CODEC.encode(rec, None))
    p.flush(10)
    c = client(server)
    deadline = time.monotonic() + 60
    while c.get("/v1/models").json()["data"][0]["model_version"] != 1:
        assert time.monotonic() < deadline, "serve did not load v1"
        time.sleep(0.2)
    r = c.post("/v1/completions", json={"prompt": "5+5=", "max_tokens": 3})
    assert r.headers["X-Rftbus-Model-Version"] == "1"
    exp_id = r.headers["X-Rftbus-Experience-Id"]
    assert recorded(cfg, [exp_id])[exp_id].model_version == 1
    got = server.service.engine.model.state_dict()
    assert all((got[k] == state[k]).all() for k in state)


def test_forwarding_to_an_upstream_endpoint(env, tmp_path):
    """serve B runs no model: it forwards to serve A (an OpenAI-compatible endpoint with logprobs) and
    records exactly the tokens A sampled."""
    cfg, upstream = env
    bcfg = cfg.model_copy(update={"serve": cfg.serve.model_copy(update={
        "port": free_port(), "id": cfg.serve.id + "-b",
        "engine": cfg.explorer.engine.model_copy(update={"kind": "openai", "base_url": upstream.url + "/v1",
                                                          "api_key": SecretStr(INF)})})})
    with BackgroundServer(bcfg) as b:
        r = client(b).post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "2+2="}],
                                                         "max_tokens": 4, "n": 2})
        assert r.status_code == 200, r.text
    ids = r.headers["X-Rftbus-Experience-Id"].split(",")
    mine = recorded(cfg, ids)
    assert {e.explorer_id for e in mine.values()} == {bcfg.serve.id}
    theirs = [e for _, e in flat(topic(cfg, "raw")) if e.explorer_id == cfg.serve.id
              and e.prompt_ids == mine[ids[0]].prompt_ids and e.group_size == 2]
    upstream_lps = {tuple(e.response_ids): e.logprobs for e in theirs[-2:]}
    assert sorted(upstream_lps) == sorted(tuple(e.response_ids) for e in mine.values())
    for e in mine.values():
        assert e.logprobs == pytest.approx(upstream_lps[tuple(e.response_ids)], abs=1e-6)
    assert {e.metadata["logprob_kind"] for e in mine.values()} == {"endpoint"}
    # an upstream that is down: 502 naming it, and nothing recorded
    dead = bcfg.model_copy(update={"serve": bcfg.serve.model_copy(update={
        "port": free_port(), "engine": bcfg.serve.engine.model_copy(update={"base_url": f"http://127.0.0.1:{free_port()}/v1"})})})
    with BackgroundServer(dead) as d:
        r = client(d).post("/v1/completions", json={"prompt": "1+1="})
        assert r.status_code == 502 and dead.serve.engine.base_url in r.json()["error"]["message"]
        assert d.service.records.delivered == 0


def test_feedback_from_python(env):
    from rftbus.producers.feedback import FeedbackClient, FeedbackNotAccepted, publish_feedback

    cfg, server = env
    exp_id = client(server).post("/v1/completions", json={"prompt": "9+9="}).headers["X-Rftbus-Experience-Id"]
    a = publish_feedback(cfg, experience_id=exp_id, thumbs="up", annotator="env:calc")
    with FeedbackClient(cfg) as fc:
        b = fc.correction(exp_id, "18", prompt="9+9=")
        with pytest.raises(FeedbackNotAccepted, match="rating"):
            fc.rating(exp_id, 42)
        with pytest.raises(FeedbackNotAccepted, match="prompt"):
            fc.correction(exp_id, "18")
    fbs = {f.feedback_id: f for _, f in topic(cfg, "feedback", lambda rs: {a.feedback.feedback_id,
                                                                            b.feedback.feedback_id} <= {x.feedback_id for _, x in rs})}
    assert fbs[a.feedback.feedback_id].thumbs_up is True and fbs[a.feedback.feedback_id].annotator == "env:calc"
    assert fbs[b.feedback.feedback_id].kind is FeedbackKind.correction
    want = b.expert.samples[0].experience_id
    experts = {e.experience_id for _, e in flat(topic(cfg, "expert", lambda rs: any(
        e.experience_id == want for _, e in flat(rs))))}
    assert want in experts


def test_kafka_unreachable_gives_503_and_buffer_is_bounded(tmp_path):
    """No broker at the bootstrap address: feedback and kafka-acked completions are refused with 503;
    in buffered mode answers go out until the bounded buffer is full, then 503."""
    dead = free_port()
    cfg = make_config(tmp_path, dead, **{"serve.port": free_port(), "serve.ack_timeout_s": 1.5,
                                         "serve.weights_wait_s": 0.0, "explorer.sampling.max_new_tokens": 3})
    with BackgroundServer(cfg) as s:
        c = httpx.Client(base_url=s.url, timeout=60)
        t0 = time.monotonic()
        r = c.post("/v1/feedback", json={"experience_id": "e1", "reward": 1.0})
        assert r.status_code == 503 and "did not acknowledge" in r.json()["error"]["message"]
        assert time.monotonic() - t0 < 10
        r = c.post("/v1/completions", json={"prompt": "1+1="})
        assert r.status_code == 503 and r.json()["error"]["code"] == "kafka_unavailable"
        assert "X-Rftbus-Experience-Id" not in r.headers
    bcfg = cfg.model_copy(update={"serve": cfg.serve.model_copy(update={
        "port": free_port(), "record_ack": "buffered", "buffer_max_bytes": 4096})})
    with BackgroundServer(bcfg) as s:
        c = httpx.Client(base_url=s.url, timeout=60)
        codes = [c.post("/v1/completions", json={"prompt": "1+1="}).status_code for _ in range(40)]
        assert codes[0] == 200 and codes[-1] == 503 and codes.index(503) > 3
        assert 503 not in codes[:codes.index(503)] and set(codes[codes.index(503):]) == {503}
        assert s.service.records.inflight_bytes <= 4096
        r = c.post("/v1/completions", json={"prompt": "1+1="})
        assert "buffer full" in r.json()["error"]["message"]


def test_open_scope_on_a_public_address_is_refused():
    auth = TokenAuth([], [SecretStr(FB)])
    with pytest.raises(OpenScopeRefused, match="inference scope has no tokens"):
        auth.check_exposure("0.0.0.0", allow_open=False, used={Scope.inference, Scope.feedback})
    with pytest.raises(OpenScopeRefused, match="inference, read and weights scopes have no tokens"):
        auth.check_exposure("0.0.0.0", allow_open=False)  # the studio mounted: its read scope too
    auth.check_exposure("127.0.0.1", allow_open=False)
    auth.check_exposure("::1", allow_open=False)
    auth.check_exposure("0.0.0.0", allow_open=True)


def test_a_stream_sends_tokens_as_they_are_sampled_and_a_client_that_leaves_still_gets_recorded(env):
    """#34: the first token leaves long before the answer is complete (the record is written at the end and
    named in the headers from the start); a client that disconnects after two chunks leaves a whole record."""
    import json

    cfg, server = env
    body = {"prompt": "1+2=", "max_tokens": 56, "temperature": 1.0, "stream": True}
    for _ in range(8):  # until a sample runs long enough to show streaming (a random model may end at once)
        arrivals: list[float] = []
        with client(server).stream("POST", "/v1/completions", json=body) as r:
            t0 = time.perf_counter()
            exp_id = r.headers["X-Rftbus-Experience-Id"]
            version = int(r.headers["X-Rftbus-Model-Version"])
            for line in r.iter_lines():
                if line.startswith("data: {"):
                    arrivals.append(time.perf_counter() - t0)
                    last = json.loads(line[6:])
        e = recorded(cfg, [exp_id])[exp_id]
        assert last["choices"][0]["experience_id"] == exp_id and last["rftbus"]["experience_ids"] == [exp_id]
        assert last["rftbus"]["model_version"] == version == e.model_version
        if len(e.response_ids) >= 30:
            break
    assert len(e.response_ids) >= 30, "no sample ran 30 tokens in 8 tries"
    assert len(arrivals) >= len(e.response_ids) // 2, (len(arrivals), len(e.response_ids))
    assert arrivals[0] < 0.5 * arrivals[-1], (arrivals[0], arrivals[-1])
    print(f"stream: {len(e.response_ids)} tokens, first at {arrivals[0] * 1000:.0f} ms, last at {arrivals[-1] * 1000:.0f} ms")
    # a client that goes away mid-answer: the answer is still generated, recorded whole, and gradeable
    with client(server).stream("POST", "/v1/chat/completions", json={
            "messages": [{"role": "user", "content": "3+4="}], "max_tokens": 40, "stream": True}) as r:
        left_id = r.headers["X-Rftbus-Experience-Id"]
        seen = 0
        for line in r.iter_lines():
            seen += line.startswith("data: {")
            if seen == 2:
                break
    e = recorded(cfg, [left_id])[left_id]
    assert e.response_ids and len(e.logprobs) == len(e.response_ids) and e.response_text is not None
    fb = client(server, FB).post("/v1/feedback", json={"experience_id": left_id, "reward": 1.0})
    assert fb.status_code == 202, fb.text


def test_the_llm_synthesizer_asks_an_openai_compatible_endpoint(env, monkeypatch):
    """The built-in `llm` synthesizer through the OpenAI SDK against a real endpoint (serve, here on the tiny
    model): it solves a prompt n times for the stage's consistency check, and its request for a variant reaches the
    endpoint, which refuses it with a reason (the instructions do not fit the tiny model's 64-token context): the
    stage counts such a synthesizer error and goes on (test_synthesis.py)."""
    import openai

    from rftbus.ground.schemas import Task
    from rftbus.producers.synthesis.base import Outcome
    from rftbus.producers.synthesis.llm import LLMSynthesizer

    cfg, server = env
    monkeypatch.setenv("SYNTH_TEST_KEY", INF)
    syn = LLMSynthesizer(base_url=f"{server.url}/v1", model=cfg.model.name, api_key_env="SYNTH_TEST_KEY",
                         max_tokens=6)
    solutions = syn.solve("12+30=", 3)
    assert len(solutions) == 3 and all(isinstance(s, str) for s in solutions)
    parent = Task(task_id="p1", taskset="addition", prompt="12+30=", answer="42")
    with pytest.raises(openai.BadRequestError, match="over the model's context"):
        syn(parent, Outcome("p1", (0.0, 0.0), 0, "easier"))
    with pytest.raises(openai.AuthenticationError):
        LLMSynthesizer(base_url=f"{server.url}/v1", model=cfg.model.name).solve("1+1=", 1)  # no key: refused
