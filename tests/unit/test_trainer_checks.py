"""The trainer's own checks of what it reads (pure logic; the real-broker path is test_trainer_poison.py)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from rftbus.trainer.batch_source import Polled
from rftbus.ground.schemas import Experience, ExperienceGroup, Source
from rftbus.trainer.checks import Limits, check_record

LIMITS = Limits(vocab=100, context=32)


def group(n: int = 3, lane_rl: bool = True, **sample) -> ExperienceGroup:
    samples = [Experience(experience_id=f"e{i}", response_ids=[5, 6, 7], logprobs=[-1.0, -2.0, -3.0],
                          loss_mask=[True] * 3, reward=float(i % 2), advantage=(1.0 if i % 2 else -1.0) if lane_rl else None,
                          model_version=0) for i in range(n)]
    samples = [replace(s, **sample) if i == 1 else s for i, s in enumerate(samples)]
    return ExperienceGroup(group_id="g", task_id="t", source=Source.explorer, explorer_id="x", prompt_ids=[1, 2, 3],
                           samples=samples, survivors=list(range(n)) if lane_rl else [])


def polled(g: ExperienceGroup, lane: str = "curated") -> Polled:
    return Polled(group=g, lane=lane, topic="t", partition=0, offset=0)


def test_a_good_group_trains_whole():
    v = check_record(polled(group()), LIMITS)
    assert v.train == [0, 1, 2] and v.rejects == []


@pytest.mark.parametrize(("field", "value", "reason"), [
    ("advantage", math.nan, "non_finite_advantage"),
    ("advantage", -math.inf, "non_finite_advantage"),
    ("reward", math.inf, "non_finite_reward"),
    ("logprobs", [-1.0, math.nan, -3.0], "non_finite_logprobs"),
    ("response_ids", [5, 100, 7], "token_out_of_vocab"),
    ("advantage", 1e308, "advantage_out_of_bounds"),
    ("advantage", -101.0, "advantage_out_of_bounds"),
    ("reward", 1e5, "reward_out_of_bounds"),
    ("logprobs", [-1.0, 0.5, -3.0], "logprob_out_of_bounds"),
    ("response_ids", [5, -1, 7], "token_out_of_vocab"),
    ("response_ids", list(range(30)), "length_mismatch"),
])
def test_a_bad_sample_costs_only_itself(field, value, reason):
    v = check_record(polled(group(**{field: value})), LIMITS)
    assert v.train == [0, 2]
    assert [(r.reason, r.indices) for r in v.rejects] == [(reason, [1])]
    assert v.rejects[0].detail  # names what was wrong


def test_over_context_is_rejected_by_name():
    n = 30
    v = check_record(polled(group(response_ids=list(range(n)), logprobs=[-1.0] * n, loss_mask=[True] * n)), LIMITS)
    assert [(r.reason, r.indices) for r in v.rejects] == [("over_context", [1])]
    assert "33 tokens > the model's context 32" in v.rejects[0].detail


@pytest.mark.parametrize(("prompt", "reason"), [([1, 2, 999], "token_out_of_vocab"), (list(range(32)), "over_context")])
def test_a_bad_prompt_rejects_the_whole_group(prompt, reason):
    v = check_record(polled(replace(group(), prompt_ids=prompt)), LIMITS)
    assert v.train == [] and [(r.reason, r.indices) for r in v.rejects] == [(reason, [0, 1, 2])]


def test_expert_lane_is_checked_the_same_way():
    v = check_record(polled(group(lane_rl=False, logprobs=[0.0, math.inf, 0.0]), lane="expert"), LIMITS)
    assert v.train == [0, 2] and v.rejects[0].reason == "non_finite_logprobs"


def test_without_limits_only_shape_and_numbers_are_checked():
    v = check_record(polled(group(response_ids=[5, 10_000, 7])), None)
    assert v.train == [0, 1, 2]


def test_a_logprob_just_above_zero_is_rounding_and_a_future_version_is_unknown():
    from rftbus.trainer.checks import split_stale

    assert check_record(polled(group(logprobs=[-1.0, 1e-4, -3.0])), LIMITS).train == [0, 1, 2]
    g = group(model_version=5)
    assert split_stale(g, [0, 1, 2], version=1, eta=1) == ([0, 2], [], [1])
    assert split_stale(group(model_version=2), [0, 1, 2], version=2, eta=2) == ([0, 1, 2], [], [])
