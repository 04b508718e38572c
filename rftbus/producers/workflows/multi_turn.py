"""Multi-turn agent-environment episodes: the model acts, the environment observes and rewards.

The n episodes of a group run in lockstep (one batched generate per turn). The response holds every
token after the prompt, model turns and observations alike, the observations framed as the chat template
frames a user turn (PromptFormat.observation), so what trains is the conversation the template renders;
loss_mask is True only on model tokens, and observation tokens carry logprob 0.0 (they were not sampled). reward = the sum of the
environment's step rewards (components: env, turns).
"""

from __future__ import annotations

import time

from rftbus.producers.workflows.base import RolloutContext, Sample, Workflow
from rftbus.producers.workflows.envs import BUILTIN_ENVS, Environment
from rftbus.ground.schemas import Task


def make_env(spec: str | None, params: dict) -> Environment:
    if spec is None:
        raise ValueError("the multi_turn workflow needs explorer.workflow.env (e.g. calculator)")
    if spec in BUILTIN_ENVS:
        return BUILTIN_ENVS[spec](**params)
    from rftbus.ground.plugins import load_object
    return load_object(spec, group="rftbus.envs", what="environment")(**params)


class _Episode:
    def __init__(self, env: Environment, prompt_ids: list[int]):
        self.env, self.prompt_ids = env, prompt_ids
        self.ids: list[int] = []
        self.logprobs: list[float] = []
        self.mask: list[bool] = []
        self.text, self.reward, self.turns, self.done, self.finish = "", 0.0, 0, False, "length"


class MultiTurn(Workflow):
    def run(self, task: Task, n: int, ctx: RolloutContext) -> list[Sample]:
        wf = ctx.workflow
        if task.images:
            raise ValueError("the multi_turn workflow does not show a task's images yet (single_turn does)")
        episodes = []
        for _ in range(n):
            env = make_env(wf.env, wf.env_params)
            episodes.append(_Episode(env, ctx.fmt.task(env.reset(task))))
        limit = getattr(ctx.engine, "max_context", None)
        t0 = time.perf_counter()
        for _turn in range(wf.max_turns):
            active = [e for e in episodes if not e.done]
            if limit is not None:
                for e in active:
                    if len(e.prompt_ids) + len(e.ids) + ctx.sampling.max_new_tokens > limit:
                        e.done, e.finish = True, "length"
                active = [e for e in active if not e.done]
            if not active:
                break
            outs = ctx.engine.generate([e.prompt_ids + e.ids for e in active], ctx.sampling)
            for e, c in zip(active, outs):
                e.ids += c.response_ids
                e.logprobs += c.logprobs
                e.mask += [True] * len(c.response_ids)
                e.text += c.text
                e.turns += 1
                step = e.env.step(c.text)
                e.reward += step.reward
                if step.done:
                    e.done, e.finish = True, "stop"
                    continue
                obs = ctx.fmt.observation(step.observation, ended=c.finish_reason == "stop")
                e.ids += obs
                e.logprobs += [0.0] * len(obs)
                e.mask += [False] * len(obs)
                e.text += step.observation
        gen_ms = (time.perf_counter() - t0) * 1000
        return [Sample(prompt_ids=e.prompt_ids, response_ids=e.ids, logprobs=e.logprobs, loss_mask=e.mask,
                       reward=e.reward, components={"env": e.reward, "turns": float(e.turns)},
                       prompt_text=task.prompt, response_text=e.text, finish_reason=e.finish,
                       generation_ms=gen_ms / n, metadata={"turns": str(e.turns)}) for e in episodes]
