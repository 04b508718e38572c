"""One trainer step on a collated batch: recompute current-policy logprobs, loss, backward, step."""

from __future__ import annotations

import torch

from rftbus.trainer.losses.base import Loss, PolicyOut, TrainBatch
from rftbus.trainer.losses.terms import masked_mean, num
from rftbus.trainer.policy import reference_logp, token_logp_entropy


def train_step(engine, loss: Loss, batch: TrainBatch, ref_model=None, update_epochs: int = 1) -> dict[str, float]:
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
        if not torch.isfinite(res.loss):
            raise FloatingPointError(f"non-finite {loss.name} loss at update epoch {epoch}: {res.parts}")
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
