"""Code-execution reward: the response's program plus the task's tests, run in the sandbox.

Tests come from task.metadata["tests"] (Python asserts), else task.answer. reward = 1 when the
program with the tests exits 0 inside the limits, else 0 (timeouts, crashes, network attempts all
score 0); the worker itself is never at risk. A limit the program ran into is recorded as the
component `sandbox.limit.<name>` = 1 (pids, memory, cpu, file_size, open_files, wall, output), and
`on_limit` is what such a run scores (default 0: a program that tried to fork a thousand times and was
stopped does not pass, even if it caught the error and exited 0; None: judge by the exit code alone).
"""

from __future__ import annotations

import re

from rftbus.ground.rewards.base import RewardFn
from rftbus.ground.rewards.sandbox import SandboxLimits, SandboxResult, check_sandbox, run_sandboxed
from rftbus.ground.schemas import Task

_FENCE = re.compile(r"```(?:python|py)?\s*\n(.*?)```", re.DOTALL)
_checked = False


def extract_code(response: str) -> str:
    blocks = _FENCE.findall(response)
    return blocks[-1] if blocks else response


class CodeExecReward(RewardFn):
    name = "code"

    def __init__(self, tests_field: str = "tests", on_limit: float | None = 0.0, **limits):
        global _checked
        if not _checked:  # fail at start with the reason, not on every task
            check_sandbox()
            _checked = True
        self.tests_field = tests_field
        self.on_limit = on_limit
        self.limits = SandboxLimits(**limits)
        self.last: SandboxResult | None = None  # the last result, for inspection

    def __call__(self, task: Task, response: str) -> dict[str, float]:
        tests = task.metadata.get(self.tests_field) or task.answer or ""
        result = self.last = run_sandboxed(extract_code(response) + "\n\n" + tests + "\n", self.limits)
        reward = 1.0 if result.ok else 0.0
        if result.limits_hit and self.on_limit is not None:
            reward = min(reward, self.on_limit)
        return {"reward": reward, "timed_out": float(result.timed_out),
                "exit_code": float(result.returncode if result.returncode is not None else -1),
                "wall_s": round(result.wall_s, 3), **{f"sandbox.limit.{name}": 1.0 for name in result.limits_hit}}
