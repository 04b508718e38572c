"""Every sample counts (#19): admission that counts what the trainer takes per version, explorers that
skip prompts with no reward variance, and a trainer step that does not wait unboundedly for B groups.
Logic units first, then each through the real part (broker, explorer, `rftbus train`)."""

from __future__ import annotations

import json
import signal
from contextlib import contextmanager

import pytest
from confluent_kafka import TopicPartition
from conftest import make_config
from explorer_kafka import committed, fresh_config, read_topic

from rftbus.ground.kafka.clients import make_admin, make_consumer, make_producer
from rftbus.producers.admission import Admission, ConsumptionRate, admission_bound
from rftbus.producers.explorer import Explorer
from rftbus.producers.no_signal import NoSignalMemory
from rftbus.ground.schemas import Task, make_codec
from rftbus.trainer.checkpoint import read_lineage
from tests.integration.test_explorer import _refreshed
from tests.integration.test_trainer import curated_group, start_trainer, trainer_config, wait_for
from tests.integration.test_trainer_modes import expert_demo, produce

ENC = make_codec(None)


def test_bound_counts_groups_per_version_and_the_explorers_own_lag():
    assert admission_bound(1, 8.0, 0) == 16  # B groups a version: the old (η+1)·B
    assert admission_bound(1, 2.0, 0) == 4  # MIX stepping on demonstrations: 2 RL groups a version
    assert admission_bound(1, 2.0, 1) == 2  # the explorer's weights are a version behind already
    assert admission_bound(1, 2.0, 3) == 0
    g = ConsumptionRate(batch_groups=8, min_versions=3, window_s=30.0)
    assert g.update(0.0, 10, 100) == 8  # unmeasured: B
    assert g.update(1.0, 12, 101) == 8  # 2 versions < 3: noise, keep the figure
    assert g.update(2.0, 14, 102) == 0.5  # 2 groups over 4 versions
    assert g.update(3.0, 15, 200) == 8  # clamped to B


def test_no_signal_memory_halves_a_flat_prompt_down_to_the_floor_and_resets():
    m = NoSignalMemory(floor=0.125)
    t = Task(taskset="addition", prompt="1+1=", answer="2", task_id="a")
    assert m.probability(t) == 1.0
    for want in (0.5, 0.25, 0.125, 0.125):
        m.record(t, [1.0, 1.0, 1.0])
        assert m.probability(t) == want
    m.record(t, [0.0])  # a group of one says nothing about the prompt
    assert m.probability(t) == 0.125
    m.record(t, [0.0, 1.0])  # variance again: back to always
    assert m.probability(t) == 1.0
    other = Task(taskset="addition", prompt="1+2=", answer="3", task_id="b")
    assert m.probability(other) == 1.0  # keyed by prompt
    again = Task(taskset="addition", prompt="1+1=", answer="2", task_id="a.p2")
    m.record(t, [1.0, 1.0])
    assert m.probability(again) == 0.5  # a later pass (new id, same prompt) shares the memory
    assert m.roll_out(again) == m.roll_out(again)  # seeded by the task id: a redo decides the same


def test_a_flat_prompt_gets_smaller_groups_and_variance_restores_n():
    m = NoSignalMemory(floor=0.125, min_group=2)
    t = Task(taskset="reverse", prompt="rev:abcd=", answer="dcba", task_id="a")
    assert m.group_size(t, 8) == 8
    for want in (4, 2, 2):
        m.record(t, [1.0] * m.group_size(t, 8))
        assert m.group_size(t, 8) == want
    m.record(t, [1.0, 0.5])  # the probe found variance: a full group next time
    assert m.group_size(t, 8) == 8
    assert m.group_size(t, 2) == 2 and NoSignalMemory(floor=0.125).group_size(t, 8) == 8  # off without min_group


def test_an_unseen_prompt_is_sized_by_the_recent_flat_share():
    """MIX rolls few prompts out twice: a new prompt starts as if ⌊log2 1/(1−f)⌋ flat groups were behind it."""
    m = NoSignalMemory(floor=0.125, min_group=2, window=8)
    new = Task(taskset="addition", prompt="9+9=", answer="18", task_id="new")
    for i, flat in enumerate([True] * 4 + [False] * 3):
        m.record(Task(taskset="addition", prompt=f"{i}+0=", answer=str(i), task_id=str(i)), [1.0, 1.0 if flat else 0.0])
    assert m.group_size(new, 8) == 8  # fewer than a window of groups: no prior yet
    m.record(Task(taskset="addition", prompt="7+0=", answer="7", task_id="7"), [1.0, 1.0])
    assert m.flat_share() == 5 / 8 and m.group_size(new, 8) == 4  # f = 5/8: one halving
    for i in range(8):
        m.record(Task(taskset="addition", prompt=f"{i}+1=", answer=str(i + 1), task_id=f"b{i}"), [1.0, 1.0])
    assert m.group_size(new, 8) == 2  # all flat: down to the probe
    m.record(new, [1.0, 0.0])  # once seen, its own streak decides
    assert m.group_size(new, 8) == 8


