"""Training objectives, one module each behind `base.Loss`, registered like rewards: a built-in name, an entry point
in the `rftbus.losses` group, or a dotted path (`my_pkg.losses:MyLoss`). A new loss is one file: a `Loss` subclass
whose class attributes say what it reads (`lanes`) and needs (`needs_reference`, `needs_values`); nothing in the
trainer names a loss."""

from __future__ import annotations

from rftbus.ground.config.trainer import TrainerConfig
from rftbus.ground.errors import RftbusError
from rftbus.trainer.losses.base import Loss, LossResult, OffPolicy, PolicyOut, TrainBatch

# Built-in names -> "module:Class" (imported on use, as the rewards are).
BUILTIN = {
    "sft": "rftbus.trainer.losses.sft:SFTLoss",
    "grpo": "rftbus.trainer.losses.grpo:GRPOLoss",
    "ppo": "rftbus.trainer.losses.ppo:PPOLoss",
    "mix": "rftbus.trainer.losses.mix:MIXLoss",
    "dpo": "rftbus.trainer.losses.dpo:DPOLoss",
}


def loss_class(name: str) -> type[Loss]:
    """The Loss subclass `trainer.loss` names; an error that says what it is instead."""
    from rftbus.ground.plugins import load_object

    obj = load_object(BUILTIN.get(name, name), group="rftbus.losses", what="loss")
    if not (isinstance(obj, type) and issubclass(obj, Loss)):
        raise RftbusError(f"trainer.loss {name!r} is {obj!r}, not a subclass of rftbus.trainer.losses.Loss "
                          "(docs/USAGE.md, \"Your own loss\")")
    return obj


def resolve_off_policy(cfg: TrainerConfig, max_staleness: int) -> OffPolicy:
    """`auto`: decoupled PPO when experiences may be stale (η > 0), none when on-policy (η = 0)."""
    if cfg.off_policy == "auto":
        return "decoupled" if max_staleness > 0 else "none"
    return cfg.off_policy


def make_loss(cfg: TrainerConfig, max_staleness: int) -> Loss:
    cls = loss_class(cfg.loss)
    if cfg.demo_replay and "expert" not in cls.lanes:
        raise RftbusError(f"trainer.demo_replay replays demonstrations (the expert lane), which loss {cfg.loss!r} "
                          "does not read: use a loss whose lanes include expert (mix, sft), or demo_replay: 0")
    return cls(cfg, resolve_off_policy(cfg, max_staleness))


def mixes(loss: Loss) -> bool:
    """Whether a loss trains RL groups and demonstrations in one step (MIX): it reads both lanes."""
    return "rl" in loss.lanes and "expert" in loss.lanes


__all__ = ["BUILTIN", "Loss", "LossResult", "PolicyOut", "TrainBatch", "loss_class", "make_loss", "mixes",
           "resolve_off_policy"]
