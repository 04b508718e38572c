"""The trainer's own recomputation of sampled completions' token logprobs (collate + PolicyWithValue at the sampling
temperature): what an engine's behaviour logprobs are checked against (tests/vllm_tier on CPU, tests/gpu on CUDA)."""

from __future__ import annotations

import torch

from rftbus.ground.schemas import Experience, ExperienceGroup
from rftbus.trainer.batch import Row, collate
from rftbus.trainer.policy import PolicyWithValue, token_logp_entropy


def trainer_logp(model, tok, prompt: list[int], comps, temperature: float, device: str = "cpu") -> list[torch.Tensor]:
    """Each completion's per-token logprobs as the trainer computes them, on `device`, returned on the CPU."""
    rows = []
    for c in comps:
        e = Experience(response_ids=c.response_ids, logprobs=c.logprobs, loss_mask=[True] * len(c.response_ids),
                       model_version=0, metadata={"logprob_temperature": repr(temperature)})
        rows.append(Row(ExperienceGroup(task_id="t", explorer_id="test", prompt_ids=prompt, samples=[e]), e))
    b = collate(rows, tok.pad_token_id, 512).to(device)
    with torch.no_grad():
        logits, _ = PolicyWithValue(model, value_head=False)(b.input_ids, b.attention_mask)
        logp, _ = token_logp_entropy(logits, b)
    return [logp[i][b.mask[i]].cpu() for i in range(len(rows))]
