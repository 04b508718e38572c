"""Singleton groups (live traffic with one response): advantage = r - baseline (the task's pass rate).

A group of one has no variance, so GRPO gives it nothing; an outside baseline still says whether
this answer was better than usual for its task.
"""

from __future__ import annotations

from collections.abc import Sequence

from .base import AdvantageEstimator


class MeanBaseline(AdvantageEstimator):
    name = "baseline"

    def __init__(self, eps: float = 1e-6, default: float = 0.5):
        super().__init__(eps)
        self.default = default

    def advantages(self, rewards: Sequence[float], baseline: float | None = None) -> list[float]:
        b = self.default if baseline is None else baseline
        return [r - b for r in rewards]
