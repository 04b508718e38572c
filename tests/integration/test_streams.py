"""The stream processors through a real `rftbus streams` worker process on the session broker.

One worker serves the whole module; every test uses its own groups and task ids, so the tests share it
safely and in any order.
"""

from __future__ import annotations

import math
import time
import uuid
from contextlib import contextmanager
from dataclasses import replace

import pytest

from weights_store import placeholder_version

from rftbus.ground.config import TopicsConfig
from rftbus.ground.kafka.clients import make_admin, make_producer
from rftbus.ground.kafka.topics import create_topics
from rftbus.ground.schemas import (Experience, ExperienceGroup, Feedback, FeedbackKind, Source, Task, TrainerMetric,
                            make_codec)
from rftbus.apps.bench.processes import WorkerProcess, read_all
from rftbus.apps.bench.synthetic import make_group
from tests.conftest import make_config

LATEST = 5  # published on the weights topic before the worker starts
TOPIC_KEYS = list(TopicsConfig.model_fields)
CODEC = make_codec(None)
DECODE = CODEC.deserializer()
LANES = ("curated", "curated_priority")


@contextmanager
def streams_worker(port: int, folder, **overrides):
    """Fresh topics (with weight version LATEST published) and one worker on them: (cfg, producer, worker)."""
    tag = uuid.uuid4().hex[:6]
    cfg = make_config(
        folder, port,
        **{f"topics.{k}.name": f"st{tag}.{k}" for k in TOPIC_KEYS},
        **{"streams.app_id": f"st{tag}", "streams.feedback_ttl_s": 4.0,
           "streams.tick_interval_s": 0.5, "streams.version_wait_s": 0.5, "streams.commit_interval_s": 0.2,
           "streams.max_tokens": 1500, "streams.max_message_bytes": 200_000, "streams.reward_min": -1.0,
           "streams.reward_max": 1.0, "streams.metrics_interval_s": 1.0, "rl.max_staleness": 1, **overrides})
    create_topics(cfg, make_admin(cfg))
    producer = make_producer(cfg)
    wv = placeholder_version(cfg, LATEST)
    producer.produce(cfg.topics.weights.name, key=wv.model.encode(), value=CODEC.encode(wv, None))
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
        value = r if isinstance(r, bytes) else CODEC.encode(r, None)
        k = key if key is not None else (r.group_id.encode() if isinstance(r, ExperienceGroup) else b"k")
        producer.produce(cfg.topics.raw.name, key=k, value=value)
    producer.flush(10)


def feedback(cfg, producer, items):
    for f in items:
        value = f if isinstance(f, bytes) else CODEC.encode(f, None)
        producer.produce(cfg.topics.feedback.name, key=getattr(f, "experience_id", "fb").encode(), value=value)
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


def curated_of(out, gid) -> list[ExperienceGroup]:
    return [g for role in LANES for g in out[role] if g.group_id == gid]


def rejected_ids(out) -> dict[str, str]:
    """experience id -> rejection reason."""
    return {eid: r.reason for r in out["rejected"] for eid in r.covers()}


def grpo(rewards, eps=1e-6):
    m = sum(rewards) / len(rewards)
    s = math.sqrt(sum((r - m) ** 2 for r in rewards) / len(rewards))
    return [(r - m) / (s + eps) for r in rewards]


def test_group_advantages_match_a_direct_computation(env):
    cfg, producer, worker = env
    rewards = [1.0, 0.0, 0.5, 0.25, 0.0, 1.0]
    group = make_group(rewards=rewards, model_version=LATEST, response_tokens=1000, seed=1)
    send(cfg, producer, [group])
    out = wait_outputs(cfg, lambda o: len(curated_of(o, group.group_id)) == 1)
    [got] = curated_of(out, group.group_id)
    assert got.survivors == list(range(len(rewards)))
    assert got.experience_ids() == group.experience_ids()
    for e, sent, want in zip(got.samples, group.samples, grpo(rewards)):
        assert e.advantage == pytest.approx(want, rel=1e-9, abs=1e-12)
        assert e.response_ids == sent.response_ids  # payload untouched
        assert e.logprobs == pytest.approx(sent.logprobs, rel=1e-6)
    assert got.priority > 0 and got.metadata["lane"] in ("priority", "normal")
    assert got.prompt_ids == group.prompt_ids


