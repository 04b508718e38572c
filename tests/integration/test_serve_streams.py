"""What `serve` publishes is what the streams consume: live completions wait for their feedback in a
real `rftbus streams` worker and come out curated with the reward the feedback gave."""

from __future__ import annotations

import time
import uuid

import httpx
from conftest import make_config

from rftbus.ground.kafka.clients import make_admin
from rftbus.ground.kafka.topics import create_topics
from rftbus.producers.serve.server import BackgroundServer
from rftbus.ground.schemas import make_codec
from rftbus.apps.bench.processes import WorkerProcess, read_all
from serve_helpers import TOPIC_KEYS, free_port

DECODE = make_codec(None).deserializer()


def test_live_traffic_is_curated_with_its_feedback(broker, tmp_path):
    tag = uuid.uuid4().hex[:6]
    cfg = make_config(tmp_path, broker.broker.port, **{f"topics.{k}.name": f"ss{tag}.{k}" for k in TOPIC_KEYS}, **{
        "streams.app_id": f"ss{tag}", "streams.tick_interval_s": 0.5, "streams.commit_interval_s": 0.2,
        "streams.version_wait_s": 0.5, "streams.feedback_ttl_s": 120.0,
        "serve.port": free_port(), "serve.weights_wait_s": 2.0, "serve.id": f"serve-{tag}"})
    create_topics(cfg, make_admin(cfg))
    worker = WorkerProcess(cfg, f"w{tag}", tmp_path / "worker.log")
    try:
        worker.wait_ready(120)
        with BackgroundServer(cfg) as s:
            c = httpx.Client(base_url=s.url, timeout=60)
            one = c.post("/v1/completions", json={"prompt": "2+3=", "max_tokens": 4}).headers["X-Rftbus-Experience-Id"]
            pair = c.post("/v1/completions", json={"prompt": "6+1=", "max_tokens": 4, "n": 2}).headers[
                "X-Rftbus-Experience-Id"].split(",")
            assert c.post("/v1/feedback", json={"experience_id": one, "thumbs": "up"}).status_code == 202
            r = c.post("/v1/feedback", json={"preferred_id": pair[1], "rejected_id": pair[0]})
            assert r.status_code == 202
            pair_id = r.json()["feedback_id"]
        deadline = time.monotonic() + 90
        while True:
            curated = [g for role in ("curated", "curated_priority")
                       for g in read_all(cfg, getattr(cfg.topics, role).name, decode=DECODE, idle_s=0.3)]
            got = {e.experience_id: (g, e) for g in curated for e in g.kept()}
            if {one, *pair} <= set(got) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert {one, *pair} <= set(got), worker.tail()
        group, e = got[one]
        assert e.reward == 1.0 and e.metadata["feedback_kind"] == "thumbs"
        assert e.advantage is not None and group.explorer_id == cfg.serve.id  # a group of one: baseline advantage
        (pg, win), (_, lose) = got[pair[1]], got[pair[0]]
        assert (win.reward, lose.reward) == (1.0, 0.0) and pg.metadata["preference_pair"] == pair_id
        assert win.advantage > 0 > lose.advantage
        rejected = read_all(cfg, cfg.topics.rejected.name, decode=DECODE, idle_s=0.3)
        assert not [r for r in rejected if set(r.covers()) & {one, *pair}]
    finally:
        assert worker.stop() == 0, worker.tail()
