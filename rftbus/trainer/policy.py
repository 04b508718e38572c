"""The trained module: the causal LM plus, for PPO, a value head on its last hidden state.

DeepSpeed wraps this module; only `.lm` is published as weights (explorers never load the critic).

Logits are computed only from the first predicted position any row trains on (transformers' `logits_to_keep`,
which slices the hidden states before the LM head): a chat prompt is most of a row, and the LM head, the
log-softmax and the entropy over a 49k vocabulary at every prompt position were most of a step's compute on
SmolLM2 (#43). Positions before it get logprob and entropy 0; every loss reads them through a mask that is false
there.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from rftbus.ground.models.loading import hidden_size_of, takes_logits_to_keep
from rftbus.ground.models.vision import image_token_of, pixel_inputs
from rftbus.trainer import shared_prompt
from rftbus.trainer.losses.base import TrainBatch


class PolicyWithValue(nn.Module):
    def __init__(self, lm: Any, value_head: bool):  # a transformers causal LM
        super().__init__()
        self.lm = lm
        hidden = hidden_size_of(lm)
        self.suppress = image_token_of(lm)  # a VLM's image token: never sampled, so never in the policy's distribution
        self.value_head = nn.Linear(hidden, 1) if value_head else None
        if self.value_head is not None:
            nn.init.zeros_(self.value_head.weight)
            nn.init.zeros_(self.value_head.bias)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, first: int = 0,
                prompt_lengths: torch.Tensor | None = None, pixel_values: torch.Tensor | None = None):
        """(logits of predicted positions `first`.. (T - first of them), values [N, T] or None). With
        `prompt_lengths`, a prompt that several rows share is read once (shared_prompt.py). `pixel_values`: the
        rows' images in row order (TrainBatch.shown_pixels), read into their image tokens (a VLM)."""
        shared = self.value_head is None and pixel_values is None
        if prompt_lengths is not None and shared and not getattr(self.lm, "is_gradient_checkpointing", False):
            plan = shared_prompt.plan(input_ids, prompt_lengths)
            if plan is not None:
                logits = shared_prompt.forward(self.lm, input_ids, attention_mask, prompt_lengths, first, plan)
                return suppressed(logits, self.suppress), None
        out = self.lm(input_ids=input_ids, attention_mask=attention_mask, use_cache=False,
                      **pixel_inputs(self.lm, pixel_values),
                      output_hidden_states=self.value_head is not None, **keep_kwargs(self.lm, input_ids, first))
        values = None
        if self.value_head is not None:
            values = self.value_head(out.hidden_states[-1]).squeeze(-1)[:, :-1]
        return suppressed(_predicted(out.logits, input_ids, first), self.suppress), values


def suppressed(logits: torch.Tensor, token: int | None) -> torch.Tensor:
    """`logits` with `token` made impossible, as generation suppresses it (the engines' `suppress_tokens`): the
    trainer's distribution is then the one the answer was sampled from. A large finite negative, not -inf, so the
    entropy's p·log p stays 0, not NaN."""
    if token is None:
        return logits
    out = logits.clone()
    out[..., token] = -1e9
    return out


def keep_kwargs(lm: Any, input_ids: torch.Tensor, first: int) -> dict[str, Any]:
    """`logits_to_keep` for the input positions first .. L - 2 (the last input position predicts nothing)."""
    if first <= 0 or not takes_logits_to_keep(lm):
        return {}
    return {"logits_to_keep": torch.arange(first, input_ids.shape[1] - 1, device=input_ids.device)}


def _predicted(logits: torch.Tensor, input_ids: torch.Tensor, first: int) -> torch.Tensor:
    """The logits of predicted positions first .. T - 1, whether the model kept only those or all."""
    t = input_ids.shape[1] - 1
    return logits[:, first:t] if logits.shape[1] == input_ids.shape[1] else logits[:, : t - first]


def first_trained(batch: TrainBatch) -> int:
    """The first predicted position any row of `batch` has a response token at (0 when none does)."""
    cols = batch.response.any(0).nonzero()
    return int(cols[0]) if cols.numel() else 0


def token_logp_entropy(logits: torch.Tensor, batch: TrainBatch, first: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token logprob of the targets and entropy, at each row's behaviour temperature; `logits` hold predicted
    positions first.. (see PolicyWithValue), and the result is [N, T] with zeros before `first`."""
    logits = logits.float() / batch.temperature.view(-1, 1, 1).to(logits.dtype)
    logsm = torch.log_softmax(logits, dim=-1)
    logp = logsm.gather(-1, batch.targets[:, first:].unsqueeze(-1)).squeeze(-1)
    entropy = -(logsm.exp() * logsm).sum(-1)
    if first:
        logp, entropy = F.pad(logp, (first, 0)), F.pad(entropy, (first, 0))
    return logp, entropy


@torch.no_grad()
def reference_logp(ref: nn.Module, batch: TrainBatch) -> torch.Tensor:
    first = first_trained(batch)
    out = ref(input_ids=batch.input_ids, attention_mask=batch.attention_mask, use_cache=False,
              **pixel_inputs(ref, batch.shown_pixels()),
              **keep_kwargs(ref, batch.input_ids, first))
    logits = suppressed(_predicted(out.logits, batch.input_ids, first), image_token_of(ref))
    logp, _ = token_logp_entropy(logits, batch, first)
    return logp
