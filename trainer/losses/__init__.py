"""Training objectives, one module each behind `base.Loss`; `make_loss` picks one from the config."""

from __future__ import annotations

from rftbus.config.trainer import TrainerConfig
from rftbus.trainer.losses.base import Loss, LossResult, OffPolicy, PolicyOut, TrainBatch
from rftbus.trainer.losses.dpo import DPOLoss
from rftbus.trainer.losses.grpo import GRPOLoss
from rftbus.trainer.losses.mix import MIXLoss
from rftbus.trainer.losses.ppo import PPOLoss
from rftbus.trainer.losses.sft import SFTLoss

LOSSES: dict[str, type[Loss]] = {c.name: c for c in (SFTLoss, GRPOLoss, PPOLoss, MIXLoss, DPOLoss)}


def resolve_off_policy(cfg: TrainerConfig, max_staleness: int) -> OffPolicy:
    """`auto`: decoupled PPO when experiences may be stale (η > 0), none when on-policy (η = 0)."""
    if cfg.off_policy == "auto":
        return "decoupled" if max_staleness > 0 else "none"
    return cfg.off_policy


def make_loss(cfg: TrainerConfig, max_staleness: int) -> Loss:
    return LOSSES[cfg.loss](cfg, resolve_off_policy(cfg, max_staleness))


__all__ = ["LOSSES", "Loss", "LossResult", "PolicyOut", "TrainBatch", "make_loss", "resolve_off_policy"]
