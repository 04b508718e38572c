"""The stream processors through a real `rftbus streams` worker process on the session broker.

One worker serves the whole module; every test uses its own group ids, so tests share it safely.
"""

from __future__ import annotations

import math
import time
import uuid
from contextlib import contextmanager

import pytest

from rftbus.kafka.clients import make_admin, make_producer
from rftbus.kafka.topics import create_topics
from rftbus.schemas import (Experience, Feedback, FeedbackKind, Source, Task, TrainerMetric,
                            WeightVersion, make_codec)
from rftbus.streams.harness import WorkerProcess, read_all
from rftbus.streams.synthetic import make_group
from tests.conftest import make_config

LATEST = 5  # published on the weights topic before the worker starts
TOPIC_KEYS = ["tasks", "raw", "curated", "curated_priority", "expert", "rejected", "feedback", "weights", "metrics"]
CODEC = make_codec(None)
DECODE = CODEC.deserializer()


@contextmanager
def streams_worker(port: int, folder, **overrides):
    """Fresh topics (with weight version LATEST published) and one worker on them: (cfg, producer, worker)."""
    tag = uuid.uuid4().hex[:6]
    cfg = make_config(
        folder, port,
        **{f"topics.{k}.name": f"st{tag}.{k}" for k in TOPIC_KEYS},
        **{"streams.app_id": f"st{tag}", "streams.group_timeout_s": 3.0, "streams.feedback_ttl_s": 4.0,
           "streams.tick_interval_s": 0.5, "streams.version_wait_s": 0.5, "streams.commit_interval_s": 0.2,
           "streams.max_tokens": 1500, "streams.max_message_bytes": 200_000, "streams.reward_min": -1.0,
           "streams.reward_max": 1.0, "streams.metrics_interval_s": 1.0, "rl.max_staleness": 1, **overrides})
    create_topics(cfg, make_admin(cfg))
    producer = make_producer(cfg)
    wv = WeightVersion(model=cfg.model.name, version=LATEST, step=LATEST, uri="file:///x", sha256="0" * 64, bytes=1)
    producer.produce(cfg.topics.weights.name, key=wv.model.encode(), value=CODEC.encode(wv))
    producer.flush(10)
    worker = WorkerProcess(cfg, f"t{tag}", cfg.state_dir / "worker.log")
    try:
        worker.wait_ready(90)
        yield cfg, producer, worker
    finally:
        assert worker.stop() == 0, worker.tail()


@pytest.fixture(scope="module")
def env(broker, tmp_path_factory):
    with streams_worker(broker.broker.port, tmp_path_factory.mktemp("streams")) as env:
        yield env


def send(cfg, producer, records, key=None):
    for r in records:
        value = r if isinstance(r, bytes) else CODEC.encode(r)
        k = key if key is not None else (r.group_id.encode() if isinstance(r, Experience) else b"k")
        producer.produce(cfg.topics.raw.name, key=k, value=value)
    producer.flush(10)


def wait_outputs(cfg, want, timeout=30.0):
    """Poll curated, priority, expert and rejected until want(outputs) is true; outputs: role -> [decoded]."""
    deadline = time.monotonic() + timeout
    while True:
        out = {role: read_all(cfg, getattr(cfg.topics, role).name, decode=DECODE, idle_s=0.3)
               for role in ("curated", "curated_priority", "expert", "rejected")}
        if want(out) or time.monotonic() > deadline:
            return out
        time.sleep(0.5)


def curated_of(out, gid):
    return [e for role in ("curated", "curated_priority") for e in out[role] if e.group_id == gid]


def rejections_of(out, ids):
    return [r for r in out["rejected"] if r.experience_id in ids]


def grpo(rewards, eps=1e-6):
    m = sum(rewards) / len(rewards)
    s = math.sqrt(sum((r - m) ** 2 for r in rewards) / len(rewards))
    return [(r - m) / (s + eps) for r in rewards]


