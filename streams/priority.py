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
    """EMA of group mean reward per key (a task id, or `class:<name>` for a prompt class). At most
    `max_keys` are kept, least recently updated dropped first: live traffic brings a new task id with
    almost every prompt, and hours of it must not grow a worker's memory without bound."""

    def __init__(self, alpha: float, max_keys: int = 200_000):
        self.alpha = alpha
        self.max_keys = max_keys
        self.rates: dict[str, float] = {}
        self.changed: set[str] = set()

    def get(self, task_id: str) -> float | None:
        return self.rates.get(task_id)

    def update(self, task_id: str, mean_reward: float, alpha: float | None = None) -> float:
        a = self.alpha if alpha is None else alpha
        old = self.rates.pop(task_id, None)  # (re-inserted: the dict's order is recency of update)
        new = mean_reward if old is None else (1 - a) * old + a * mean_reward
        self.rates[task_id] = new
        self.changed.add(task_id)
        while len(self.rates) > self.max_keys:
            gone = next(iter(self.rates))
            del self.rates[gone]
            self.changed.discard(gone)
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
