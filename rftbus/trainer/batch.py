"""Collating experiences (samples of groups) into the tensors every loss reads (see losses/base.py).

A row is one sample with its group's prompt. Sequences are prompt + response, right-padded, so a row's
positions are 0..len-1 exactly as the explorer's left-padded generation saw them (HF derives position
ids from the attention mask). An experience longer than the model's context keeps its prompt and loses
its response tail.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch

from rftbus.ground.schemas import Experience, ExperienceGroup
from rftbus.trainer.losses.base import TrainBatch
from rftbus.ground.weights.staleness import is_stale


@dataclass(slots=True)
class Row:
    """One sample to train, with the group it belongs to."""

    group: ExperienceGroup
    sample: Experience
    expert: bool = False

    @property
    def prompt_ids(self) -> list[int]:
        return self.group.prompt_ids


def rows_of(group: ExperienceGroup, expert: bool = False, indices: Sequence[int] | None = None) -> list[Row]:
    """The group's samples to train: `indices`, else its survivors (all samples before the streams ran)."""
    chosen = group.kept() if indices is None else [group.samples[i] for i in indices]
    return [Row(group, s, expert) for s in chosen]


def temperature_of(exp: Experience) -> float:
    """The temperature the behaviour logprobs were taken at (explorer stamps it; default 1)."""
    try:
        t = float(exp.metadata.get("logprob_temperature", "1.0"))
    except ValueError:
        return 1.0
    return t if t > 0 else 1.0


def pixels_of(rows: Sequence[Row], vision: Any) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """([N, K, C, H, W] pixel values, [N] image counts) of the rows' groups' images, computed from the records the
    explorer generated from (models/vision.py, the same processor); (None, None) when no row shows an image."""
    if vision is None or not any(r.group.images for r in rows):
        return None, None
    per_row = [vision.pixels(r.group.images) if r.group.images else None for r in rows]
    shown = [p for p in per_row if p is not None]
    most = max(p.shape[0] for p in shown)
    values = torch.zeros((len(rows), most, *shown[0].shape[1:]), dtype=shown[0].dtype)
    counts = torch.zeros(len(rows), dtype=torch.long)
    for i, p in enumerate(per_row):
        if p is not None:
            values[i, : p.shape[0]] = p
            counts[i] = p.shape[0]
    return values, counts


def collate(rows: Sequence[Row], pad_id: int, max_len: int, vision: Any = None) -> TrainBatch:
    """The rows as tensors; `vision` (a VLM's models/vision.Vision): their groups' images as pixel values."""
    n = len(rows)
    if n == 0:
        raise ValueError("cannot collate an empty batch")
    experiences = [r.sample for r in rows]
    lengths = [min(len(r.prompt_ids) + len(r.sample.response_ids), max_len) for r in rows]
    width = max(max(lengths), 2)
    ids = torch.full((n, width), pad_id, dtype=torch.long)
    attn = torch.zeros((n, width), dtype=torch.long)
    mask = torch.zeros((n, width - 1), dtype=torch.bool)
    resp = torch.zeros((n, width - 1), dtype=torch.bool)
    behav = torch.zeros((n, width - 1), dtype=torch.float32)
    pixels, counts = pixels_of(rows, vision)
    pair_names: dict[str, int] = {}
    pair_index = torch.full((n,), -1, dtype=torch.long)
    preferred = torch.zeros(n, dtype=torch.bool)
    for i, (row, e) in enumerate(zip(rows, experiences)):
        seq = (list(row.prompt_ids) + list(e.response_ids))[: lengths[i]]
        ids[i, : len(seq)] = torch.tensor(seq, dtype=torch.long)
        attn[i, : len(seq)] = 1
        p = len(row.prompt_ids)
        kept = max(0, len(seq) - p)  # response tokens that fit
        if kept and p > 0:
            # response token j sits at input position p + j and is predicted at column p + j - 1
            cols = slice(p - 1, p - 1 + kept)
            resp[i, cols] = True
            mask[i, cols] = torch.tensor([bool(b) for b in e.loss_mask[:kept]], dtype=torch.bool)
            behav[i, cols] = torch.tensor(e.logprobs[:kept], dtype=torch.float32)
        pair = row.group.metadata.get("preference_pair")  # both answers of the pair are in this group
        if pair is not None and pair == e.metadata.get("preference_pair"):
            pair_index[i] = pair_names.setdefault(f"{row.group.group_id}/{pair}", len(pair_names))
            preferred[i] = e.metadata.get("preferred") == "1"
    return TrainBatch(
        input_ids=ids, attention_mask=attn, targets=ids[:, 1:].clone(), mask=mask, response=resp,
        behav_logp=behav,
        advantages=torch.tensor([e.advantage if e.advantage is not None else 0.0 for e in experiences]),
        rewards=torch.tensor([e.reward if e.reward is not None else 0.0 for e in experiences]),
        is_expert=torch.tensor([r.expert for r in rows], dtype=torch.bool),
        temperature=torch.tensor([temperature_of(e) for e in experiences]),
        pair_index=pair_index, preferred=preferred,
        versions=torch.tensor([e.model_version for e in experiences], dtype=torch.long),
        behav_known=(None if all(e.behaviour_logprobs for e in experiences) else
                     torch.tensor([e.behaviour_logprobs for e in experiences], dtype=torch.bool)),
        pixel_values=pixels, image_counts=counts,
    )


def late_rows(rows: Sequence[Row], reference: int, max_staleness: int) -> torch.Tensor | None:
    """[N] bool: the RL rows staler than η against `reference` (late grades, trained under the feedback bound and
    corrected: rftbus/trainer/losses/m2.py); None when there are none."""
    late = torch.tensor([not r.expert and is_stale(r.sample.model_version, reference, max_staleness) for r in rows],
                        dtype=torch.bool)
    return late if bool(late.any()) else None


def whiten_advantages(batch: TrainBatch, eps: float = 1e-6) -> TrainBatch:
    """`trainer.advantage_norm: batch`: the RL rows' advantages less their mean, over their std, across the step's
    batch (REINFORCE++'s global normalization, Hu et al. 2025). A lone live answer's r - baseline carries the
    baseline's lag in its mean (most are positive while the policy improves, which sharpens whatever was
    sampled) and is ~0.05 in size, so KL-Cov's penalty and the ratio clip outweigh it; whitened, it is ~1, as a
    group's GRPO advantage is. Groups should carry r - mean (`streams.advantage: drgrpo`), in the same units:
    GRPO's ±1 for a pair would set the batch's std alone. Demonstrations, and a batch with fewer than two RL
    rows, are left as they are."""
    rl = ~batch.is_expert & batch.mask.any(dim=1)
    if int(rl.sum()) < 2:
        return batch
    a = batch.advantages[rl]
    out = batch.advantages.clone()
    out[rl] = (a - a.mean()) / (a.std(unbiased=False) + eps)
    return replace(batch, advantages=out)
