"""How fast a run got going and whether it kept going (#19): the trainer's steps over time, its first
step after the broker answered, the step rate in the first and last third of the run, the first
eval at each reward milestone, and the shares of generated work thrown away (zero variance, stale).
Read from the status files the live view reads anyway, and the run's own eval points."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MILESTONES = (0.2, 0.5, 0.8)


@dataclass
class Pace:
    """(epoch seconds, trainer step) whenever the step changed, and when the first step was taken."""

    timeline: list[tuple[float, int]] = field(default_factory=list)
    first_step_at: float | None = None
    since: float = 0.0  # this run's start: status files older than it are an earlier run's, left in a reused folder

    def see(self, now: float, statuses: list[dict[str, Any]], last: bool = False) -> None:
        """`last`: the run's final reading, kept however soon after the previous one it comes."""
        trainers = [st for st in statuses if st.get("role") == "trainer" and float(st.get("updated_at") or 0) >= self.since]
        step = max((int(st.get("step") or 0) for st in trainers), default=0)
        changed = not self.timeline or step != self.timeline[-1][1]
        if changed and (last or not self.timeline or now - self.timeline[-1][0] >= 2.0):
            self.timeline.append((now, step))  # every 2 s at most: a 15-minute run keeps ~450 points
        firsts = [float(st["first_step_at"]) for st in trainers
                  if st.get("first_step_at") and float(st["first_step_at"]) >= self.since]
        if firsts and self.first_step_at is None:
            self.first_step_at = min(firsts)

    def steps_at(self, t: float) -> int:
        """Steps taken by time t (the last reading at or before it)."""
        out = 0
        for when, step in self.timeline:
            if when > t:
                break
            out = step
        return out


def step_rates(pace: Pace, start: float, end: float) -> tuple[float | None, float | None]:
    """Steps per second in the first and the last third of [start, end]."""
    if end - start < 3:
        return None, None
    third = (end - start) / 3
    first = (pace.steps_at(start + third) - pace.steps_at(start)) / third
    last = (pace.steps_at(end) - pace.steps_at(end - third)) / third
    return round(first, 3), round(last, 3)


BEST_WEIGHTS, BEST_META = "best.safetensors", "best.json"  # in the run folder, written by run/evaluator.py


def read_best(run_dir: Path) -> dict | None:
    """The best eval's version, reward, sha256 and where its weights are kept, if any."""
    p = run_dir / BEST_META
    return json.loads(p.read_text()) if p.is_file() else None


def pace_summary(pace: Pace, evals: list[dict], rec, started: float, broker_ready: float | None,
                 end: float) -> dict[str, Any]:
    """The summary's pace fields; `rec` is the run's Reconciliation."""
    first_rate, last_rate = step_rates(pace, pace.timeline[0][0] if pace.timeline else started, end)
    zero = rec.rejected_by_reason.get("zero_variance", 0)
    stale = rec.rejected_by_reason.get("stale", 0)
    past_filter = rec.trained + stale  # RL experiences that reached the staleness checks (curated or stale)
    return {
        "broker_ready_s": round(broker_ready - started, 2) if broker_ready else None,
        "first_step_after_broker_s": (round(pace.first_step_at - broker_ready, 2)
                                      if pace.first_step_at and broker_ready else None),
        "first_eval_at_s": {str(m): next((p["seconds"] for p in evals if p["reward"] >= m), None) for m in MILESTONES},
        "step_rate_first_third": first_rate,
        "step_rate_last_third": last_rate,
        "zero_variance_share_of_produced": round(zero / rec.produced, 4) if rec.produced else None,
        "stale_share_of_curated": round(stale / past_filter, 4) if past_filter else None,
        "steps_timeline": [[round(t - started, 1), s] for t, s in pace.timeline],
    }
