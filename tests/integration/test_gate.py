"""The promotion gate as a process on the real broker (`rftbus gate`): the seed serves, a new version goes on
canary, a worse one is rolled back on live grades with its statistics on the record, a killed gate reads its
decisions back and decides nothing twice, and a good candidate is promoted. What the rest of the run refuses, the
gate refuses too (#63): a weight record with no file is never a candidate, a decision another writer put on the
topic is not read back as the gate's own, and answers or grades the streams reject are not evidence."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import torch

from rftbus.ground.config import TopicsConfig, write_config
from rftbus.ground.kafka.clients import make_admin, make_producer
from rftbus.ground.kafka.read import read_to_end
from rftbus.ground.kafka.retry import retry_kafka
from rftbus.ground.kafka.topics import create_topics
from rftbus.ground.schemas import (Experience, ExperienceGroup, Feedback, FeedbackKind, GateDecision, Source, WeightVersion,
                            make_codec)
from rftbus.ground.status import read_statuses
from rftbus.ground.weights import WeightStore
from rftbus.ground.weights.store_transport import store_url, version_uri
from tests.conftest import make_config

CODEC = make_codec(None)


def decisions(cfg) -> list[GateDecision]:
    def read() -> list[GateDecision]:
        out = []
        for m in read_to_end(cfg, cfg.topics.decisions.name, strict=False, timeout_s=10):
            d = CODEC.decode(m.value())
            assert isinstance(d, GateDecision)
            out.append(d)
        return out

    return retry_kafka(read, "reading the decisions")


def wait_for(cfg, kind: str, version: int, timeout: float = 90.0, lineage: str = "") -> list[GateDecision]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = decisions(cfg)
        if any(d.decision == kind and d.version == version and d.lineage == lineage for d in got):
            return got
        time.sleep(0.5)
    raise AssertionError(f"no {kind} of {lineage}:v{version}: "
                         f"{[(d.decision, d.lineage, d.version) for d in decisions(cfg)]}")


def publish(cfg, *records) -> None:
    p = make_producer(cfg)
    topic = {WeightVersion: cfg.topics.weights.name, ExperienceGroup: cfg.topics.raw.name,
             Feedback: cfg.topics.feedback.name}
    for rec in records:
        key = getattr(rec, type(rec).KEY_FIELD or "", None)
        p.produce(topic[type(rec)], key=key.encode() if isinstance(key, str) else None, value=CODEC.encode(rec, None))
    assert p.flush(30) == 0


def answered(cfg, version: int, rewards: list[float], tag: str) -> list:
    """A live group of served answers of `version` and a grade for each."""
    samples = [Experience(experience_id=f"{tag}-{i}", response_ids=[5, 6], logprobs=[-0.1, -0.2],
                          loss_mask=[True, True], model_version=version) for i in range(len(rewards))]
    group = ExperienceGroup(group_id=f"g-{tag}", task_id=f"t-{tag}", source=Source.live, explorer_id="serve-test",
                            prompt_ids=[1, 2, 3], samples=samples)
    return [group, *(Feedback(experience_id=s.experience_id, kind=FeedbackKind.reward, reward=r)
                     for s, r in zip(samples, rewards))]


def weights(cfg, version: int, file: bool = True) -> WeightVersion:
    """Version `version`'s record, its file in the weight store (`file`; without, a record the admission refuses)."""
    if not file:
        return WeightVersion(model=cfg.model.name, version=version, step=version, sha256="0" * 64, bytes=1,
                             uri=version_uri(store_url(cfg), cfg.model.name, version))
    saved = WeightStore(store_url(cfg)).save(cfg.model.name, version, {"w": torch.full((2,), float(version))})
    return WeightVersion(model=cfg.model.name, version=version, step=version, uri=saved.uri, sha256=saved.sha256,
                         bytes=saved.bytes)


def wait_caught_up(cfg, gate: subprocess.Popen, log: Path, timeout: float = 90.0) -> None:
    """Until the gate's status says it read its topics to their ends (it has decided on them once by then)."""
    deadline = time.monotonic() + timeout
    while not any(s.get("caught_up") for s in read_statuses(cfg.state_dir, "gate") if s.get("id") == cfg.gate.id):
        assert gate.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.2)


