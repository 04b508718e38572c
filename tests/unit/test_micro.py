"""Micro-batches by a token budget (rftbus/trainer/micro.py): the plan's units and bounds, and through DeepSpeed's
real engine, a step cut into micro-batches takes the same gradient and lands on the same weights as the
whole batch."""

from __future__ import annotations

import copy

import pytest
import torch

from rftbus.trainer.losses.base import TrainBatch
from rftbus.trainer.micro import even_out, plan, split
from tests.integration.test_grpo_direction import dist_env, grpo_setup  # noqa: F401 - the fixture


def batch_of(lengths: list[int], pairs: list[int] | None = None) -> TrainBatch:
    n, width = len(lengths), max(lengths)
    attn = torch.tensor([[1] * k + [0] * (width - k) for k in lengths])
    mask = attn[:, 1:].bool()
    z = torch.zeros(n)
    return TrainBatch(input_ids=attn.clone(), attention_mask=attn, targets=attn[:, 1:].clone(), mask=mask,
                      response=mask.clone(), behav_logp=torch.zeros(n, width - 1), advantages=z, rewards=z,
                      is_expert=torch.zeros(n, dtype=torch.bool), temperature=torch.ones(n),
                      pair_index=torch.tensor(pairs or [-1] * n), preferred=torch.zeros(n, dtype=torch.bool),
                      versions=torch.zeros(n, dtype=torch.long))


def test_plan_keeps_each_chunk_within_the_budget_and_pairs_together():
    b = batch_of([10, 12, 30, 8, 8, 9], pairs=[-1, 0, -1, 1, 0, 1])
    chunks = plan(b, 40)
    lengths = b.attention_mask.sum(1).tolist()
    assert sorted(i for c in chunks for i in c) == list(range(6))
    for c in chunks:
        assert len(c) == 1 or len(c) * max(lengths[i] for i in c) <= 40, chunks
        for pair in (0, 1):  # both sides of a DPO pair in one chunk
            members = [i for i in range(6) if b.pair_index[i] == pair]
            assert all(i in c for i in members) or not any(i in c for i in members)
    (everything,) = plan(b, None)
    assert sorted(everything) == list(range(6))


def test_chunks_are_trimmed_and_weighted_by_trained_tokens():
    b = batch_of([4, 9, 3])
    parts = split(b, 9)
    assert [p.input_ids.shape[1] for p, _ in parts] == [4, 9, 3]  # one row each, trimmed to it
    assert sum(w for _, w in parts) == pytest.approx(1.0)
    assert [w for _, w in parts] == pytest.approx([3 / 13, 8 / 13, 2 / 13])


def test_every_rank_runs_the_agreed_count():
    three = even_out([[0, 1, 2, 3]], 3)
    assert sorted(len(c) for c in three) == [1, 1, 2] and [i for c in three for i in c] == [0, 1, 2, 3]
    assert even_out([[0]], 3) == [[0], [], []]
    fillers = split(batch_of([5]), 100, agree_count=lambda n: 3)
    assert [w for _, w in fillers] == [1.0, 0.0, 0.0]


def test_micro_batches_take_the_whole_batch_gradient(dist_env):  # noqa: F811
    from rftbus.ground.config.trainer import TrainerConfig
    from rftbus.trainer.engine import build_engine
    from rftbus.trainer.step import train_step

    engine, loss, batch, _ = grpo_setup(0, lr=1e-2)
    twin = build_engine(copy.deepcopy(engine.module), TrainerConfig(loss="grpo", lr=1e-2))
    before = {k: v.clone() for k, v in engine.module.state_dict().items()}
    longest = int(batch.attention_mask.sum(1).max())
    assert len(plan(batch, longest)) == 2  # one row per micro-batch

    whole = train_step(engine, loss, batch)
    cut = train_step(twin, loss, batch, micro_tokens=longest)
    assert cut["micro_batches"] == 2 and "micro_batches" not in whole
    assert cut["grad_norm"] == pytest.approx(whole["grad_norm"], rel=1e-4)
    assert cut["loss"] == pytest.approx(whole["loss"], rel=1e-4, abs=1e-6)
    a, b = engine.module.state_dict(), twin.module.state_dict()
    assert any(not torch.equal(a[k], before[k]) for k in a)  # the step moved the weights
    # Adam's first update is ~lr·sign(g): where a gradient is ~0 its sign is float noise, so compare the
    # update directions as a whole (the gradient itself matched through its norm above)
    da = torch.cat([(a[k] - before[k]).flatten() for k in a])
    db = torch.cat([(b[k] - before[k]).flatten() for k in a])
    assert float(torch.nn.functional.cosine_similarity(da, db, dim=0)) > 0.99
