"""The built-in taskset interface: problems, a scorer with partial credit, and expert answers."""

from __future__ import annotations

import hashlib
import random
from abc import ABC, abstractmethod
from collections.abc import Iterator

from rftbus.ground.schemas import Image, Task

EVAL_EVERY = 10  # one problem in ten (by hash) is held out for eval; train never sees it


def stable_task_id(taskset: str, prompt: str) -> str:
    """Same problem, same id: re-publishing a taskset never creates a second task."""
    return hashlib.sha1(f"{taskset}\x00{prompt}".encode()).hexdigest()[:20]


def is_eval(taskset: str, prompt: str) -> bool:
    return int(stable_task_id(taskset, prompt), 16) % EVAL_EVERY == 0


class BuiltinTaskset(ABC):
    name: str

    @abstractmethod
    def problem(self, rng: random.Random) -> tuple[str, str, dict[str, str]]:
        """One random (prompt, answer, metadata)."""

    @abstractmethod
    def score(self, response: str, answer: str) -> dict[str, float]:
        """Reward components in [0, 1]; must include "reward", the combined value."""

    def answer_of(self, prompt: str) -> str | None:
        """The answer recomputed from a prompt of this taskset's form, or None (not of its form, or a taskset that
        cannot): how a synthesized task's reference answer is checked (rftbus/producers/synthesis/verify.py)."""
        return None

    def variant(self, meta: dict[str, str], difficulty: str, rng: random.Random) -> tuple[str, str, dict[str, str]] | None:
        """A new problem like the one `meta` describes (a problem's metadata), `difficulty` easier, same or harder:
        (prompt, answer, metadata), or None where this taskset has no variants (the built-in synthesizer)."""
        return None

    def key_of(self, prompt: str, meta: dict[str, str]) -> str:
        """What makes a problem distinct (its id and its split are drawn from it): the prompt, unless the prompt
        repeats over different problems (a picture's question: shapes.py)."""
        return prompt

    def images_of(self, meta: dict[str, str]) -> list[Image]:
        """The images a problem's prompt shows (none for a text taskset)."""
        return []

    def expert(self, task: Task) -> str:
        """The demonstration an expert would give (the reference answer)."""
        return task.answer or ""

    def tasks(self, split: str, n: int, seed: int = 0) -> Iterator[Task]:
        """`n` distinct tasks of `split` ("train" or "eval"), deterministic for a seed."""
        if split not in ("train", "eval"):
            raise ValueError(f"split must be 'train' or 'eval', not {split!r}")
        rng = random.Random(f"{self.name}:{split}:{seed}")
        seen: set[str] = set()
        attempts = 0
        while len(seen) < n:
            attempts += 1
            if attempts > 50 * n + 1000:
                raise ValueError(f"taskset {self.name} has fewer than {n} distinct {split} problems")
            prompt, answer, meta = self.problem(rng)
            key = self.key_of(prompt, meta)
            if key in seen or is_eval(self.name, key) != (split == "eval"):
                continue
            seen.add(key)
            yield Task(task_id=stable_task_id(self.name, key), taskset=self.name, split=split,
                       prompt=prompt, answer=answer, metadata=meta, images=self.images_of(meta))


def _registry() -> dict[str, type[BuiltinTaskset]]:
    from rftbus.ground.tasksets.addition import Addition
    from rftbus.ground.tasksets.reverse import Reverse
    from rftbus.ground.tasksets.shapes import Shapes
    from rftbus.ground.tasksets.times import Times
    return {"addition": Addition, "reverse": Reverse, "shapes": Shapes, "times": Times}


def taskset_names() -> list[str]:
    return sorted(_registry())


def get_taskset(name: str, **params) -> BuiltinTaskset:
    reg = _registry()
    if name not in reg:
        raise KeyError(f"no built-in taskset {name!r}; choose one of {', '.join(sorted(reg))}")
    return reg[name](**params)
