"""Single-turn: prompt -> n sampled responses (one batched generate) -> the group scored at once (a group reward
sees all n; a per-answer one each)."""

from __future__ import annotations

import time

from rftbus.ground.rewards.base import Response
from rftbus.producers.engines.base import generate
from rftbus.producers.workflows.base import RolloutContext, Sample, Workflow
from rftbus.ground.schemas import Task


class SingleTurn(Workflow):
    def run(self, task: Task, n: int, ctx: RolloutContext) -> list[Sample]:
        prompt_ids = ctx.fmt.of_task(task)  # a task's images expanded into their image tokens (models/vision.py)
        pixels = ctx.fmt.vision.inputs(task.images) if task.images else None
        t0 = time.perf_counter()
        completions = generate(ctx.engine, [prompt_ids] * n, ctx.sampling, images=[pixels] * n if pixels else None)
        gen_ms = (time.perf_counter() - t0) * 1000
        scores = ctx.rewards.score_group(task, [Response(c.text, c.response_ids, c.finish_reason) for c in completions])
        samples = []
        for c, scored in zip(completions, scores):
            if "batch_samples" in c.metadata:  # generated with other tasks' groups (rftbus/producers/engines/primed.py)
                per_sample_ms = float(c.metadata["batch_generation_ms"]) / int(c.metadata["batch_samples"])
            else:
                per_sample_ms = gen_ms / n
            samples.append(Sample(
                prompt_ids=prompt_ids, response_ids=c.response_ids, logprobs=c.logprobs,
                loss_mask=[True] * len(c.response_ids), reward=scored.reward, components=scored.components,
                prompt_text=task.prompt, response_text=c.text, finish_reason=c.finish_reason,
                generation_ms=per_sample_ms, reward_ms=scored.reward_ms,
                metadata={"batch_generation_ms": f"{gen_ms:.3f}", **c.metadata},
            ))
        return samples
