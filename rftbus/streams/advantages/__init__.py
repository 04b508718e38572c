"""Advantage estimators: one interface (base.py), one file per estimator."""

from .base import AdvantageEstimator
from .baseline import MeanBaseline
from .drgrpo import DrGRPO
from .grpo import GRPO

ESTIMATORS: dict[str, type[AdvantageEstimator]] = {"grpo": GRPO, "drgrpo": DrGRPO}


def make_estimator(name: str, eps: float) -> AdvantageEstimator:
    return ESTIMATORS[name](eps=eps)


__all__ = ["AdvantageEstimator", "DrGRPO", "ESTIMATORS", "GRPO", "MeanBaseline", "make_estimator"]
