"""User-side plugins the explorer tests load by dotted path (as a user's own package would)."""

from __future__ import annotations

import time

from rftbus.producers.workflows import Sample, Workflow
from rftbus.producers.workflows.envs import Environment, Step


class Failing(Workflow):
    """A workflow whose environment is broken: every attempt raises."""

    calls = 0

    def run(self, task, n, ctx):
        Failing.calls += 1
        raise ConnectionError("environment server is down")


class Hanging(Workflow):
    def run(self, task, n, ctx):
        while True:
            time.sleep(0.05)


class EchoCode(Workflow):
    """The 'policy' answers with the program stored in the task (to score hostile code)."""

    def run(self, task, n, ctx):
        text = task.metadata["program"]
        ids = ctx.tokenizer(text, add_special_tokens=False)["input_ids"][:4] or [0]
        out = []
        for _ in range(n):
            scored = ctx.rewards.score(task, text)
            out.append(Sample(prompt_ids=[1], response_ids=ids, logprobs=[0.0] * len(ids), loss_mask=[True] * len(ids),
                              reward=scored.reward, components=scored.components, response_text=text))
        return out


class TwoTurnEnv(Environment):
    """Observes every turn with ' ok ' and ends after two turns with reward 1."""

    def reset(self, task):
        self.turns = 0
        return task.prompt

    def step(self, action):
        self.turns += 1
        if self.turns >= 2:
            return Step("", 1.0, True)
        return Step(" ok ", 0.25, False)


def half_reward(task, response):
    """A custom reward function given by dotted path (a plain function)."""
    return {"reward": 0.5, "length": float(len(response))}


async def slow_len(task, response):
    """An async per-answer reward: the group's calls overlap on the shared loop."""
    import asyncio

    await asyncio.sleep(0.2)
    return {"reward": float(len(response))}


class RankGroup:
    """A group reward: the longest answer of the group scores 1, the others 0 (one call per group)."""

    calls = 0

    def score_group(self, task, responses):
        RankGroup.calls += 1
        best = max(range(len(responses)), key=lambda i: len(responses[i].text))
        return [{"reward": float(i == best), "rank_of": float(len(responses))} for i in range(len(responses))]
