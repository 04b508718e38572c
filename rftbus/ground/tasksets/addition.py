"""k-digit addition: "37+45=" -> "82". Partial credit per correct digit, so learning has a gradient."""

from __future__ import annotations

import random
import re

from rftbus.ground.tasksets.base import BuiltinTaskset

_SUM = re.compile(r"^(\d+)\+(\d+)=$")


def digit_credit(response: str, answer: str) -> dict[str, float]:
    """exact: 1 if the answer is right; digits: share of answer positions right (extra length costs)."""
    pred = response.strip()
    width = max(len(pred), len(answer), 1)
    hits = sum(1 for p, a in zip(pred, answer) if p == a)
    digits = hits / width
    exact = 1.0 if pred == answer else 0.0
    return {"reward": 0.5 * digits + 0.5 * exact, "digits": digits, "exact": exact}


def place_value_credit(response: str, answer: str) -> dict[str, float]:
    """Like digit_credit but aligned from the right (ones with ones): a training-only shaping reward.

    Left-aligned credit pays for a leading "1" whatever the prompt says (half of all 2-digit sums start
    with 1), a plateau GRPO from scratch settles on; place value pays for the ones digit first, which is
    a function of the prompt's last digits. Eval keeps the taskset's own score.
    """
    pred = response.strip()
    width = max(len(pred), len(answer), 1)
    hits = sum(1 for p, a in zip(reversed(pred), reversed(answer)) if p == a)
    exact = 1.0 if pred == answer else 0.0
    return {"reward": 0.5 * hits / width + 0.5 * exact, "digits": hits / width, "exact": exact}


class PlaceValueReward:
    """`explorer.rewards: [{name: "rftbus.ground.tasksets.addition:PlaceValueReward"}]`."""

    name = "place_value"

    def __call__(self, task, response: str) -> dict[str, float]:
        if task.answer is None:
            raise ValueError(f"task {task.task_id} has no answer to score against")
        return place_value_credit(response, task.answer)


class Addition(BuiltinTaskset):
    name = "addition"

    def __init__(self, digits: int = 2):
        if not 1 <= digits <= 9:
            raise ValueError("addition digits must be 1..9")
        self.digits = digits

    def problem(self, rng: random.Random) -> tuple[str, str, dict[str, str]]:
        hi = 10 ** self.digits - 1
        a, b = rng.randint(0, hi), rng.randint(0, hi)
        return f"{a}+{b}=", str(a + b), {"a": str(a), "b": str(b)}

    def score(self, response: str, answer: str) -> dict[str, float]:
        return digit_credit(response, answer)

    def answer_of(self, prompt: str) -> str | None:
        m = _SUM.match(prompt.strip())
        return str(int(m.group(1)) + int(m.group(2))) if m else None

    def variant(self, meta: dict[str, str], difficulty: str, rng: random.Random) -> tuple[str, str, dict[str, str]] | None:
        """One operand (either) changed: fewer digits (easier), a carry added where there was none (harder), or
        redrawn at the same width (same)."""
        try:
            ops = [int(meta["a"]), int(meta["b"])]
        except (KeyError, ValueError):
            return None
        hi = 10 ** self.digits - 1
        i = rng.randrange(2)
        x, other = ops[i], ops[1 - i]
        if difficulty == "easier":
            x = rng.randint(0, max(0, min(x, hi) // 10))
        elif difficulty == "harder":
            x = min(hi, x + rng.randint(1, 9) * (1 + (x % 10 + other % 10 < 10) * 9))
        else:
            x = rng.randint(0, hi)
        ops[i] = x
        a, b = ops
        return f"{a}+{b}=", str(a + b), {"a": str(a), "b": str(b)}
