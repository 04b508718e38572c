"""The late-row correction (M2PO's second-moment mask, rftbus/trainer/losses/m2.py): pure tensor logic."""

from __future__ import annotations

import pytest
import torch

from rftbus.ground.config.trainer import TrainerConfig
from rftbus.trainer.batch import Row, late_rows
from rftbus.trainer.losses.grpo import GRPOLoss
from rftbus.trainer.losses.m2 import m2_keep
from rftbus.trainer.losses.terms import policy_gradient
from tests.unit.test_losses import batch_of, out_of


def drifted(k: int, n: int = 20000, seed: int = 0) -> torch.Tensor:
    """log π_prox/π_behav of an answer k versions old: most tokens barely move, a tenth drift as √k."""
    g = torch.Generator().manual_seed(seed)
    small = torch.randn(n, generator=g) * 0.02
    tail = torch.randn(n, generator=g) * 0.3 * (k / 10) ** 0.5
    return torch.where(torch.rand(n, generator=g) < 0.1, tail, small).reshape(100, n // 100)


def test_m2_keep_masks_the_largest_until_the_rest_fits():
    log_w = torch.tensor([[0.1, -0.1, 2.0, 0.0], [0.05, -1.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]], dtype=torch.bool)
    keep = m2_keep(log_w, mask, 0.04)
    assert keep.tolist() == [[True, True, False, True], [True, False, True, False]]  # the 2.0 and the -1.0 go
    assert bool((log_w[keep] ** 2).mean() <= 0.04)
    assert m2_keep(log_w * 0.01, mask, 0.04).equal(mask)  # near-policy rows: nothing masked


@pytest.mark.parametrize("k", [1, 10, 30, 100])
def test_m2_bounds_what_is_kept_at_any_staleness(k):
    """The kept tokens' second moment stays <= τ however stale the row (so their weights' variance is bounded),
    and only the tail goes: at k = 100 still over 95 % of the tokens train."""
    lw = drifted(k)
    keep = m2_keep(lw, torch.ones_like(lw, dtype=torch.bool), 0.04)
    assert float((lw[keep] ** 2).mean()) <= 0.04 + 1e-6
    assert float(keep.float().mean()) > 0.95
    if float((lw ** 2).mean()) <= 0.04:
        assert bool(keep.all())
    else:
        assert not bool(keep.all())


def test_late_rows_are_corrected_and_fresh_rows_are_not():
    """Row 0 fresh, row 1 late with one token far off-policy: the far token is masked, the fresh row's gradient is
    what it is without any late row, and even in mode `none` the late row is importance-weighted."""
    behav = [[-1.0, -1.0, -1.0], [-1.0, -4.0, -1.2]]
    logp = [[-1.0, -1.0, -1.0], [-1.0, -1.0, -1.0]]
    cfg = TrainerConfig()
    for mode in ("none", "decoupled"):
        b = batch_of([[1, 1, 1], [1, 1, 1]], adv=[1.0, 1.0], behav=behav)
        plain = out_of(logp)
        GRPOLoss(cfg, mode)(plain, b).loss.backward()
        b.late = torch.tensor([False, True])
        out = out_of(logp)
        res = GRPOLoss(cfg, mode)(out, b)
        res.loss.backward()
        assert out.logp.grad[1, 1] == 0  # (log w = 3: masked)
        assert res.parts["late_rows"] == 1 and res.parts["late_masked_frac"] == pytest.approx(1 / 3)
        w = torch.exp(torch.tensor(0.2)).item()  # the third token's weight, π_prox/π_behav = e^0.2
        assert out.logp.grad[1, 2].item() == pytest.approx(-w / 5, rel=1e-5)  # 5 tokens kept
        assert out.logp.grad[0, 0].item() == pytest.approx(-1 / 5)  # the fresh row: unweighted, over the kept
        assert plain.logp.grad[0, 0].item() == pytest.approx(-1 / 6)  # (without the late row: 6 tokens)


def test_without_late_rows_the_objective_is_unchanged():
    b = batch_of([[1, 1, 0], [1, 1, 1]], adv=[1.0, -0.5], behav=[[-1.2, -2.0, 0.0], [-0.4, -0.9, -0.1]])
    lp = torch.tensor([[-1.0, -2.0, -9.0], [-0.5, -0.7, -0.1]])
    a = policy_gradient(lp, lp, b.behav_logp, b.advantages.unsqueeze(1).expand_as(lp), b.mask, "decoupled",
                        0.2, 0.2, 2.0)
    c = policy_gradient(lp, lp, b.behav_logp, b.advantages.unsqueeze(1).expand_as(lp), b.mask, "decoupled",
                        0.2, 0.2, 2.0, torch.tensor([False, False]), 0.04)
    assert a[0].item() == c[0].item() and "late_rows" not in c[1]


def test_late_rows_of_a_batch():
    from rftbus.ground.schemas import Experience, ExperienceGroup

    def row(v: int, expert: bool = False) -> Row:
        e = Experience(experience_id=f"e{v}", response_ids=[1], logprobs=[-1.0], loss_mask=[True], model_version=v)
        return Row(ExperienceGroup(group_id=f"g{v}", task_id="t", explorer_id="x", prompt_ids=[1], samples=[e]), e,
                   expert)

    assert late_rows([row(9), row(8)], 9, 1) is None
    assert late_rows([row(9), row(3), row(2, expert=True)], 9, 1).tolist() == [False, True, False]
