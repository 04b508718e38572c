"""PPO with a critic: token-level GAE on the value head, clipped policy loss, value loss, and a
KL penalty to the frozen reference model (k3 estimator, as a loss term rather than in the reward).

The sequence reward (Experience.reward) lands on the last response token; values after the last
response token are 0. GAE uses the proximal (pre-update) values so several update epochs see
fixed targets.
"""

from __future__ import annotations

import torch

from rftbus.trainer.losses.base import Loss, LossResult, PolicyOut, TrainBatch
from rftbus.trainer.losses.terms import kl_k3, masked_mean, policy_gradient, num

DEFAULT_PPO_KL = 0.05


def last_response_index(response: torch.Tensor) -> torch.Tensor:
    """[N] column of each row's last response token (-1 for a row without one)."""
    cols = torch.arange(response.shape[1]).expand_as(response)
    return torch.where(response, cols, torch.full_like(cols, -1)).max(dim=1).values


def gae(rewards: torch.Tensor, values: torch.Tensor, response: torch.Tensor,
        gamma: float, lam: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Advantages and returns over response positions; `rewards` and `values` are [N, T]."""
    n, t_len = values.shape
    adv = torch.zeros_like(values)
    next_adv = torch.zeros(n, dtype=values.dtype)
    next_value = torch.zeros(n, dtype=values.dtype)
    for t in reversed(range(t_len)):
        live = response[:, t]
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        a = delta + gamma * lam * next_adv
        adv[:, t] = torch.where(live, a, torch.zeros_like(a))
        next_adv = torch.where(live, a, torch.zeros_like(a))
        next_value = torch.where(live, values[:, t], torch.zeros_like(a))
    return adv, adv + values * response.to(values.dtype)


def whiten(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    mean = masked_mean(x, mask)
    var = masked_mean((x - mean) ** 2, mask)
    return (x - mean) * torch.rsqrt(var + 1e-8)


class PPOLoss(Loss):
    name = "ppo"
    needs_reference = True
    needs_values = True
    whiten_advantages = True

    @property
    def kl_coef(self) -> float:
        return self.cfg.kl_coef if self.cfg.kl_coef is not None else DEFAULT_PPO_KL

    def __call__(self, out: PolicyOut, batch: TrainBatch) -> LossResult:
        cfg = self.cfg
        assert out.values is not None, "PPO needs the value head"
        old_values = out.prox_values if out.prox_values is not None else out.values.detach()
        token_rewards = torch.zeros_like(old_values)
        last = last_response_index(batch.response)
        rows = (last >= 0).nonzero().flatten()
        token_rewards[rows, last[rows]] = batch.rewards[rows].to(old_values.dtype)
        adv, returns = gae(token_rewards, old_values, batch.response, cfg.gamma, cfg.gae_lambda)
        if self.whiten_advantages and int(batch.mask.sum()) > 1:
            adv = whiten(adv, batch.mask)
        pg, parts = policy_gradient(out.logp, out.proximal(), batch.behav_logp, adv, batch.mask,
                                    self.off_policy, cfg.clip_low, cfg.clip_high, cfg.is_cap, batch.late,
                                    cfg.late_m2_tau)
        vf = 0.5 * masked_mean((out.values - returns) ** 2, batch.mask)
        total = pg + cfg.vf_coef * vf
        parts.update(pg=num(pg), value_loss=num(vf), value_mean=num(masked_mean(old_values, batch.mask)))
        if out.ref_logp is not None:
            kl = masked_mean(kl_k3(out.logp, out.ref_logp), batch.mask)
            total = total + self.kl_coef * kl
            parts["kl_ref"] = num(kl)
        entropy = masked_mean(out.entropy, batch.mask)
        parts["entropy"] = num(entropy)
        if cfg.entropy_coef > 0:
            total = total - cfg.entropy_coef * entropy
        return LossResult(total, parts)
