"""One trainer step on a collated batch: recompute current-policy logprobs, loss, backward, step.

A non-finite loss is never backpropagated: the checks keep NaN and out-of-range values out, but a
finite record can still overflow a loss (an advantage of 1e300). Every rank must agree before anyone
calls backward (it is a collective), so the decision goes through `agree`.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from rftbus.trainer.losses.base import Loss, PolicyOut, TrainBatch
from rftbus.trainer.losses.terms import masked_mean, num
from rftbus.trainer.policy import reference_logp, token_logp_entropy


class NonFiniteLoss(Exception):
    """The first update epoch's loss was not finite on some rank: nothing was updated."""

    def __init__(self, detail: str):
        super().__init__(detail)
        self.detail = detail


def _all_true(ok: bool) -> bool:
    return ok


def train_step(engine, loss: Loss, batch: TrainBatch, ref_model=None, update_epochs: int = 1,
               agree: Callable[[bool], bool] = _all_true) -> dict[str, float]:
    """The step's metrics. Raises NonFiniteLoss (weights untouched) when epoch 0's loss is not finite on
    any rank; a later epoch's non-finite loss ends the step there (`non_finite_epochs` = 1)."""
    ref_logp = reference_logp(ref_model, batch) if ref_model is not None else None
    prox_logp = prox_values = None
    parts: dict[str, float] = {}
    rl_mask = batch.mask & ~batch.is_expert.unsqueeze(1)
    for epoch in range(update_epochs):
        logits, values = engine(batch.input_ids, batch.attention_mask)
        logp, entropy = token_logp_entropy(logits, batch)
        if epoch == 0:
            prox_logp = logp.detach()
            prox_values = values.detach() if values is not None else None
            if bool(rl_mask.any()):
                # how far the behaviour policy is from the current one (k1 estimate of KL(behav‖π))
                parts["kl_behaviour"] = num(masked_mean(batch.behav_logp - prox_logp, rl_mask))
        out = PolicyOut(logp=logp, entropy=entropy, prox_logp=prox_logp, values=values,
                        prox_values=prox_values, ref_logp=ref_logp)
        res = loss(out, batch)
        if not agree(bool(torch.isfinite(res.loss))):
            detail = f"{loss.name} loss {num(res.loss)} at update epoch {epoch} (on this or another rank): {res.parts}"
            if epoch == 0:
                raise NonFiniteLoss(detail)
            parts["non_finite_epochs"] = 1.0
            break
        engine.backward(res.loss)
        with torch.no_grad():  # ZeRO-1/2 all-gathers into views of flat params; gloo on CPU must not track them
            engine.step()
        parts.update(res.parts)
        parts["loss"] = num(res.loss)
    norm = engine.get_global_grad_norm()
    if norm is not None:
        parts["grad_norm"] = float(norm)
    parts["lr"] = float(engine.get_lr()[0])
    return parts
