"""The built-in `llm` synthesizer: any OpenAI-compatible endpoint (serve, an upstream vLLM, a judge's endpoint)
writes an easier, similar or harder variant of a parent task with its answer, as JSON; the same endpoint can solve
a prompt, which the stage's consistency check uses where nothing can recompute the answer."""

from __future__ import annotations

import json
import os
import re
from typing import Any

from rftbus.ground.schemas import Task
from rftbus.producers.synthesis.base import Candidate, Outcome

ASK = ("Here is a problem{how}:\n\n{prompt}\n\nWrite one new problem of the same kind that is {difficulty}, "
       "and its final answer. Reply with JSON only: {{\"problem\": \"...\", \"answer\": \"...\"}}")
HOW = {"failed": " a student could not solve", "mastered": " a student always solves", "mixed": " a student "
       "sometimes solves"}
WANT = {"easier": "a little easier", "same": "about as hard", "harder": "a little harder"}
_JSON = re.compile(r"\{.*\}", re.S)


class LLMSynthesizer:
    name = "llm"

    def __init__(self, base_url: str, model: str, api_key_env: str | None = None, temperature: float = 0.7,
                 max_tokens: int = 512, timeout_s: float = 60.0):
        from openai import OpenAI

        key = os.environ.get(api_key_env, "") if api_key_env else ""
        self.client = OpenAI(base_url=base_url, api_key=key or "unused", timeout=timeout_s, max_retries=1)
        self.model, self.temperature, self.max_tokens = model, temperature, max_tokens

    def _chat(self, content: str, n: int = 1, temperature: float | None = None) -> list[str]:
        out = self.client.chat.completions.create(
            model=self.model, messages=[{"role": "user", "content": content}], n=n, max_tokens=self.max_tokens,
            temperature=self.temperature if temperature is None else temperature)
        return [c.message.content or "" for c in out.choices]

    def __call__(self, parent: Task, outcome: Outcome) -> list[Candidate]:
        [text] = self._chat(ASK.format(how=HOW.get(outcome.kind, ""), prompt=parent.prompt,
                                       difficulty=WANT[outcome.difficulty]))
        made = parse_reply(text)
        return [] if made is None else [Candidate(prompt=made[0], answer=made[1])]

    def solve(self, prompt: str, n: int) -> list[str]:
        return self._chat(prompt, n=n)


def parse_reply(text: str) -> tuple[str, str] | None:
    """(problem, answer) from the model's reply (the first JSON object in it), or None."""
    m = _JSON.search(text)
    if not m:
        return None
    try:
        obj: Any = json.loads(m.group(0))
    except ValueError:
        return None
    if not isinstance(obj, dict):
        return None
    problem, answer = obj.get("problem"), obj.get("answer")
    if not isinstance(problem, str) or answer is None or isinstance(answer, (dict, list)):
        return None
    return problem.strip(), str(answer).strip()
