"""Only checked tasks enter: a candidate's answer is recomputed by the taskset where it can (the built-ins parse
their own prompts) and compared with math-verify, or else the synthesizer's endpoint solves the new prompt several
times and enough of its solutions must agree with the answer (self-consistency). Which check passed is recorded
on the task (metadata `verified`); a candidate nothing can check is refused `unverified`."""

from __future__ import annotations

import math
from dataclasses import dataclass

from rftbus.ground.config.synthesis import SynthesisConfig
from rftbus.ground.rewards.math_verify import MathVerifyReward
from rftbus.ground.schemas import Task
from rftbus.ground.tasksets.base import BuiltinTaskset
from rftbus.producers.synthesis.base import Candidate, Solver


@dataclass(frozen=True)
class Checked:
    refusal: str | None  # None: verified
    detail: str


class AnswerCheck:
    def __init__(self, sc: SynthesisConfig, taskset: BuiltinTaskset | None, solver: Solver | None):
        self.sc, self.taskset, self.solver = sc, taskset, solver
        self.math = MathVerifyReward(timeout_s=5.0)

    def agree(self, reference: str, response: str) -> bool:
        """The same text, or the same math (math-verify): a reversed string is no number to parse."""
        if reference.strip() == response.strip():
            return True
        try:
            return self.math(Task(taskset="synthesis", prompt="", answer=reference), response)["reward"] == 1.0
        except ValueError:  # a reference math-verify cannot read
            return False

    def __call__(self, c: Candidate) -> Checked:
        mode = self.sc.verify
        if mode in ("auto", "recompute") and self.taskset is not None:
            want = self.taskset.answer_of(c.prompt)
            if want is not None:
                if self.agree(want, c.answer):
                    return Checked(None, "recompute")
                return Checked("wrong_answer", f"the taskset recomputes {want!r}; the synthesizer said {c.answer[:80]!r}")
        if mode == "recompute":
            return Checked("unverified", "the taskset cannot recompute this prompt's answer (synthesis.verify: "
                                         "recompute)")
        if self.solver is not None:
            n = self.sc.consistency_samples
            solutions = self.solver.solve(c.prompt, n)
            agreed = sum(self.agree(c.answer, s) for s in solutions)
            need = math.ceil(self.sc.consistency_agree * n)
            if agreed >= need:
                return Checked(None, f"consistency {agreed}/{n}")
            return Checked("inconsistent", f"{agreed} of {n} solutions agree with {c.answer[:80]!r} ({need} needed)")
        return Checked("unverified", "neither the taskset can recompute its answer nor the synthesizer solve it")
