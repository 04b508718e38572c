"""Advantage estimators as pure logic (the streams worker applies them: tests/integration/test_streams.py)."""

from __future__ import annotations

import pytest

from rftbus.streams.advantages import ESTIMATORS, make_estimator


def test_drgrpo_centres_without_scaling_and_grpo_scales_to_unit_std():
    rewards = [1.0, 0.0, 0.5, 0.5]
    assert make_estimator("drgrpo", 1e-6).advantages(rewards) == pytest.approx([0.5, -0.5, 0.0, 0.0])
    assert make_estimator("grpo", 1e-6).advantages(rewards) == pytest.approx([1.414, -1.414, 0.0, 0.0], abs=1e-3)


def test_drgrpo_weighs_a_nearly_unanimous_group_by_how_much_its_rewards_differ():
    """One sample in eight differs by 0.125 (one position of reverse's credit): GRPO gives it the same
    scale as a split group (about 2.6), Dr. GRPO a small push in proportion to the reward gap."""
    near = [0.5] * 7 + [0.625]
    assert max(make_estimator("grpo", 1e-6).advantages(near)) == pytest.approx(2.646, abs=1e-3)
    dr = make_estimator("drgrpo", 1e-6).advantages(near)
    assert max(dr) == pytest.approx(0.109375) and sum(dr) == pytest.approx(0.0)


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_every_estimator_handles_empty_and_constant_groups(name):
    est = make_estimator(name, 1e-6)
    assert est.advantages([]) == []
    assert est.advantages([0.3, 0.3, 0.3]) == pytest.approx([0.0, 0.0, 0.0])
