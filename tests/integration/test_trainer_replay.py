"""Demonstration replay (`trainer.demo_replay`): the pool's logic, and a real trainer (DeepSpeed, broker)
that draws demonstrations again beside each batch, counts each once, and rebuilds its pool from the log
after a restart."""

from __future__ import annotations

from rftbus.trainer.batch import rows_of
from rftbus.trainer.checkpoint import read_lineage
from rftbus.trainer.replay import DemoReplay
from tests.integration.test_trainer import curated_group, trainer_config
from tests.integration.test_trainer_modes import dist_env, expert_demo, metrics_of, produce, run_trainer  # noqa: F401


def test_pool_keeps_the_newest_demonstrations_and_draws_without_repeats():
    pool = DemoReplay(size=5, per_step=3, seed=1)
    assert pool.draw() == []
    pool.add(rows_of(curated_group("rl00", 2)))  # RL rows never join
    assert len(pool) == 0
    demos = [row for i in range(7) for row in rows_of(expert_demo(i), expert=True)]
    pool.add(demos)
    assert len(pool) == 5 and list(pool.rows) == demos[2:]  # the oldest left
    for _ in range(20):
        drawn = pool.draw()
        assert len(drawn) == 3 and len({id(r) for r in drawn}) == 3 and all(r in demos[2:] for r in drawn)


def test_trainer_replays_demonstrations_counts_them_once_and_rebuilds_the_pool(broker, tmp_path, dist_env):  # noqa: F811
    cfg, _ = trainer_config(tmp_path, broker, **{
        "trainer.loss": "mix", "trainer.demo_replay": 8, "trainer.demo_replay_per_step": 3,
        "trainer.mix_expert_per_batch": 1, "rl.batch_groups": 1,
        **{f"topics.{k}.partitions": 1 for k in ("curated", "curated_priority", "expert")}})
    t = cfg.topics
    groups, demos = [curated_group(f"g{i:02x}", 2) for i in range(4)], [expert_demo(i) for i in range(4)]
    produce(cfg, t.curated.name, groups)
    produce(cfg, t.expert.name, demos)
    first = run_trainer(cfg, mode="replay", until_end=True, enforce_staleness=False)
    assert first.steps == 4 and first.trained == 4 * 2 + 4, first  # replays are not trained experiences
    assert [m.values["replayed"] for m in metrics_of(cfg)] == [0, 1, 2, 3]  # the pool grows one demo a step

    # a restart: the pool is rebuilt from the expert topic behind the checkpoint's position
    late = curated_group("g10", 2)
    produce(cfg, t.curated.name, [late])
    produce(cfg, t.expert.name, [expert_demo(10)])
    second = run_trainer(cfg, mode="replay", until_end=True, enforce_staleness=False)
    assert second.resumed_from and second.steps == 1 and second.trained == 3, second
    assert metrics_of(cfg)[-1].values["replayed"] == 3  # not 0: four demonstrations came back from the log

    ids = [i for line in read_lineage(cfg.state_dir / "checkpoints" / "lineage.jsonl") for i in line["experience_ids"]]
    every = [i for g in [*groups, late] for i in g.experience_ids()]
    assert len(ids) == len(set(ids)) == 5 * 2 + 5  # each experience in the lineage once
    assert set(every) <= set(ids)
