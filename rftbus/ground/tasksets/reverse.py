"""String reversal: "rev:abc=" -> "cba". Partial credit per correct character."""

from __future__ import annotations

import random
import re
import string

from rftbus.ground.tasksets.addition import digit_credit
from rftbus.ground.tasksets.base import BuiltinTaskset


class Reverse(BuiltinTaskset):
    name = "reverse"

    def __init__(self, length: int = 4, alphabet: str = string.ascii_lowercase[:8]):
        self.length, self.alphabet = length, alphabet

    def problem(self, rng: random.Random) -> tuple[str, str, dict[str, str]]:
        s = "".join(rng.choice(self.alphabet) for _ in range(self.length))
        return f"rev:{s}=", s[::-1], {"s": s}

    def score(self, response: str, answer: str) -> dict[str, float]:
        return digit_credit(response, answer)

    def answer_of(self, prompt: str) -> str | None:
        m = re.fullmatch(r"rev:([a-z]+)=", prompt.strip())
        return m.group(1)[::-1] if m else None

    def variant(self, meta: dict[str, str], difficulty: str, rng: random.Random) -> tuple[str, str, dict[str, str]] | None:
        """The parent's string with letters redrawn: one (easier: closest to what was seen), two (same), or every
        letter (harder: a string unlike it)."""
        s = meta.get("s")
        if not s or any(c not in self.alphabet for c in s):
            return None
        letters = list(s)
        k = {"easier": 1, "same": 2}.get(difficulty, len(letters))
        for i in rng.sample(range(len(letters)), min(k, len(letters))):
            letters[i] = rng.choice(self.alphabet)
        v = "".join(letters)
        return f"rev:{v}=", v[::-1], {"s": v}
