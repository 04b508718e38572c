"""LLM judge over any OpenAI-compatible chat completions endpoint (the OpenAI SDK's async client).

Two modes. `pointwise`: each answer graded 0-10 in its own call, at most `max_concurrency` calls in flight at
once (the n answers of a group overlap). `group`: one call shows the judge all n answers of a prompt and asks
for a JSON list of n grades, so answers are ranked against each other (ART's RULER pattern) at the cost of one
request per group. reward = grade / 10; an answer whose grade cannot be read scores 0 with component
`parsed` = 0, so a confused judge lowers the reward visibly instead of failing the task. Rate limits, 5xx and
connection errors are retried by the SDK with exponential backoff (`max_retries`); what still fails fails the
task (the explorer retries it, then rejects it `task_failed`). `api_key` is a secret: `rftbus config` masks it.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any, Literal

from pydantic import SecretStr

from rftbus.ground.rewards.base import Components, GroupRewardFn, Response
from rftbus.ground.schemas import Task

SYSTEM = "You are a strict grader. You grade answers to a task against its reference answer."
POINTWISE = ("Task:\n{prompt}\n\nReference answer:\n{answer}\n\nAnswer to grade:\n{response}\n\n"
             "Grade the answer from 0 (wrong) to 10 (perfect). Reply with the number only.")
GROUP = ("Task:\n{prompt}\n\nReference answer:\n{answer}\n\n{answers}\n\nGrade each of the {n} answers from 0 (wrong) "
         "to 10 (perfect), comparing them with each other. Reply with a JSON list of {n} numbers only, in order.")
_GRADE = re.compile(r"\b(10|[0-9])(?:\.\d+)?\b")
_LIST = re.compile(r"\[[^\[\]]*\]")


def parse_grade(text: str) -> float | None:
    m = _GRADE.search(text or "")
    return float(m.group(0)) if m is not None else None


def parse_grades(text: str, n: int) -> list[float] | None:
    """The first JSON list of n numbers in 0..10 in `text`, else None."""
    for m in _LIST.finditer(text or ""):
        try:
            values = json.loads(m.group(0))
        except json.JSONDecodeError:
            continue
        if (isinstance(values, list) and len(values) == n
                and all(isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v <= 10 for v in values)):
            return [float(v) for v in values]
    return None


def _scored(grade: float | None) -> Components:
    return {"reward": 0.0, "parsed": 0.0} if grade is None else {"reward": grade / 10.0, "parsed": 1.0}


class LLMJudge(GroupRewardFn):
    name = "judge_llm"

    def __init__(self, base_url: str, model: str, api_key: str | SecretStr = "EMPTY",
                 mode: Literal["pointwise", "group"] = "pointwise", max_concurrency: int = 8, max_retries: int = 3,
                 timeout_s: float = 60.0, max_tokens: int | None = None, temperature: float = 0.0,
                 system: str = SYSTEM, template: str | None = None):
        if mode not in ("pointwise", "group"):
            raise ValueError(f"judge_llm mode must be pointwise or group, not {mode!r}")
        if max_concurrency < 1:
            raise ValueError(f"judge_llm max_concurrency must be >= 1, got {max_concurrency}")
        self.base_url, self.model, self.mode = base_url, model, mode
        self.api_key = api_key if isinstance(api_key, SecretStr) else SecretStr(api_key)
        self.max_concurrency, self.max_retries, self.timeout_s = max_concurrency, max_retries, timeout_s
        self.max_tokens, self.temperature, self.system = max_tokens, temperature, system
        self.template = template or (POINTWISE if mode == "pointwise" else GROUP)
        self._client: Any = None
        self._gate: asyncio.Semaphore | None = None
        self.calls = 0  # requests sent (not counting the SDK's retries)

    def __repr__(self) -> str:  # never the key
        return f"LLMJudge({self.base_url!r}, {self.model!r}, mode={self.mode!r})"

    def _ready(self) -> tuple[Any, asyncio.Semaphore]:
        if self._client is None:  # made on the loop that runs it (aio.py): an async client belongs to one loop
            from openai import AsyncOpenAI

            self._client = AsyncOpenAI(base_url=self.base_url, api_key=self.api_key.get_secret_value(),
                                       max_retries=self.max_retries, timeout=self.timeout_s)
            self._gate = asyncio.Semaphore(self.max_concurrency)
        assert self._gate is not None
        return self._client, self._gate

    async def _ask(self, content: str, max_tokens: int) -> str:
        client, gate = self._ready()
        async with gate:
            self.calls += 1
            resp = await client.chat.completions.create(
                model=self.model, messages=[{"role": "system", "content": self.system}, {"role": "user", "content": content}],
                max_tokens=max_tokens, temperature=self.temperature)
        return resp.choices[0].message.content or ""

    async def score_group(self, task: Task, responses: list[Response]) -> list[Components]:
        answer = task.answer or "(none)"
        if self.mode == "pointwise":
            texts = await asyncio.gather(*(
                self._ask(self.template.format(prompt=task.prompt, answer=answer, response=r.text), self.max_tokens or 8)
                for r in responses))
            return [_scored(parse_grade(t)) for t in texts]
        answers = "\n\n".join(f"Answer {i}:\n{r.text}" for i, r in enumerate(responses, 1))
        text = await self._ask(self.template.format(prompt=task.prompt, answer=answer, answers=answers, n=len(responses)),
                               self.max_tokens or 8 * len(responses) + 16)
        grades = parse_grades(text, len(responses))
        if grades is None:
            return [_scored(None) for _ in responses]
        return [_scored(g) for g in grades]