def test_explorer_probes_flat_prompts_with_smaller_groups(broker, tmp_path):
    """Through a real explorer: a reward that is the same for every answer, n = 8, no_signal_min_group 2 and
    every task rolled out (floor 1): the first group has 8 samples, the next 4, then 2 each."""
    cfg = fresh_config(make_config, tmp_path, broker, **{
        "explorer.admission": False, "explorer.idle_exit_s": 6.0, "explorer.no_signal_floor": 1.0,
        "explorer.no_signal_min_group": 2, "rl.group_size": 8,
        "explorer.rewards": [{"name": "explorer_plugins.half_reward"}]})
    p = make_producer(cfg)
    for i in range(5):
        t = Task(taskset="addition", prompt="3+4=", answer="7", task_id=f"t{i}")
        p.produce(cfg.topics.tasks.name, key=b"same", value=ENC.encode(t, None))  # one partition: in order
    assert p.flush(10) == 0
    result = Explorer(cfg, report=lambda s: None).run()
    assert result["groups_produced"] == 5 and result["experiences_produced"] == 8 + 4 + 2 + 2 + 2, result
    sizes = sorted(len(g.samples) for _, g in read_topic(cfg, "raw"))
    assert sizes == [2, 2, 2, 4, 8]


def test_explorer_skips_prompts_with_no_variance_and_commits_them(broker, tmp_path):
    """A reward that is the same for every answer: after the first groups of a prompt the explorer
    rolls it out at the floor rate; every task is still handled and committed."""
    cfg = fresh_config(make_config, tmp_path, broker, **{
        "explorer.admission": False, "explorer.idle_exit_s": 6.0, "explorer.no_signal_floor": 0.125,
        "explorer.rewards": [{"name": "explorer_plugins.half_reward"}]})
    tasks = [Task(taskset="addition", prompt="3+4=", answer="7", task_id=f"t{i}") for i in range(48)]
    p = make_producer(cfg)
    for t in tasks:
        p.produce(cfg.topics.tasks.name, key=b"same", value=ENC.encode(t, None))  # one partition: in order
    assert p.flush(10) == 0
    result = Explorer(cfg, report=lambda s: None).run()
    produced, skipped = result["groups_produced"], result["tasks_skipped_no_signal"]
    assert produced + skipped == 48 and 3 <= produced <= 16, result
    assert len(read_topic(cfg, "raw")) == produced
    assert max(committed(cfg, cfg.explorer.group_id, "tasks").values()) == 48  # one partition holds them all


def test_admission_bound_follows_the_trainers_groups_per_version(broker, tmp_path):
    """The trainer finishes 2 curated groups while 4 versions are published: g = 0.5, so with η = 1 at most
    1 group may be pending (0.5 when the explorer is a version behind); nothing pending always admits one."""
    cfg = fresh_config(make_config, tmp_path, broker, **{"rl.batch_groups": 8, "rl.max_staleness": 1,
                                                         "explorer.admission_refresh_s": 3600.0})
    versions = [(0, 0)]
    adm = Admission(cfg, make_admin(cfg), versions=lambda: versions[-1])
    wait_for(lambda: _refreshed(adm), 30, "partition leaders of the new topics")
    assert adm.bound == 16
    producer = make_producer(cfg)
    for i in range(4):
        producer.produce(cfg.topics.curated.name, key=f"c{i}", value=b"x", partition=0)
    producer.flush(10)
    trainer = make_consumer(cfg, cfg.trainer.group_id)
    trainer.commit(offsets=[TopicPartition(cfg.topics.curated.name, 0, 2)], asynchronous=False)
    trainer.close()
    versions.append((4, 4))
    adm.refresh()
    assert adm.consumption.value == pytest.approx(0.5) and adm.bound == pytest.approx(1.0)
    assert adm.pending() == pytest.approx(2)
    why = adm.blocked(adm.pending())
    assert why is not None and "groups the trainer takes per version" in why
    versions.append((5, 4))  # a version behind: the group would already be one old (g: 2 groups in 5 versions)
    adm.refresh()
    assert adm.lag == 1 and adm.bound == pytest.approx(0.4 * 1)
    assert adm.blocked(0.0) is None  # nothing pending: one group may always go
    versions.append((7, 4))  # past η: not even that, until the explorer loads newer weights
    adm.refresh()
    assert adm.blocked(0.0) is not None
    adm.close()


