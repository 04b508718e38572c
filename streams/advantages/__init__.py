"""Advantage estimators: one interface (base.py), one file per estimator."""

from .base import AdvantageEstimator
from .baseline import MeanBaseline
from .grpo import GRPO

ESTIMATORS: dict[str, type[AdvantageEstimator]] = {"grpo": GRPO}


def make_estimator(name: str, eps: float) -> AdvantageEstimator:
    return ESTIMATORS[name](eps=eps)


__all__ = ["AdvantageEstimator", "ESTIMATORS", "GRPO", "MeanBaseline", "make_estimator"]
