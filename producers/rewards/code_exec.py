"""Code-execution reward: the response's program plus the task's tests, run in the sandbox.

Tests come from task.metadata["tests"] (Python asserts), else task.answer. reward = 1 when the
program with the tests exits 0 inside the limits, else 0 (timeouts, crashes, limit kills, network
attempts all score 0); the worker itself is never at risk.
"""

from __future__ import annotations

import re

from rftbus.producers.rewards.base import RewardFn
from rftbus.producers.rewards.sandbox import SandboxResult, SandboxLimits, run_sandboxed
from rftbus.schemas import Task

_FENCE = re.compile(r"```(?:python|py)?\s*\n(.*?)```", re.DOTALL)


def extract_code(response: str) -> str:
    blocks = _FENCE.findall(response)
    return blocks[-1] if blocks else response


class CodeExecReward(RewardFn):
    name = "code"

    def __init__(self, tests_field: str = "tests", **limits):
        self.tests_field = tests_field
        self.limits = SandboxLimits(**limits)
        self.last: SandboxResult | None = None  # the last result, for inspection

    def __call__(self, task: Task, response: str) -> dict[str, float]:
        tests = task.metadata.get(self.tests_field) or task.answer or ""
        result = self.last = run_sandboxed(extract_code(response) + "\n\n" + tests + "\n", self.limits)
        return {"reward": 1.0 if result.ok else 0.0, "timed_out": float(result.timed_out),
                "exit_code": float(result.returncode if result.returncode is not None else -1),
                "wall_s": round(result.wall_s, 3)}
