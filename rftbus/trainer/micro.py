"""Micro-batches by a token budget: real responses are long, and one forward over a whole batch of
them does not fit in a GPU's memory.

A batch is cut into row chunks of at most `budget` tokens each (a chunk of one row may exceed it: a row
is never split), DPO pairs kept in one chunk, each chunk trimmed to its own longest row. Every rank of a
data-parallel step must run the same number of backward passes (ZeRO reduces gradients in each), so the
count is agreed first; a rank with fewer rows than chunks runs zero-weight copies of a row.

Each chunk's loss is weighted by its share of the batch's trained tokens, so for a token-mean loss (GRPO,
PPO's policy term, SFT) the summed gradient is the whole batch's exactly (tests/unit/test_micro.py); losses
that average over other units (DPO's pairs, MIX's two token means) get the token-weighted average.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields

from typing import Any

import torch

from rftbus.trainer.losses.base import TrainBatch


def _units(batch: TrainBatch) -> list[list[int]]:
    """Rows that must stay together: a DPO pair, else each row alone; in row order."""
    pairs: dict[int, list[int]] = {}
    units: list[list[int]] = []
    for i, p in enumerate(batch.pair_index.tolist()):
        if p < 0:
            units.append([i])
        elif p in pairs:
            pairs[p].append(i)
        else:
            pairs[p] = [i]
            units.append(pairs[p])
    return units


def plan(batch: TrainBatch, budget: int | None) -> list[list[int]]:
    """Row indices per chunk, each chunk's padded size (rows x its longest row) within `budget`."""
    units = _units(batch)
    if not budget:
        return [[i for u in units for i in u]]
    lengths = batch.attention_mask.sum(dim=1).tolist()
    chunks: list[list[int]] = []
    cur: list[int] = []
    for u in units:
        cand = cur + u
        if cur and len(cand) * max(lengths[i] for i in cand) > budget:
            chunks.append(cur)
            cand = list(u)
        cur = cand
    if cur:
        chunks.append(cur)
    return chunks


def even_out(chunks: list[list[int]], count: int) -> list[list[int]]:
    """`count` chunks (>= len(chunks)): the largest split further, then empty ones (zero-weight fillers)."""
    chunks = [list(c) for c in chunks]
    while len(chunks) < count:
        big = max(range(len(chunks)), key=lambda k: len(chunks[k]))
        if len(chunks[big]) < 2:
            chunks.append([])
            continue
        c = chunks.pop(big)
        chunks[big:big] = [c[: len(c) // 2], c[len(c) // 2:]]
    return chunks


def select(batch: TrainBatch, rows: list[int]) -> TrainBatch:
    """The rows' sub-batch, trimmed to its longest row."""
    idx = torch.tensor(rows, dtype=torch.long)
    width = max(int(batch.attention_mask[idx].sum(dim=1).max()), 2)
    out: dict[str, Any] = {}
    for f in fields(batch):
        t = getattr(batch, f.name)
        if t is None:
            out[f.name] = None
            continue
        t = t[idx]
        if t.dim() == 2:
            t = t[:, : width if f.name in ("input_ids", "attention_mask") else width - 1]
        out[f.name] = t
    return TrainBatch(**out)


def split(batch: TrainBatch, budget: int | None,
          agree_count: Callable[[int], int] = lambda n: n) -> list[tuple[TrainBatch, float]]:
    """(chunk, weight) pairs: weights are shares of the trained tokens and sum to 1 (0 for fillers)."""
    own = plan(batch, budget)
    chunks = even_out(own, agree_count(len(own)))
    if len(chunks) == 1:
        return [(batch, 1.0)]
    total = max(int(batch.mask.sum()), 1)
    out = []
    for rows in chunks:
        if not rows:  # this rank has fewer rows than the agreed count: a copy of a row, weight 0
            out.append((select(batch, [0]), 0.0))
            continue
        part = select(batch, rows)
        out.append((part, int(part.mask.sum()) / total))
    return out