def test_a_worker_configured_for_drgrpo_centres_without_the_std(broker, tmp_path):
    """streams.advantage: drgrpo reaches the worker: advantages are r - mean (rftbus/streams/advantages/drgrpo.py)."""
    rewards = [0.5] * 7 + [0.625]  # nearly unanimous: GRPO would give the odd one out +2.65
    with streams_worker(broker.broker.port, tmp_path, **{"streams.advantage": "drgrpo"}) as (cfg, producer, _):
        group = make_group(rewards=rewards, model_version=LATEST, response_tokens=50, seed=2)
        send(cfg, producer, [group])
        out = wait_outputs(cfg, lambda o: len(curated_of(o, group.group_id)) == 1)
    [got] = curated_of(out, group.group_id)
    mean = sum(rewards) / len(rewards)
    assert [e.advantage for e in got.samples] == pytest.approx([r - mean for r in rewards], rel=1e-9, abs=1e-12)


def _with_sample(group: ExperienceGroup, i: int, **changes) -> ExperienceGroup:
    samples = list(group.samples)
    samples[i] = replace(samples[i], **changes)
    return replace(group, samples=samples)


def test_a_bad_record_is_rejected_whole_with_its_bytes_and_the_worker_goes_on(env):
    cfg, producer, worker = env
    good = make_group(rewards=[1.0, 0.0], model_version=LATEST, response_tokens=50, seed=2)
    huge = make_group(rewards=[1.0, 0.0], model_version=LATEST, response_tokens=60_000, seed=6)
    task = Task(taskset="addition", prompt="1+1", answer="2")
    empty = replace(make_group(rewards=[1.0], model_version=LATEST, response_tokens=5, seed=7), samples=[])
    legacy = Experience(response_ids=[1], logprobs=[-1.0], loss_mask=[True], model_version=LATEST)
    poison = {b"\x00\x00\x00\x00\x07garbage": "schema", b"": "malformed", b"hello": "malformed",
              b"\xc3\x01" + b"\x11" * 8 + b"body": "schema", CODEC.encode(task, None): "schema",
              CODEC.encode(huge, None): "too_large", CODEC.encode(good, None)[:-7]: "malformed", CODEC.encode(empty, None): "schema",
              CODEC.encode(legacy, None): "schema"}
    for raw in poison:
        send(cfg, producer, [raw], key=b"poison-" + uuid.uuid4().hex.encode())
    send(cfg, producer, [good])
    wanted = set(poison) - {CODEC.encode(huge, None)}
    out = wait_outputs(cfg, lambda o: wanted <= {r.original for r in o["rejected"]}
                       and any(r.reason == "too_large" for r in o["rejected"]) and curated_of(o, good.group_id))
    by_bytes = {r.original: r for r in out["rejected"] if r.original in poison}
    assert {raw: r.reason for raw, r in by_bytes.items()} == {k: v for k, v in poison.items() if k in wanted}
    for r in by_bytes.values():
        assert r.stage == "verify" and r.source_topic == cfg.topics.raw.name and r.offset is not None
    # an original too big to copy is referenced by its position, not copied
    [big] = [r for r in out["rejected"] if r.reason == "too_large"]
    assert big.original is None and big.offset is not None and "not copied" in big.detail
    assert len(curated_of(out, good.group_id)) == 1  # the worker carried on
    assert worker.proc.poll() is None


