"""Every loss through real DeepSpeed on a real broker (in-process, replay mode), the staleness bound,
the priority lane, rejections, and the batch consumer's exactly-once positions."""

from __future__ import annotations

import os
import uuid

import pytest

from rftbus.consumers.batch_consumer import BatchConsumer, Position
from rftbus.kafka.clients import make_consumer, make_producer
from rftbus.schemas import Experience, Rejection, Source, TrainerMetric, WeightVersion
from rftbus.trainer.checkpoint import read_lineage
from rftbus.trainer.publish import protected_versions
from tests.test_trainer import CODEC, experience, produce_groups, read_topic, trainer_config


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


def produce(cfg, topic: str, exps: list[Experience]) -> None:
    p = make_producer(cfg)
    ser = CODEC.serializer(Experience)
    for e in exps:
        p.produce(topic, key=e.group_id, value=ser(e, None))
    assert p.flush(30) == 0


def metrics_of(cfg) -> list[TrainerMetric]:
    return [m for m in read_topic(cfg, cfg.topics.metrics.name) if m.kind == "metric"]


def expert_demo(i: int) -> Experience:
    e = experience(f"x{i:02x}", 0, 1, source=Source.expert)
    e.logprobs = [0.0] * len(e.response_ids)
    e.reward, e.advantage = 1.0, None
    e.metadata = {}
    return e


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
        exps = []
        for k in range(4):  # 4 pairs from 2 groups
            for pref in ("1", "0"):
                exps.append(experience(f"d{k:02x}", int(pref), 2, preference_pair=f"pair{k}", preferred=pref))
        produce(cfg, cfg.topics.curated.name, exps)
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


def test_priority_lane_first_stale_and_bad_records_rejected(broker, tmp_path, dist_env):
    cfg, _ = trainer_config(tmp_path, broker, **{
        "rl.max_staleness": 0, "rl.batch_groups": 1, "trainer.idle_exit_s": 3.0})
    first = produce_groups(cfg, cfg.topics.curated_priority.name, 1, prefix="p")
    late = produce_groups(cfg, cfg.topics.curated.name, 1, prefix="c")  # v0, stale once v1 is out
    bad = experience("bad00", 0, 1)
    bad.logprobs = bad.logprobs[:-1]
    produce(cfg, cfg.topics.curated.name, [bad])
    p = make_producer(cfg)
    p.produce(cfg.topics.curated.name, key=b"junk", value=b"\x00not avro")
    p.flush(30)
    summary = run_trainer(cfg)
    assert summary.steps == 1 and summary.stopped_by == "idle"
    lineage = read_lineage(cfg.state_dir / "checkpoints" / "lineage.jsonl")
    assert [line["experience_ids"] for line in lineage] == [first]
    rejected = [r for r in read_topic(cfg, cfg.topics.rejected.name) if isinstance(r, Rejection)]
    by_reason = {}
    for r in rejected:
        assert r.stage == "trainer" and r.original
        by_reason.setdefault(r.reason, []).append(r.experience_id)
    assert sorted(by_reason["stale"]) == sorted(late)
    assert by_reason["length_mismatch"] == [bad.experience_id]
    assert len(by_reason["malformed"]) == 1
    m = metrics_of(cfg)[0].values
    assert m["staleness_max"] == 0 and "reward_mean" in m and "tokens_per_s" in m


def test_positions_skip_trained_records_above_a_pending_group(broker, tmp_path):
    """Groups interleave in a partition: a restart re-reads the pending group and skips the trained one."""
    cfg, _ = trainer_config(tmp_path, broker, **{"topics.curated.partitions": 1})
    topic = cfg.topics.curated.name
    a0, b0, a1 = experience("aa", 0, 2), experience("bb", 0, 2), experience("aa", 1, 2)
    produce(cfg, topic, [a0, b0, a1])
    rejected = []

    def open_consumer(pos):
        c = make_consumer(cfg, f"pos-{uuid.uuid4().hex[:6]}")
        return BatchConsumer(c, {"curated": topic}, CODEC.deserializer(Experience),
                             lambda *a: rejected.append(a), {(topic, 0): pos})

    bc = open_consumer(Position(0))
    for _ in range(50):
        bc.poll(0.2)
        if bc.complete_units(("curated",)):
            break
    (unit,) = bc.complete_units(("curated",))
    assert [r.exp.experience_id for r in unit.records] == [a0.experience_id, a1.experience_id]
    bc.finish(unit.records)
    pos = bc.positions()[(topic, 0)]
    assert pos.offset == 1 and pos.skip == {2}  # b0 pending at 1; a1 (offset 2) done
    bc.close()
    bc = open_consumer(pos)
    for _ in range(20):
        bc.poll(0.2)
    units = bc.units["curated"]
    assert list(units) == ["g:bb"] and [r.offset for r in units["g:bb"].records] == [1]
    bc.close()
    assert not rejected


def test_gc_never_deletes_versions_an_explorer_may_load():
    superseded = {0: 0.0, 1: 0.0, 2: 95.0, 3: 99.0}
    got = protected_versions([0, 1, 2, 3, 4], newest=4, eta=1, superseded_at=superseded, grace_s=10.0, now=100.0)
    assert got == {2, 3, 4}  # 3, 2: within η+1 of the newest; 2 is also inside the grace period
    got = protected_versions([0, 1, 2, 3, 4], newest=4, eta=0, superseded_at=superseded, grace_s=1.0, now=100.0)
    assert got == {3, 4}
