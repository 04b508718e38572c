"""String reversal: "rev:abc=" -> "cba". Partial credit per correct character."""

from __future__ import annotations

import random
import string

from rftbus.ground.tasksets.addition import digit_credit
from rftbus.ground.tasksets.base import BuiltinTaskset


class Reverse(BuiltinTaskset):
    name = "reverse"

    def __init__(self, length: int = 4, alphabet: str = string.ascii_lowercase[:8]):
        self.length, self.alphabet = length, alphabet

    def problem(self, rng: random.Random) -> tuple[str, str, dict[str, str]]:
        s = "".join(rng.choice(self.alphabet) for _ in range(self.length))
        return f"rev:{s}=", s[::-1], {}

    def score(self, response: str, answer: str) -> dict[str, float]:
        return digit_credit(response, answer)
