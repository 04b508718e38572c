"""LLM judge over any OpenAI-compatible `/v1/completions` endpoint: asks for a 0-10 grade.

reward = grade / 10; an answer without a parseable grade scores 0 with component `parsed` = 0,
so a confused judge lowers the reward visibly instead of failing the task. Transport errors do
fail the task (the explorer retries it, then rejects it as task_failed).
"""

from __future__ import annotations

import re

import httpx

from rftbus.producers.rewards.base import RewardFn
from rftbus.schemas import Task

TEMPLATE = ("Grade the response to the task from 0 (wrong) to 10 (perfect). Reply with the number only.\n"
            "Task: {prompt}\nReference: {answer}\nResponse: {response}\nGrade:")
_GRADE = re.compile(r"\b(10|[0-9])(?:\.\d+)?\b")


class LLMJudge(RewardFn):
    name = "judge_llm"

    def __init__(self, base_url: str, model: str, api_key: str = "EMPTY", template: str = TEMPLATE,
                 max_tokens: int = 4, timeout_s: float = 30.0):
        self.client = httpx.Client(base_url=base_url.rstrip("/"), timeout=timeout_s,
                                   headers={"Authorization": f"Bearer {api_key}"})
        self.model, self.template, self.max_tokens = model, template, max_tokens

    def __call__(self, task: Task, response: str) -> dict[str, float]:
        prompt = self.template.format(prompt=task.prompt, answer=task.answer or "", response=response)
        resp = self.client.post("/completions", json={"model": self.model, "prompt": prompt,
                                                      "max_tokens": self.max_tokens, "temperature": 0.0})
        resp.raise_for_status()
        text = resp.json()["choices"][0].get("text", "")
        m = _GRADE.search(text)
        if m is None:
            return {"reward": 0.0, "parsed": 0.0}
        return {"reward": float(m.group(0)) / 10.0, "parsed": 1.0}
