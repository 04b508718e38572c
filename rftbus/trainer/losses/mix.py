"""MIX: (1-μ)·GRPO on the usual experiences + μ·SFT on expert ones, in one batch (Trinity-RFT's MIX).

A side with no rows in the batch contributes nothing; the other keeps its weight.
"""

from __future__ import annotations

from rftbus.trainer.losses.base import Loss, LossResult, PolicyOut, TrainBatch
from rftbus.trainer.losses.grpo import grpo_terms
from rftbus.trainer.losses.sft import sft_nll
from rftbus.trainer.losses.terms import num


class MIXLoss(Loss):
    name = "mix"
    lanes = ("rl", "expert")

    def __call__(self, out: PolicyOut, batch: TrainBatch) -> LossResult:
        mu = self.cfg.mix_mu
        expert = batch.is_expert
        usual_mask = batch.mask & ~expert.unsqueeze(1)
        total = out.logp.sum() * 0.0
        parts: dict[str, float] = {}
        if bool(usual_mask.any()):
            rl = grpo_terms(self, out, batch, usual_mask)
            total = total + (1.0 - mu) * rl.loss
            parts.update(rl.parts)
            parts["grpo"] = num(rl.loss)
        if bool(expert.any()):
            nll = sft_nll(out, batch, expert)
            total = total + mu * nll
            parts["sft_nll"] = num(nll)
        parts["expert_rows"] = num(expert.sum())
        return LossResult(total, parts)
