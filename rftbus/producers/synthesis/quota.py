"""The synthesize stage's bounds: per parent over the run, per minute, as a share of all the tasks on the tasks
topic, and a generation limit. Counted from the topic itself (a restart reads it back) and from what this stage
has just published (not yet read back), each task once."""

from __future__ import annotations

from collections import deque

from rftbus.ground.config.synthesis import SynthesisConfig
from rftbus.ground.schemas import Task


class Quota:
    def __init__(self, sc: SynthesisConfig):
        self.sc = sc
        self.children: dict[str, set[str]] = {}  # parent task id -> its synthesized tasks
        self.synthesized: set[str] = set()
        self.total = 0  # task records on the topic
        self.ours_unseen: set[str] = set()  # published by this stage, not yet read back
        self.recent: deque[float] = deque()  # when each of the last minute's tasks was published

    def seen(self, task: Task) -> None:
        """A task read off the topic."""
        self.total += 1
        self.ours_unseen.discard(task.task_id)
        if task.parent_task_id is not None:
            self.synthesized.add(task.task_id)
            self.children.setdefault(task.parent_task_id, set()).add(task.task_id)

    def refusal(self, parent: Task, now: float) -> str | None:
        """Why no new task may come from `parent` now, or None."""
        if parent.generation + 1 > self.sc.max_generation:
            return "generation_limit"
        if len(self.children.get(parent.task_id, ())) >= self.sc.per_parent:
            return "parent_quota"
        while self.recent and now - self.recent[0] > 60.0:
            self.recent.popleft()
        if len(self.recent) >= self.sc.per_minute:
            return "rate_limit"
        ours = len(self.synthesized | self.ours_unseen)
        if (ours + 1) / (self.total + len(self.ours_unseen - self.synthesized) + 1) > self.sc.max_share:
            return "share_limit"
        return None

    def taken(self, task: Task, now: float) -> None:
        """`task` (with its parent) is being published."""
        assert task.parent_task_id is not None
        self.ours_unseen.add(task.task_id)
        self.children.setdefault(task.parent_task_id, set()).add(task.task_id)
        self.recent.append(now)
