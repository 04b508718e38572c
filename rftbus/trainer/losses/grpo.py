"""GRPO: clipped policy gradient with the group advantages streams computed (no critic).

The advantage is one number per experience, broadcast over its tokens; the off-policy correction
with the behaviour logprobs is chosen by `off_policy` (see terms.policy_gradient).
"""

from __future__ import annotations

import torch

from rftbus.trainer.losses.base import Loss, LossResult, PolicyOut, TrainBatch
from rftbus.trainer.losses.terms import kl_cov, kl_k3, masked_mean, policy_gradient, num


def grpo_terms(loss: Loss, out: PolicyOut, batch: TrainBatch, mask: torch.Tensor) -> LossResult:
    cfg = loss.cfg
    adv = batch.advantages.unsqueeze(1).expand_as(out.logp)
    pg, parts = policy_gradient(out.logp, out.proximal(), batch.behav_logp, adv, mask, loss.off_policy,
                                cfg.clip_low, cfg.clip_high, cfg.is_cap, batch.late, cfg.late_m2_tau)
    total = pg
    parts["pg"] = num(pg)
    rows = batch.advantages[mask.any(dim=1)]  # the advantages this loss trained on, one per row
    if rows.numel():
        parts["adv_mean"], parts["adv_std"] = num(rows.mean()), num(rows.std(unbiased=False))
    if cfg.kl_cov_ratio > 0:
        held, k = kl_cov(out.logp, out.proximal(), adv, mask, cfg.kl_cov_ratio)
        total = total + cfg.kl_cov_coef * held
        parts["kl_cov"], parts["kl_cov_tokens"] = num(held), float(k)
    if out.ref_logp is not None:
        kl = masked_mean(kl_k3(out.logp, out.ref_logp), mask)
        parts["kl_ref"] = num(kl)
        if loss.kl_coef > 0:
            total = total + loss.kl_coef * kl
    entropy = masked_mean(out.entropy, mask)
    parts["entropy"] = num(entropy)
    if cfg.entropy_coef > 0:
        total = total - cfg.entropy_coef * entropy
    return LossResult(total, parts)


class GRPOLoss(Loss):
    name = "grpo"

    def __call__(self, out: PolicyOut, batch: TrainBatch) -> LossResult:
        return grpo_terms(self, out, batch, batch.mask)
