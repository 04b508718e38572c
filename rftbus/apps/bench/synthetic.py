"""Realistic ExperienceGroup records for the benchmark and tests.

Shapes follow the explorer contract: n samples per group keyed by group_id, response tokens with one
behaviour logprob and one loss-mask flag each, a reward with components, text fields filled.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from rftbus.ground.schemas import Experience, ExperienceGroup, Source, new_id


def make_group(*, task_id: str | None = None, rewards: Sequence[float | None], model_version: int = 0,
               response_tokens: int = 1000, prompt_tokens: int = 64, source: Source = Source.explorer,
               group_id: str | None = None, seed: int | None = None, explorer_id: str = "bench-0",
               vocab: int = 49) -> ExperienceGroup:
    rng = random.Random(seed)
    task = task_id or f"task-{rng.randrange(10_000)}"
    prompt = [rng.randrange(vocab) for _ in range(prompt_tokens)]
    samples = []
    for r in rewards:
        resp = [rng.randrange(vocab) for _ in range(response_tokens)]
        samples.append(Experience(
            response_ids=resp, logprobs=[-rng.random() * 4.0 for _ in resp], loss_mask=[True] * len(resp),
            reward=r, reward_components={} if r is None else {"exact": float(r == 1.0), "digits": r},
            model_version=model_version, response_text="80235", finish_reason="stop",
            generation_ms=rng.random() * 100, reward_ms=0.1))
    return ExperienceGroup(group_id=group_id or new_id(), task_id=task, source=source, explorer_id=explorer_id,
                           prompt_ids=prompt, prompt_text="what is 12345 + 67890?", samples=samples)
