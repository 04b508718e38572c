"""The rollout-engine interface: token ids in, sampled token ids + behaviour logprobs out.

Engines work on token ids, not text, so the ids the trainer sees are exactly the ids sampled
(re-tokenizing text can split differently). `version` is the weight version in use; the explorer
stamps it on every experience and only changes it through `load_weights` between generations.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from rftbus.ground.config.explorer import SamplingConfig
from rftbus.ground.models.lora import Adapter

if TYPE_CHECKING:
    from rftbus.ground.models.vision import Pixels


@dataclass
class Completion:
    """One sampled continuation of one prompt."""

    response_ids: list[int]
    logprobs: list[float]  # one per response token, under the distribution named in `logprob_kind`
    finish_reason: str  # "stop" (EOS) or "length"
    text: str = ""
    metadata: dict[str, str] = field(default_factory=dict)


StepCallback = Callable[[list[int]], None]
"""Called once per decoding step with the token each row of the batch sampled (rows in `prompts` order)."""


class PromptTooLong(ValueError):
    """A prompt that leaves no room for one new token in the model's context. Deterministic, so the
    explorer rejects the task at once (`prompt_too_long`) instead of retrying it."""


def generate(engine: RolloutEngine, prompts: Sequence[list[int]], sampling: SamplingConfig,
             max_new_tokens: int | None = None, on_step: StepCallback | None = None,
             images: Sequence[Pixels | None] | None = None) -> list[Completion]:
    """`engine.generate`, with `images` passed only when a prompt shows some: an engine written before images
    (a user's, by entry point) keeps working for text."""
    if images is not None and any(i is not None for i in images):
        return engine.generate(prompts, sampling, max_new_tokens, on_step, images=images)
    if on_step is not None:
        return engine.generate(prompts, sampling, max_new_tokens, on_step)
    return engine.generate(prompts, sampling, max_new_tokens)


class RolloutEngine(ABC):
    """Generates continuations and hot-swaps weights; one instance per explorer process."""

    name: str = "base"
    version: int = 0
    max_context: int | None = None  # tokens the model can attend to (None: unknown, e.g. a remote server)
    streams_tokens: bool = False  # calls `on_step` as tokens are sampled (else a caller frames whole completions)

    def budget(self, prompts: Sequence[list[int]], max_new_tokens: int) -> int:
        """New tokens every prompt can get: `max_new_tokens`, cut to what the context leaves after the
        longest prompt. Raises PromptTooLong before any work when a prompt leaves no room at all."""
        if self.max_context is None or not prompts:
            return max_new_tokens
        longest = max(len(p) for p in prompts)
        room = self.max_context - longest
        if room < 1:
            raise PromptTooLong(f"the prompt is {longest} tokens: no room for a new token in the model's "
                                f"context of {self.max_context}")
        return min(max_new_tokens, room)

    reads_images: bool = False  # generates from a prompt's pixel values (a VLM on the transformers engine)

    @abstractmethod
    def generate(self, prompts: Sequence[list[int]], sampling: SamplingConfig,
                 max_new_tokens: int | None = None, on_step: StepCallback | None = None,
                 images: Sequence[Pixels | None] | None = None) -> list[Completion]:
        """One completion per entry of `prompts` (pass a prompt n times for a group of n). An engine that
        `streams_tokens` calls `on_step` with every decoding step's tokens; others ignore it. `images`: per
        prompt, the pixel values of the images it shows (prompts expanded by models/vision.py), or None."""

    def refuse_images(self, images: Sequence[Pixels | None] | None) -> None:
        """An engine that cannot read images says so for a prompt that shows some (never generates blind)."""
        if images and any(i is not None for i in images):
            raise NotImplementedError(f"the {self.name} engine does not read images yet: a task that shows images "
                                      "needs explorer.engine.kind: transformers (rftbus/ground/models/vision.py)")

    @abstractmethod
    def load_weights(self, state_dict: dict[str, torch.Tensor] | Adapter, version: int) -> None:
        """Swap in new weights; called only between generations."""

    def close(self) -> None:  # noqa: B027 - optional hook: most engines hold nothing to release
        """Release resources (servers, GPU memory)."""