def test_a_group_away_from_its_key_is_rejected_bad_key_and_trains_once(env):
    """The raw dedupe is per partition; a copy of a group under another key, a null key or on a partition
    its key does not hash to would slip past it and train again (#36). Each is rejected `bad_key`; the
    copy at home is curated once and a second copy at home is a `duplicate`."""
    from aiokafka.partitioner import murmur2

    cfg, producer, worker = env
    g = make_group(rewards=[1.0, 0.0], model_version=LATEST, response_tokens=12, seed=41, group_id=uuid.uuid4().hex)
    n = cfg.topics.raw.partitions
    home = (murmur2(g.group_id.encode()) & 0x7FFFFFFF) % n
    value = CODEC.encode(g, None)
    producer.produce(cfg.topics.raw.name, key=b"another-key", value=value)
    producer.produce(cfg.topics.raw.name, key=None, value=value)
    producer.produce(cfg.topics.raw.name, key=g.group_id.encode(), value=value, partition=(home + 1) % n)
    producer.flush(10)
    send(cfg, producer, [g, g])  # keyed by its group id: the producer's murmur2 puts both at home
    out = wait_outputs(cfg, lambda o: sum(r.group_id == g.group_id for r in o["rejected"]) >= 4
                       and curated_of(o, g.group_id))
    mine = [r for r in out["rejected"] if r.group_id == g.group_id]
    assert sorted(r.reason for r in mine) == ["bad_key"] * 3 + ["duplicate"], [(r.reason, r.detail) for r in mine]
    details = " | ".join(r.detail for r in mine if r.reason == "bad_key")
    assert "null key" in details and "another-key" in details and f"hashes to partition {home}" in details
    assert all(r.experience_ids == g.experience_ids() for r in mine)
    [cur] = curated_of(out, g.group_id)
    assert cur.experience_ids() == g.experience_ids()


def test_a_bad_sample_costs_only_itself(env):
    cfg, producer, worker = env
    base = make_group(rewards=[1.0, 0.0, 0.5, 0.0], model_version=LATEST, response_tokens=20, seed=3)
    g = _with_sample(base, 1, logprobs=base.samples[1].logprobs[:-1])  # length mismatch
    g = _with_sample(g, 2, reward=math.nan)
    g = _with_sample(g, 3, model_version=LATEST + 3)
    g = replace(g, samples=[*g.samples, replace(g.samples[0], reward=0.0)])  # experience id seen twice
    g.samples.append(replace(base.samples[0], experience_id=uuid.uuid4().hex, reward=0.25))
    send(cfg, producer, [g])
    ids = g.experience_ids()
    out = wait_outputs(cfg, lambda o: curated_of(o, g.group_id) and set(ids[1:4]) <= set(rejected_ids(o)))
    reasons = rejected_ids(out)
    assert [reasons.get(i) for i in ids[1:4]] == ["length_mismatch", "non_finite_reward", "unknown_version"]
    dup = [r for r in out["rejected"] if r.reason == "duplicate" and r.group_id == g.group_id]
    assert len(dup) == 1 and dup[0].experience_ids == [ids[0]]  # the second sample named ids[0]
    [got] = curated_of(out, g.group_id)
    assert got.survivors == [0, 5]  # the two good samples, renormalized between themselves
    assert [got.samples[i].advantage for i in got.survivors] == pytest.approx(grpo([1.0, 0.25]))
    bad_len = next(r for r in out["rejected"] if r.reason == "length_mismatch" and r.group_id == g.group_id)
    assert bad_len.stage == "verify" and bad_len.original == CODEC.encode(g, None)  # the evidence


def test_each_filter_has_its_own_reason(env):
    cfg, producer, worker = env
    stale = make_group(rewards=[1.0, 0.0], model_version=LATEST - 2, response_tokens=30, seed=10)
    zero = make_group(rewards=[0.5, 0.5, 0.5], model_version=LATEST, response_tokens=30, seed=11)
    dup = make_group(rewards=[1.0, 0.0], model_version=LATEST, response_tokens=30, seed=12)
    base = make_group(rewards=[1.0, 0.0, 0.0], model_version=LATEST, response_tokens=30, seed=13)
    s0 = base.samples[0]
    long_ = _with_sample(base, 0, response_ids=s0.response_ids * 60, logprobs=s0.logprobs * 60,
                         loss_mask=s0.loss_mask * 60)
    out_of_range = make_group(rewards=[1.0, 0.0, 7.0], model_version=LATEST, response_tokens=30, seed=14)
    send(cfg, producer, [stale, zero, dup, long_, out_of_range])
    send(cfg, producer, [dup])  # the same group again, in a second record
    expect = {**{i: "stale" for i in stale.experience_ids()}, **{i: "zero_variance" for i in zero.experience_ids()},
              long_.samples[0].experience_id: "over_length", out_of_range.samples[2].experience_id: "reward_out_of_range",
              # after the long sample is dropped, the two left are both 0.0
              **{i: "zero_variance" for i in long_.experience_ids()[1:]}}

    def done(o):
        got = rejected_ids(o)
        return all(got.get(k) == v for k, v in expect.items()) and any(
            r.reason == "duplicate" and r.group_id == dup.group_id for r in o["rejected"]) and curated_of(o, dup.group_id)

    out = wait_outputs(cfg, done, timeout=40)
    got = rejected_ids(out)
    assert {k: got.get(k) for k in expect} == expect
    assert not curated_of(out, long_.group_id)
    [again] = [r for r in out["rejected"] if r.group_id == dup.group_id]
    assert again.reason == "duplicate" and again.experience_ids == dup.experience_ids()
    assert len(curated_of(out, dup.group_id)) == 1  # the duplicate did not enter curated twice
    [kept] = curated_of(out, out_of_range.group_id)
    assert kept.survivors == [0, 1]
    assert [kept.samples[i].advantage for i in kept.survivors] == pytest.approx(grpo([1.0, 0.0]))
    assert kept.samples[2].advantage is None  # not a survivor: left as it came


