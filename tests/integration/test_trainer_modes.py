"""Every loss through real DeepSpeed on a real broker (in-process, replay mode), the staleness bound,
the priority lane, rejections, and the batch consumer's plain-offset positions."""

from __future__ import annotations

import os
import uuid

import pytest

from dataclasses import replace

from rftbus.trainer.batch_source import BatchConsumer
from rftbus.ground.kafka.clients import make_consumer, make_producer
from rftbus.ground.schemas import ExperienceGroup, Rejection, Source, TrainerMetric, WeightVersion
from rftbus.trainer.checkpoint import read_lineage
from rftbus.trainer.publish import protected_versions
from tests.integration.test_trainer import CODEC, committed, curated_group, produce_groups, read_topic, trainer_config


@pytest.fixture
def dist_env():
    """In-process DeepSpeed: its env vars exist for this test only (subprocess tests must not inherit them)."""
    names = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "DS_ACCELERATOR")
    saved = {k: os.environ.pop(k) for k in names if k in os.environ}
    yield
    for k in names:
        os.environ.pop(k, None)
    os.environ.update(saved)


def run_trainer(cfg, **opts):
    from rftbus.trainer.loop import RunOptions, Trainer

    return Trainer(cfg, RunOptions(**opts), log=lambda _l: None).run()


def produce(cfg, topic: str, groups: list[ExperienceGroup]) -> None:
    p = make_producer(cfg)
    ser = CODEC.serializer(ExperienceGroup)
    for g in groups:
        p.produce(topic, key=g.group_id, value=ser(g, None))
    assert p.flush(30) == 0


def metrics_of(cfg) -> list[TrainerMetric]:
    return [m for m in read_topic(cfg, cfg.topics.metrics.name) if m.kind == "metric"]


def expert_demo(i: int) -> ExperienceGroup:
    """A demonstration: a group of one on the expert lane (no survivors, no advantage)."""
    g = curated_group(f"x{i:02x}", 1, source=Source.expert)
    s = g.samples[0]
    return replace(g, group_id=f"x{i:02x}-{uuid.uuid4().hex[:6]}", survivors=[],
                   samples=[replace(s, logprobs=[0.0] * len(s.response_ids), reward=1.0, advantage=None)])


def test_sft_learns_the_expert_demonstrations(broker, tmp_path, dist_env):
    cfg, _ = trainer_config(tmp_path, broker, **{"trainer.loss": "sft", "trainer.lr": 0.01})
    produce(cfg, cfg.topics.expert.name, [expert_demo(1) for _ in range(12)])  # one demo, repeated
    summary = run_trainer(cfg, mode="replay", until_end=True, enforce_staleness=False)
    assert summary.steps == 6 and summary.trained == 12
    nll = [m.values["sft_nll"] for m in metrics_of(cfg)]
    assert len(nll) == 6 and nll[-1] < 0.7 * nll[0], nll
    assert (cfg.state_dir / "tensorboard").exists() and any((cfg.state_dir / "tensorboard").iterdir())


@pytest.mark.parametrize("loss", ["ppo", "mix", "dpo"])
def test_rl_losses_train_on_deepspeed(broker, tmp_path, dist_env, loss):
    cfg, _ = trainer_config(tmp_path, broker, **{"trainer.loss": loss, "trainer.zero_stage": 2 if loss == "ppo" else 1})
    if loss == "dpo":
        pairs = []
        for k in range(4):  # 4 groups of two answers, each graded by a preference
            g = curated_group(f"d{k:02x}", 2, preference_pair=f"pair{k}")
            meta = [{"preference_pair": f"pair{k}", "preferred": p} for p in ("0", "1")]
            pairs.append(replace(g, samples=[replace(s, metadata=m) for s, m in zip(g.samples, meta)]))
        produce(cfg, cfg.topics.curated.name, pairs)
    else:
        produce_groups(cfg, cfg.topics.curated.name, 4)
    if loss == "mix":
        produce(cfg, cfg.topics.expert.name, [expert_demo(i) for i in range(4)])
    summary = run_trainer(cfg, mode="replay", until_end=True, enforce_staleness=False)
    assert summary.steps == 2, summary
    values = metrics_of(cfg)[-1].values
    expected = {"ppo": ["value_loss", "kl_ref", "pg", "clip_frac"], "mix": ["sft_nll", "grpo", "expert_rows"],
                "dpo": ["dpo", "dpo_pairs", "dpo_margin"]}[loss]
    assert all(k in values for k in expected), values
    if loss == "dpo":
        assert values["dpo_pairs"] == 2.0
    if loss == "mix":
        assert values["expert_rows"] > 0
    published = [r.version for r in read_topic(cfg, cfg.topics.weights.name) if isinstance(r, WeightVersion)]
    assert published == [0, 1, 2]


