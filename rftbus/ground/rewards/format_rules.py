"""Format rules: regexes the response must (or must not) match, each worth a share of the reward."""

from __future__ import annotations

import re

from rftbus.ground.rewards.base import RewardFn
from rftbus.ground.schemas import Task


class FormatReward(RewardFn):
    """params: rules = [{"pattern": "...", "weight": 1.0, "must_match": true, "name": "boxed"}, ...]
    (or `pattern` alone). reward = weighted share of rules satisfied, in [0, 1]."""

    name = "format"

    def __init__(self, rules: list[dict] | None = None, pattern: str | None = None, fullmatch: bool = False):
        rules = list(rules or []) + ([{"pattern": pattern}] if pattern else [])
        if not rules:
            raise ValueError("format reward needs `rules` or `pattern`")
        self.rules = []
        for i, r in enumerate(rules):
            try:
                rx = re.compile(r["pattern"], re.DOTALL)
            except (KeyError, re.error) as e:
                raise ValueError(f"format rule {i}: bad or missing pattern ({e})") from None
            self.rules.append((r.get("name", f"rule{i}"), rx, float(r.get("weight", 1.0)), bool(r.get("must_match", True))))
        self.fullmatch = fullmatch

    def __call__(self, task: Task, response: str) -> dict[str, float]:
        out, got, total = {}, 0.0, 0.0
        for name, rx, weight, must in self.rules:
            hit = bool(rx.fullmatch(response) if self.fullmatch else rx.search(response))
            ok = hit == must
            out[name] = 1.0 if ok else 0.0
            got += weight * ok
            total += weight
        out["reward"] = got / total if total else 0.0
        return out
