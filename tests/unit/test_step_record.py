"""A trainer step's metrics values and lineage line (rftbus/trainer/step_record.py): staleness and reward are the RL
samples' only (a demonstration has no policy version), the lineage names every id with its staleness."""

from __future__ import annotations

from types import SimpleNamespace as NS

from rftbus.trainer.step_record import step_record


def _row(eid: str, version: int, reward: float | None, expert: bool = False):
    return NS(expert=expert, sample=NS(experience_id=eid, model_version=version, reward=reward))


def test_a_steps_values_count_the_rl_samples_and_its_lineage_every_id():
    rl, demo = NS(lane="curated", topic="c", partition=0, offset=7), NS(lane="expert", topic="e", partition=1, offset=3)
    groups = [(rl, NS(group_id="g1"), [0, 1]), (demo, NS(group_id="d1"), [0])]
    rows = [_row("a", 3, 1.0), _row("b", 1, 0.0), _row("x", 0, None, expert=True)]
    values, line = step_record(step=9, rank=0, version=4, ref=4, parts={"loss": 0.5}, rows=rows, groups=groups,
                               take=[(rl, [0, 1]), (demo, [0])], tokens=300, step_s=2.0, replayed=1)
    assert values["loss"] == 0.5 and values["experiences"] == 3 and values["groups"] == 1  # RL groups only
    assert values["staleness_mean"] == (1 + 3) / 2 and values["staleness_max"] == 3
    assert values["reward_mean"] == 0.5 and values["tokens_per_s"] == 150.0 and values["replayed"] == 1
    assert line["experience_ids"] == ["a", "b", "x"] and line["groups"] == ["g1", "d1"]
    assert line["offsets"] == [["c", 0, 7], ["e", 1, 3]] and line["staleness_max"] == 3
    values, _ = step_record(step=1, rank=0, version=0, ref=0, parts={}, rows=[rows[2]], groups=groups[1:],
                            take=[(demo, [0])], tokens=10, step_s=0.0, replayed=0)
    assert "reward_mean" not in values and values["staleness_mean"] == 0.0 and values["tokens_per_s"] == 0.0
