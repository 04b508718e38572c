"""Times tables asked of a chat model: "What is 7 times 8? Answer with the number only." -> "56".

The real-model task (`make demo-real`, SmolLM2-135M-Instruct): the base model knows most of the table when it
writes "7 * 8 = 56" straight away (85 % measured with that prefix), but asked this way it mostly starts to
explain ("To solve this problem, we need to ...") and runs out of tokens: about 20 % right. Rewarded on the
exact answer: the last integer of the response must equal the product. `bare` (a component, not in the
reward) says whether the response was the number alone.
"""

from __future__ import annotations

import random
import re

from rftbus.ground.tasksets.base import BuiltinTaskset

PHRASINGS = (
    "What is {a} times {b}? Answer with the number only.",
    "What is {a} * {b}? Answer with the number only.",
    "Multiply {a} by {b}. Reply with just the number.",
    "What is the product of {a} and {b}? Give only the number.",
    "Compute {a} x {b}. Answer with the number only.",
)
_INT = re.compile(r"-?\d+")
_FORMS = [re.compile("^" + re.escape(p).replace(re.escape("{a}"), r"(\d+)").replace(re.escape("{b}"), r"(\d+)") + "$")
          for p in PHRASINGS]


def final_number_credit(response: str, answer: str) -> dict[str, float]:
    nums = _INT.findall(response.replace(",", ""))
    exact = 1.0 if nums and nums[-1] == answer else 0.0
    bare = 1.0 if response.strip().rstrip(".") == answer else 0.0
    return {"reward": exact, "exact": exact, "bare": bare}


class Times(BuiltinTaskset):
    name = "times"

    def __init__(self, low: int = 2, high: int = 9, high_b: int = 12):
        if not 1 <= low <= high or high_b < low:
            raise ValueError("times needs 1 <= low <= high and high_b >= low")
        self.low, self.high, self.high_b = low, high, high_b

    def problem(self, rng: random.Random) -> tuple[str, str, dict[str, str]]:
        a, b = rng.randint(self.low, self.high), rng.randint(self.low, self.high_b)
        prompt = rng.choice(PHRASINGS).format(a=a, b=b)
        return prompt, str(a * b), {"a": str(a), "b": str(b)}

    def score(self, response: str, answer: str) -> dict[str, float]:
        return final_number_credit(response, answer)

    def answer_of(self, prompt: str) -> str | None:
        for form in _FORMS:
            m = form.match(prompt.strip())
            if m:
                return str(int(m.group(1)) * int(m.group(2)))
        return None

    def variant(self, meta: dict[str, str], difficulty: str, rng: random.Random) -> tuple[str, str, dict[str, str]] | None:
        """One factor moved: down by 1-3 (easier, never below 2), up by 1-3 (harder: past the taskset's range is
        allowed, up to 19), or to another value of the range (same); the phrasing drawn again."""
        try:
            a, b = int(meta["a"]), int(meta["b"])
        except (KeyError, ValueError):
            return None
        which = rng.randrange(2)
        x = (a, b)[which]
        if difficulty == "easier":
            x = max(2, x - rng.randint(1, 3))
        elif difficulty == "harder":
            x = min(19, x + rng.randint(1, 3))
        else:
            x = rng.randint(self.low, self.high if which == 0 else self.high_b)
        a, b = (x, b) if which == 0 else (a, x)
        return rng.choice(PHRASINGS).format(a=a, b=b), str(a * b), {"a": str(a), "b": str(b)}