def test_feedback_join_preference_pairs_and_timeout(env):
    cfg, producer, worker = env
    live = make_group(rewards=[None, None, None], model_version=LATEST, response_tokens=40, source=Source.live,
                      seed=20)
    pref = make_group(rewards=[None, None], model_version=LATEST, response_tokens=40, source=Source.live, seed=21)
    orphan = make_group(rewards=[None], model_version=LATEST, response_tokens=40, source=Source.live, seed=22)
    li, pi = live.experience_ids(), pref.experience_ids()
    feedback(cfg, producer, [Feedback(experience_id=li[0], kind=FeedbackKind.reward, reward=1.0)])  # before the group
    send(cfg, producer, [live, pref, orphan])
    fbs = [Feedback(experience_id=li[1], kind=FeedbackKind.thumbs, thumbs_up=False),
           Feedback(experience_id=li[2], kind=FeedbackKind.rating, rating=4.0),
           Feedback(experience_id=pi[1], kind=FeedbackKind.preference, preferred_id=pi[1], rejected_id=pi[0]),
           b"not feedback"]
    feedback(cfg, producer, fbs)
    pair_id = fbs[2].feedback_id

    def done(o):
        return (curated_of(o, live.group_id) and curated_of(o, pref.group_id)
                and orphan.samples[0].experience_id in rejected_ids(o))

    out = wait_outputs(cfg, done, timeout=40)
    [got] = curated_of(out, live.group_id)
    assert [e.reward for e in got.samples] == [1.0, 0.0, 0.75]  # reward, thumbs down, rating 4 on 1..5
    assert [e.advantage for e in got.samples] == pytest.approx(grpo([1.0, 0.0, 0.75]))
    [pair] = curated_of(out, pref.group_id)
    assert pair.metadata["preference_pair"] == pair_id
    lose, win = pair.samples
    assert (win.metadata["preferred"], lose.metadata["preferred"]) == ("1", "0")
    assert [win.advantage, lose.advantage] == pytest.approx(grpo([1.0, 0.0]))  # +1 / -1 (up to eps)
    [nofb] = [r for r in out["rejected"] if orphan.samples[0].experience_id in r.covers()]
    assert nofb.reason == "no_feedback" and nofb.source_topic == cfg.topics.raw.name
    assert any(r.reason == "malformed" and r.original == b"not feedback" for r in out["rejected"])


