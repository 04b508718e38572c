"""The advantage estimator interface: rewards of one complete group in, one advantage per sample out."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence


class AdvantageEstimator(ABC):
    name: str

    def __init__(self, eps: float = 1e-6):
        self.eps = eps  # (what (r - mean) / (std + eps) adds; estimators without a division ignore it)

    @abstractmethod
    def advantages(self, rewards: Sequence[float], baseline: float | None = None) -> list[float]:
        """Advantages in the order of `rewards`; `baseline` is an outside estimate (e.g. the task's pass
        rate) that estimators may use where the group alone carries no signal."""
