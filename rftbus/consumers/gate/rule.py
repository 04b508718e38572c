"""The gate's statistics: one candidate against the serving version, on the live rewards of the answers each
served since the canary began (the same users, the same hours), and their held-out evals when scored.

The test is a one-sided Welch z-test of non-inferiority with margin δ on the mean reward:
z = (mean_c - mean_s + δ) / sqrt(var_c/n_c + var_s/n_s). Promote when z > z_crit (the candidate is no worse than
δ below the serving version, with confidence); roll back when z < -z_crit (worse than that, with confidence); hold
otherwise. The test is taken at fixed looks, when both arms have reached k × `min_answers` graded answers
(k = 1 .. `max_looks`, a group-sequential design), and α is split over the looks (Bonferroni), so looking again
never inflates the error; the normal approximation holds at `min_answers` ≥ 30 for rewards in a bounded range.
A held-out eval more than `eval_margin` below the serving version's rolls back at once, at any time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from statistics import NormalDist

from rftbus.ground.config.gate import GateConfig

TEST = "one-sided Welch z-test of non-inferiority on mean live reward (Bonferroni over looks)"


@dataclass
class Arm:
    """Running mean and variance of one version's graded answers (Welford)."""

    n: int = 0
    mean: float = 0.0
    m2: float = 0.0

    def add(self, x: float) -> None:
        self.n += 1
        d = x - self.mean
        self.mean += d / self.n
        self.m2 += d * (x - self.mean)

    @property
    def var(self) -> float:
        return self.m2 / (self.n - 1) if self.n > 1 else 0.0


@dataclass
class Verdict:
    decision: str  # promote | rollback | hold
    reason: str
    evidence: dict[str, float] = field(default_factory=dict)


def decide(serving: Arm, candidate: Arm, rule: GateConfig, look: int, eval_serving: float | None = None,
           eval_candidate: float | None = None) -> Verdict:
    """Look number `look` (1-based; taken when both arms reached look × min_answers graded answers): promote,
    roll back or hold. With look 0 only the held-out evals are compared (no live test yet)."""
    alpha = rule.alpha / rule.max_looks
    z_crit = NormalDist().inv_cdf(1 - alpha)
    ev: dict[str, float] = {"n_serving": serving.n, "n_candidate": candidate.n, "mean_serving": serving.mean,
                            "mean_candidate": candidate.mean, "margin": rule.margin, "alpha": alpha,
                            "z_crit": z_crit, "look": look}
    if eval_serving is not None:
        ev["eval_serving"] = eval_serving
    if eval_candidate is not None:
        ev["eval_candidate"] = eval_candidate
    if eval_serving is not None and eval_candidate is not None and eval_candidate < eval_serving - rule.eval_margin:
        return Verdict("rollback", f"held-out eval {eval_candidate:.3f} is more than {rule.eval_margin:g} below the "
                       f"serving version's {eval_serving:.3f}", ev)
    if look < 1:
        said = f"{candidate.n} graded answers of the candidate and {serving.n} of the serving version since the canary began"
        if min(candidate.n, serving.n) >= rule.min_answers:  # between looks, or past the last one
            return Verdict("hold", f"{said}: no look due (one at each multiple of {rule.min_answers} an arm, "
                           f"{rule.max_looks} at most)", ev)
        return Verdict("hold", f"{said}; the first look needs {rule.min_answers} each", ev)
    se = math.sqrt(candidate.var / candidate.n + serving.var / serving.n)
    diff = candidate.mean - serving.mean
    ev.update(diff=diff, se=se)
    if se == 0.0:  # every answer of both arms scored alike: the difference is exact
        z = math.inf if diff + rule.margin > 0 else -math.inf if diff + rule.margin < 0 else 0.0
    else:
        z = (diff + rule.margin) / se
    ev["z"] = z if math.isfinite(z) else math.copysign(1e9, z)
    said = (f"live reward {candidate.mean:.3f} (n={candidate.n}) against {serving.mean:.3f} (n={serving.n}), "
            f"z={ev['z']:.2f}, margin {rule.margin:g}, critical {z_crit:.2f} (look {look} of {rule.max_looks})")
    if z > z_crit:
        return Verdict("promote", f"no worse than the serving version by more than the margin: {said}", ev)
    if z < -z_crit:
        return Verdict("rollback", f"worse than the serving version by more than the margin: {said}", ev)
    return Verdict("hold", f"not conclusive: {said}", ev)
