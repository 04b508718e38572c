"""Environments for multi-turn episodes, and a built-in one with a tool.

An environment sees the model's turn as text and answers with an observation, a reward and
whether the episode is over. Users plug theirs in by dotted path (`explorer.workflow.env`).
"""

from __future__ import annotations

import ast
import operator
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass

from rftbus.ground.schemas import Task
from rftbus.ground.tasksets import get_taskset


@dataclass
class Step:
    observation: str
    reward: float
    done: bool


class Environment(ABC):
    @abstractmethod
    def reset(self, task: Task) -> str:
        """Start an episode for `task`; returns the first observation (the prompt)."""

    @abstractmethod
    def step(self, action: str) -> Step:
        """Apply the model's turn."""


_CALC = re.compile(r"^calc:([0-9+\-* ]{1,40})$")


class CalculatorEnv(Environment):
    """A tool-use episode for arithmetic tasks: a turn `calc:12+30` is a tool call answered with
    ` =42 `; any other turn is the final answer, rewarded with the taskset's score."""

    def __init__(self, tool_reward: float = 0.0):
        self.tool_reward = tool_reward

    def reset(self, task: Task) -> str:
        self.task = task
        self.scorer = get_taskset(task.taskset)
        return task.prompt

    def step(self, action: str) -> Step:
        action = action.strip()
        m = _CALC.match(action)
        if m:
            try:
                value = _arith(m.group(1))
            except (ValueError, SyntaxError):
                return Step(" =error ", 0.0, False)
            return Step(f" ={value} ", self.tool_reward, False)
        return Step("", self.scorer.score(action, self.task.answer or "")["reward"], True)


_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}


def _arith(expr: str) -> int:
    """Evaluate integers with + - * only (an AST walk, never eval)."""
    def ev(node):
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -ev(node.operand)
        raise ValueError(f"not arithmetic: {expr!r}")
    return ev(ast.parse(expr, mode="eval"))


BUILTIN_ENVS = {"calculator": CalculatorEnv}
