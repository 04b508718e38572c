"""One bad record must never stop training (#18), through a real `rftbus train` process on the broker.

On each of the trainer's input lanes (curated.priority, curated, expert) a decodable record with a NaN
advantage and one with a token id past the vocabulary; on curated a group whose advantage overflows
the loss (1e300 is a finite double but inf in float32) and one longer than the model's context. Each
is rejected with its named reason, the step that met the overflow is bisected (its samples rejected, the
rest of its batch trained), and the same trainer process keeps stepping on the good groups around them.
"""

from __future__ import annotations

import json
import math
import signal
from dataclasses import replace

import pytest

from rftbus.ground.schemas import ExperienceGroup, Rejection, bound_id
from rftbus.trainer.checkpoint import read_lineage
from tests.integration.test_trainer import curated_group, read_topic, start_trainer, trainer_config, wait_for
from tests.integration.test_trainer_modes import expert_demo, produce


def poisoned(g: ExperienceGroup, **sample) -> ExperienceGroup:
    return replace(g, samples=[replace(s, **sample) for s in g.samples])


def oov(g: ExperienceGroup) -> ExperienceGroup:
    return replace(g, samples=[replace(s, response_ids=[*s.response_ids[:-1], 10**6]) for s in g.samples])


def positive_logprob(g: ExperienceGroup) -> ExperienceGroup:
    return replace(g, samples=[replace(s, logprobs=[0.5, *s.logprobs[1:]]) for s in g.samples])


@pytest.mark.timeout(400)
def test_poison_on_every_lane_costs_a_rejection_not_the_trainer(broker, tmp_path):
    cfg, path = trainer_config(tmp_path, broker, **{
        "trainer.loss": "mix", "trainer.mix_expert_per_batch": 2, "trainer.mix_min_groups": 1,
        "rl.batch_groups": 1, "rl.max_staleness": 1000, "trainer.checkpoint_interval": 1,
        # high enough that 1e300 still reaches the step (the non-finite loss's skip is the last line of defence);
        # 1e302 is over it and rejected per sample before any tensor
        "trainer.max_abs_advantage": 1e301,
        **{f"topics.{k}.partitions": 1 for k in ("curated", "curated_priority", "expert")}})
    t = cfg.topics
    bad: dict[str, list[str]] = {}  # reason -> experience ids

    def bad_group(lane: str, reason: str, g: ExperienceGroup) -> ExperienceGroup:
        bad.setdefault(reason, []).extend(bound_id(i) or "" for i in g.experience_ids())  # as a rejection names it
        return g

    good = {lane: [curated_group(f"{lane}-ok{i}", 2) for i in range(3)] for lane in ("priority", "curated")}
    demos = [expert_demo(i) for i in range(6)]
    produce(cfg, t.curated_priority.name, [
        bad_group("priority", "non_finite_advantage", poisoned(curated_group("p-nan", 2), advantage=math.nan)),
        good["priority"][0],
        bad_group("priority", "token_out_of_vocab", oov(curated_group("p-oov", 2))),
        # a 600 KB experience_id: its rejection named it twice, over the topic's 1 MB, and the trainer crash-looped
        bad_group("priority", "non_finite_advantage", poisoned(curated_group("p-huge-id", 1), advantage=math.nan,
                                                               experience_id="h" * 600_000)),
        *good["priority"][1:],
        good["curated"][0]])  # the same record on both lanes: trained once, the other copy `duplicate`
    twin = curated_group("c-twin", 2)
    twin = replace(twin, samples=[replace(s, experience_id=twin.samples[0].experience_id) for s in twin.samples])
    produce(cfg, t.curated.name, [
        twin,  # two survivors sharing an experience_id: one trains
        bad_group("curated", "non_finite_advantage", poisoned(curated_group("c-nan", 2), advantage=-math.inf)),
        good["curated"][0],
        bad_group("curated", "token_out_of_vocab", oov(curated_group("c-oov", 2))),
        bad_group("curated", "over_context", poisoned(curated_group("c-long", 2), response_ids=[10 + i % 30 for i in range(70)],
                                                      logprobs=[-1.0] * 70, loss_mask=[True] * 70)),
        good["curated"][1],
        bad_group("curated", "non_finite_loss", poisoned(curated_group("c-overflow", 2), advantage=1e300)),
        bad_group("curated", "advantage_out_of_bounds", poisoned(curated_group("c-huge-adv", 2), advantage=1e302)),
        bad_group("curated", "logprob_out_of_bounds", positive_logprob(curated_group("c-pos-logp", 2))),
        good["curated"][2]])
    produce(cfg, t.expert.name, [
        bad_group("expert", "non_finite_advantage", poisoned(expert_demo(90), advantage=math.nan)),
        demos[0],
        bad_group("expert", "token_out_of_vocab", oov(expert_demo(91))),
        *demos[1:]])
    want = {i for lane in good.values() for g in lane for i in g.experience_ids()}

    lineage_file = cfg.state_dir / "checkpoints" / "lineage.jsonl"
    status_file = cfg.state_dir / "status" / "trainer-0.json"
    rejected_ids = lambda: {i for r in read_topic(cfg, t.rejected.name) if isinstance(r, Rejection) for i in r.covers()}
    proc = start_trainer(cfg, path)
    try:
        first_pid = wait_for(lambda: status_file.exists() and json.loads(status_file.read_text()).get("pid"),
                             120, "the trainer's status", proc)
        every_bad = {i for ids in bad.values() for i in ids}
        wait_for(lambda: want <= {i for line in read_lineage(lineage_file) for i in line["experience_ids"]}
                 | rejected_ids(), 240, "every good experience trained (or rejected)", proc)
        wait_for(lambda: every_bad <= rejected_ids(), 60, "every poisoned experience rejected", proc)
        steps_before = len(read_lineage(lineage_file))
        extra = [curated_group("after-all", 2)]
        produce(cfg, t.curated.name, extra)
        wait_for(lambda: len(read_lineage(lineage_file)) > steps_before, 120, "a step after the poison", proc)
        assert proc.poll() is None, "the trainer exited"
        status = json.loads(status_file.read_text())
        assert status["pid"] == first_pid == proc.pid, "the trainer was restarted"
        # the overflow's step was bisected: its samples rejected, the rest of its batch trained (#36)
        assert status.get("bisected_steps") == 1 and not status.get("skipped_steps"), status
        assert "non-finite" not in status.get("state", "")
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-3000:]
    assert "to blame" in err and "non_finite_loss" in err

    by_reason: dict[str, set[str]] = {}
    for r in read_topic(cfg, t.rejected.name):
        assert isinstance(r, Rejection) and r.stage == "trainer"
        assert r.detail, r
        by_reason.setdefault(r.reason, set()).update(r.covers())
    for reason, ids in bad.items():
        assert set(ids) <= by_reason.get(reason, set()), (reason, by_reason)
    trained = [i for line in read_lineage(lineage_file) for i in line["experience_ids"]]
    assert not set(trained) & {i for ids in bad.values() for i in ids}
    assert len(trained) == len(set(trained))  # nothing trained twice: the repeats were rejected `duplicate`
    repeated = set(good["curated"][0].experience_ids()) | {twin.samples[0].experience_id}
    assert repeated <= set(trained) and repeated <= by_reason.get("duplicate", set()), by_reason.get("duplicate")
    # the overflow costs only its own samples: every good experience batched with it trained
    assert by_reason["non_finite_loss"] == set(bad["non_finite_loss"]), by_reason["non_finite_loss"]
    assert want <= set(trained)