@pytest.mark.timeout(300)
def test_step_wait_trains_what_is_ready_instead_of_waiting_for_b(broker, tmp_path):
    """B = 8 but only 3 groups arrive: with `trainer.step_wait_s` the trainer steps on them; the lineage
    names them, and the status says when the first step was taken."""
    cfg, path = trainer_config(tmp_path, broker, **{
        "trainer.loss": "grpo", "rl.batch_groups": 8, "rl.max_staleness": 1000, "trainer.step_wait_s": 1.0,
        "topics.curated.partitions": 1})
    groups = [curated_group(f"few{i}", 2) for i in range(3)]
    produce(cfg, cfg.topics.curated.name, groups)
    with training(cfg, path, groups, "the 3 groups trained without waiting for 8") as (lines, proc):
        assert all(len(line["groups"]) <= 3 for line in lines) and lines[0]["step"] == 1
        status = cfg.state_dir / "status" / "trainer-0.json"  # written every status_interval_s
        wait_for(lambda: json.loads(status.read_text()).get("first_step_at", 0) > 0, 30, "first_step_at", proc)


@contextmanager
def training(cfg, path, groups, what: str):
    """A real `rftbus train` until every experience of `groups` is in the lineage: (lineage lines, process)."""
    want = {i for g in groups for i in g.experience_ids()}
    lineage_file = cfg.state_dir / "checkpoints" / "lineage.jsonl"
    proc = start_trainer(cfg, path)
    try:
        wait_for(lambda: want <= {i for line in read_lineage(lineage_file) for i in line["experience_ids"]},
                 180, what, proc)
        yield read_lineage(lineage_file), proc
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)


def test_lr_schedule_warms_up_then_decays_by_cosine_to_the_floor():
    from rftbus.ground.config.trainer import TrainerConfig
    from rftbus.trainer.engine import lr_factor

    flat = TrainerConfig()
    assert lr_factor(0, flat) == lr_factor(10_000, flat) == 1.0
    cfg = TrainerConfig(warmup_steps=10, lr_decay_steps=100, lr_min_ratio=0.1)
    assert lr_factor(0, cfg) == pytest.approx(0.1) and lr_factor(9, cfg) == pytest.approx(1.0)
    assert lr_factor(10, cfg) == pytest.approx(1.0)
    assert lr_factor(60, cfg) == pytest.approx(0.55)  # half way down the cosine
    assert lr_factor(110, cfg) == pytest.approx(0.1) and lr_factor(5_000, cfg) == pytest.approx(0.1)
    assert all(lr_factor(s, cfg) >= lr_factor(s + 1, cfg) for s in range(10, 200))


@pytest.mark.timeout(300)
def test_mix_steps_on_demonstrations_alone_once_no_rl_group_comes(broker, tmp_path):
    """MIX with `step_wait_s`: no RL group at all (a solved task makes only zero-variance ones), so after
    the wait the demonstrations train alone; without the wait the trainer would stand still."""
    cfg, path = trainer_config(tmp_path, broker, **{
        "trainer.loss": "mix", "trainer.mix_expert_per_batch": 2, "trainer.mix_min_groups": 1,
        "rl.batch_groups": 4, "trainer.step_wait_s": 0.5, "topics.expert.partitions": 1})
    demos = [expert_demo(i) for i in range(6)]
    produce(cfg, cfg.topics.expert.name, demos)
    with training(cfg, path, demos, "the demonstrations trained with no RL group") as (lines, _):
        assert len(lines) == 3  # two demonstrations a step


def test_pace_keeps_the_final_reading_and_splits_the_run_in_thirds():
    from rftbus.apps.run.pace import Pace, step_rates

    p = Pace()
    trainer = lambda step: [{"role": "trainer", "step": step}]  # noqa: E731
    for t, step in [(0.0, 0), (1.0, 1), (2.0, 2), (3.0, 3), (30.0, 30), (31.0, 31)]:
        p.see(t, trainer(step))
    assert p.timeline[-1] == (30.0, 30)  # readings closer than 2 s are thinned
    p.see(31.5, trainer(32), last=True)
    assert p.timeline[-1] == (31.5, 32)  # but never the last one
    first, last = step_rates(p, 0.0, 30.0)
    # readings at 0, 2, 30: by 10 s 2 steps, by 20 s still 2 (nothing read in between), by 30 s 30
    assert first == pytest.approx(0.2) and last == pytest.approx(2.8)


def test_pace_ignores_an_earlier_runs_status_files():
    """A reused state folder keeps the last run's trainer status: its first step (hours ago) is not this run's
    (a 15-minute demo reported its first step -17,770 s after the broker answered)."""
    from rftbus.apps.run.pace import Pace

    p = Pace(since=1000.0)
    old = {"role": "trainer", "step": 900, "first_step_at": 10.0, "updated_at": 20.0}
    p.see(1001.0, [old])
    assert p.first_step_at is None and p.timeline == [(1001.0, 0)]  # no trainer of this run yet
    p.see(1010.0, [{"role": "trainer", "step": 1, "first_step_at": 1009.0, "updated_at": 1010.0}])
    assert p.first_step_at == 1009.0 and p.timeline[-1] == (1010.0, 1)
