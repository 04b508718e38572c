"""The built-in tasksets' own partial-credit scorer as a reward function ("taskset")."""

from __future__ import annotations

from typing import Any

from rftbus.ground.rewards.base import RewardFn
from rftbus.ground.schemas import Task
from rftbus.ground.tasksets import get_taskset


class TasksetReward(RewardFn):
    name = "taskset"

    def __init__(self, **taskset_params):
        self.params = taskset_params
        self._cache: dict[str, Any] = {}  # taskset name -> taskset

    def __call__(self, task: Task, response: str) -> dict[str, float]:
        if task.answer is None:
            raise ValueError(f"task {task.task_id} has no answer to score against")
        ts = self._cache.get(task.taskset)
        if ts is None:
            ts = self._cache[task.taskset] = get_taskset(task.taskset, **self.params)
        return ts.score(response, task.answer)
