"""DPO from preference pairs streams marked (metadata preference_pair = pair id, preferred = 1/0).

loss = -log σ(β·[(log π(y_w) - log π_ref(y_w)) - (log π(y_l) - log π_ref(y_l))]), sequence
log-probabilities summed over trained tokens. Rows outside a complete pair are ignored.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from rftbus.trainer.losses.base import Loss, LossResult, PolicyOut, TrainBatch
from rftbus.trainer.losses.terms import num


def sequence_logp(logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (logp * mask.to(logp.dtype)).sum(dim=1)


class DPOLoss(Loss):
    name = "dpo"
    needs_reference = True

    def __call__(self, out: PolicyOut, batch: TrainBatch) -> LossResult:
        assert out.ref_logp is not None, "DPO needs the reference model"
        pi = sequence_logp(out.logp, batch.mask)
        ref = sequence_logp(out.ref_logp, batch.mask)
        chosen, rejected = [], []
        for pair in sorted(set(batch.pair_index.tolist()) - {-1}):
            rows = (batch.pair_index == pair).nonzero().flatten().tolist()
            w = [r for r in rows if bool(batch.preferred[r])]
            lose = [r for r in rows if not bool(batch.preferred[r])]
            if len(w) == 1 and len(lose) == 1:
                chosen.append(w[0])
                rejected.append(lose[0])
        if not chosen:
            return LossResult(out.logp.sum() * 0.0, {"dpo_pairs": 0.0})
        c, r = torch.tensor(chosen), torch.tensor(rejected)
        margin = (pi[c] - ref[c]) - (pi[r] - ref[r])
        loss = -F.logsigmoid(self.cfg.dpo_beta * margin).mean()
        return LossResult(loss, {
            "dpo": num(loss), "dpo_pairs": num(len(chosen)),
            "dpo_margin": num(margin.mean()), "dpo_accuracy": num((margin > 0).float().mean()),
        })
