"""The run's evaluator scores what the promotion gate puts on canary (gate.eval_candidates), on the real broker with
the tiny model: a canary decision about another trainer's version (its lineage) gets one held-out eval point, on
the metrics topic under that lineage's weights key, where the gate's eval rule reads it; the first trainer's curve
is left alone."""

from __future__ import annotations

import time
import uuid

from rftbus.ground.kafka.clients import make_admin, make_producer
from rftbus.ground.kafka.read import read_to_end
from rftbus.ground.kafka.topics import create_topics
from rftbus.ground.models.lineage import weights_key
from rftbus.apps.run.evaluator import Evaluator
from rftbus.ground.schemas import GateDecision, TrainerMetric
from tests.integration.test_serve import CODEC, serve_config
from tests.integration.test_serve_gate import LORA, publish_adapter


def test_each_canary_candidate_of_any_lineage_is_scored_once_under_its_key(broker, tmp_path):
    cfg = serve_config(tmp_path, broker.broker.port, uuid.uuid4().hex[:6], **{
        "gate.enabled": True, "trainer.lora": LORA, "run.eval_n": 4, "run.eval_nice": 0,
        "run.trainers": [{"lineage": "hot"}]})
    create_topics(cfg, make_admin(cfg))
    publish_adapter(cfg, 0, 0.0)
    publish_adapter(cfg, 2, 0.05, lineage="hot")
    p = make_producer(cfg)
    seed = GateDecision(decision_id=f"{cfg.model.name}:v0:promote", model=cfg.model.name, decision="promote",
                        version=0, serving=0, gate=cfg.gate.id, reason="test")
    p.produce(cfg.topics.decisions.name, key=seed.model.encode(), value=CODEC.encode(seed, None))
    for _ in range(2):  # a decision read twice (a restarted gate wrote it again) is scored once
        d = GateDecision(decision_id=f"{cfg.model.name}:hot:v2:canary", model=cfg.model.name, decision="canary",
                         version=2, serving=0, candidate=2, gate=cfg.gate.id, reason="test", lineage="hot",
                         canary_share=0.3)
        p.produce(cfg.topics.decisions.name, key=d.model.encode(), value=CODEC.encode(d, None))
    assert p.flush(30) == 0
    ev = Evaluator(cfg, started=time.time(), report=print).start()
    try:
        deadline = time.monotonic() + 120
        while not ev.candidate_points or not ev.points:
            assert time.monotonic() < deadline, "the candidate was never scored"
            time.sleep(0.5)
        while ev.decisions.repeats < 1 or not ev.candidates.empty():  # the second copy read, skipped
            assert time.monotonic() < deadline, f"{ev.decisions.read} copies of the decision read"
            time.sleep(0.1)
    finally:
        ev.finish(wait_s=1)
    [point] = ev.candidate_points
    assert (point["lineage"], point["version"], point["candidate"]) == ("hot", 2, 1) and 0 <= point["reward"] <= 1
    assert [q["version"] for q in ev.points] == [0]  # the first trainer's curve: its own versions only
    evals = [m for m in (CODEC.decode(x.value()) for x in read_to_end(cfg, cfg.topics.metrics.name, strict=False,
                                                                        timeout_s=10))
             if isinstance(m, TrainerMetric) and m.kind == "eval"]
    by = {(m.model, m.version): m.values for m in evals}
    assert by[(weights_key(cfg.model.name, "hot"), 2)]["reward"] == point["reward"]
    assert by[(cfg.model.name, 0)]["reward"] == ev.points[0]["reward"]
