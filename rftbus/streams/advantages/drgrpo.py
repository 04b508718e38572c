"""Dr. GRPO advantages: r - mean over the group, without GRPO's division by the group's std.

Liu et al. 2025 ("Understanding R1-Zero-Like Training: A Critical Perspective"). Dividing by the std
gives a group whose rewards barely differ (a prompt the policy already answers almost the same way
every time) the same advantage scale as a group that is split down the middle, so the policy is pushed
hardest exactly where it is nearly deterministic already. Without the division such groups weigh in
proportion to how much their rewards really differ.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from .base import AdvantageEstimator


class DrGRPO(AdvantageEstimator):
    name = "drgrpo"

    def advantages(self, rewards: Sequence[float], baseline: float | None = None) -> list[float]:
        if not rewards:
            return []
        mean = math.fsum(rewards) / len(rewards)
        return [r - mean for r in rewards]
