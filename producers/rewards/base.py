"""Reward functions and how they combine.

A reward function maps (task, response text) to named components in which "reward" is its scalar;
the explorer combines the functions with weights: reward = sum(weight_i * reward_i), and records
every component as `<name>` / `<name>.<component>` in Experience.reward_components.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from dataclasses import dataclass

from rftbus.schemas import Task


class RewardFn(ABC):
    """One reward term. Subclasses take their config `params` as keyword arguments."""

    name: str = "reward"

    @abstractmethod
    def __call__(self, task: Task, response: str) -> dict[str, float]:
        """Components, including "reward" (the scalar this function contributes)."""


@dataclass
class Scored:
    reward: float
    components: dict[str, float]
    reward_ms: float


class RewardSet:
    """Weighted combination of reward functions (the explorer's scorer)."""

    def __init__(self, terms: list[tuple[str, float, RewardFn]]):
        if not terms:
            raise ValueError("at least one reward function is needed")
        self.terms = terms

    def score(self, task: Task, response: str) -> Scored:
        t0 = time.perf_counter()
        total, comps = 0.0, {}
        for name, weight, fn in self.terms:
            out = fn(task, response)
            if "reward" not in out:
                raise ValueError(f"reward function {name!r} returned no 'reward' component")
            value = float(out["reward"])
            total += weight * value
            comps[name] = value
            comps.update({f"{name}.{k}": float(v) for k, v in out.items() if k != "reward"})
        return Scored(total, comps, (time.perf_counter() - t0) * 1000)
