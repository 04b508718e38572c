"""Don't generate what cannot teach: prompts whose recent groups had no reward variance are rolled out
less often (#19).

GRPO learns nothing from a group whose samples all scored the same (all pass, all fail, or a policy that
gives one answer per prompt): streams drop it as `zero_variance`. The explorer computes the rewards
itself, so it knows this about every group it makes before streams see it, with no extra topic to read.
A prompt whose last k groups all had zero variance is rolled out with probability max(floor, 2^-k);
one group with variance resets it. So a solved or hopeless prompt is revisited now and then (the policy
moves, and may make it teachable again) instead of costing a full group every pass. With `min_group`, a
revisit is also smaller: n·2^-k samples, at least `min_group` (groups sized adaptively: a flat prompt is
probed with 2 samples, not 8; a probe that finds variance trains as a group of its own and restores n).
A prompt not seen yet is sized by what the explorer's recent groups were like: where a share f of them was
flat, it starts as if ⌊log2 1/(1−f)⌋ flat groups were behind it (MIX publishes thousands of tasks and rolls
few of them out twice, so per-prompt memory alone never sees a solved task coming).

Keyed by (taskset, prompt), not task id: `rftbus run` gives every pass over the tasks new ids, and the
streams' pass rates are per task id. The draw is seeded by the task id, so a task redone after a
crash gets the same decision from the same memory.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections import OrderedDict, deque
from collections.abc import Sequence

from rftbus.ground.schemas import Task


def _key(task: Task) -> bytes:
    return hashlib.blake2b(f"{task.taskset}\0{task.prompt}".encode(), digest_size=12).digest()


class NoSignalMemory:
    """Per prompt: how many groups in a row had zero reward variance (bounded LRU)."""

    def __init__(self, floor: float, eps: float = 1e-6, capacity: int = 1_000_000, min_group: int | None = None,
                 window: int = 64):
        self.floor, self.eps, self.capacity, self.min_group = floor, eps, capacity, min_group
        self.streaks: OrderedDict[bytes, int] = OrderedDict()
        self.recent: deque[bool] = deque(maxlen=window)  # the last groups' flatness, every prompt

    def flat_share(self) -> float:
        return sum(self.recent) / len(self.recent) if len(self.recent) == self.recent.maxlen else 0.0

    def group_size(self, task: Task, n: int) -> int:
        """Samples to generate for `task`: n, or n·2^-k (at least min_group) after k flat groups in a row
        (for a prompt not seen yet, k from the recent flat share)."""
        if self.min_group is None or n <= self.min_group:
            return n
        k = self.streaks.get(_key(task))
        if k is None:
            k = int(math.floor(-math.log2(max(1.0 - self.flat_share(), 1e-9))))
        return max(self.min_group, n >> k)

    def probability(self, task: Task) -> float:
        k = self.streaks.get(_key(task), 0)
        return max(self.floor, 0.5 ** k)

    def roll_out(self, task: Task) -> bool:
        """Whether to generate this task's group now."""
        p = self.probability(task)
        return p >= 1.0 or random.Random(task.task_id).random() < p

    def record(self, task: Task, rewards: Sequence[float]) -> None:
        """A group was made for `task` with these rewards."""
        if len(rewards) < 2:  # a group of one never has variance; it is not the prompt's fault
            return
        key = _key(task)
        flat = max(rewards) - min(rewards) <= self.eps
        self.recent.append(flat)
        self.streaks[key] = self.streaks.get(key, 0) + 1 if flat else 0
        self.streaks.move_to_end(key)
        if len(self.streaks) > self.capacity:
            self.streaks.popitem(last=False)
