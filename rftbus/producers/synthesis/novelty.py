"""Whether a candidate is new: its prompt's fingerprint (Unicode-normalized, case-folded, punctuation other than
math's dropped, whitespace collapsed) against every task on the tasks topic, and never a held-out eval problem
(a synthesized copy of one would make the eval measure memory, not learning)."""

from __future__ import annotations

import hashlib
import re
import string
import unicodedata
from collections.abc import Callable

KEEP = set("+-*/^=()<>%.")  # math's punctuation: "3+4" and "3-4" stay apart
_DROP = {ord(c): " " for c in string.punctuation if c not in KEEP}
_SPACE = re.compile(r"\s+")


def fingerprint(prompt: str) -> str:
    text = unicodedata.normalize("NFKC", prompt).casefold().translate(_DROP)
    text = _SPACE.sub(" ", text).strip().rstrip(".").strip()
    return hashlib.sha1(text.encode()).hexdigest()[:20]


class Novelty:
    """The fingerprints of the tasks seen, and the held-out rule."""

    def __init__(self, held_out: Callable[[str], bool]):
        self.seen: set[str] = set()
        self.held_out = held_out

    def add(self, prompt: str) -> None:
        self.seen.add(fingerprint(prompt))

    def refusal(self, prompt: str) -> str | None:
        if self.held_out(prompt):
            return "held_out"
        if fingerprint(prompt) in self.seen:
            return "duplicate"
        return None
