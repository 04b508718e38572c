"""Per-task pass rates (a streaming EMA of group mean reward) and the priority / lane rule.

priority(experience) = |advantage| * recency_decay ** (latest - model_version)
                       + difficulty_weight * 4 p (1 - p),   p = the task's pass rate before this group
A group goes to the priority lane when the mean priority of its survivors >= priority_threshold.
Balanced groups (|A| near 1 for every sample) and tasks of middling difficulty land there first;
lopsided groups (one success in eight) and solved or hopeless tasks go to the normal lane.
"""

from __future__ import annotations

from collections.abc import Sequence


class PassRates:
    def __init__(self, alpha: float):
        self.alpha = alpha
        self.rates: dict[str, float] = {}
        self.changed: set[str] = set()

    def get(self, task_id: str) -> float | None:
        return self.rates.get(task_id)

    def update(self, task_id: str, mean_reward: float) -> float:
        old = self.rates.get(task_id)
        new = mean_reward if old is None else (1 - self.alpha) * old + self.alpha * mean_reward
        self.rates[task_id] = new
        self.changed.add(task_id)
        return new

    def take_changed(self) -> dict[str, float]:
        out = {t: self.rates[t] for t in self.changed}
        self.changed.clear()
        return out


def difficulty_bonus(pass_rate: float | None, weight: float) -> float:
    if pass_rate is None:
        return 0.0
    p = min(1.0, max(0.0, pass_rate))
    return weight * 4.0 * p * (1.0 - p)


def priorities(advantages: Sequence[float], versions: Sequence[int], latest: int, decay: float,
               bonus: float) -> list[float]:
    return [abs(a) * decay ** max(0, latest - v) + bonus for a, v in zip(advantages, versions)]
