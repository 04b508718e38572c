"""The correction for late rows: M2PO's second-moment trust region on the behaviour importance ratio.

A grade that comes back hours later trains an answer made 10-100 versions ago. Its behaviour logprobs are that far
from the current policy, and the two usual corrections fail there in opposite ways: truncated importance weights
(decoupled PPO's w = min(π_prox/π_behav, C)) keep every token, and the many tokens at the cap weigh C however far off
they are (bias grows with k); IcePop-style masking keeps only tokens whose ratio lies in a fixed band, so as k grows
almost every token falls outside it and the row teaches nothing. M2PO (Zheng et al. 2025, "Prosperity before
Collapse: How Far Can Off-policy RL Reach with Stale Data on LLMs?", arXiv:2510.01161) bounds the batch's second
moment instead: M2 = mean over tokens of (log π_prox/π_behav)². Tokens are masked, the largest (log w)² first, only
until the rest's M2 <= τ (0.04 in the paper, stable with data 256 updates stale). What is kept has its log-ratio
variance bounded whatever k is, so the gradient's variance is bounded too; what is masked is only the tail.

Applied to the late rows only (staler than rl.max_staleness): fresh rows keep the decoupled objective as it was.
"""

from __future__ import annotations

import torch


def m2_keep(log_w: torch.Tensor, mask: torch.Tensor, tau: float) -> torch.Tensor:
    """The tokens of `mask` to keep: all but the fewest largest-(log w)² ones whose removal leaves the kept tokens'
    mean (log w)² <= tau. Same shape as `mask` (bool)."""
    m = mask.bool()
    sq = (log_w.detach() ** 2)[m]
    if sq.numel() == 0:
        return m
    ordered, order = torch.sort(sq)  # ascending: a prefix of it is what is kept
    means = torch.cumsum(ordered, 0) / torch.arange(1, ordered.numel() + 1, dtype=ordered.dtype)
    n_keep = int((means <= tau).sum())  # (means is non-decreasing: the prefix that fits)
    kept_flat = torch.zeros_like(sq, dtype=torch.bool)
    kept_flat[order[:n_keep]] = True
    out = torch.zeros_like(m)
    out[m] = kept_flat
    return out


def m2(log_w: torch.Tensor, mask: torch.Tensor) -> float:
    """The second moment of the log importance ratio over `mask`'s tokens."""
    m = mask.bool()
    return float((log_w.detach() ** 2)[m].mean()) if bool(m.any()) else 0.0
