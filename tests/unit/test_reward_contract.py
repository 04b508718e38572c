"""The reward contract (rftbus/ground/rewards/base.py, docs/REWARDS.md): a number, a dict with "reward", a list per
group, TRL's f(prompts, completions, **columns); anything else is an error naming the reward and the contract."""

from __future__ import annotations

import pytest

from rftbus.ground.rewards.base import RewardSet, components_of, trl_style
from rftbus.ground.schemas import Task

TASK = Task(taskset="t", prompt="2+2?", answer="4", metadata={"level": "easy"})


def test_every_documented_shape_scores():
    seen: dict = {}

    def trl(prompts, completions, answer, level, task_id, **kw):
        seen.update(prompts=prompts, answer=answer, level=level, ids=kw["completion_ids"])
        return [float(c == a) for c, a in zip(completions, answer)]

    class Group:
        def score_group(self, task, responses):
            return (0.5, {"reward": 0.25, "x": 2})  # a tuple is a list too

    terms = [("num", 1.0, lambda t, r: r == "4"), ("d", 1.0, lambda t, r: {"reward": 1, "len": len(r)}),
             ("trl", 2.0, trl), ("g", 1.0, Group())]
    out = RewardSet(terms).score_group(TASK, ["4", "5"])
    assert [s.reward for s in out] == [1 + 1 + 2 + 0.5, 0 + 1 + 0 + 0.25]
    assert out[0].components["d.len"] == 1.0 and out[1].components["g.x"] == 2.0
    assert seen["prompts"] == ["2+2?", "2+2?"] and seen["answer"] == ["4", "4"] and seen["level"] == ["easy", "easy"]
    assert trl_style(trl) and not trl_style(lambda task, response: 0)


@pytest.mark.parametrize("value,words", [(None, "NoneType"), ("yes", "str"), ({"score": 1}, "without 'reward'"),
                                         ({"reward": "high"}, "non-numeric")])
def test_a_wrong_return_names_the_reward_and_the_contract(value, words):
    with pytest.raises(ValueError) as e:
        components_of("mine", value)
    assert "mine" in str(e.value) and words in str(e.value) and "docs/REWARDS.md" in str(e.value)


def test_a_group_answer_of_the_wrong_length_is_an_error():
    with pytest.raises(ValueError, match="returned 1 scores for 2 answers"):
        RewardSet([("trl", 1.0, lambda prompts, completions, **kw: [1.0])]).score_group(TASK, ["a", "b"])
