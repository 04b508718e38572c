"""Which records the next step trains: whole groups from the heads of the lanes, priority first, in
offset order (the loop's rule 1), plus demonstrations for MIX; or None while a step should wait."""

from __future__ import annotations

import time
from collections.abc import Callable

from rftbus.ground.config import Config
from rftbus.trainer.batch_source import BatchSource, Polled
from rftbus.trainer.losses import Loss, mixes

Take = list[tuple[Polled, list[int]]]  # records at the lane heads, in order, with the samples to train
Trainable = Callable[[Polled], list[int]]  # the samples of a record that may train now


def walk(bc: BatchSource, lane: str, groups: int, trainable: Trainable) -> Take:
    """From the head of `lane`, records up to the `groups`-th one with something to train."""
    take: Take = []
    found = 0
    for r in bc.head(lane, bc.waiting(lane)):
        if found == groups:
            break
        idx = trainable(r)
        take.append((r, idx))
        found += bool(idx)
    while take and not take[-1][1]:  # nothing to train at the tail: leave it for the next step
        take.pop()
    return take


def waited_enough(cfg: Config, last_step_at: float) -> bool:
    """`trainer.step_wait_s`: a step takes the RL groups that are ready once this long has passed since
    the last one, so the step rate holds up when streams drop most groups (a sharp policy makes
    mostly zero-variance groups) instead of waiting unboundedly for B survivors."""
    wait = cfg.trainer.step_wait_s
    return wait is not None and time.monotonic() - last_step_at >= wait


def min_groups(bc: BatchSource, cfg: Config, loss: Loss) -> int:
    """RL groups a step waits for: B, or for MIX `mix_min_groups` while demonstrations are waiting,
    so scarce RL data (early on most groups have zero variance) does not hold back the SFT part."""
    B, least = cfg.rl.batch_groups, cfg.trainer.mix_min_groups
    if not mixes(loss) or least is None or not bc.waiting("expert"):
        return B
    return min(least, B)


def select(bc: BatchSource, cfg: Config, loss, trainable: Trainable, partial: bool,
           last_step_at: float) -> Take | None:
    """The next step's records, or None to wait. `partial`: the run is ending, take what there is."""
    B = cfg.rl.batch_groups
    primary = ("priority", "curated") if "rl" in loss.lanes else ("expert",)
    take: Take = []
    for lane in primary:
        take += walk(bc, lane, B - sum(1 for _, idx in take if idx), trainable)
    groups = sum(1 for _, idx in take if idx)
    waited = waited_enough(cfg, last_step_at)
    # MIX: once step_wait_s has passed with no RL group at all, the demonstrations step alone (the
    # loss's RL side is then empty): a solved task makes only zero-variance groups, and the SFT
    # side should not stand still for them.
    demos_alone = not groups and mixes(loss) and bool(bc.waiting("expert")) and waited
    if (not groups and not demos_alone) or (
            groups and groups < min_groups(bc, cfg, loss) and not partial and not waited):
        return None
    if any(r.lane == "curated" for r, _ in take) and not bc.lane_drained("priority"):
        return None  # the priority lane has records not read yet: they go first
    if mixes(loss):
        n_exp = cfg.trainer.mix_expert_per_batch if cfg.trainer.mix_expert_per_batch is not None else B
        if n_exp and not partial and not bc.waiting("expert") and not bc.lane_drained("expert"):
            return None  # demonstrations in the log, not fetched yet: mixed in, not skipped by a late fetch
        take += walk(bc, "expert", n_exp, trainable)
    return take if any(idx for _, idx in take) else None
