"""The built-in programmatic synthesizer: variants of a built-in taskset's problems (times tables, addition) of the
difficulty asked for, with their answers computed. It lets the loop be shown without a strong model."""

from __future__ import annotations

import random
from typing import Any

from rftbus.ground.errors import RftbusError
from rftbus.ground.schemas import Task
from rftbus.ground.tasksets import get_taskset, taskset_names
from rftbus.producers.synthesis.base import Candidate, Outcome


class TasksetSynthesizer:
    name = "taskset"

    def __init__(self, taskset: str, taskset_params: dict[str, Any] | None = None, variants: int = 2, seed: int = 0):
        if taskset not in taskset_names():
            raise RftbusError(f"synthesizer taskset writes variants of a built-in taskset ({', '.join(taskset_names())}),"
                              f" and taskset.name is {taskset!r}: use synthesizer llm or your own")
        self.taskset = get_taskset(taskset, **(taskset_params or {}))
        self.variants = variants
        self.seed = seed

    def __call__(self, parent: Task, outcome: Outcome) -> list[Candidate]:
        # the same parent, difficulty and children so far write the same variants (a replay after a crash);
        # drawn again after its first children, it writes others
        rng = random.Random(f"{self.seed}:{parent.task_id}:{outcome.difficulty}:{outcome.children}")
        out = []
        for _ in range(self.variants):
            made = self.taskset.variant(parent.metadata, outcome.difficulty, rng)
            if made is not None:
                prompt, answer, meta = made
                out.append(Candidate(prompt=prompt, answer=answer, metadata=meta))
        return out