def test_group_advantages_match_a_direct_computation(env):
    cfg, producer, worker = env
    rewards = [1.0, 0.0, 0.5, 0.25, 0.0, 1.0]
    group = make_group(rewards=rewards, model_version=LATEST, response_tokens=1000, seed=1)
    send(cfg, producer, list(reversed(group)))  # arrival order must not matter
    out = wait_outputs(cfg, lambda o: len(curated_of(o, group[0].group_id)) == len(group))
    got = sorted(curated_of(out, group[0].group_id), key=lambda e: e.sample_index)
    assert [e.experience_id for e in got] == [e.experience_id for e in group]
    for e, want in zip(got, grpo(rewards)):
        assert e.advantage == pytest.approx(want, rel=1e-9, abs=1e-12)
        assert e.metadata["group_survivors"] == str(len(group))
        assert e.priority > 0
        assert e.response_ids == group[e.sample_index].response_ids  # payload untouched
        assert e.logprobs == pytest.approx(group[e.sample_index].logprobs, rel=1e-6)


def test_a_worker_configured_for_drgrpo_centres_without_the_std(broker, tmp_path):
    """streams.advantage: drgrpo reaches the worker: advantages are r - mean (streams/advantages/drgrpo.py)."""
    rewards = [0.5] * 7 + [0.625]  # nearly unanimous: GRPO would give the odd one out +2.65
    with streams_worker(broker.broker.port, tmp_path, **{"streams.advantage": "drgrpo"}) as (cfg, producer, _):
        group = make_group(rewards=rewards, model_version=LATEST, response_tokens=50, seed=2)
        send(cfg, producer, group)
        out = wait_outputs(cfg, lambda o: len(curated_of(o, group[0].group_id)) == len(group))
    got = sorted(curated_of(out, group[0].group_id), key=lambda e: e.sample_index)
    mean = sum(rewards) / len(rewards)
    assert [e.advantage for e in got] == pytest.approx([r - mean for r in rewards], rel=1e-9, abs=1e-12)


def test_poison_messages_are_rejected_with_their_bytes_and_the_worker_goes_on(env):
    cfg, producer, worker = env
    good = make_group(rewards=[1.0, 0.0], model_version=LATEST, response_tokens=50, seed=2)
    mismatch = make_group(rewards=[1.0], model_version=LATEST, response_tokens=20, seed=3)[0]
    mismatch.logprobs = mismatch.logprobs[:-1]
    nan = make_group(rewards=[float("nan")], model_version=LATEST, response_tokens=20, seed=4)[0]
    future = make_group(rewards=[1.0], model_version=LATEST + 3, response_tokens=20, seed=5)[0]
    huge = make_group(rewards=[1.0], model_version=LATEST, response_tokens=60_000, seed=6)[0]
    task = Task(taskset="addition", prompt="1+1", answer="2")
    poison = {b"\x00\x00\x00\x00\x07garbage": "schema", b"": "malformed", b"hello": "malformed",
              b"\xc3\x01" + b"\x11" * 8 + b"body": "schema", CODEC.encode(task): "schema",
              CODEC.encode(mismatch): "length_mismatch", CODEC.encode(nan): "non_finite_reward",
              CODEC.encode(future): "unknown_version", CODEC.encode(huge): "too_large",
              CODEC.encode(good[0])[:-7]: "malformed"}
    for raw in poison:
        send(cfg, producer, [raw], key=b"poison-" + uuid.uuid4().hex.encode())
    send(cfg, producer, good)
    wanted = set(poison)
    out = wait_outputs(cfg, lambda o: wanted <= {r.original for r in o["rejected"]}
                       and len(curated_of(o, good[0].group_id)) == 2)
    by_bytes = {r.original: r for r in out["rejected"] if r.original in poison}
    assert {raw: r.reason for raw, r in by_bytes.items()} == poison
    for r in by_bytes.values():
        assert r.stage == "verify" and r.source_topic == cfg.topics.raw.name and r.offset is not None
    assert len(curated_of(out, good[0].group_id)) == 2  # the worker carried on
    assert worker.proc.poll() is None


