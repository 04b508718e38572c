"""The trained module: the causal LM plus, for PPO, a value head on its last hidden state.

DeepSpeed wraps this module; only `.lm` is published as weights (explorers never load the critic).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from rftbus.trainer.losses.base import TrainBatch


class PolicyWithValue(nn.Module):
    def __init__(self, lm: Any, value_head: bool):  # a transformers causal LM
        super().__init__()
        self.lm = lm
        hidden = lm.config.hidden_size
        self.value_head = nn.Linear(hidden, 1) if value_head else None
        if self.value_head is not None:
            nn.init.zeros_(self.value_head.weight)
            nn.init.zeros_(self.value_head.bias)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor):
        out = self.lm(input_ids=input_ids, attention_mask=attention_mask,
                      output_hidden_states=self.value_head is not None, use_cache=False)
        values = None
        if self.value_head is not None:
            values = self.value_head(out.hidden_states[-1]).squeeze(-1)[:, :-1]
        return out.logits[:, :-1], values


def token_logp_entropy(logits: torch.Tensor, batch: TrainBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token logprob of the targets and entropy, at each row's behaviour temperature."""
    logits = logits.float() / batch.temperature.view(-1, 1, 1).to(logits.dtype)
    logsm = torch.log_softmax(logits, dim=-1)
    logp = logsm.gather(-1, batch.targets.unsqueeze(-1)).squeeze(-1)
    entropy = -(logsm.exp() * logsm).sum(-1)
    return logp, entropy


@torch.no_grad()
def reference_logp(ref: nn.Module, batch: TrainBatch) -> torch.Tensor:
    out = ref(input_ids=batch.input_ids, attention_mask=batch.attention_mask, use_cache=False)
    logp, _ = token_logp_entropy(out.logits[:, :-1], batch)
    return logp