def test_lone_answers_advantages_are_whitened_across_the_batch(broker, tmp_path, dist_env):
    """`trainer.advantage_norm: batch` on live traffic's lone answers: what the loss trains on is r - baseline
    whitened over the step's batch (mean 0, std 1), not the small positive numbers the streams wrote."""
    cfg, _ = trainer_config(tmp_path, broker, **{"rl.group_size": 1, "rl.batch_groups": 4,
                                                 "trainer.advantage_norm": "batch"})
    lone = []
    for k, adv in enumerate([0.01, 0.02, 0.04, 0.05, 0.02, 0.03, 0.03, 0.06]):
        g = curated_group(f"s{k:02x}{uuid.uuid4().hex[:4]}", 1, source=Source.live)
        lone.append(replace(g, samples=[replace(g.samples[0], reward=0.1 + adv, advantage=adv)]))
    produce(cfg, cfg.topics.curated.name, lone)
    summary = run_trainer(cfg, mode="replay", until_end=True, enforce_staleness=False)
    assert summary.steps == 2 and summary.trained == 8, summary
    for m in metrics_of(cfg):
        assert m.values["adv_mean"] == pytest.approx(0.0, abs=1e-5), m.values
        assert m.values["adv_std"] == pytest.approx(1.0, abs=1e-3), m.values


def test_priority_lane_first_stale_and_bad_records_rejected(broker, tmp_path, dist_env):
    cfg, _ = trainer_config(tmp_path, broker, **{
        "rl.max_staleness": 0, "rl.batch_groups": 1, "trainer.idle_exit_s": 3.0})
    first = produce_groups(cfg, cfg.topics.curated_priority.name, 1, prefix="p")
    late = produce_groups(cfg, cfg.topics.curated.name, 1, prefix="c")  # v0, stale once v1 is out
    bad = curated_group("bad00", 2)
    bad.samples[1].logprobs = bad.samples[1].logprobs[:-1]
    produce(cfg, cfg.topics.curated.name, [bad])
    p = make_producer(cfg)
    p.produce(cfg.topics.curated.name, key=b"junk", value=b"\x00not avro")
    p.flush(30)
    summary = run_trainer(cfg)
    assert summary.steps == 1 and summary.stopped_by == "idle"
    lineage = read_lineage(cfg.state_dir / "checkpoints" / "lineage.jsonl")
    assert [line["experience_ids"] for line in lineage] == [first]
    rejected = [r for r in read_topic(cfg, cfg.topics.rejected.name) if isinstance(r, Rejection)]
    by_reason: dict[str, list] = {}
    for r in rejected:
        assert r.stage == "trainer"
        assert (r.original is None) == (r.reason == "stale")  # stale is unwanted, not wrong: no evidence copied
        by_reason.setdefault(r.reason, []).extend(r.covers() or [None])
    assert sorted(by_reason["stale"]) == sorted(late + [bad.samples[0].experience_id])
    assert by_reason["length_mismatch"] == [bad.samples[1].experience_id]
    assert by_reason["schema"] == [None]  # Confluent framing (magic 0), and no registry to read it with
    m = metrics_of(cfg)[0].values
    assert m["staleness_max"] == 0 and "reward_mean" in m and "tokens_per_s" in m


def test_a_trainer_held_at_a_step_begins_no_further_one(broker, tmp_path, dist_env):
    """`trainer.hold_at_step` (what `rftbus run --max-steps` sets): with work for three steps it takes one and
    waits, so nothing is in flight when the run stops it; the groups it did not take stay uncommitted."""
    cfg, _ = trainer_config(tmp_path, broker, **{
        "rl.batch_groups": 1, "trainer.idle_exit_s": 3.0, "trainer.hold_at_step": 1, "topics.curated.partitions": 1})
    first = produce_groups(cfg, cfg.topics.curated.name, 1, prefix="h")
    produce_groups(cfg, cfg.topics.curated.name, 2, prefix="k")
    summary = run_trainer(cfg)
    assert summary.steps == 1 and summary.stopped_by == "idle", summary
    lineage = read_lineage(cfg.state_dir / "checkpoints" / "lineage.jsonl")
    assert [line["experience_ids"] for line in lineage] == [first]
    assert committed(cfg, cfg.trainer.group_id, cfg.topics.curated.name) == {0: 1}


