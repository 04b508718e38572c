"""Feedback -> reward, and preference pairs -> two-sample groups.

Mapping (what the trainer reads, rftbus/streams/README.md):
- reward: the value as given. thumbs: 1.0 up / 0.0 down. rating: scaled from
  `streams.rating_scale` (min, max) onto 0..1. correction: reward 0.0 (the response needed fixing)
  and metadata["correction"] = the corrected text.
- preference (preferred_id, rejected_id): reward 1.0 for the preferred answer and 0.0 for the other,
  each with metadata preference_pair = pair id (the feedback_id) and preferred = "1"/"0". When both are
  samples of one group (a request with two choices, the usual case), the group is marked a pair too
  (group metadata preference_pair), so a pairwise loss (DPO) can pick it; GRPO gives it +1 / -1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rftbus.ground.schemas import Experience, Feedback, FeedbackKind
from rftbus.ground.schemas.records import rating_problem, rating_reward


class BadFeedback(ValueError):
    """A Feedback record that carries no usable signal for its kind."""


@dataclass(slots=True)
class Grade:
    """What one feedback record does to one experience."""

    experience_id: str
    reward: float
    metadata: dict[str, str]
    pair_id: str | None = None  # set for preference: the experience joins this two-sample group
    preferred: bool = False


def grades(fb: Feedback, rating_scale: tuple[float, float]) -> list[Grade]:
    """One Grade per experience the feedback is about (two for a preference)."""
    meta = {"feedback_id": fb.feedback_id, "feedback_kind": fb.kind.value}
    if fb.annotator:
        meta["annotator"] = fb.annotator
    kind = fb.kind
    if kind is FeedbackKind.reward:
        if fb.reward is None or not math.isfinite(fb.reward):
            raise BadFeedback(f"kind=reward with reward={fb.reward}")
        return [Grade(fb.experience_id, float(fb.reward), meta)]
    if kind is FeedbackKind.thumbs:
        if fb.thumbs_up is None:
            raise BadFeedback("kind=thumbs without thumbs_up")
        return [Grade(fb.experience_id, 1.0 if fb.thumbs_up else 0.0, meta)]
    if kind is FeedbackKind.rating:
        lo, hi = rating_scale
        problem = rating_problem(fb.rating, rating_scale) if hi > lo else f"rating scale {lo}..{hi} is empty"
        if problem or fb.rating is None:  # refused, not clamped: the same rule as serve's HTTP check
            raise BadFeedback(f"kind=rating: {problem}")
        return [Grade(fb.experience_id, rating_reward(fb.rating, rating_scale), meta)]
    if kind is FeedbackKind.correction:
        if not fb.correction:
            raise BadFeedback("kind=correction without correction text")
        return [Grade(fb.experience_id, 0.0, {**meta, "correction": fb.correction})]
    if kind is FeedbackKind.preference:
        if not fb.preferred_id or not fb.rejected_id or fb.preferred_id == fb.rejected_id:
            raise BadFeedback(f"kind=preference needs two different ids (preferred={fb.preferred_id}, "
                              f"rejected={fb.rejected_id})")
        pair = fb.feedback_id
        return [Grade(fb.preferred_id, 1.0, {**meta, "preference_pair": pair, "preferred": "1"}, pair, True),
                Grade(fb.rejected_id, 0.0, {**meta, "preference_pair": pair, "preferred": "0"}, pair, False)]
    raise BadFeedback(f"unknown feedback kind {kind}")


def apply_grade(e: Experience, g: Grade) -> Experience:
    """The sample with its reward set from the grade (the feedback's own terms in its metadata)."""
    e.reward = g.reward
    e.reward_components = {**e.reward_components, "feedback": g.reward}
    e.metadata = {**e.metadata, **g.metadata}
    return e


def credit(value: float, turns: int, index: int, mode: str, discount: float) -> float:
    """The share of an episode's grade that call `index` of `turns` gets."""
    return value if mode == "same" else value * discount ** (turns - 1 - index)