def start(cfg, path: Path) -> subprocess.Popen:
    log = open(path.parent / "gate.log", "ab")
    return subprocess.Popen([str(Path(sys.executable).parent / "rftbus"), "--config", str(path), "gate"],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def test_the_gate_rolls_back_a_worse_version_survives_a_kill_and_promotes_a_good_one(broker, tmp_path):
    tag = uuid.uuid4().hex[:6]
    cfg = make_config(tmp_path / "state", broker.broker.port,
                      **{f"topics.{k}.name": f"gate{tag}.{k}" for k in TopicsConfig.model_fields},
                      **{"gate.min_answers": 30, "gate.hold_every_s": 600.0, "gate.id": f"gate-{tag}"})
    create_topics(cfg, make_admin(cfg))
    path = write_config(cfg, tmp_path / "gate.yaml")
    gate = start(cfg, path)
    try:
        wait_caught_up(cfg, gate, tmp_path / "gate.log")  # it has read the empty log and looked at it
        assert decisions(cfg) == []  # nothing published: nothing to serve
        publish(cfg, weights(cfg, 0))
        wait_for(cfg, "promote", 0)  # the seed serves first
        publish(cfg, weights(cfg, 1))
        wait_for(cfg, "canary", 1)
        publish(cfg, *answered(cfg, 0, [1.0, 0.0, 1.0] * 10, "s1"), *answered(cfg, 1, [0.0] * 30, "c1"))
        got = wait_for(cfg, "rollback", 1)
        rb = next(d for d in got if d.decision == "rollback")
        assert rb.serving == 0 and rb.candidate is None and rb.gate == f"gate-{tag}"
        ev = rb.evidence
        assert ev["n_serving"] == 30 and ev["n_candidate"] == 30 and ev["mean_candidate"] == 0.0
        assert ev["z"] < -ev["z_crit"] and ev["margin"] == cfg.gate.margin and "Welch" in rb.test
        # forged: a newer version with no file, and a decision by another writer that would put it on canary
        publish(cfg, weights(cfg, 50, file=False))
        forged = GateDecision(decision_id="x", model=cfg.model.name, decision="canary", version=50, serving=0,
                              candidate=50, canary_share=0.9, gate="intruder", reason="forged")
        p = make_producer(cfg)
        p.produce(cfg.topics.decisions.name, key=forged.model.encode(), value=CODEC.encode(forged, None))
        assert p.flush(30) == 0

        os.killpg(gate.pid, signal.SIGKILL)  # kill -9: its decisions are on the log, its state is not
        gate.wait(30)
        gate = start(cfg, path)
        publish(cfg, weights(cfg, 2))
        wait_for(cfg, "canary", 2)  # v50 was never a candidate, and the forged decision did not make it one
        # what the streams reject is no evidence: grades out of streams.reward_min..max, answers whose logprobs
        # do not match their tokens (both first, so they would be the candidate's first 30 if they counted)
        bad = answered(cfg, 2, [cfg.streams.reward_max + 5] * 30, "c2-range")
        short = answered(cfg, 2, [0.0] * 30, "c2-short")
        for e in short[0].samples:
            e.logprobs = [-0.1]
        publish(cfg, *bad, *short)
        publish(cfg, *answered(cfg, 0, [1.0] * 30, "s2"), *answered(cfg, 2, [1.0] * 30, "c2"))
        got = wait_for(cfg, "promote", 2)

        def status() -> dict:
            return next(s for s in read_statuses(cfg.state_dir, "gate") if s.get("id") == cfg.gate.id)

        # (the status file is written once a second: the decision can be on the log before the counts are on disk)
        deadline = time.monotonic() + 15
        while (status()["refused_grades"], status()["refused_answers"]) != (30, 30) and time.monotonic() < deadline:
            time.sleep(0.3)
        st = status()
        assert st["refused_weights"] >= 1 and st["refused_decisions"] == 1, st
        assert st["refused_grades"] == 30 and st["refused_answers"] == 30, st
    finally:
        if gate.poll() is None:
            gate.send_signal(signal.SIGTERM)
            assert gate.wait(60) == 0, (tmp_path / "gate.log").read_text()[-3000:]
    assert [d.decision_id for d in got if d.gate != cfg.gate.id] == ["x"]  # the forged one is on the topic ...
    got = [d for d in got if d.gate == cfg.gate.id]  # ... and the gate's are these
    assert [(d.decision, d.version) for d in got] == [("promote", 0), ("canary", 1), ("rollback", 1),
                                                     ("canary", 2), ("promote", 2)], [d.reason for d in got]
    assert len({d.decision_id for d in got}) == len(got)  # nothing decided twice across the kill
    assert got[-1].serving == 2 and got[-1].evidence["n_candidate"] == 30
    assert got[-1].evidence["mean_candidate"] == 1.0
    log = (tmp_path / "gate.log").read_text()
    assert "5 earlier decision(s)" not in log and "3 earlier decision(s) read back; serving v0" in log, log[-2000:]
