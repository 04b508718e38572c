"""Collating Experience records into the tensors every loss reads (see losses/base.py).

Sequences are prompt + response, right-padded, so a row's positions are 0..len-1 exactly as the
explorer's left-padded generation saw them (HF derives position ids from the attention mask).
An experience longer than the model's context keeps its prompt and loses its response tail.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from rftbus.schemas import Experience
from rftbus.trainer.losses.base import TrainBatch


def temperature_of(exp: Experience) -> float:
    """The temperature the behaviour logprobs were taken at (explorer stamps it; default 1)."""
    try:
        t = float(exp.metadata.get("logprob_temperature", "1.0"))
    except ValueError:
        return 1.0
    return t if t > 0 else 1.0


def collate(experiences: Sequence[Experience], expert: Sequence[bool], pad_id: int,
            max_len: int) -> TrainBatch:
    n = len(experiences)
    if n == 0:
        raise ValueError("cannot collate an empty batch")
    lengths = [min(len(e.prompt_ids) + len(e.response_ids), max_len) for e in experiences]
    width = max(max(lengths), 2)
    ids = torch.full((n, width), pad_id, dtype=torch.long)
    attn = torch.zeros((n, width), dtype=torch.long)
    mask = torch.zeros((n, width - 1), dtype=torch.bool)
    resp = torch.zeros((n, width - 1), dtype=torch.bool)
    behav = torch.zeros((n, width - 1), dtype=torch.float32)
    pair_names: dict[str, int] = {}
    pair_index = torch.full((n,), -1, dtype=torch.long)
    preferred = torch.zeros(n, dtype=torch.bool)
    for i, e in enumerate(experiences):
        seq = (list(e.prompt_ids) + list(e.response_ids))[: lengths[i]]
        ids[i, : len(seq)] = torch.tensor(seq, dtype=torch.long)
        attn[i, : len(seq)] = 1
        p = len(e.prompt_ids)
        kept = max(0, len(seq) - p)  # response tokens that fit
        if kept and p > 0:
            # response token j sits at input position p + j and is predicted at column p + j - 1
            cols = slice(p - 1, p - 1 + kept)
            resp[i, cols] = True
            mask[i, cols] = torch.tensor([bool(b) for b in e.loss_mask[:kept]], dtype=torch.bool)
            behav[i, cols] = torch.tensor(e.logprobs[:kept], dtype=torch.float32)
        pair = e.metadata.get("preference_pair")
        if pair is not None:
            pair_index[i] = pair_names.setdefault(pair, len(pair_names))
            preferred[i] = e.metadata.get("preferred") == "1"
    return TrainBatch(
        input_ids=ids, attention_mask=attn, targets=ids[:, 1:].clone(), mask=mask, response=resp,
        behav_logp=behav,
        advantages=torch.tensor([e.advantage if e.advantage is not None else 0.0 for e in experiences]),
        rewards=torch.tensor([e.reward if e.reward is not None else 0.0 for e in experiences]),
        is_expert=torch.tensor(list(expert), dtype=torch.bool),
        temperature=torch.tensor([temperature_of(e) for e in experiences]),
        pair_index=pair_index, preferred=preferred,
        versions=torch.tensor([e.model_version for e in experiences], dtype=torch.long),
    )
