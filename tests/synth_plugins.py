"""A user's synthesizer the synthesize-stage tests load by dotted path; what it does depends on the parent task's
metadata `mode`, so one run of the stage meets every kind of synthesizer a user may write."""

from __future__ import annotations

import random
import time

from rftbus.ground.tasksets import get_taskset

TIMES = get_taskset("times")


def by_mode(parent, outcome):
    mode = parent.metadata.get("mode", "good")
    rng = random.Random(parent.task_id)
    if mode == "good":  # two right variants
        return [dict(zip(("prompt", "answer", "metadata"), TIMES.variant(parent.metadata, outcome.difficulty, rng),
                         strict=True)) for _ in range(2)]
    if mode == "raise":
        raise RuntimeError("the synthesizer's endpoint is down")
    if mode == "slow":
        time.sleep(3.0)
        return []
    if mode == "not_a_list":
        return "What is 2 times 2?"
    if mode == "malformed":
        return [{"prompt": "What is 2 times 3?"}]
    if mode == "duplicate":
        return [{"prompt": parent.prompt.upper() + " ", "answer": parent.answer}]
    if mode == "wrong":
        prompt, answer, _ = TIMES.variant(parent.metadata, "same", rng)
        return [{"prompt": prompt, "answer": str(int(answer) + 1)}]
    if mode == "held_out":
        held = next(TIMES.tasks("eval", 1))
        return [{"prompt": held.prompt, "answer": held.answer}]
    if mode == "unverifiable":
        return [{"prompt": "Name a prime number between 10 and 12.", "answer": "11"}]
    raise ValueError(mode)
