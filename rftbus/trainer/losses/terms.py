"""Terms several losses share: token-level means, the KL estimator, the clipped policy gradient."""

from __future__ import annotations

import torch

from rftbus.trainer.losses.base import OffPolicy
from rftbus.trainer.losses.m2 import m2, m2_keep


def num(x) -> float:
    """A metric value: detached Python float."""
    return float(x.detach()) if isinstance(x, torch.Tensor) else float(x)


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Token-level mean: every trained token weighs the same, however long its sequence (DAPO)."""
    m = mask.to(x.dtype)
    return (x * m).sum() / m.sum().clamp_min(1.0)


def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token KL(π‖ref) estimator k3 = e^(ref-π) - (ref-π) - 1: unbiased, always ≥ 0 (Schulman)."""
    d = ref_logp - logp
    return torch.exp(d) - d - 1.0


def policy_gradient(
    logp: torch.Tensor, prox_logp: torch.Tensor, behav_logp: torch.Tensor, adv: torch.Tensor,
    mask: torch.Tensor, mode: OffPolicy, clip_low: float, clip_high: float, is_cap: float,
    late: torch.Tensor | None = None, m2_tau: float = 0.04,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The surrogate loss and its diagnostics.

    r = π/π_prox, where π_prox is the policy before this batch's updates (detached).
    - none: -min(r·A, clip(r)·A); assumes behaviour == proximal (on-policy).
    - tis: -w·r·A with w = min(π_prox/π_behav, C): truncated importance sampling, no ratio clip.
    - decoupled: -w·min(r·A, clip(r)·A), the decoupled PPO objective (AReaL): the trust region is
      around the recent proximal policy, and the stale behaviour policy is corrected by w.
    `late` ([N] bool): rows past rl.max_staleness (late grades). Whatever the mode, they are weighted by w and
    their tokens masked by M2PO's second-moment rule (rftbus/trainer/losses/m2.py) so the kept ones' mean (log w)² <= m2_tau.
    """
    ratio = torch.exp(logp - prox_logp)
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high) * adv
    if mode == "tis":
        surrogate = unclipped
    else:
        surrogate = torch.minimum(unclipped, clipped)
    parts: dict[str, float] = {}
    late_rows = late.unsqueeze(1).expand_as(mask) if late is not None and bool(late.any()) else None
    if mode in ("tis", "decoupled") or late_rows is not None:
        log_w = prox_logp - behav_logp
        raw_w = torch.exp(log_w)
        w = torch.clamp(raw_w, max=is_cap).detach()
        if mode not in ("tis", "decoupled"):  # only the late rows are corrected
            assert late_rows is not None
            w = torch.where(late_rows, w, torch.ones_like(w))
        surrogate = w * surrogate
        parts["is_weight"] = num(masked_mean(w, mask))
        parts["is_truncated_frac"] = num(masked_mean((raw_w > is_cap).float(), mask))
        if late_rows is not None:
            late_tokens = mask & late_rows
            keep = m2_keep(log_w, late_tokens, m2_tau)
            parts["late_rows"] = num(late.sum())  # type: ignore[union-attr]
            parts["late_m2"] = num(m2(log_w, late_tokens))
            parts["late_masked_frac"] = num(1.0 - keep.sum() / late_tokens.sum().clamp_min(1))
            mask = (mask & ~late_rows) | keep
    loss = -masked_mean(surrogate, mask)
    with torch.no_grad():
        active = (clipped < unclipped) if mode != "tis" else torch.zeros_like(mask)
        parts["clip_frac"] = num(masked_mean(active.float(), mask))
        parts["ratio"] = num(masked_mean(ratio, mask))
    return loss, parts


def kl_cov(logp: torch.Tensor, prox_logp: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor,
           ratio: float) -> tuple[torch.Tensor, int]:
    """KL-Cov (Cui et al. 2025, "The Entropy Mechanism of RL for Reasoning LMs"): entropy falls by the
    covariance of a token's logprob and its advantage, so the `ratio` share of trained tokens with the largest
    (logp − mean)(A − mean) get a |logp − logp_prox| penalty that holds them near the proximal policy.
    Returns the penalty's token sum ÷ trained tokens, and how many tokens it held."""
    m = mask.bool()
    n = int(m.sum())
    k = int(ratio * n)
    if k < 1:
        return logp.new_zeros(()), 0
    lp, a = logp.detach()[m], adv.detach()[m]
    cov = (lp - lp.mean()) * (a - a.mean())
    top = torch.topk(cov, k).indices
    held = torch.zeros_like(cov, dtype=torch.bool)
    held[top] = True
    penalty = (logp - prox_logp).abs()[m] * held
    return penalty.sum() / n, k