def test_each_filter_has_its_own_reason(env):
    cfg, producer, worker = env
    stale = make_group(rewards=[1.0, 0.0], model_version=LATEST - 2, response_tokens=30, seed=10)
    zero = make_group(rewards=[0.5, 0.5, 0.5], model_version=LATEST, response_tokens=30, seed=11)
    dup = make_group(rewards=[1.0, 0.0], model_version=LATEST, response_tokens=30, seed=12)
    long_ = make_group(rewards=[1.0, 0.0, 0.0], model_version=LATEST, response_tokens=30, seed=13)
    long_[0].response_ids = long_[0].response_ids * 60
    long_[0].logprobs = long_[0].logprobs * 60
    long_[0].loss_mask = long_[0].loss_mask * 60
    out_of_range = make_group(rewards=[1.0, 0.0, 7.0], model_version=LATEST, response_tokens=30, seed=14)
    incomplete = make_group(rewards=[1.0, 0.0, 0.0, 1.0], model_version=LATEST, response_tokens=30, seed=15)[:3]
    send(cfg, producer, stale + zero + dup + long_ + out_of_range + incomplete)
    send(cfg, producer, [dup[0]])  # the same experience again, after its group went out
    expect = {stale[0].experience_id: "stale", stale[1].experience_id: "stale",
              long_[0].experience_id: "over_length", out_of_range[2].experience_id: "reward_out_of_range",
              **{e.experience_id: "zero_variance" for e in zero},
              **{e.experience_id: "incomplete_group" for e in incomplete}}

    def done(o):
        got = {r.experience_id: r.reason for r in o["rejected"]}
        return (all(got.get(k) == v for k, v in expect.items())
                and any(r.experience_id == dup[0].experience_id and r.reason == "duplicate" for r in o["rejected"]))

    out = wait_outputs(cfg, done, timeout=40)
    got = {r.experience_id: r.reason for r in out["rejected"] if r.reason != "duplicate"}
    assert {k: got.get(k) for k in expect} == expect
    assert [r.reason for r in out["rejected"] if r.experience_id == dup[0].experience_id] == ["duplicate"]
    # the survivors of a partly filtered group are renormalized among themselves
    survivors = sorted(curated_of(out, long_[0].group_id), key=lambda e: e.sample_index)
    assert [e.reward for e in survivors] == [0.0, 0.0] or not survivors  # (zero variance -> rejected)
    kept = sorted(curated_of(out, out_of_range[0].group_id), key=lambda e: e.sample_index)
    assert [e.advantage for e in kept] == pytest.approx(grpo([1.0, 0.0]))
    assert {e.metadata["group_survivors"] for e in kept} == {"2"}
    assert len(curated_of(out, dup[0].group_id)) == 2  # the duplicate did not enter curated twice


def test_feedback_join_preference_pairs_and_timeout(env):
    cfg, producer, worker = env
    live = make_group(rewards=[None, None, None], model_version=LATEST, response_tokens=40, source=Source.live,
                      seed=20)
    pref = make_group(rewards=[None, None], model_version=LATEST, response_tokens=40, source=Source.live, seed=21)
    orphan = make_group(rewards=[None], model_version=LATEST, response_tokens=40, source=Source.live, seed=22)[0]
    # feedback for one experience arrives before the experience itself
    fbs = [Feedback(experience_id=live[0].experience_id, kind=FeedbackKind.reward, reward=1.0)]
    for f in fbs:
        producer.produce(cfg.topics.feedback.name, key=f.experience_id.encode(), value=CODEC.encode(f))
    producer.flush(10)
    send(cfg, producer, live + pref + [orphan])
    fbs = [Feedback(experience_id=live[1].experience_id, kind=FeedbackKind.thumbs, thumbs_up=False),
           Feedback(experience_id=live[2].experience_id, kind=FeedbackKind.rating, rating=4.0),
           Feedback(experience_id=pref[1].experience_id, kind=FeedbackKind.preference,
                    preferred_id=pref[1].experience_id, rejected_id=pref[0].experience_id),
           b"not feedback"]
    for f in fbs:
        producer.produce(cfg.topics.feedback.name, key=b"fb", value=f if isinstance(f, bytes) else CODEC.encode(f))
    producer.flush(10)
    pair_id = fbs[2].feedback_id

    def done(o):
        return (len(curated_of(o, live[0].group_id)) == 3 and len(curated_of(o, pair_id)) == 2
                and any(r.experience_id == orphan.experience_id for r in o["rejected"]))

    out = wait_outputs(cfg, done, timeout=40)
    got = sorted(curated_of(out, live[0].group_id), key=lambda e: e.sample_index)
    assert [e.reward for e in got] == [1.0, 0.0, 0.75]  # reward, thumbs down, rating 4 on 1..5
    assert [e.advantage for e in got] == pytest.approx(grpo([1.0, 0.0, 0.75]))
    pair = {e.experience_id: e for e in curated_of(out, pair_id)}
    win, lose = pair[pref[1].experience_id], pair[pref[0].experience_id]
    assert (win.metadata["preferred"], lose.metadata["preferred"]) == ("1", "0")
    assert win.metadata["preference_pair"] == lose.metadata["preference_pair"] == pair_id
    assert win.metadata["original_group_id"] == pref[0].group_id
    assert [win.advantage, lose.advantage] == pytest.approx(grpo([1.0, 0.0]))  # +1 / -1 (up to eps)
    [nofb] = [r for r in out["rejected"] if r.experience_id == orphan.experience_id]
    assert nofb.reason == "no_feedback" and nofb.original == CODEC.encode(orphan)
    assert nofb.source_topic == cfg.topics.raw.name
    assert any(r.reason == "malformed" and r.original == b"not feedback" for r in out["rejected"])


