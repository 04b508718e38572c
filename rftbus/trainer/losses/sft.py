"""SFT: maximise the likelihood of expert demonstrations (the expert topic)."""

from __future__ import annotations

from rftbus.trainer.losses.base import Loss, LossResult, PolicyOut, TrainBatch
from rftbus.trainer.losses.terms import masked_mean, num


def sft_nll(out: PolicyOut, batch: TrainBatch, rows=None):
    mask = batch.mask if rows is None else batch.mask & rows.unsqueeze(1)
    return -masked_mean(out.logp, mask)


class SFTLoss(Loss):
    name = "sft"
    lanes = ("expert",)

    def __call__(self, out: PolicyOut, batch: TrainBatch) -> LossResult:
        nll = sft_nll(out, batch)
        return LossResult(nll, {"sft_nll": num(nll), "entropy": num(masked_mean(out.entropy, batch.mask))})
