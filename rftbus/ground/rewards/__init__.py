"""Reward functions (one file each) and the weighted combination the explorer scores with."""

from __future__ import annotations

from rftbus.ground.config.explorer import RewardSpec
from rftbus.ground.rewards.base import GroupRewardFn, Response, RewardFn, RewardSet, Scored

__all__ = ["BUILTIN", "GroupRewardFn", "Response", "RewardFn", "RewardSet", "Scored", "build_reward", "make_rewards"]

# Built-in names -> "module:Class" (imported on use: the judge pulls in transformers/httpx).
BUILTIN = {
    "taskset": "rftbus.ground.rewards.taskset:TasksetReward",
    "math": "rftbus.ground.rewards.math_verify:MathVerifyReward",
    "math_verify": "rftbus.ground.rewards.math_verify:MathVerifyReward",
    "code": "rftbus.ground.rewards.code_exec:CodeExecReward",
    "format": "rftbus.ground.rewards.format_rules:FormatReward",
    "judge_model": "rftbus.ground.rewards.judge_model:RewardModelJudge",
    "judge_llm": "rftbus.ground.rewards.judge_llm:LLMJudge",
}


def build_reward(spec: RewardSpec) -> RewardFn | GroupRewardFn:
    from rftbus.ground.plugins import load_object
    target = BUILTIN.get(spec.name, spec.name)
    obj = load_object(target, group="rftbus.rewards", what="reward function")
    fn = obj(**spec.params) if isinstance(obj, type) else obj
    if not callable(fn) and not callable(getattr(fn, "score_group", None)):
        raise TypeError(f"reward function {spec.name!r} is neither callable nor has score_group(task, responses)")
    return fn


def make_rewards(specs: list[RewardSpec]) -> RewardSet:
    short = lambda s: s.name if s.name in BUILTIN else s.name.replace(":", ".").rsplit(".", 1)[-1]  # noqa: E731
    return RewardSet([(short(s), s.weight, build_reward(s)) for s in specs])