def test_high_advantage_groups_take_the_priority_lane(env):
    cfg, producer, worker = env
    balanced = [make_group(task_id=f"bal-{i}", rewards=[1, 1, 0, 0], model_version=LATEST, response_tokens=30)
                for i in range(3)]
    skewed = [make_group(task_id=f"skew-{i}", rewards=[1, 0, 0, 0, 0, 0, 0, 0], model_version=LATEST,
                         response_tokens=30) for i in range(3)]
    send(cfg, producer, [e for g in balanced + skewed for e in g])
    ids = {g[0].group_id for g in balanced + skewed}
    out = wait_outputs(cfg, lambda o: {e.group_id for r in ("curated", "curated_priority") for e in o[r]} >= ids)
    prio = {e.group_id for e in out["curated_priority"]}
    normal = {e.group_id for e in out["curated"]}
    assert {g[0].group_id for g in balanced} <= prio
    assert {g[0].group_id for g in skewed} <= normal
    mean_abs = lambda g: sum(abs(e.advantage) for e in out["curated_priority"] + out["curated"]  # noqa: E731
                             if e.group_id == g[0].group_id) / len(g)
    assert min(mean_abs(g) for g in balanced) > max(mean_abs(g) for g in skewed)
    # the best of each group with reward 1.0 is promoted as expert data
    promoted = {e.group_id for e in out["expert"] if e.metadata.get("promoted") == "1"}
    assert ids <= promoted


def test_status_file_and_metrics_reconcile(env):
    cfg, producer, worker = env
    time.sleep(2.5)
    st = worker.status()
    assert st["role"] == "streams" and st["pid"] == worker.proc.pid
    assert st["errors"] == 0
    assert st["raw_in"] == st["verified"] + st["rejected_by_stage"]["verify"]
    # every raw record is curated, rejected, or visibly still open / waiting for feedback
    assert st["raw_in"] == st["raw_accounted"]
    out = {r: read_all(cfg, getattr(cfg.topics, r).name, decode=DECODE) for r in ("curated", "curated_priority",
                                                                                  "rejected")}
    assert st["curated"] == len(out["curated"]) + len(out["curated_priority"])
    assert st["rejected"] == len(out["rejected"])
    metrics = read_all(cfg, cfg.topics.metrics.name, decode=DECODE)
    kinds = {m.kind for m in metrics if isinstance(m, TrainerMetric)}
    assert {"streams", "task_pass_rate"} <= kinds
    rates = {}
    for m in metrics:
        if m.kind == "task_pass_rate":
            rates.update(m.values)
    assert rates["bal-0"] == pytest.approx(0.5) and rates["skew-0"] == pytest.approx(0.125)
