"""One trainer step on a collated batch: recompute current-policy logprobs, loss, backward, step.

A non-finite loss is never backpropagated: the checks keep NaN and out-of-range values out, but a
finite record can still overflow a loss (an advantage of 1e300). Every rank must agree before anyone
calls backward (it is a collective), so the decision goes through `agree`.

With `micro_tokens` the batch is cut into micro-batches (micro.py) whose weighted losses are backpropagated
one by one into DeepSpeed's gradient accumulation, the optimizer stepping once after the last. A
micro-batch whose loss is not finite is left out of the step on every rank; when it was the last one, a
zero-weight pass over the first closes the accumulation, so the gradients are exactly those of the rest.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import torch

from rftbus.ground.profile import phase
from rftbus.trainer.losses.base import Loss, PolicyOut, TrainBatch
from rftbus.trainer.losses.terms import masked_mean, num
from rftbus.trainer.micro import split
from rftbus.trainer.policy import first_trained, reference_logp, token_logp_entropy
from rftbus.trainer.shared_prompt import prompt_lengths


class NonFiniteLoss(Exception):
    """The first update epoch's loss was not finite on some rank: nothing was updated."""

    def __init__(self, detail: str):
        super().__init__(detail)
        self.detail = detail


def _all_true(ok: bool) -> bool:
    return ok


def _same(n: int) -> int:
    return n


def forward(engine, c: TrainBatch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """(logp, entropy, values) of a batch under the current policy: logits from the first trained position on,
    each shared prompt read once (policy.PolicyWithValue.forward)."""
    with phase("forward"):
        first = first_trained(c)
        logits, values = engine(c.input_ids, c.attention_mask, first, prompt_lengths(c.response), c.shown_pixels())
        logp, entropy = token_logp_entropy(logits, c, first)
    return logp, entropy, values


def with_behaviour(c: TrainBatch, current: torch.Tensor) -> TrainBatch:
    """`c` with the current policy's logprobs as the behaviour of the rows that came without any (a traced
    answer: traces carry text, not logprobs). Recomputed at the step, as verl recomputes old_log_prob: the ratio
    starts at 1 for them, so they train on-policy, uncorrected for the versions between the call and now."""
    known = c.behav_known
    assert known is not None
    behav = torch.where(known.to(current.device).unsqueeze(1), c.behav_logp, current.to(c.behav_logp.dtype))
    return replace(c, behav_logp=behav, behav_known=None)


def train_step(engine, loss: Loss, batch: TrainBatch, ref_model=None, update_epochs: int = 1,
               agree: Callable[[bool], bool] = _all_true, micro_tokens: int | None = None,
               agree_count: Callable[[int], int] = _same) -> dict[str, float]:
    """The step's metrics. Raises NonFiniteLoss (weights untouched) when epoch 0's loss is not finite on
    any rank (in every micro-batch); a later epoch's non-finite loss ends the step there
    (`non_finite_epochs` = 1). `agree_count` makes every rank run the same number of micro-batches."""
    device = getattr(engine, "device", None)
    chunks = [(c.to(device) if device is not None else c, w) for c, w in split(batch, micro_tokens, agree_count)]
    ref = [reference_logp(ref_model, c) if ref_model is not None else None for c, _ in chunks]
    prox: list[tuple[torch.Tensor, torch.Tensor | None] | None] = [None] * len(chunks)
    parts: dict[str, float] = {}
    last = len(chunks) - 1
    for epoch in range(update_epochs):
        sums: dict[str, float] = {}
        done = 0
        bad = ""
        for k, (c, w) in enumerate(chunks):
            logp, entropy, values = forward(engine, c)
            if epoch == 0:
                prox[k] = (logp.detach(), values.detach() if values is not None else None)
                if c.behav_known is not None:  # answers without behaviour logprobs: the policy before this step's
                    c = with_behaviour(c, logp.detach())  # update stands in (no off-policy correction for them)
                    chunks[k] = (c, w)
                rl_mask = c.mask & ~c.is_expert.unsqueeze(1)
                if bool(rl_mask.any()):
                    # how far the behaviour policy is from the current one (k1 estimate of KL(behav‖π))
                    kl = num(masked_mean(c.behav_logp - prox[k][0], rl_mask))  # type: ignore[index]
                    sums["kl_behaviour"] = sums.get("kl_behaviour", 0.0) + w * kl
            p = prox[k]
            assert p is not None
            out = PolicyOut(logp=logp, entropy=entropy, prox_logp=p[0], values=values, prox_values=p[1],
                            ref_logp=ref[k])
            res = loss(out, c)
            if not agree(bool(torch.isfinite(res.loss))):
                bad = f"{loss.name} loss {num(res.loss)} at update epoch {epoch} (on this or another rank): {res.parts}"
                parts["non_finite_micro_batches"] = parts.get("non_finite_micro_batches", 0.0) + 1
                if k < last or done == 0:
                    continue
                # the last one is out: close the accumulation with a zero-weight pass over the first
                c0 = chunks[0][0]
                logp, entropy, values = forward(engine, c0)
                p0 = prox[0]
                assert p0 is not None
                res = loss(PolicyOut(logp=logp, entropy=entropy, prox_logp=p0[0], values=values,
                                     prox_values=p0[1], ref_logp=ref[0]), c0)
                w = 0.0
            else:
                done += 1
                for name, v in res.parts.items():
                    sums[name] = sums.get(name, 0.0) + w * v
                sums["loss"] = sums.get("loss", 0.0) + w * num(res.loss)
            if last:
                engine.set_gradient_accumulation_boundary(k == last)
            with phase("backward"):
                engine.backward(res.loss * w if last else res.loss, scale_wrt_gas=False)
            with phase("optimizer"), torch.no_grad():  # ZeRO-1/2 all-gathers into views of flat params; gloo on CPU must not track them
                engine.step()
        if done == 0:
            if epoch == 0:
                raise NonFiniteLoss(bad)
            parts["non_finite_epochs"] = 1.0
            break
        parts.update(sums)
    if len(chunks) > 1:
        parts["micro_batches"] = float(len(chunks))
    norm = engine.get_global_grad_norm()
    if norm is not None:
        parts["grad_norm"] = float(norm)
    parts["lr"] = float(engine.get_lr()[0])
    return parts


@torch.no_grad()
def loss_is_finite(engine, loss: Loss, batch: TrainBatch, ref_model=None, micro_tokens: int | None = None) -> bool:
    """Whether the first update epoch's loss on `batch` is finite: a forward pass per micro-batch, no
    gradient, no collective (the bisection of bisect.py runs it on each rank's own records)."""
    device = getattr(engine, "device", None)
    for c, _ in split(batch, micro_tokens, _same):
        c = c.to(device) if device is not None else c
        logp, entropy, values = forward(engine, c)
        if c.behav_known is not None:
            c = with_behaviour(c, logp)
        ref = reference_logp(ref_model, c) if ref_model is not None else None
        res = loss(PolicyOut(logp=logp, entropy=entropy, prox_logp=logp, values=values, prox_values=values,
                             ref_logp=ref), c)
        if not bool(torch.isfinite(res.loss)):
            return False
    return True