def test_positions_are_plain_offsets_and_records_finish_in_order(broker, tmp_path):
    """One record per group: a partition is done strictly in offset order, so a restart needs only the
    first offset not yet trained or rejected."""
    cfg, _ = trainer_config(tmp_path, broker, **{"topics.curated.partitions": 1})
    topic = cfg.topics.curated.name
    groups = [curated_group(f"pos{i}", 2) for i in range(3)]
    produce(cfg, topic, groups)

    def open_consumer(pos: int) -> BatchConsumer:
        c = make_consumer(cfg, f"pos-{uuid.uuid4().hex[:6]}")
        return BatchConsumer(c, {"curated": topic}, CODEC.deserializer(ExperienceGroup), {(topic, 0): pos})

    bc = open_consumer(0)
    for _ in range(50):
        bc.poll(0.2)
        if bc.waiting("curated") == 3:
            break
    first, second, third = bc.head("curated", 3)
    assert [r.group.group_id for r in (first, second, third)] == [g.group_id for g in groups]
    with pytest.raises(RuntimeError, match="out of order"):
        bc.finish([second])
    bc.finish([first])
    assert bc.positions() == {(topic, 0): 1}
    bc.close()
    bc = open_consumer(1)
    for _ in range(20):
        bc.poll(0.2)
    assert [r.offset for r in bc.head("curated", 5)] == [1, 2]
    bc.close()


def test_a_recovery_fence_is_read_past(broker, tmp_path):
    """A streams recovery fence (an aborted record and its marker, rftbus/ground/kafka/fence.py) after the last
    group: the trainer never sees it, and its position, the lanes' drained check and so the committed
    offset go past it (else a lane holding a fence at its end would never count as drained)."""
    from rftbus.ground.kafka.fence import fence

    cfg, _ = trainer_config(tmp_path, broker, **{"topics.curated.partitions": 1})
    topic = cfg.topics.curated.name
    produce(cfg, topic, [curated_group("fenced0", 2)])
    ends = fence(cfg, [(topic, 0)], f"test-fence-{uuid.uuid4().hex[:6]}")
    assert ends == {(topic, 0): 1}
    c = make_consumer(cfg, f"fence-{uuid.uuid4().hex[:6]}", **{"enable.partition.eof": True})
    bc = BatchConsumer(c, {"curated": topic}, CODEC.deserializer(ExperienceGroup), {(topic, 0): 0})
    for _ in range(50):
        bc.poll(0.2)
        if bc.waiting("curated") == 1 and bc.lane_drained("curated"):
            break
    (only,) = bc.head("curated", 5)
    assert only.group is not None and only.group.group_id == "fenced0"
    bc.finish([only])
    assert bc.lane_drained("curated")
    assert bc.positions() == {(topic, 0): 3}  # the group, the fence, the abort marker
    bc.close()


def test_gc_never_deletes_versions_an_explorer_may_load():
    superseded = {0: 0.0, 1: 0.0, 2: 95.0, 3: 99.0}
    got = protected_versions([0, 1, 2, 3, 4], newest=4, eta=1, superseded_at=superseded, grace_s=10.0, now=100.0)
    assert got == {2, 3, 4}  # 3, 2: within η+1 of the newest; 2 is also inside the grace period
    got = protected_versions([0, 1, 2, 3, 4], newest=4, eta=0, superseded_at=superseded, grace_s=1.0, now=100.0)
    assert got == {3, 4}


def test_gc_keeps_what_the_gate_serves(tmp_path):
    """A version the gate has serving (or on canary) keeps its file however far behind the newest it falls: a serve
    that restarts loads it again."""
    import torch

    from rftbus.ground.weights.store_transport import StoreTransport
    from rftbus.trainer.publish import WeightPublisher

    served = {2}
    pub = WeightPublisher(StoreTransport(None, str(tmp_path / "store")), "m", None, None, "t", eta=0, keep=1, grace_s=0.0,
                          serving=lambda: set(served))
    for v in range(8):
        pub.transport.store.save("m", v, {"w": torch.zeros(1)})
    pub.gc(7)
    assert pub.transport.versions("m") == [2, 6, 7]
    served.clear()
    pub.gc(7)
    assert pub.transport.versions("m") == [6, 7]