def test_high_advantage_groups_take_the_priority_lane(env):
    cfg, producer, worker = env
    tag = uuid.uuid4().hex[:6]
    balanced = [make_group(task_id=f"bal-{tag}-{i}", rewards=[1, 1, 0, 0], model_version=LATEST, response_tokens=30)
                for i in range(3)]
    skewed = [make_group(task_id=f"skew-{tag}-{i}", rewards=[1, 0, 0, 0, 0, 0, 0, 0], model_version=LATEST,
                         response_tokens=30) for i in range(3)]
    send(cfg, producer, balanced + skewed)
    ids = {g.group_id for g in balanced + skewed}
    out = wait_outputs(cfg, lambda o: {g.group_id for r in LANES for g in o[r]} >= ids)
    prio = {g.group_id for g in out["curated_priority"]}
    normal = {g.group_id for g in out["curated"]}
    assert {g.group_id for g in balanced} <= prio
    assert {g.group_id for g in skewed} <= normal
    by_id = {g.group_id: g for r in LANES for g in out[r]}
    mean_abs = lambda g: sum(abs(e.advantage) for e in by_id[g.group_id].samples) / len(g.samples)  # noqa: E731
    assert min(mean_abs(g) for g in balanced) > max(mean_abs(g) for g in skewed)
    # the best of each group with reward 1.0 is promoted as a demonstration: a group of one, new ids
    promoted = {g.metadata["promoted_from"]: g for g in out["expert"] if g.metadata.get("promoted") == "1"}
    for g in balanced + skewed:
        best = g.samples[0]
        copy = promoted[best.experience_id]
        assert copy.group_id == f"{g.group_id}:expert" and len(copy.samples) == 1
        assert copy.samples[0].experience_id == f"{best.experience_id}:expert"
        assert copy.samples[0].response_ids == best.response_ids and copy.prompt_ids == g.prompt_ids


def test_status_file_and_metrics_reconcile(env):
    cfg, producer, worker = env
    tag = uuid.uuid4().hex[:6]
    groups = [make_group(task_id=f"rate-{tag}", rewards=[1, 0, 0, 0], model_version=LATEST, response_tokens=20),
              make_group(task_id=f"flat-{tag}", rewards=[1, 1], model_version=LATEST, response_tokens=20)]
    send(cfg, producer, groups)
    ids = {g.group_id for g in groups}

    def settled() -> dict | None:
        st = worker.status()
        seen = {g.group_id for r in LANES for g in read_all(cfg, getattr(cfg.topics, r).name, decode=DECODE)}
        rejected = {r.group_id for r in read_all(cfg, cfg.topics.rejected.name, decode=DECODE)}
        return st if ids <= seen | rejected and st["held_groups"] == 0 and st["pending_feedback"] == 0 else None

    deadline = time.monotonic() + 30
    while (st := settled()) is None and time.monotonic() < deadline:
        time.sleep(0.5)
    seen_at = time.time()  # a status written after the last output was read, and between two records (a status
    # written while a record's write is awaited has it in raw_in and not yet in its outcome: seen under load)

    def between(st: dict | None) -> bool:
        return (st is not None and st["updated_at"] > seen_at and st["raw_in"] == st["raw_accounted"]
                and st["experiences_in"] == st["experiences_accounted"])

    while not between(st := worker.status()) and time.monotonic() < deadline + 10:
        time.sleep(0.2)
    assert st is not None
    assert st["role"] == "streams" and st["pid"] == worker.proc.pid and st["errors"] == 0
    # every raw record is rejected whole, decided, held for feedback or a replay; every experience of a
    # verified group is curated, rejected or still waiting
    assert st["raw_in"] == st["raw_accounted"]
    assert st["experiences_in"] == st["experiences_accounted"]
    out = {r: read_all(cfg, getattr(cfg.topics, r).name, decode=DECODE) for r in (*LANES, "rejected")}
    assert st["curated"] == sum(len(g.survivors) for r in LANES for g in out[r])
    assert st["curated_groups"] == sum(len(out[r]) for r in LANES)
    assert st["rejected"] == sum(max(1, len(r.covers())) for r in out["rejected"])
    deadline = time.monotonic() + 30  # the pass rates are published every streams.metrics_interval_s
    while True:
        metrics = [m for m in read_all(cfg, cfg.topics.metrics.name, decode=DECODE) if isinstance(m, TrainerMetric)]
        rates = {k: v for m in metrics if m.kind == "task_pass_rate" for k, v in m.values.items()}
        if {f"rate-{tag}", f"flat-{tag}"} <= rates.keys() or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert {"streams", "task_pass_rate"} <= {m.kind for m in metrics}
    assert rates[f"rate-{tag}"] == pytest.approx(0.25) and rates[f"flat-{tag}"] == pytest.approx(1.0)

