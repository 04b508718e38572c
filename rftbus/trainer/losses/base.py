"""The loss interface: every loss sees the same batch tensors and the same policy outputs.

Tensors are aligned to *predicted* positions: column t holds what the model predicts at input
position t for target token t+1, so `logp[:, t]` is the log-probability of `targets[:, t]`.
Keeping one layout for every loss is why SFT, GRPO, PPO, MIX and DPO can share one trainer loop.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import fields, dataclass, field
from typing import Any, ClassVar, Literal

import torch

from rftbus.ground.config.trainer import TrainerConfig

OffPolicy = Literal["none", "tis", "decoupled"]


@dataclass
class TrainBatch:
    """Collated experiences (N rows, L tokens, T = L - 1 predicted positions)."""

    input_ids: torch.Tensor  # [N, L] long, right-padded
    attention_mask: torch.Tensor  # [N, L] long
    targets: torch.Tensor  # [N, T] long: input_ids[:, 1:]
    mask: torch.Tensor  # [N, T] bool: response tokens with loss_mask true (what is trained)
    response: torch.Tensor  # [N, T] bool: every response token (env tokens included; for GAE)
    behav_logp: torch.Tensor  # [N, T] float: recorded behaviour logprobs (0 off-response)
    advantages: torch.Tensor  # [N] float: group advantage from streams (0 when unset)
    rewards: torch.Tensor  # [N] float (0 when unset)
    is_expert: torch.Tensor  # [N] bool: read from the expert lane
    temperature: torch.Tensor  # [N] float: the behaviour logprobs' sampling temperature
    pair_index: torch.Tensor  # [N] long: DPO pair number, -1 outside pairs
    preferred: torch.Tensor  # [N] bool: DPO chosen side
    versions: torch.Tensor  # [N] long: model_version of each experience
    late: torch.Tensor | None = None  # [N] bool: staler than rl.max_staleness (a late grade: corrected, m2.py)
    # [N] bool: false where the answer came without behaviour logprobs (read from a trace): the step takes the
    # current policy's in their place before the first update (train_step), so the ratio starts at 1
    behav_known: torch.Tensor | None = None
    # a VLM's rows: [N, K, C, H, W] pixel values of each row's images (its group's, K the most any row shows) and
    # [N] long how many of them each row shows; the forward hands the model the shown ones in row order
    pixel_values: torch.Tensor | None = None
    image_counts: torch.Tensor | None = None

    def shown_pixels(self) -> torch.Tensor | None:
        """[sum of image_counts, C, H, W]: the rows' images in row order (what the model's image tokens read)."""
        if self.pixel_values is None or self.image_counts is None:
            return None
        parts = [self.pixel_values[i, :k] for i, k in enumerate(self.image_counts.tolist()) if k]
        return torch.cat(parts) if parts else None

    @property
    def n_rows(self) -> int:
        return int(self.input_ids.shape[0])

    def to(self, device: torch.device | str) -> TrainBatch:
        """The same batch on `device` (the engine's: collate builds it on the CPU)."""
        if self.input_ids.device == torch.device(device):
            return self
        moved: dict[str, Any] = {f.name: None if getattr(self, f.name) is None else
                                 getattr(self, f.name).to(device, non_blocking=True) for f in fields(self)}
        return TrainBatch(**moved)


@dataclass
class PolicyOut:
    """What the forward pass gives the loss."""

    logp: torch.Tensor  # [N, T] current policy, with grad
    entropy: torch.Tensor  # [N, T]
    prox_logp: torch.Tensor | None = None  # [N, T] detached policy before this batch's updates
    values: torch.Tensor | None = None  # [N, T] critic, with grad (PPO)
    prox_values: torch.Tensor | None = None  # [N, T] detached critic before this batch's updates
    ref_logp: torch.Tensor | None = None  # [N, T] frozen reference model

    def proximal(self) -> torch.Tensor:
        return self.prox_logp if self.prox_logp is not None else self.logp.detach()


@dataclass
class LossResult:
    loss: torch.Tensor
    parts: dict[str, float] = field(default_factory=dict)


class Loss(ABC):
    """One training objective; `lanes` says which topics feed it."""

    name: ClassVar[str]
    needs_reference: ClassVar[bool] = False
    needs_values: ClassVar[bool] = False
    lanes: ClassVar[tuple[str, ...]] = ("rl",)  # "rl" = curated (priority first), "expert"

    def __init__(self, cfg: TrainerConfig, off_policy: OffPolicy = "none"):
        self.cfg = cfg
        self.off_policy = off_policy

    @property
    def kl_coef(self) -> float:
        return self.cfg.kl_coef if self.cfg.kl_coef is not None else 0.0

    def uses_reference(self) -> bool:
        return self.needs_reference or self.kl_coef > 0

    @abstractmethod
    def __call__(self, out: PolicyOut, batch: TrainBatch) -> LossResult:
        """The scalar to minimise plus its named parts (floats, for metrics)."""
