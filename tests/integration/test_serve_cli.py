"""The real `rftbus serve` process and `rftbus feedback post`: tokens from the environment, one
completion, feedback through the proxy and straight to Kafka, SIGTERM exits 0, and no token ever
appears in the log or on any topic."""

from __future__ import annotations

import json
import uuid

import httpx
import pytest
from conftest import make_config, rftbus_cli

from rftbus.ground.kafka.clients import make_admin
from rftbus.ground.kafka.read import read_to_end
from rftbus.ground.kafka.topics import create_topics
from rftbus.apps.bench.processes import ServeProcess
from rftbus.ground.schemas import FeedbackKind, make_codec
from serve_helpers import TOPIC_KEYS, free_port

DECODE = make_codec(None).deserializer()


@pytest.fixture(scope="module")
def proc(broker, tmp_path_factory):
    tag = uuid.uuid4().hex[:6]
    tokens = {"inf": [f"inf-a-{uuid.uuid4().hex}", f"inf-b-{uuid.uuid4().hex}"], "fb": f"fb-{uuid.uuid4().hex}"}
    cfg = make_config(tmp_path_factory.mktemp("serve-cli"), broker.broker.port,
                      **{f"topics.{k}.name": f"sc{tag}.{k}" for k in TOPIC_KEYS},
                      **{"serve.port": free_port(), "serve.id": f"serve-cli-{tag}", "serve.weights_wait_s": 2.0,
                         "explorer.sampling.max_new_tokens": 4})
    create_topics(cfg, make_admin(cfg))
    env = {"RFTBUS_SERVE__INFERENCE_TOKENS": ",".join(tokens["inf"]), "RFTBUS_SERVE__FEEDBACK_TOKENS": tokens["fb"]}
    p = ServeProcess(cfg, cfg.state_dir / "serve.log", env=env)
    try:
        p.wait_ready(120)
        yield cfg, p, tokens
    finally:
        p.stop()


def _cli(cfg, *args, env=None):
    """`rftbus` with the module's config (topics, port) via a config file, like an operator would."""
    path = cfg.state_dir / "cli.yaml"
    data = cfg.model_dump(mode="json")
    data["serve"].pop("inference_tokens"), data["serve"].pop("feedback_tokens")
    path.write_text(json.dumps(data))
    return rftbus_cli(None, "--config", str(path), *args, env=env, timeout=120)


def test_serve_process_records_and_takes_feedback(proc):
    cfg, p, tokens = proc
    c = httpx.Client(base_url=p.url, timeout=60)
    for t in tokens["inf"]:  # both comma-separated tokens work
        assert c.get("/v1/models", headers={"Authorization": f"Bearer {t}"}).status_code == 200
    r = c.post("/v1/chat/completions", headers={"Authorization": f"Bearer {tokens['inf'][1]}"},
               json={"messages": [{"role": "user", "content": "4+4="}], "max_tokens": 3})
    assert r.status_code == 200, r.text
    exp_id = r.headers["X-Rftbus-Experience-Id"]
    # through the proxy: the token comes from the environment, never a flag
    out = _cli(cfg, "feedback", "post", exp_id, "--thumbs", "up", "--url", p.url, "--json",
               env={"RFTBUS_FEEDBACK_TOKEN": tokens["fb"]})
    assert out.returncode == 0, out.stderr
    via_proxy = json.loads(out.stdout)
    assert via_proxy["kind"] == "thumbs" and via_proxy["experience_id"] == exp_id
    out = _cli(cfg, "feedback", "post", exp_id, "--correction", "8", "--url", p.url, "--json",
               env={"RFTBUS_FEEDBACK_TOKEN": tokens["fb"]})
    assert out.returncode == 0, out.stderr
    corrected = json.loads(out.stdout)
    assert corrected["expert_experience_id"] == f"{corrected['feedback_id']}:correction"
    # without the token the proxy says 401 and the command says so in one line
    out = _cli(cfg, "feedback", "post", exp_id, "--reward", "1", "--url", p.url, env={"RFTBUS_FEEDBACK_TOKEN": ""})
    assert out.returncode == 1 and "401" in out.stderr and "RFTBUS_FEEDBACK_TOKEN" in out.stderr
    # straight to Kafka
    out = _cli(cfg, "feedback", "post", exp_id, "--reward", "0.5", "--annotator", "cli", "--json")
    assert out.returncode == 0, out.stderr
    direct = json.loads(out.stdout)
    out = _cli(cfg, "feedback", "post", exp_id, "--rating", "99")
    assert out.returncode == 1 and "rating 99 is outside streams.rating_scale" in out.stderr

    fbs = {f.feedback_id: f for f in (DECODE(m.value(), None) for m in read_to_end(cfg, cfg.topics.feedback.name))}
    assert fbs[via_proxy["feedback_id"]].thumbs_up is True
    assert fbs[corrected["feedback_id"]].kind is FeedbackKind.correction
    assert fbs[direct["feedback_id"]].reward == 0.5 and fbs[direct["feedback_id"]].annotator == "cli"
    assert len(fbs) == 3
    experts = [DECODE(m.value(), None) for m in read_to_end(cfg, cfg.topics.expert.name)]
    assert [e.experience_id for g in experts for e in g.samples] == [corrected["expert_experience_id"]]
    assert experts[0].metadata["corrected_from"] == exp_id


def test_sigterm_exits_cleanly_and_no_token_leaks(proc):
    cfg, p, tokens = proc
    c = httpx.Client(base_url=p.url, timeout=60)
    # a rejected token is not echoed back either
    r = c.post("/v1/completions", headers={"Authorization": "Bearer some-guess-123"}, json={"prompt": "1"})
    assert r.status_code == 401 and "some-guess-123" not in r.text
    assert p.stop() == 0
    log = p.log()
    assert "Application shutdown complete" in log and "serving tiny" in log
    secrets = [*tokens["inf"], tokens["fb"]]
    assert not any(t in log for t in secrets)
    for key in TOPIC_KEYS:
        for m in read_to_end(cfg, getattr(cfg.topics, key).name):
            blob = (m.key() or b"") + (m.value() or b"") + b"".join(v or b"" for _, v in (m.headers() or []))
            assert not any(t.encode() in blob for t in secrets), f"token on {key}"
    status = json.loads((cfg.state_dir / "status" / f"serve-{cfg.serve.id}.json").read_text())
    assert status["state"] == "stopped" and status["completions"] == 1 and status["feedback_published"] == 2
    assert not any(t in json.dumps(status) for t in secrets)


def test_open_scope_on_public_address_refused_by_the_command(broker, tmp_path):
    cfg = make_config(tmp_path, broker.broker.port, **{"serve.port": free_port()})
    out = _cli(cfg, "serve", "--host", "0.0.0.0")
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert "the inference, feedback and read scopes have no tokens" in out.stderr, out.stderr
