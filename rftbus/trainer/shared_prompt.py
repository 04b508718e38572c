"""The trainer reads a prompt that several rows share once: a group is n answers to one prompt.

A batch row is prompt + response, right-padded (batch.py), so the rows of a group hold the same tokens at the
same positions up to the prompt's end. Recomputing them n times was most of a step's work on short answers
(40 prompt tokens, 16 answer tokens, n = 8). Here the distinct prompts, less their last token, are run once,
with gradients (LoRA on the attention projections changes their keys and values); their cache is copied to
every row that shares them (an index_select, through which the gradients of all n rows flow back to the one
prompt pass); then each row runs its last prompt token and its response on that cache, at its own positions.
The logits come back in the layout of the one-pass forward: predicted positions first .. T - 2, rows
aligned by position, with zeros where a row is still inside its prompt (those positions are never trained).
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import DynamicCache

from rftbus.ground.models.loading import takes_logits_to_keep


def prompt_lengths(response: torch.Tensor) -> torch.Tensor:
    """Each row's prompt length from its response columns (column c predicts token c + 1): 0 for a row with
    no response token, which then shares nothing."""
    any_resp = response.any(dim=1)
    first = response.float().argmax(dim=1)  # the first True column
    return torch.where(any_resp, first + 1, torch.zeros_like(first))


def plan(input_ids: torch.Tensor, lengths: torch.Tensor) -> tuple[list[tuple[int, ...]], list[int]] | None:
    """(distinct prompts less their last token, the distinct prompt of each row), or None when no two rows
    share a prompt (or some row has none): the one-pass forward is then as cheap."""
    prompts: dict[tuple[int, ...], int] = {}
    index = []
    for row, p in zip(input_ids.tolist(), lengths.tolist()):
        if p < 2:
            return None
        index.append(prompts.setdefault(tuple(row[: p - 1]), len(prompts)))
    if len(prompts) == len(index):
        return None
    return list(prompts), index


def forward(lm: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, lengths: torch.Tensor,
            first: int, shared: tuple[list[tuple[int, ...]], list[int]]) -> torch.Tensor:
    """Logits of predicted positions first .. T - 2, [N, T - 1 - first, V], as `lm` over the whole rows gives them."""
    prompts, index = shared
    dev, n, t = input_ids.device, input_ids.shape[0], input_ids.shape[1]
    head = max(len(p) for p in prompts)
    pids = torch.zeros((len(prompts), head), dtype=torch.long, device=dev)
    pmask = torch.zeros((len(prompts), head), dtype=torch.long, device=dev)
    for k, p in enumerate(prompts):
        pids[k, : len(p)] = torch.tensor(p, dtype=torch.long)
        pmask[k, : len(p)] = 1
    cache = DynamicCache(config=lm.config)
    keep = {"logits_to_keep": 1} if takes_logits_to_keep(lm) else {}
    lm(input_ids=pids, attention_mask=pmask, position_ids=torch.arange(head, device=dev).expand(len(prompts), -1),
       past_key_values=cache, use_cache=True, **keep)
    rows: Any = torch.tensor(index, dtype=torch.long, device=dev)  # a LongTensor
    cache.reorder_cache(rows)  # every row its prompt's keys and values (gradients flow back through the copy)
    starts = (lengths - 1).tolist()  # each row from its last prompt token
    ends = attention_mask.sum(dim=1).tolist()
    width = max(e - s for s, e in zip(starts, ends))
    cids = torch.zeros((n, width), dtype=torch.long, device=dev)
    cmask = torch.zeros((n, width), dtype=torch.long, device=dev)
    pos = torch.zeros((n, width), dtype=torch.long, device=dev)
    for i, (s, e) in enumerate(zip(starts, ends)):
        cids[i, : e - s] = input_ids[i, s:e]
        cmask[i, : e - s] = 1
        pos[i] = torch.arange(s, s + width, device=dev)
    mask = torch.cat([pmask[rows], cmask], dim=1)
    logits = lm(input_ids=cids, attention_mask=mask, position_ids=pos, past_key_values=cache, use_cache=True).logits
    out = logits.new_zeros((n, t - 1 - first, logits.shape[-1]))
    for s in sorted(set(starts)):  # rows that start at the same position move together
        sel = torch.tensor([i for i, x in enumerate(starts) if x == s], dtype=torch.long, device=dev)
        w = min(width, t - 1 - s)
        out[sel, s - first: s - first + w] = logits[sel, :w]
    return out
