"""GRPO: group-normalized advantages (r - mean) / (std + eps), population std over the group."""

from __future__ import annotations

import math
from collections.abc import Sequence

from .base import AdvantageEstimator


class GRPO(AdvantageEstimator):
    name = "grpo"

    def advantages(self, rewards: Sequence[float], baseline: float | None = None) -> list[float]:
        n = len(rewards)
        if n == 0:
            return []
        mean = math.fsum(rewards) / n
        std = math.sqrt(math.fsum((r - mean) ** 2 for r in rewards) / n)
        return [(r - mean) / (std + self.eps) for r in rewards]


def group_std(rewards: Sequence[float]) -> float:
    n = len(rewards)
    mean = math.fsum(rewards) / n
    return math.sqrt(math.fsum((r - mean) ** 2 for r in rewards) / n)
